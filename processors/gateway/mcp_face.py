"""The Model Context Protocol face: retrieval as MCP tools, on the official SDK (``mcp``, MCPServer).

Five tools, each one request of the pipeline the REST routes call (``BusPipeline``), so MCP
adds no retrieval or ingestion of its own and scales like any gateway:

- ``ask``: the cited answer, with the cited chunks' text and documents (document-rag; streamed when
  the caller asked for progress, with a progress token, so the call reports it: sources found, the
  answer being written, done; the stream carries the sources and the whole answer, not its pieces;
  otherwise one response);
- ``search``: the ranked chunks with their scores and no answer (document-rag with ``answer=False``);
- ``graph``: the facts about the entities a question names, valid at ``at``, as known ``as_of`` (kg-query);
- ``documents``: the collections, or a page of one collection's documents (documents-query);
- ``ingest``: a file's bytes (base64, no bigger than an upload) read and stored as ``POST /v1/documents``
  stores an upload (``uploads.py``), reporting each page converted when the caller gave a progress token.

A caller's mistake (an empty question, an unknown mode, a time that is no time, a bad
collection name, a collection that holds nothing: the pipeline's ``EmptyCollection``) comes back
as a tool error (``is_error``) that says what to change, as the REST routes' 4xx bodies do; so
does a pipeline that is not ready or did not answer in time.

Transports: ``run_stdio`` for ``ragbus mcp``; ``http_routes`` and ``running`` mount streamable
HTTP at ``/mcp`` inside ``ragbus serve`` (behind the same key check as every route there, and
allowing the same browser origins as its CORS: ``transport_security``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from typing_extensions import TypedDict

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from pydantic import Field
from starlette.routing import BaseRoute

from ragbus.schema import (
    DEFAULT_COLLECTION,
    MAX_TURNS,
    DocumentRagRequest,
    DocumentRagResponse,
    KgQueryRequest,
    ListDocuments,
    Turn,
    check_collection,
)
from ragbus.schema.common import LOG_TOKEN_MAX, LOG_TOKEN_PATTERN, MUST_SEE_MAX

from ragbus.config.settings import ConvertSettings, GatewaySettings
from ragbus.ingestion import page_label
from ragbus.ingestion.convert import Page

from . import uploads
from .errors import from_pipeline
from .keys import Role, allows, key_of
from .pipeline import BusPipeline

MCP_PATH = "/mcp"
# The addresses on which the SDK checks Host and Origin (its own choice, kept): loopback, by these names.
LOOPBACK = {"127.0.0.1": "127.0.0.1", "localhost": "localhost", "::1": "[::1]"}
ASK_FIELDS = ["question", "mode", "at", "as_of", "collection", "doc_limit", "history", "must_see"]
GRAPH_FIELDS = ["question", "at", "as_of", "limit", "collection", "must_see"]

Mode = Literal["vector", "keyword", "hybrid"]
Question = Annotated[str, Field(description="the question, in words", min_length=1)]
At = Annotated[str | None, Field(description="ISO 8601 instant: only graph facts valid then (e.g. 2019-06-01)")]
AsOf = Annotated[str | None, Field(description="ISO 8601 instant: the graph as it was recorded then, "
                                               "before later revisions")]
Collection = Annotated[str, Field(description="the collection to read")]
Limit = Annotated[int | None, Field(description="chunks to draw from (default: the pipeline's)", ge=1)]
Token = Annotated[str, Field(pattern=LOG_TOKEN_PATTERN, max_length=LOG_TOKEN_MAX)]
MustSee = Annotated[list[Token] | None, Field(
    description="writes the answer must see, with stores from the bus's logs: the seen tokens an ingest answered "
                "with (topic@position); each replica answers once it has applied them", max_length=MUST_SEE_MAX)]


class TurnArgument(TypedDict):
    role: Literal["user", "assistant"]
    content: str


History = Annotated[list[TurnArgument] | None, Field(
    description="the conversation before the question, oldest first: a follow-up (\"and what does it return?\") "
                "is made a standalone question from it", max_length=MAX_TURNS)]


def _failed(exc: Exception, fields: list[str], renamed: dict[str, str] | None = None,
            params: dict[str, str] | None = None) -> ToolError:
    """What went wrong, in words a caller can act on (the REST route's error type and message), with the
    pipeline's field names made the tool's (``renamed``; ``params``: in the argument named only)."""
    e = from_pipeline(exc, [*fields, *(renamed or {})])
    message, param = e.message, (e.param or "").removeprefix("$.")
    for theirs, ours in (renamed or {}).items():
        message = re.sub(rf"\b{theirs}\b", ours, message)
        param = ours if param == theirs else param
    param = (params or {}).get(param, param)
    where = f" (argument {param})" if param else ""
    return ToolError(f"{e.type}{where}: {message}")


def transport_security(host: str, origins: Sequence[str]) -> TransportSecuritySettings | None:
    """The SDK's Host and Origin check of ``/mcp`` on ``host``, allowing the gateway's CORS ``origins``.

    On loopback the check is on, so that a page elsewhere cannot drive a local server through the user's
    browser (nor a name rebound to loopback): the Host must be a loopback name, and a browser's Origin
    loopback's own or one of ``origins``, the pages the gateway's CORS lets read its answers: one
    allow-list. ``*`` there allows every page, so then nothing is checked. On another address the SDK
    checks nothing (None), as before: CORS alone governs what a page may read."""
    if host not in LOOPBACK:
        return None
    if "*" in origins:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = LOOPBACK.values()
    return TransportSecuritySettings(allowed_hosts=[f"{n}:*" for n in names],
                                     allowed_origins=[*(f"http://{n}:*" for n in names), *origins])


def _collection(name: str) -> str:
    try:
        return check_collection(name)
    except ValueError as exc:
        raise ToolError(f"BadRequest (argument collection): {exc}") from None


def _scope(ctx: Context) -> dict[str, Any] | None:
    """The HTTP request's ASGI scope (its key on it, put there by the gateway's guard); None on stdio."""
    request = ctx.request_context.request
    return getattr(request, "scope", None)


def _progress_token(ctx: Context) -> str | int | None:
    """The token the caller sent to hear a call's progress (``_meta.progressToken``), if it sent one."""
    return progress_token_from_params(ctx.request_context.params)


