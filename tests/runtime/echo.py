"""A processor for runtime tests: echoes text, and can be told to be slow or to fail."""

from __future__ import annotations

import asyncio
import os

import msgspec

from config.settings import ProcessorSettings
from processors.runtime.processor import Processor, RequestContext
from schema import Error


class EchoRequest(msgspec.Struct, kw_only=True):
    text: str
    delay_s: float = 0.0
    fail: str | None = None  # raise RuntimeError with this message


class EchoResponse(msgspec.Struct, kw_only=True):
    text: str = ""
    request_id: str = ""
    pid: int = 0
    error: Error | None = None


class EchoSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    prefix: str = ""


class EchoProcessor(Processor[EchoRequest, EchoResponse]):
    request_type = EchoRequest
    response_type = EchoResponse
    Settings = EchoSettings

    async def handle(self, request: EchoRequest, context: RequestContext) -> EchoResponse:
        if request.delay_s:
            await asyncio.sleep(request.delay_s)
        if request.fail is not None:
            raise RuntimeError(request.fail)
        return EchoResponse(text=self.settings.prefix + request.text, request_id=context.request_id, pid=os.getpid())
