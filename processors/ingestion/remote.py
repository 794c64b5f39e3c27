"""Converting a file on the bus: its bytes to document-convert in parts, its pages back as they are read.

With ``[convert] on_bus``, a PDF or an image is not read in this process: ``send_document`` first sends
its bytes in parts that fit a message, all keyed by one conversion id so they reach one worker, and
collects the pages streamed back into the document's text and sections (offsets made the document's),
telling the source's ``on_page`` listeners of each page as it arrives. A worker that did not get the
parts before one (a rebalance, a restart) answers ``RESTART_UPLOAD``, and the file is sent again from
part 0, a few times at most; so it is when the worker streaming the pages died and the resent last
part reached one without the file (``StreamDiverged``: its answer is numbered before the pages here).
The id, content hash and title follow the rules of a file read here.
"""

from __future__ import annotations

import dataclasses
import uuid

from ragbus.runtime.request_client import RequestClient, StreamDiverged
from ragbus.runtime.sizing import body_budget
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import RESTART_UPLOAD, ConvertPart, ConvertPiece, ConvertReply, DecodeError, Error, decode, encode
from ragbus.schema import topics as t

from .convert import Page
from .errors import UnreadableDocument, UnsupportedFormat
from .sources import DocumentSource, OnBus, Section

# How often an upload is begun again after a worker said it lacks the parts before one.
RESTARTS = 3
# What a part's fields may grow by over the one sized: the numbers, the data's msgpack prefix.
_GROWTH = 64


class UploadRestarts(RemoteError):
    """The worker lost the parts before one more often than ``RESTARTS`` allows (workers keep moving)."""


async def convert_on_bus(client: RequestClient, doc: DocumentSource, *, timeout: float,
                         restarts: int = RESTARTS) -> DocumentSource:
    """``doc`` (with ``on_bus``) converted by document-convert: a source holding its text and sections.

    Each part waits at most ``timeout``, the pages' stream as long. Raises ``UnsupportedFormat`` or
    ``UnreadableDocument`` for the worker's refusal (naming the file), ``RemoteError`` for another error
    answer (a file over the worker's ``max_file_bytes``), ``UploadRestarts`` past ``restarts``.
    """
    remote = doc.on_bus
    assert remote is not None
    for attempt in range(restarts + 1):
        outcome = await _upload(client, doc, remote, timeout)
        if not isinstance(outcome, Error):
            return outcome
        if attempt == restarts:
            raise UploadRestarts(t.DOCUMENT_CONVERT, Error(RESTART_UPLOAD, f"{remote.name}: sent {restarts + 1} "
                                                           f"times, and each time a worker lost its parts: "
                                                           f"{outcome.message}"))
    raise AssertionError("unreachable")


async def _upload(client: RequestClient, doc: DocumentSource, remote: OnBus,
                  timeout: float) -> DocumentSource | Error:
    """One upload from part 0: the converted source, or the ``RESTART_UPLOAD`` error that ends it."""
    conversion = uuid.uuid4().hex
    empty = ConvertPart(conversion_id=conversion, filename=remote.name, part=0, last=False, size=remote.size,
                        language=remote.settings.language)
    room = body_budget(client.bus.max_message_bytes) - len(encode(empty)) - _GROWTH
    if room < 1:
        raise ValueError(f"max_message_bytes={client.bus.max_message_bytes} leaves no room for a file's bytes")
    blocks = remote.chunks(room)
    block, part = next(blocks), 0
    while True:
        following = next(blocks, None)
        message = ConvertPart(conversion_id=conversion, filename=remote.name, part=part, last=following is None,
                              size=remote.size, data=block, language=remote.settings.language)
        if following is None:
            return await _pages(client, doc, remote, message, conversion, timeout)
        reply = await client.request(t.DOCUMENT_CONVERT, message, ConvertReply, timeout=timeout, key=conversion)
        if reply.error is not None:
            if reply.error.type == RESTART_UPLOAD:
                return reply.error
            raise _failure(reply.error)
        block, part = following, part + 1


async def _pages(client: RequestClient, doc: DocumentSource, remote: OnBus, last: ConvertPart, conversion: str,
                 timeout: float) -> DocumentSource | Error:
    """The last part sent, the pages collected as they stream back."""
    texts: list[str] = []
    sections: list[Section] = []
    held = 0
    final: ConvertPiece | None = None
    try:
        async for piece in client.stream(t.DOCUMENT_CONVERT, last, ConvertPiece, timeout=timeout, key=conversion):
            if piece.error is not None:
                if piece.error.type == RESTART_UPLOAD:
                    return piece.error
                raise _failure(piece.error)
            if piece.last:
                final = piece
                break
            if piece.page and not piece.continued:
                for listener in doc.on_page:
                    listener(Page(piece.page, piece.pages, piece.ocr))
            sections.extend(Section(held + s.offset, tuple(s.heading)) for s in piece.sections)
            if piece.text:
                texts.append(piece.text)
                held += len(piece.text)
    except StreamDiverged as diverged:
        # The worker streaming the pages died; the one the resend reached does not hold the file.
        ending = _diverged(diverged)
        if ending.type == RESTART_UPLOAD:
            return ending
        raise _failure(ending) from None
    assert final is not None  # the stream ends with its final piece
    text = "".join(texts)
    del texts
    if not text.strip():
        raise UnreadableDocument(f"{remote.name}: no text")
    title = remote.title or final.title or remote.fallback
    return dataclasses.replace(doc, title=title, size=len(text), read=lambda: iter((text,)), sections=sections,
                               on_bus=None)


def _diverged(diverged: StreamDiverged) -> Error:
    """The error a worker ended a resent stream with, after another had sent pages of it."""
    try:
        piece = decode(diverged.body, ConvertPiece)
    except DecodeError:
        piece = ConvertPiece()
    return piece.error or Error("StreamDiverged", str(diverged))


def _failure(error: Error) -> Exception:
    """document-convert's error answer as the type a face maps."""
    if error.type == "UnsupportedFormat":
        return UnsupportedFormat(error.message)
    if error.type == "UnreadableDocument":
        return UnreadableDocument(error.message)
    return RemoteError(t.DOCUMENT_CONVERT, error)
