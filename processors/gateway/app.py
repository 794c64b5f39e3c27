"""The gateway's routes (Starlette): names fixed, so clients can rely on them.

Starlette with uvicorn rather than Litestar: msgspec already does all the JSON work here
(decoding with errors that name the field, encoding, the OpenAPI components from the
Structs), so the server library only has to route and stream, which Starlette does in
a small, well-kept package with no model layer of its own to keep in step with msgspec.

A streamed answer (``"stream": true``) is Server-Sent Events. Its first piece is awaited
before the response starts, so a bad request still gets its 4xx status; a failure after
that ends the stream with an ``error`` event (``/v1/ask``) or an error chunk (chat). An upload
asked for with ``Accept: application/x-ndjson`` answers likewise: a line per page as it is converted,
then the stored body or the error (``uploads.py`` reads and stores it, for MCP's ``ingest`` too).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ragbus.config.settings import ConvertSettings, GatewaySettings
from ragbus.ingestion import DocumentSource
from ragbus.ingestion.convert import Page
from ragbus.schema import (
    Document,
    DocumentRagPiece,
    DocumentRagRequest,
    KgQueryRequest,
    ListDocuments,
    check_collection,
)
from ragbus.schema.http import (
    AskRequest,
    ChatRequest,
    CollectionList,
    DocumentsQuery,
    DocumentUpload,
    ErrorBody,
    ErrorDetail,
    Health,
    KeyScope,
    UploadLine,
)

from . import chat, openapi, page, uploads
from .errors import HTTPError, decode_body, error_response, from_pipeline, json_response, param_named
from .guard import Guard
from .keys import EVERY, ApiKey, Role, allows, gather, key_of
from .pipeline import BusPipeline

log = logging.getLogger(__name__)
Q = TypeVar("Q")
NDJSON = "application/x-ndjson"  # POST /v1/documents' progress: a line per page, then the outcome

ASK_FIELDS = [f.name for f in msgspec.structs.fields(AskRequest)]
CHAT_FIELDS = ["model", "messages", "collection", "at_time", "doc_limit"]
KG_FIELDS = [f.name for f in msgspec.structs.fields(KgQueryRequest)]
DOCUMENTS_FIELDS = [f.name for f in msgspec.structs.fields(DocumentsQuery)]


@dataclass
class GatewayState:
    """What the routes reach: the pipeline once it is there, and why not until then."""

    pipeline: BusPipeline | None = None
    problem: str = "starting"
    draining: bool = False  # told to stop: /ready says 503 while requests are still taken
    # How uploads are converted ([convert]): with on_bus, PDFs and images by document-convert on the bus.
    convert: ConvertSettings = field(default_factory=ConvertSettings)

    def need(self) -> BusPipeline:
        if self.pipeline is None:
            raise HTTPError(503, "NotReady", f"the pipeline is not ready: {self.problem}", headers={"Retry-After": "5"})
        return self.pipeline


def _sse(data: bytes, event: str | None = None) -> bytes:
    return (f"event: {event}\n" if event else "").encode() + b"data: " + data + b"\n\n"


async def _first(
    pieces: AsyncIterator[DocumentRagPiece], fields, collection: str
) -> tuple[DocumentRagPiece, AsyncIterator[DocumentRagPiece]]:
    """The first piece (its failure is the request's HTTP error) and the iterator of the rest."""
    try:
        first = await anext(pieces)
    except StopAsyncIteration:
        raise HTTPError(502, "EmptyStream", "the pipeline ended the answer before its first piece") from None
    except Exception as exc:
        raise from_pipeline(exc, fields, collection=collection) from None
    return first, pieces


def build_app(state: GatewayState, settings: GatewaySettings, *, api_keys: list[ApiKey] | None = None,
              mcp_routes: Sequence[BaseRoute] = ()) -> Guard | CORSMiddleware:
    """The gateway's ASGI app; ``mcp_routes``: the MCP face's endpoint (``McpFace.http_routes``), behind
    the same guard as every route."""
    keys = list(api_keys if api_keys is not None else gather(settings.api_keys, settings.keys_file))
    schema_doc = msgspec.json.encode(openapi.document(auth=bool(keys)))

    async def health(request: Request) -> Response:
        return json_response(Health(status="ok"))

    async def ready(request: Request) -> Response:
        if state.draining:
            return json_response(Health(status="stopping", detail="told to stop: finishing what it has"), 503)
        if state.pipeline is None:
            return json_response(Health(status="starting", detail=state.problem), 503)
        try:
            await state.pipeline.ready()
        except Exception as exc:
            return json_response(Health(status="starting", detail=f"the pipeline does not answer: {exc}"[:500]), 503)
        return json_response(Health(status="ready"))

    async def openapi_json(request: Request) -> Response:
        return Response(schema_doc, media_type="application/json")

    async def ask(request: Request) -> Response:
        body = decode_body(await request.body(), AskRequest)
        pipeline = state.need()
        question = DocumentRagRequest(query=body.question, mode=body.mode, at_time=body.at_time, as_of=body.as_of,
                                      doc_limit=body.doc_limit, collection=_collection(body.collection),
                                      history=body.history, must_see=body.must_see)
        _allow(request, "read", question.collection)
        if not body.stream:
            try:
                answer = await pipeline.ask(question)
            except Exception as exc:
                raise from_pipeline(exc, ASK_FIELDS, collection=question.collection) from None
            return json_response(answer)
        first, rest = await _first(pipeline.ask_stream(question), ASK_FIELDS, question.collection)

        async def events() -> AsyncIterator[bytes]:
            piece = first
            try:
                while True:
                    yield _sse(msgspec.json.encode(piece), piece.kind)
                    piece = await anext(rest)
            except StopAsyncIteration:
                return
            except Exception as exc:
                yield _sse(msgspec.json.encode(_body(from_pipeline(exc, ASK_FIELDS))), "error")

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def chat_completions(request: Request) -> Response:
        body: ChatRequest = decode_body(await request.body(), ChatRequest)
        question = chat.question_of(body, state.pipeline.max_query_chars if state.pipeline is not None else None)
        _allow(request, "read", _collection(body.collection))
        pipeline = state.need()
        if not body.stream:
            try:
                answer = await pipeline.ask(question)
            except Exception as exc:
                raise from_pipeline(exc, CHAT_FIELDS, collection=question.collection) from None
            return json_response(chat.completion(body, answer))
        first, rest = await _first(pipeline.ask_stream(question), CHAT_FIELDS, question.collection)
        maker = chat.ChunkMaker(body)

        async def chunks() -> AsyncIterator[bytes]:
            piece: DocumentRagPiece = first
            try:
                while True:
                    yield _sse(msgspec.json.encode(maker.of(piece)))
                    piece = await anext(rest)
            except StopAsyncIteration:
                yield _sse(b"[DONE]")
            except Exception as exc:
                yield _sse(msgspec.json.encode(_body(from_pipeline(exc, CHAT_FIELDS))))

        return StreamingResponse(chunks(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def models(request: Request) -> Response:
        return json_response(chat.models())

    async def add_document(request: Request) -> Response:
        document = await _upload(request)
        _allow(request, "ingest", document.collection)
        pipeline = state.need()
        if NDJSON not in request.headers.get("accept", ""):
            return json_response(await uploads.stored(pipeline, document, state.convert), 201)
        events = uploads.with_pages(lambda told: uploads.stored(pipeline, document, state.convert, told))
        first = await anext(events)  # a failure before the first page keeps its status

        async def lines() -> AsyncIterator[bytes]:
            event = first
            try:
                while True:
                    if isinstance(event, Page):
                        yield msgspec.json.encode(UploadLine(page=event.number, pages=event.pages,
                                                             ocr=event.ocr)) + b"\n"
                    else:
                        yield msgspec.json.encode(UploadLine(stored=event)) + b"\n"
                        return
                    event = await anext(events)
            except Exception as exc:  # uploads.stored's HTTPError, or what it did not foresee (502)
                failed = from_pipeline(exc)
                yield msgspec.json.encode(UploadLine(error=_body(failed).error, status=failed.status)) + b"\n"

        return StreamingResponse(lines(), media_type=NDJSON, headers={"Cache-Control": "no-store"})

    async def delete_document(request: Request) -> Response:
        document_id = request.path_params["document_id"]
        collection = _collection(request.query_params.get("collection", "default"), "collection")
        _allow(request, "ingest", collection)
        pipeline = state.need()
        try:
            result = await pipeline.delete(document_id, collection)
        except Exception as exc:
            raise from_pipeline(exc, ["document_id", "collection"]) from None
        if not result.count:
            raise HTTPError(404, "NotFound", f"no document {document_id[:200]!r} in collection {collection!r}",
                            "document_id")
        return json_response(result)

    async def list_documents(request: Request) -> Response:
        query = _query(request, DocumentsQuery, DOCUMENTS_FIELDS)
        collection = _collection(query.collection, "collection")
        _allow(request, "read", collection)
        pipeline = state.need()
        listing = ListDocuments(collection=collection, after=query.after, limit=query.limit,
                                document_ids=[query.document_id] if query.document_id else [])
        try:
            found = await pipeline.documents(listing)
        except Exception as exc:
            raise from_pipeline(exc, DOCUMENTS_FIELDS) from None
        return json_response(found)

    async def list_collections(request: Request) -> Response:
        pipeline = state.need()
        try:
            found = await pipeline.documents(ListDocuments(collection="default", collections=True))
        except Exception as exc:
            raise from_pipeline(exc, []) from None
        key = key_of(request.scope)
        return json_response(CollectionList(collections=key.shown(found.collections) if key else found.collections))

    async def key_scope(request: Request) -> Response:
        key = key_of(request.scope)
        scope = KeyScope(role=key.role, collections=list(key.collections)) if key else KeyScope(role="admin",
                                                                                              collections=[EVERY])
        return json_response(scope)

    async def kg_query(request: Request) -> Response:
        query = _query(request, KgQueryRequest, KG_FIELDS)
        if not query.question.strip():
            raise HTTPError(422, "ValidationError", "the question is empty", "question")
        _allow(request, "read", _collection(query.collection, "collection"))
        pipeline = state.need()
        try:
            return json_response(await pipeline.kg_query(query))
        except Exception as exc:
            raise from_pipeline(exc, KG_FIELDS, collection=query.collection) from None

    async def pipeline_status(request: Request) -> Response:
        if not allows(request.scope, "admin", EVERY):
            raise HTTPError(403, "Forbidden", "the pipeline's status is an admin's: a key with role admin over "
                                              f"every collection ({EVERY!r})")
        pipeline = state.need()
        try:
            return json_response(await pipeline.status())
        except Exception as exc:
            raise from_pipeline(exc, []) from None

    async def on_http_error(request: Request, exc: HTTPError) -> Response:
        return error_response(exc)

    async def on_starlette_error(request: Request, exc) -> Response:  # 404 and 405 of the router
        status = getattr(exc, "status_code", 400)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(status, "BadRequest")
        return error_response(HTTPError(status, kind, getattr(exc, "detail", "") or kind, headers=exc.headers))

    async def on_anything(request: Request, exc: Exception) -> Response:
        log.exception("gateway: %s %s failed", request.method, request.url.path)
        return error_response(HTTPError(502, type(exc).__name__, "the gateway could not answer this request"))

    from starlette.exceptions import HTTPException

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
            Route("/v1/ask", ask, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/documents", add_document, methods=["POST"]),
            Route("/v1/documents", list_documents, methods=["GET"]),
            Route("/v1/collections", list_collections, methods=["GET"]),
            Route("/v1/key", key_scope, methods=["GET"]),
            Route("/v1/documents/{document_id:path}", delete_document, methods=["DELETE"]),
            Route("/v1/kg/query", kg_query, methods=["GET"]),
            Route("/v1/status", pipeline_status, methods=["GET"]),
            *mcp_routes,
            *page.routes(),
        ],
        exception_handlers={
            HTTPError: on_http_error,  # type: ignore[dict-item]  # Starlette passes a handler its key's class
            HTTPException: on_starlette_error,
            Exception: on_anything,
        },
    )
    guarded = Guard(app, api_keys=keys, max_body_bytes=settings.max_body_bytes, max_in_flight=settings.max_in_flight,
                    max_in_flight_per_key=settings.max_in_flight_per_key, retry_after_s=settings.retry_after_s)
    if not settings.cors_origins:
        return guarded
    # Outside the guard: a browser's preflight carries no key, and the guard's refusals (401, 413, 429, 503) must
    # carry the allow headers for the page to read them.
    return CORSMiddleware(guarded, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"],
                          expose_headers=["Retry-After", "WWW-Authenticate"])


def _allow(request: Request, role: Role, collection: str) -> None:
    """403 unless the request's key may act as ``role`` on ``collection`` (no keys configured: it may)."""
    if not allows(request.scope, role, collection):
        raise HTTPError(403, "Forbidden", f"this API key may not {role} collection {collection!r}", "collection")


def _query(request: Request, kind: type[Q], fields: list[str]) -> Q:
    """A route's query parameters as ``kind`` (numbers from their text), 422 naming the one at fault."""
    try:
        return msgspec.convert(dict(request.query_params), kind, strict=False)
    except msgspec.ValidationError as exc:
        raise HTTPError(422, "ValidationError", str(exc), param_named(str(exc), fields)) from None


def _body(exc: HTTPError) -> ErrorBody:
    return ErrorBody(error=ErrorDetail(type=exc.type, message=exc.message[:2000], param=exc.param))


def _collection(name: str, param: str = "$.collection") -> str:
    try:
        return check_collection(name)
    except ValueError as exc:
        raise HTTPError(422, "ValidationError", str(exc), param) from None


async def _upload(request: Request) -> DocumentSource | uploads.Upload:
    """The document of ``POST /v1/documents``: JSON text, or a file of any format ``ragbus ingest`` reads
    (converted by ``uploads.stored``)."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        body = decode_body(await request.body(), DocumentUpload)
        collection = _collection(body.collection)
        document = Document(document_id=body.document_id or uploads.upload_id(body.text.encode()), text=body.text,
                            title=body.title, collection=collection, source="http")
        return DocumentSource.of(document)
    try:
        form = await request.form()
    except Exception as exc:  # a malformed multipart body
        raise HTTPError(400, "BadRequest", f"the multipart body cannot be read: {exc}") from None
    file = form.get("file")
    if file is None or isinstance(file, str):
        raise HTTPError(422, "ValidationError", "a multipart upload needs a 'file' field holding the file", "file")
    fields = {k: v for k in ("document_id", "title", "collection") if isinstance(v := form.get(k), str) and v}
    try:  # the fields as the JSON form checks them; the text is the file's, once converted
        checked = msgspec.convert({"text": "-", **fields}, DocumentUpload)
    except msgspec.ValidationError as exc:
        raise HTTPError(422, "ValidationError", str(exc), param_named(str(exc), ["document_id", "title"])) from None
    return uploads.Upload(await file.read(), file.filename or "", _collection(checked.collection),
                          checked.document_id or "", checked.title, file.content_type or "")
