"""The embed processor: texts to vectors, with the backend its settings name.

It serves two lanes (``schema/topics.py``): ``embed``, the questions' vectors, and
``embed-bulk``, ingestion's, each with a consumer and a concurrency of its own, so a
question never queues on the bus behind a document's chunks; within the process the
backend lets a question's call go before the next bulk one.
"""

from __future__ import annotations

from typing import Protocol

from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import BadRequest, EmbedRequest, EmbedResponse

from .settings import EmbedSettings


class Backend(Protocol):
    model: str  # what EmbedResponse.model says

    async def start(self) -> None: ...

    async def embed(self, texts: list[str], deadline: float | None = None, *, bulk: bool = False) -> list[list[float]]:
        """One unit vector per text, in input order; ``deadline`` (the event loop's clock) bounds retries.

        ``bulk``: the request came on the bulk lane (ingestion); a backend that schedules its own
        work lets interactive requests go first."""
        ...

    async def close(self) -> None: ...


def make_backend(settings: EmbedSettings) -> Backend:
    # Imported here: each backend's dependencies load only when it is chosen.
    if settings.backend == "onnx":
        from .onnx_backend import OnnxBackend

        return OnnxBackend(settings.onnx)
    if settings.backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(settings.openai)
    raise ValueError(f"unknown embed backend {settings.backend!r}; expected 'onnx' or 'openai'")


class EmbedProcessor(Processor[EmbedRequest, EmbedResponse]):
    request_type = EmbedRequest
    response_type = EmbedResponse
    Settings = EmbedSettings

    settings: EmbedSettings

    def __init__(self, name: str, settings: EmbedSettings) -> None:
        super().__init__(name, settings)
        self.backend: Backend | None = None

    async def start(self) -> None:
        backend = make_backend(self.settings)
        try:
            await backend.start()
        except BaseException:
            await backend.close()  # the base calls close() only after a successful start()
            raise
        self.backend = backend

    async def close(self) -> None:
        if self.backend is not None:
            backend, self.backend = self.backend, None
            await backend.close()

    async def handle(self, request: EmbedRequest, context: RequestContext) -> EmbedResponse:
        if self.backend is None:
            raise RuntimeError(f"{self.name} is not started")
        texts = request.texts
        check_texts(texts, self.settings)
        vectors = await self.backend.embed(texts, self.handler_deadline(context), bulk=context.bulk) if texts else []
        return EmbedResponse(vectors=vectors, model=self.backend.model)


def check_texts(texts: list[str], settings: EmbedSettings) -> None:
    """Refuse what would be expensive by mistake; an empty or blank text is a text like any other."""
    if len(texts) > settings.max_batch:
        raise BadRequest(
            f"{len(texts)} texts in one request; at most max_batch={settings.max_batch}: split the request"
        )
    for i, text in enumerate(texts):
        if len(text) > settings.max_chars:
            raise BadRequest(f"text {i} has {len(text)} characters; at most max_chars={settings.max_chars}")
