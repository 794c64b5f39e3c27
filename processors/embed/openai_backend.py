"""The remote backend: any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, llama.cpp, Ollama, TEI...).

One ``POST {base_url}/embeddings`` per request, with every text of it as
``input``. The vectors are L2-normalised here, as the onnx backend's are, so
callers may rely on unit vectors whichever backend answered.

Failures are handled by ``ragbus.runtime.http.OpenAIEndpoint``, as for
the prompt backend: a 429, a 5xx or a failed connection is retried with
backoff (or after ``Retry-After``), never past the request's deadline; any
other refusal (OpenAI's of an empty string, for one) is not. Every failure
is an ``EndpointError`` naming the URL, the status and the server's message.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ragbus.runtime.http import EndpointError, OpenAIEndpoint

from .settings import OpenAISettings

__all__ = ["EndpointError", "OpenAIBackend"]  # EndpointError: still importable from here, where it was defined


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int


class _Answer(msgspec.Struct):
    data: list[_Item]


class OpenAIBackend:
    def __init__(self, settings: OpenAISettings) -> None:
        self.settings = settings
        self.model = settings.model
        url = settings.base_url.rstrip("/") + "/embeddings"
        self.endpoint = OpenAIEndpoint(url, settings.api_key, settings.timeout_s, retry=settings)

    async def start(self) -> None:
        await self.endpoint.start()

    async def close(self) -> None:
        await self.endpoint.close()

    async def embed(self, texts: list[str], deadline: float | None = None, *, bulk: bool = False) -> list[list[float]]:
        # ``bulk`` changes nothing here: the endpoint schedules its own work.
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        content = await self.endpoint.post_json(body, deadline)
        try:
            items = msgspec.json.decode(content, type=_Answer).data
        except msgspec.DecodeError as exc:
            raise self.endpoint.error(f"unexpected answer: {exc}") from None
        return _in_order(self.endpoint, items, len(texts))


def _in_order(endpoint: OpenAIEndpoint, items: list[_Item], count: int) -> list[list[float]]:
    if sorted(item.index for item in items) != list(range(count)):
        raise endpoint.error(f"asked for {count} vectors, got indexes {sorted(i.index for i in items)[:20]}")
    items = sorted(items, key=lambda item: item.index)
    dims = {len(item.embedding) for item in items}
    if len(dims) > 1 or 0 in dims:
        raise endpoint.error(f"vectors of dimensions {sorted(dims)}")
    if not items:
        return []
    vectors = np.array([item.embedding for item in items], dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).tolist()
