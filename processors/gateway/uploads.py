"""A document to store, taken by any face (REST's ``POST /v1/documents``, MCP's ``ingest``): one way in.

``store`` reads an upload's bytes through the ingestion layer (``open_bytes`` in a thread, with the
deployment's ``[convert]``; or on document-convert, ``on_bus``), stores it (``BusPipeline.store``), and
maps every failure to the gateway's ``HTTPError`` once, for every face. ``with_pages`` runs it and yields
each page as it is converted, then the result, for a face that shows progress.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ragbus.config.settings import ConvertSettings
from ragbus.ingestion import DocumentSource, UnreadableDocument, UnsupportedFormat, open_bytes
from ragbus.ingestion.convert import Page
from ragbus.schema.http import DocumentStored

from .errors import HTTPError, from_pipeline
from .pipeline import BusPipeline

log = logging.getLogger(__name__)
T = TypeVar("T")
STORE_FIELDS = ["text", "document_id", "title", "collection"]
# Stores still running after the face that started them stopped listening (a client gone mid-stream).
_left: set[asyncio.Future] = set()


@dataclass(frozen=True, slots=True)
class Upload:
    """A file's bytes and what the caller said of it; its ``filename``'s suffix (else ``media_type``) picks
    the converter."""

    content: bytes
    filename: str
    collection: str
    document_id: str = ""  # "" = ``upload_id`` of the content
    title: str = ""  # "" = the document's own, else the file's name
    media_type: str = ""


def upload_id(content: bytes) -> str:
    """An upload's id when it names none: the same content is the same document."""
    return "upload:" + hashlib.sha256(content).hexdigest()[:24]


def unreadable(exc: UnreadableDocument) -> HTTPError:
    """415 for a format the converters do not read, 422 for a file they cannot; ``param`` ``file``."""
    if isinstance(exc, UnsupportedFormat):
        return HTTPError(415, "UnsupportedFormat", str(exc), "file")
    return HTTPError(422, "UnreadableDocument", str(exc), "file")


async def opened(upload: Upload, convert: ConvertSettings,
                 on_page: Callable[[Page], None] | None = None) -> DocumentSource:
    """The upload as a source (converted here, in a thread: a scan's pages take seconds each, unless
    document-convert reads it); ``on_page`` is called on this event loop for each page."""
    told = [_on_loop(on_page)] if on_page is not None else []
    try:
        return await asyncio.to_thread(
            open_bytes, upload.content, filename=upload.filename, media_type=upload.media_type,
            collection=upload.collection, document_id=upload.document_id or upload_id(upload.content),
            title=upload.title, source="http", settings=convert, on_page=told)
    except UnreadableDocument as exc:  # UnsupportedFormat too
        raise unreadable(exc) from None


async def stored(pipeline: BusPipeline, document: DocumentSource | Upload, convert: ConvertSettings,
                 on_page: Callable[[Page], None] | None = None) -> DocumentStored:
    """``document`` converted (an ``Upload``) and stored; ``HTTPError`` says why not."""
    source = await opened(document, convert, on_page) if isinstance(document, Upload) else document
    try:
        sent = await pipeline.store(source)
    except UnreadableDocument as exc:  # document-convert's refusal (on_bus)
        raise unreadable(exc) from None
    except Exception as exc:
        raise from_pipeline(exc, STORE_FIELDS) from None
    return DocumentStored(document_id=source.document_id, collection=source.collection, chunks=sent.chunks,
                          seen=list(sent.seen), superseded=sent.superseded)


async def with_pages(job: Callable[[Callable[[Page], None]], Awaitable[T]]) -> AsyncIterator[Page | T]:
    """Each page ``job`` is told of (through the callable it is given), in order, then what it returns;
    what it raises is raised after the pages before it. A reader that stops early leaves the job running,
    as a request whose client has gone finishes storing its document."""
    pages: asyncio.Queue[Page] = asyncio.Queue()
    task = asyncio.ensure_future(job(pages.put_nowait))
    try:
        while not task.done():
            waiting = asyncio.ensure_future(pages.get())
            await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
            if waiting.done():
                yield waiting.result()
            else:
                waiting.cancel()
        while not pages.empty():  # told before the job ended
            yield pages.get_nowait()
        yield task.result()
    finally:
        if not task.done():
            _left.add(task)
            task.add_done_callback(_forget)


def _forget(task: asyncio.Future) -> None:
    _left.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("an upload whose client left failed: %s", task.exception())


def _on_loop(listener: Callable[[Page], None]) -> Callable[[Page], None]:
    """``listener`` called on this event loop, whatever thread tells of a page (the converting one)."""
    loop = asyncio.get_running_loop()

    def told(page: Page) -> None:
        loop.call_soon_threadsafe(listener, page)

    return told
