"""The gateway's OpenAPI 3.1 document, generated from the ``schema/`` Structs by msgspec.

Paths are written here; every body they name is a component msgspec derives from its
Struct (``msgspec.json.schema_components``), so the HTTP schema changes with the bus schema.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ragbus.schema import DocumentList, DocumentRagPiece, DocumentRagResponse, IngestResult, KgQueryResponse
from ragbus.schema.http import (
    AskRequest,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    CollectionList,
    DocumentStored,
    DocumentUpload,
    ErrorBody,
    Health,
    KeyScope,
    ModelList,
    PipelineStatus,
    UploadLine,
)

_REF = "#/components/schemas/{name}"  # msgspec fills {name} in its own components
TYPES = (AskRequest, DocumentRagResponse, DocumentRagPiece, ChatRequest, ChatCompletion, ChatCompletionChunk,
         ModelList, DocumentUpload, DocumentStored, IngestResult, KgQueryResponse, ErrorBody, Health, DocumentList,
         CollectionList, KeyScope, PipelineStatus, UploadLine)


def _ref(kind: type) -> dict:
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


def _json(kind: type, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(kind)}}}


def _errors(*statuses: int) -> dict:
    return {str(s): _json(ErrorBody, "error") for s in statuses}


def _streamed(kind: type, description: str) -> dict:
    return {"description": description, "content": {
        "application/json": {"schema": _ref(kind)},
        "text/event-stream": {"schema": {"type": "string"}},
    }}


def _query(name: str, schema: dict, required: bool = False) -> dict:
    return {"name": name, "in": "query", "required": required, "schema": schema}


def document(title: str = "ragbus", version: str = "0.1.0", *, auth: bool = False) -> dict[str, Any]:
    _, components = msgspec.json.schema_components(TYPES, ref_template=_REF)
    failures = _errors(400, 401, 408, 413, 422, 431, 502, 503, 504)
    text = {"type": "string"}
    paths: dict[str, Any] = {
        "/health": {"get": {"summary": "alive", "responses": {"200": _json(Health, "the process answers")}}},
        "/ready": {"get": {"summary": "ready once the pipeline answers", "responses": {
            "200": _json(Health, "the pipeline answers"), "503": _json(Health, "not yet")}}},
        "/v1/ask": {"post": {
            "summary": "a cited answer; with stream=true, Server-Sent Events: sources, answer deltas, final",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(AskRequest)}}},
            "responses": {"200": _streamed(DocumentRagResponse, "the answer (or its events)"), **failures,
                          **_errors(404)},
        }},
        "/v1/chat/completions": {"post": {
            "summary": "OpenAI-compatible chat: the last user message is the question",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(ChatRequest)}}},
            "responses": {"200": _streamed(ChatCompletion, "a chat completion (or its chunks)"),
                          **failures, **_errors(404)},
        }},
        "/v1/models": {"get": {"summary": "the model ids", "responses": {"200": _json(ModelList, "models"),
                                                                        **_errors(401)}}},
        "/v1/collections": {"get": {
            "summary": "the collections holding documents or a graph, those the key may read",
            "responses": {"200": _json(CollectionList, "collections"), **failures},
        }},
        "/v1/key": {"get": {
            "summary": "what the request's key may do: its role (read, ingest, admin) over its collections (*: every "
                       "one); without keys configured, admin over every collection",
            "responses": {"200": _json(KeyScope, "the key's role and collections"), **_errors(401)},
        }},
        "/v1/documents": {"get": {
            "summary": "a page of a collection's documents in id order (after: the last id of the page before), "
                       "or the one document_id",
            "parameters": [_query("collection", text), _query("after", text),
                           _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                           _query("document_id", text)],
            "responses": {"200": _json(DocumentList, "documents; more: another page follows"), **failures,
                          **_errors(403)},
        }, "post": {
            "summary": "ingest a document through the pipeline (JSON text, or a multipart upload of a file of any "
                       "format ragbus ingest reads: PDF, Word, PowerPoint, HTML, Markdown, text in any encoding)",
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref(DocumentUpload)},
                "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
                    "file": {"type": "string", "format": "binary"}, "document_id": text, "title": text,
                    "collection": text}}},
            }},
            "responses": {"201": _json(DocumentStored, "stored"),
                          "200": {"description": "asked with Accept: application/x-ndjson: a line per page as it is "
                                                 "converted, then the stored body or the error",
                                  "content": {"application/x-ndjson": {"schema": _ref(UploadLine)}}},
                          **failures, **_errors(415)},
        }},
        "/v1/documents/{document_id}": {"delete": {
            "summary": "remove a document from every store",
            "parameters": [{"name": "document_id", "in": "path", "required": True, "schema": text},
                           _query("collection", text)],
            "responses": {"200": _json(IngestResult, "removed"), **failures, **_errors(404)},
        }},
        "/v1/kg/query": {"get": {
            "summary": "facts about the entities a question names",
            "parameters": [_query("question", text, True), _query("at_time", text), _query("as_of", text),
                           _query("limit", {"type": "integer", "minimum": 0}), _query("collection", text)],
            "responses": {"200": _json(KgQueryResponse, "facts"), **failures},
        }},
        "/v1/status": {"get": {
            "summary": "every processor topic of the wiring: its consumer group's live members, the messages "
                       "waiting for it, its dead letters (for an admin key over every collection)",
            "responses": {"200": _json(PipelineStatus, "the pipeline's status"), **failures, **_errors(403)},
        }},
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
