"""The model backend: any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp's server).

One ``POST {base_url}/chat/completions`` per request, the rendered template
as the only (user) message. Token counts come from the answer's ``usage``
(0 when the server sends none).

Failures. A 429 or a 5xx says "later", a failed connection may be a server
restarting: those are retried up to ``max_retries`` times with exponential
backoff (or after the server's ``Retry-After``). Any other 4xx is a request
the server will refuse again, and a read timeout a model too slow for
``timeout_s``, so neither is retried: retrying would only multiply the wait.
No retry sleeps past the request's deadline; the error then says what the
last attempt got, which helps more than a bare time-out. Every failure is
an ``EndpointError`` naming the URL, the status and the server's message.

``extract-concepts`` answers are lines: the model's non-blank lines, list
markers removed, each once, the question first (prepended when the model
left it out), at most ``max_concepts`` after it.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from email.utils import parsedate_to_datetime

import httpx
import msgspec

from processors.runtime.http import json_client
from schema import PromptResult

from .settings import OpenAISettings
from .variables import EXTRACT_CONCEPTS, PromptInput, one_line

NAME = "openai"

# Errors before the server could have answered, or after it dropped the connection: worth a retry.
RETRYABLE_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)
_LIST_MARKER = re.compile(r"^(?:[-*•+]|\d+[.)])\s+")


class EndpointError(RuntimeError):
    """The chat endpoint could not be reached, refused the request, or answered nonsense."""


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Answer(msgspec.Struct):
    choices: list[_Choice]
    usage: _Usage | None = None


class _Refusal(msgspec.Struct):
    error: dict | str


def retryable(status: int) -> bool:
    return status == 429 or status >= 500


def retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); None if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def concept_lines(text: str, question: str, limit: int) -> list[str]:
    """The model's concepts as lines, the question first, each once, at most ``limit`` after it."""
    first = one_line(question)
    lines, seen = [first], {first.casefold()}
    for raw in text.splitlines():
        line = one_line(_LIST_MARKER.sub("", raw.strip()))
        if line and line.casefold() not in seen:
            seen.add(line.casefold())
            lines.append(line)
    return lines[: limit + 1]


class OpenAIBackend:
    name = NAME

    def __init__(self, settings: OpenAISettings, max_concepts: int) -> None:
        self.settings = settings
        self.max_concepts = max_concepts
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._client = json_client(self.settings.api_key, self.settings.timeout_s)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def answer(self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None) -> PromptResult:
        text, usage = await self.complete(prompt, deadline)
        if template_id == EXTRACT_CONCEPTS:
            lines = concept_lines(text, inp.query, self.max_concepts)
            return self._result("lines", "\n".join(lines), template_id, usage)
        return self._result("text", text.strip(), template_id, usage)

    def _result(self, kind: str, text: str, template_id: str, usage: _Usage) -> PromptResult:
        return PromptResult(
            kind,
            text,
            template_id=template_id,
            backend=NAME,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )

    async def complete(self, prompt: str, deadline: float | None = None) -> tuple[str, _Usage]:
        """The model's reply to ``prompt`` and its usage; ``deadline`` is on the event loop's clock."""
        if self._client is None:
            raise RuntimeError("the openai backend is not started")
        s = self.settings
        body = msgspec.json.encode(
            {
                "model": s.model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": s.temperature,
                "max_tokens": s.max_tokens,
                "stream": False,
            }
        )
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                r = await self._client.post(self.url, content=body)
            except RETRYABLE_ERRORS as exc:
                failure = f"{type(exc).__name__}: {exc}"
            except httpx.TimeoutException:
                raise EndpointError(f"POST {self.url}: no answer within timeout_s={s.timeout_s}") from None
            except httpx.HTTPError as exc:
                raise EndpointError(f"POST {self.url}: {type(exc).__name__}: {exc}") from None
            else:
                if r.status_code == 200:
                    return _parse(self.url, r.content)
                failure = f"HTTP {r.status_code}: {_refusal(r.content)}"
                if not retryable(r.status_code):
                    raise EndpointError(f"POST {self.url}: {failure}")
                wait = retry_after_s(r.headers.get("retry-after"))
                if wait is not None and wait > s.max_retry_after_s:
                    raise EndpointError(
                        f"POST {self.url}: {failure}; Retry-After {wait:.0f}s exceeds max_retry_after_s={s.max_retry_after_s}"
                    )
            if attempt > s.max_retries:
                raise EndpointError(f"POST {self.url}: {failure} (gave up after {attempt} attempts)")
            if wait is None:
                wait = min(s.backoff_max_s, s.backoff_base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            loop = asyncio.get_running_loop()
            if deadline is not None and loop.time() + wait >= deadline:
                raise EndpointError(f"POST {self.url}: {failure}; a retry in {wait:.1f}s would pass the deadline")
            await asyncio.sleep(wait)


def _parse(url: str, content: bytes) -> tuple[str, _Usage]:
    try:
        answer = msgspec.json.decode(content, type=_Answer)
    except msgspec.DecodeError as exc:
        raise EndpointError(f"POST {url}: unexpected answer: {exc}") from None
    if not answer.choices:
        raise EndpointError(f"POST {url}: the answer has no choices")
    return answer.choices[0].message.content or "", answer.usage or _Usage()


def _refusal(content: bytes) -> str:
    try:
        error = msgspec.json.decode(content, type=_Refusal).error
        if isinstance(error, dict):
            return str(error.get("message") or error)[:500]
        return error[:500]
    except msgspec.DecodeError:
        return content.decode("utf-8", "replace")[:500] or "(empty body)"
