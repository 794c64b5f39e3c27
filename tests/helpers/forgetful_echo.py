"""An echo processor that loses each request's first attempt, as a worker that died holding it."""

from __future__ import annotations

from ragbus.runtime.processor import RequestContext

from .echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings


class ForgetsFirstAttempts(EchoProcessor):
    """Swallows attempt 1 of every request (acked, no reply), answers later attempts."""

    def __init__(self, topic: str) -> None:
        super().__init__("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
        self.attempts: list[int] = []

    async def handle(self, request: EchoRequest, context: RequestContext) -> EchoResponse | None:
        self.attempts.append(context.envelope.attempt)
        if context.envelope.attempt == 1:
            return None
        return await super().handle(request, context)
