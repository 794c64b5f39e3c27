"""The HTTP client of backends that call an OpenAI-compatible endpoint (embed, prompt).

``OpenAIEndpoint`` is one URL: a pooled client (``start``/``close``) and
``post_json``, the one POST both backends make. A backend keeps only its own
request body and the parsing of a 200 answer.

Failures. A 429 or a 5xx says "later", a failed connection may be a server
restarting: those are retried up to ``max_retries`` times with exponential
backoff (or after the server's ``Retry-After``). Any other 4xx is a request
the server will refuse again, and a read timeout a model too slow for
``timeout_s``, so neither is retried: retrying would only multiply the wait.
No retry sleeps past the request's deadline; the error then says what the
last attempt got, which helps more than a bare time-out. Every failure is
an ``EndpointError`` naming the URL, the status and the server's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime

import httpx
import msgspec

from ragbus.config.settings import RetrySettings

# Errors before the server could have answered, or after it dropped the connection: worth a retry.
RETRYABLE_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


class EndpointError(RuntimeError):
    """The endpoint could not be reached, refused the request, or answered nonsense."""


class _Refusal(msgspec.Struct):
    error: dict | str  # OpenAI sends {"message": ...}; some servers a bare string


def json_client(api_key: str, timeout_s: float) -> httpx.AsyncClient:
    """One pooled client per backend: JSON in and out, a bearer token only when there is a key."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.AsyncClient(headers=headers, timeout=timeout_s)


def retryable(status: int) -> bool:
    """A status that says "later" (429, 5xx), as opposed to a request the server will refuse again."""
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


def refusal(content: bytes) -> str:
    """The server's own message from an error body, so the error says why and not only the status."""
    try:
        error = msgspec.json.decode(content, type=_Refusal).error
    except msgspec.DecodeError:
        return content.decode("utf-8", "replace")[:500] or "(empty body)"
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return error[:500]


class OpenAIEndpoint:
    """One endpoint URL: a pooled JSON client and a POST retried as the module docstring says."""

    def __init__(self, url: str, api_key: str, timeout_s: float, retry: RetrySettings) -> None:
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retry = retry
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._client = json_client(self.api_key, self.timeout_s)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def error(self, failure: str) -> EndpointError:
        """An ``EndpointError`` naming this URL, for what a backend finds wrong in an answer."""
        return EndpointError(f"POST {self.url}: {failure}")

    async def post_json(self, body: object, deadline: float | None = None) -> bytes:
        """The body of the endpoint's 200 answer to ``body`` (encoded as JSON), after retries.

        ``deadline`` is on the event loop's clock; None = retry without one (the caller bounds the time).
        """
        answer = await self._send(body, deadline, stream=False)
        return answer.content

    @contextlib.asynccontextmanager
    async def post_stream(self, body: object, deadline: float | None = None) -> AsyncIterator[httpx.Response]:
        """The endpoint's 200 answer to ``body``, its body not read yet (``aiter_lines``), closed on exit.

        Retried as ``post_json`` is, until the status line of a 200: once the
        answer has begun, a failure is the caller's to report.
        """
        answer = await self._send(body, deadline, stream=True)
        try:
            yield answer
        except httpx.TimeoutException:
            raise self.error(f"the answer stopped coming within timeout_s={self.timeout_s}") from None
        except httpx.HTTPError as exc:
            raise self.error(f"the answer broke off: {type(exc).__name__}: {exc}") from None
        finally:
            await answer.aclose()

    async def _send(self, body: object, deadline: float | None, *, stream: bool) -> httpx.Response:
        if self._client is None:
            raise RuntimeError(f"the client of {self.url} is not started")
        content = msgspec.json.encode(body)
        r = self.retry
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                request = self._client.build_request("POST", self.url, content=content)
                answer = await self._client.send(request, stream=stream)
                if stream and answer.status_code != 200:
                    await answer.aread()  # the refusal's message, then the connection goes back to the pool
                    await answer.aclose()
            except RETRYABLE_ERRORS as exc:
                failure = f"{type(exc).__name__}: {exc}"
            except httpx.TimeoutException:
                raise self.error(f"no answer within timeout_s={self.timeout_s}") from None
            except httpx.HTTPError as exc:
                raise self.error(f"{type(exc).__name__}: {exc}") from None
            else:
                if answer.status_code == 200:
                    return answer
                failure = f"HTTP {answer.status_code}: {refusal(answer.content)}"
                if not retryable(answer.status_code):
                    raise self.error(failure)
                wait = retry_after_s(answer.headers.get("retry-after"))
                if wait is not None and wait > r.max_retry_after_s:
                    raise self.error(
                        f"{failure}; Retry-After {wait:.0f}s exceeds max_retry_after_s={r.max_retry_after_s}"
                    )
            if attempt > r.max_retries:
                raise self.error(f"{failure} (gave up after {attempt} attempts)")
            if wait is None:
                wait = min(r.backoff_max_s, r.backoff_base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            if deadline is not None and asyncio.get_running_loop().time() + wait >= deadline:
                raise self.error(f"{failure}; a retry in {wait:.1f}s would pass the deadline")
            await asyncio.sleep(wait)