def _allow(ctx: Context, role: Role, collection: str) -> None:
    """The same check as the REST routes': the key must have ``role`` on ``collection``."""
    scope = _scope(ctx)
    if scope is not None and not allows(scope, role, collection):
        raise ToolError(f"Forbidden (argument collection): this API key may not {role} collection {collection!r}")


def _chunk(c) -> dict[str, Any]:
    return {"chunk_id": c.chunk_id, "score": c.score, "document_id": c.document_id, "title": c.title,
            "text": c.text}


def _facts(facts) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(f) for f in facts]


class McpFace:
    """The MCP server over a pipeline; ``await pipeline()`` returns it or raises why it is not there
    (it may wait for a pipeline still starting)."""

    def __init__(self, pipeline: Callable[[], Awaitable[BusPipeline]], *, version: str = "",
                 convert: ConvertSettings | None = None, max_bytes: int = GatewaySettings().max_body_bytes) -> None:
        self._pipeline = pipeline
        self._convert = convert or ConvertSettings()  # the gateway's [convert]: how ingest reads a file
        self._max_bytes = max_bytes  # the gateway's max_body_bytes: a file ingest takes is no bigger than an upload
        self.server = MCPServer(
            "ragbus", version=version,
            instructions="Question answering over ragbus's document collections and knowledge graph. "
                         "ask answers with citations; search ranks chunks; graph lists facts valid at a "
                         "time; documents lists collections and their documents; ingest adds a file to a "
                         "collection.",
        )
        self._routes: list[BaseRoute] | None = None
        self.server.tool(description="Answer a question from a collection, citing the chunks it drew on; "
                                     "the cited chunks come with their text and document.")(self.ask)
        self.server.tool(description="The chunks of a collection that best match a query, best first, each with "
                                     "its rank and the score of the retriever that found it (cosine for vector, "
                                     "BM25 for keyword: in hybrid mode compare ranks, not scores); no answer is "
                                     "written.")(self.search)
        self.server.tool(description="Facts of the knowledge graph about the entities a question names, valid "
                                     "at a time (at) and as recorded at a time (as_of).")(self.graph)
        self.server.tool(description="Without a collection: the collections. With one: a page of its documents "
                                     "in id order (pass the last id as after for the next page).")(self.documents)
        self.server.tool(description="Read a file (PDF, Word, PowerPoint, HTML, Markdown, text, or an image read "
                                     "by OCR) and store it in a collection, as an upload to the gateway is; "
                                     "with a progress token, each page is reported as it is read.")(self.ingest)

    async def _need(self) -> BusPipeline:
        try:
            return await self._pipeline()
        except Exception as exc:
            raise _failed(exc, []) from None

    async def ask(self, question: Question, ctx: Context, mode: Mode | None = None, at: At = None,
                  as_of: AsOf = None, collection: Collection = DEFAULT_COLLECTION,
                  doc_limit: Limit = None, history: History = None, must_see: MustSee = None) -> dict[str, Any]:
        turns = [Turn(role=t["role"], content=t["content"]) for t in history or []]
        request = DocumentRagRequest(query=question, mode=mode, at_time=at, as_of=as_of, doc_limit=doc_limit,
                                     collection=_collection(collection), history=turns, must_see=must_see or [])
        _allow(ctx, "read", request.collection)
        pipeline = await self._need()
        if _progress_token(ctx) is None:
            final = await self._answer(pipeline, request)
        else:
            final = await self._answer_reporting(pipeline, request, ctx)
        cited = set(final.cited)
        return {
            "answer": final.answer,
            "citations": [_chunk(c) for c in final.chunks if c.chunk_id in cited],
            "facts": _facts(final.facts),
            "at_time": final.at_time,
            "standalone": final.standalone,
            "paths": final.paths,
            "degraded": final.degraded,
            "problems": final.problems,
        }

    @staticmethod
    async def _answer(pipeline: BusPipeline, request: DocumentRagRequest) -> DocumentRagResponse:
        """The answer in one response: for a caller that asked for no progress, no pieces cross the bus."""
        try:
            final = await pipeline.ask(request)
        except Exception as exc:
            raise _failed(exc, ASK_FIELDS, {"at_time": "at"}) from None
        return final

    @staticmethod
    async def _answer_reporting(pipeline: BusPipeline, request: DocumentRagRequest,
                                ctx: Context) -> DocumentRagResponse:
        """The answer streamed, so that the call reports progress: sources found, the answer being written, done.
        The tool's result is the whole answer, so the stream leaves the answer's pieces out."""
        await ctx.report_progress(0, 3, "retrieving")
        final = None
        try:
            async for piece in pipeline.ask_stream(msgspec.structs.replace(request, answer_pieces=False)):
                if piece.kind == "sources":
                    await ctx.report_progress(1, 3, f"{len(piece.chunks)} chunks and {len(piece.facts)} facts "
                                                    "found")
                    await ctx.report_progress(2, 3, "writing the answer")  # the prompt is asked next
                elif piece.response is not None:
                    final = piece.response
        except Exception as exc:
            raise _failed(exc, ASK_FIELDS, {"at_time": "at"}) from None
        if final is None:
            raise ToolError("EmptyStream: the pipeline ended the answer without its result")
        await ctx.report_progress(3, 3, "answered")
        return final

    async def search(self, query: Question, ctx: Context, mode: Mode | None = None, limit: Limit = None,
                     collection: Collection = DEFAULT_COLLECTION) -> dict[str, Any]:
        request = DocumentRagRequest(query=query, mode=mode, doc_limit=limit, collection=_collection(collection),
                                     answer=False)
        _allow(ctx, "read", request.collection)
        pipeline = await self._need()
        try:
            found = await pipeline.ask(request)
        except Exception as exc:
            raise _failed(exc, ["query", "mode", "limit", "collection"], {"doc_limit": "limit"}) from None
        chunks = [{"rank": n, **_chunk(c)} for n, c in enumerate(found.chunks, 1)]
        return {"chunks": chunks, "paths": [p for p in found.paths if p != "kg"],
                "degraded": found.degraded, "problems": found.problems}

    async def graph(self, question: Question, ctx: Context, at: At = None, as_of: AsOf = None,
                    limit: Annotated[int, Field(description="facts at most; 0 = the entities only", ge=0)] = 8,
                    collection: Collection = DEFAULT_COLLECTION, must_see: MustSee = None) -> dict[str, Any]:
        request = KgQueryRequest(question=question, at_time=at, as_of=as_of, limit=limit,
                                 collection=_collection(collection), must_see=must_see or [])
        _allow(ctx, "read", request.collection)
        pipeline = await self._need()
        try:
            found = await pipeline.kg_query(request)
        except Exception as exc:
            raise _failed(exc, GRAPH_FIELDS, {"at_time": "at"}) from None
        return {"entities": found.entities, "facts": _facts(found.facts), "rejected": _facts(found.rejected),
                "at_time": found.at_time, "as_of": found.as_of}

    async def documents(self, ctx: Context,
                        collection: Annotated[str | None, Field(description="the collection to list")] = None,
                        after: Annotated[str, Field(description="list after this document id")] = "",
                        limit: Annotated[int, Field(description="documents at most", ge=1, le=500)] = 100,
                        ) -> dict[str, Any]:
        if collection is None:
            request = ListDocuments(collection=DEFAULT_COLLECTION, collections=True)
        else:
            request = ListDocuments(collection=_collection(collection), after=after, limit=limit)
            _allow(ctx, "read", request.collection)
        pipeline = await self._need()
        try:
            found = await pipeline.documents(request)
        except Exception as exc:
            raise _failed(exc, ["collection", "after", "limit"]) from None
        if collection is None:
            key = key_of(_scope(ctx) or {})
            return {"collections": key.shown(found.collections) if key is not None else found.collections}
        return {"collection": collection, "documents": [msgspec.to_builtins(d) for d in found.documents],
                "more": found.more, "after": found.documents[-1].document_id if found.more else None}

    async def ingest(self, filename: Annotated[str, Field(description="the file's name: its suffix (.pdf, .docx, "
                                                          ".png...) picks how it is read", min_length=1)],
                     content_base64: Annotated[str, Field(description="the file's bytes, base64")],
                     ctx: Context, collection: Collection = DEFAULT_COLLECTION,
                     title: Annotated[str, Field(description="the title (default: the document's own, else "
                                                             "the file's name)")] = "",
                     document_id: Annotated[str, Field(description="the id (default: one from the content, so the "
                                                                   "same file is the same document)")] = "",
                     ) -> dict[str, Any]:
        collection = _collection(collection)
        _allow(ctx, "ingest", collection)
        limit = -(-self._max_bytes // 3) * 4  # base64 of max_body_bytes
        if len(content_base64) > limit:
            raise ToolError(f"TooLarge (argument content_base64): {len(content_base64):,} characters, over the "
                            f"{limit:,} of a file of the gateway's max_body_bytes={self._max_bytes:,} "
                            "([gateway] max_body_bytes)")
        try:
            content = base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"BadRequest (argument content_base64): not base64 ({exc}); send the file's bytes "
                            "base64-encoded") from None
        if len(content) > self._max_bytes:  # base64's last group may hold up to 2 bytes past the bound
            raise ToolError(f"TooLarge (argument content_base64): a file of {len(content):,} bytes, over the "
                            f"gateway's max_body_bytes={self._max_bytes:,} ([gateway] max_body_bytes)")
        upload = uploads.Upload(content, filename, collection, document_id, title)
        pipeline = await self._need()
        stored = None
        reporting = _progress_token(ctx) is not None
        try:
            async for event in uploads.with_pages(
                    lambda told: uploads.stored(pipeline, upload, self._convert, told if reporting else None)):
                if isinstance(event, Page):
                    await ctx.report_progress(event.number, event.pages, page_label(filename, event))
                else:
                    stored = event
        except Exception as exc:  # the file's fault: its suffix (no converter), else its bytes
            wrong = "filename" if from_pipeline(exc).type == "UnsupportedFormat" else "content_base64"
            raise _failed(exc, ["document_id", "title", "collection"], params={"file": wrong}) from None
        assert stored is not None
        return {"document_id": stored.document_id, "collection": stored.collection, "chunks": stored.chunks,
                "seen": stored.seen,
                "superseded": msgspec.to_builtins(stored.superseded) if stored.superseded else None}

    # -- transports ----------------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve one client on this process's standard input and output until it closes them."""
        await self.server.run_stdio_async()

    def http_routes(self, host: str, origins: Sequence[str] = ()) -> list[BaseRoute]:
        """The streamable HTTP endpoint at ``/mcp``, for the gateway's router.

        ``host`` is the address the gateway binds, ``origins`` its ``cors_origins``: on loopback the
        SDK checks the Host and Origin headers (``transport_security``)."""
        if self._routes is None:
            app = self.server.streamable_http_app(streamable_http_path=MCP_PATH, host=host,
                                                  transport_security=transport_security(host, origins))
            self._routes = list(app.routes)
        return self._routes

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The HTTP sessions' task group: around the HTTP server's life (after ``http_routes``)."""
        async with self.server.session_manager.run():
            yield
