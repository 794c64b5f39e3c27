"""A processor for runtime tests: echoes text, and can be told to be slow or to fail."""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

import msgspec

from ragbus.config.settings import ProcessorSettings
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import Error


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
        lane = "bulk:" if context.bulk else ""  # says which lane the request came on (a processor's bulk_topic)
        return EchoResponse(text=lane + self.settings.prefix + request.text, request_id=context.request_id,
                            pid=os.getpid())


class EchoPiece(msgspec.Struct, kw_only=True):
    """One word of a streamed echo; the last piece (``done``) carries the whole text."""

    text: str = ""
    done: bool = False
    pid: int = 0
    error: Error | None = None


class StreamingEcho(EchoProcessor):
    """Echoes word by word when asked for a stream; ``hang_after`` words into attempt 1 it stalls (a worker
    that died mid-stream, as the caller sees it), later attempts run to the end, or with ``lost_on_resend``
    fail at once (a replica without what the first one held)."""

    piece_type = EchoPiece

    def __init__(self, name: str, settings: EchoSettings, hang_after: int | None = None,
                 lost_on_resend: bool = False) -> None:
        super().__init__(name, settings)
        self.hang_after = hang_after
        self.lost_on_resend = lost_on_resend
        self.attempts: list[int] = []

    async def stream(self, request: EchoRequest, context: RequestContext):
        self.attempts.append(context.envelope.attempt)
        if self.lost_on_resend and context.envelope.attempt > 1:
            raise RuntimeError("nothing held for this request")
        words = request.text.split()
        for i, word in enumerate(words):
            if self.hang_after is not None and i == self.hang_after and context.envelope.attempt == 1:
                await asyncio.Event().wait()
            if request.fail is not None and i == 1:
                raise RuntimeError(request.fail)
            if request.delay_s:
                await asyncio.sleep(request.delay_s)
            yield EchoPiece(text=word, pid=os.getpid())
        yield EchoPiece(text=request.text, done=True, pid=os.getpid())

    def is_final(self, piece: EchoPiece) -> bool:
        return piece.done


class StartOrder:
    """What the start-order processors below did, and the gate the first one waits at (one test at a time)."""

    gate: ClassVar[asyncio.Event | None] = None
    entered: ClassVar[asyncio.Event | None] = None
    started: ClassVar[list[str]] = []

    @classmethod
    def reset(cls) -> None:
        cls.gate, cls.entered, cls.started = asyncio.Event(), asyncio.Event(), []


class GatedFirst(EchoProcessor):
    """Starts first (as a replica does) and is ready only once ``StartOrder.gate`` opens."""

    starts_first = True

    async def start(self) -> None:
        assert StartOrder.gate is not None and StartOrder.entered is not None
        StartOrder.entered.set()
        await StartOrder.gate.wait()
        StartOrder.started.append(self.name)
        await super().start()


class Follower(EchoProcessor):
    """Says when it starts: after the processor that starts first is ready, never before."""

    async def start(self) -> None:
        StartOrder.started.append(self.name)
        await super().start()
