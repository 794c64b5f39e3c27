"""Document-convert: a file's bytes in parts (``schema/convert.py``), its text back a page at a time.

Parts arrive keyed by their conversion, so one worker gets them all; each is appended to a file in the
worker's scratch folder (``uploads.py``). The last part asks for a stream: the file is converted with
the deployment's ``[convert]`` settings (the request's language, if it names one) on a thread of its
own, and each page is sent back as it is read, so neither side holds the whole text and the caller
shows progress a page at a time. A file no converter can read is an error answer naming the file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from ragbus.config.settings import ConvertSettings
from ragbus.config.settings import Settings as Deployment
from ragbus.ingestion.errors import UnreadableDocument, UnsupportedFormat
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.sizing import body_budget
from ragbus.runtime.threads import OneThread
from ragbus.schema import RESTART_UPLOAD, BadRequest, ConvertPart, ConvertPiece, ConvertReply, Error

from .pages import PageReader, page_pieces
from .settings import DocumentConvertSettings
from .uploads import RestartUpload, Upload, Uploads

log = logging.getLogger(__name__)


class DocumentConvertProcessor(Processor[ConvertPart, ConvertReply]):
    request_type = ConvertPart
    response_type = ConvertReply
    piece_type = ConvertPiece
    Settings = DocumentConvertSettings
    keyed = True  # a file's parts, all with its conversion id as their key, reach one replica

    settings: DocumentConvertSettings

    def __init__(self, name: str, settings: DocumentConvertSettings, convert: ConvertSettings | None = None) -> None:
        super().__init__(name, settings)
        self.convert_settings = convert or ConvertSettings()
        self.uploads: Uploads | None = None
        self._slots: asyncio.Semaphore | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._endings: set[asyncio.Future[Any]] = set()  # conversions cut short, finishing their page

    @classmethod
    def build(cls, name: str, settings: Any, pipeline: Deployment) -> Processor:
        return cls(name, settings, pipeline.convert)

    async def start(self) -> None:
        folder = await asyncio.to_thread(_scratch_folder, self.settings.scratch_dir, self.name)
        self.uploads = Uploads(folder, max_file_bytes=self.settings.max_file_bytes, expire_s=self.settings.expire_s)
        self._slots = asyncio.Semaphore(self.settings.conversions)
        self._sweeper = asyncio.ensure_future(self._sweep())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._endings:
            await asyncio.gather(*self._endings, return_exceptions=True)
        if self.uploads is not None:
            self.uploads.close()

    async def _sweep(self) -> None:
        """Abandoned uploads go within ``expire_s`` even when no further part comes."""
        while True:
            await asyncio.sleep(max(1.0, self.settings.expire_s / 4))
            assert self.uploads is not None
            self.uploads.sweep()

    async def handle(self, request: ConvertPart, context: RequestContext) -> ConvertReply:
        if request.last:
            raise BadRequest(f"{request.filename}: the last part asks for its pages as a stream (RequestClient.stream)")
        assert self.uploads is not None
        try:
            upload = self.uploads.add(request)
        except RestartUpload as exc:
            return ConvertReply(error=Error(RESTART_UPLOAD, str(exc)))
        return ConvertReply(received=upload.received)

    async def stream(self, request: ConvertPart, context: RequestContext) -> AsyncIterator[ConvertPiece]:
        if not request.last:
            raise BadRequest(f"{request.filename}: only the last part is answered in pieces")
        assert self.uploads is not None and self._slots is not None
        try:
            upload = self.uploads.add(request)
        except RestartUpload as exc:
            yield ConvertPiece(error=Error(RESTART_UPLOAD, str(exc)))
            return
        async with self._slots:
            async for piece in self._pages(upload, request):
                yield piece

    def is_final(self, piece: ConvertPiece) -> bool:
        return piece.last

    async def _pages(self, upload: Upload, request: ConvertPart) -> AsyncIterator[ConvertPiece]:
        settings = self.convert_settings
        if request.language:
            settings = msgspec.structs.replace(settings, language=request.language)
        reader = PageReader(upload.path, settings)
        room = body_budget(self.bus.max_message_bytes)
        assert self.uploads is not None
        self.uploads.reading(upload)
        thread = OneThread(f"{self.name}-file", closed_message=f"{self.name} stopped")
        try:
            title = await thread.run(reader.open)
            pages = 0
            while (page := await thread.run(reader.next_page)) is not None:
                pages = page.page.pages if page.page else pages
                for piece in page_pieces(page, room):
                    yield piece
            yield ConvertPiece(pages=pages, title=title, last=True)
        except Exception as exc:  # UnsupportedFormat, UnreadableDocument, OSError, a library failing on a page
            yield ConvertPiece(error=self._failure(exc, upload))
        finally:
            # Not awaited here: cancelled mid-page, the thread first finishes that page. Then the file goes.
            ending = asyncio.ensure_future(self._end(thread, reader, upload))
            self._endings.add(ending)
            ending.add_done_callback(self._endings.discard)

    async def _end(self, thread: OneThread, reader: PageReader, upload: Upload) -> None:
        try:
            await thread.run(reader.close)
        except Exception as exc:
            log.debug("%s: closing %s: %r", self.name, upload.filename, exc)
        await thread.close()
        if self.uploads is not None:
            self.uploads.read(upload)

    def _failure(self, exc: BaseException, upload: Upload) -> Error:
        """A conversion's failure as an answer naming the caller's file, never the path here."""
        message = str(exc).replace(str(upload.path), upload.filename)
        if isinstance(exc, UnsupportedFormat | UnreadableDocument):
            return Error(type(exc).__name__, message, caller=True)
        if isinstance(exc, OSError):
            return Error("UnreadableDocument", f"{upload.filename}: cannot be read ({message[:300]})", caller=True)
        log.warning("%s: converting %s failed: %r", self.name, upload.filename, exc)
        return Error("UnreadableDocument", f"{upload.filename}: cannot be read ({type(exc).__name__}: "
                     f"{message[:200]})", caller=True)


def _scratch_folder(scratch_dir: str, name: str) -> Path:
    """A private folder of this worker's own for its uploads, in ``scratch_dir`` ("" = the system's temporary)."""
    base = Path(scratch_dir).expanduser() if scratch_dir else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"ragbus-{name}-{os.getpid()}-", dir=base))
