"""The remote backend: any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, llama.cpp, Ollama, TEI...).

One ``POST {base_url}/embeddings`` per request, with every text of it as
``input``. The vectors are L2-normalised here, as the onnx backend's are, so
callers may rely on unit vectors whichever backend answered. An endpoint's
own refusal (OpenAI's refuses empty strings, for one) comes back as an
``EndpointError`` carrying its status and message.
"""

from __future__ import annotations

import httpx
import msgspec
import numpy as np

from processors.runtime.http import json_client

from .settings import OpenAISettings


class EndpointError(RuntimeError):
    """The embeddings endpoint could not be reached, refused the request, or answered nonsense."""


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int


class _Answer(msgspec.Struct):
    data: list[_Item]


class _Refusal(msgspec.Struct):
    error: dict


class OpenAIBackend:
    def __init__(self, settings: OpenAISettings) -> None:
        self.settings = settings
        self.model = settings.model
        self.url = settings.base_url.rstrip("/") + "/embeddings"
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._client = json_client(self.settings.api_key, self.settings.timeout_s)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self._client is None:
            raise RuntimeError("the openai backend is not started")
        body = msgspec.json.encode({"model": self.model, "input": texts, "encoding_format": "float"})
        try:
            r = await self._client.post(self.url, content=body)
        except httpx.TimeoutException:
            raise EndpointError(f"POST {self.url}: no answer within {self.settings.timeout_s}s") from None
        except httpx.HTTPError as exc:
            raise EndpointError(f"POST {self.url}: {type(exc).__name__}: {exc}") from None
        if r.status_code != 200:
            raise EndpointError(f"POST {self.url}: HTTP {r.status_code}: {_refusal(r.content)}")
        try:
            items = msgspec.json.decode(r.content, type=_Answer).data
        except msgspec.DecodeError as exc:
            raise EndpointError(f"POST {self.url}: unexpected answer: {exc}") from None
        return _in_order(self.url, items, len(texts))


def _refusal(content: bytes) -> str:
    try:
        error = msgspec.json.decode(content, type=_Refusal).error
        return str(error.get("message") or error)[:500]
    except msgspec.DecodeError:
        return content.decode("utf-8", "replace")[:500] or "(empty body)"


def _in_order(url: str, items: list[_Item], count: int) -> list[list[float]]:
    if sorted(item.index for item in items) != list(range(count)):
        raise EndpointError(f"POST {url}: asked for {count} vectors, got indexes {sorted(i.index for i in items)[:20]}")
    items = sorted(items, key=lambda item: item.index)
    dims = {len(item.embedding) for item in items}
    if len(dims) > 1 or 0 in dims:
        raise EndpointError(f"POST {url}: vectors of dimensions {sorted(dims)}")
    if not items:
        return []
    vectors = np.array([item.embedding for item in items], dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).tolist()
