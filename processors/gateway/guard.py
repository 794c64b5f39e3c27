"""The gateway's safety limits, as one ASGI middleware in front of every route.

- bearer keys: with keys configured, a request without ``Authorization: Bearer <key>`` of
  one of them gets 401 (``/health``, ``/ready`` and the OpenAPI document stay open, for
  probes and tooling, and so do the web page's files, which hold no data);
- a body limit: a declared ``Content-Length`` over it is refused before reading, and a
  body that grows past it while read (chunked) is cut off with 413. The body is read
  here, whole, before the route runs (every route reads it whole anyway);
- a bound on requests in flight: past it, 503 with ``Retry-After`` at once, rather than
  a queue that grows until every caller times out; and a smaller one per key, past which that
  key gets 429, so one key cannot take every place. A request takes its place once its body is
  read: a client still sending one (however slowly: the protocol's ``body_timeout_s`` ends it)
  holds none. A full gateway or key is also refused before the body is read, sparing the read.

Written here rather than taken from a library: Starlette has none of these, and
uvicorn's ``limit_concurrency`` counts connections (keep-alive ones too) and sends no
``Retry-After``. Each is a few lines over the ASGI messages.
"""

from __future__ import annotations

import enum
from collections import Counter

import msgspec

from ragbus.schema.http import ErrorBody, ErrorDetail

from .keys import KEY_STATE, ApiKey, key_of, match

OPEN_PATHS = frozenset({"/health", "/ready", "/openapi.json", "/"})
OPEN_PREFIX = "/page/"  # the web page's files: they hold no data (the page asks the routes with the user's key)


def error_message(status: int, type_: str, message: str, headers: dict[str, str] | None = None):
    """The ASGI messages of a JSON error answer."""
    body = msgspec.json.encode(ErrorBody(error=ErrorDetail(type=type_, message=message)))
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return [
        {"type": "http.response.start", "status": status, "headers": raw},
        {"type": "http.response.body", "body": body},
    ]


class Unread(enum.Enum):
    """Why a body was not read whole."""

    TOO_LARGE = "too large"
    GONE = "gone"  # the client left, or its body ran past body_timeout_s (the protocol answered 408)


class Guard:
    def __init__(self, app, *, api_keys: list[ApiKey], max_body_bytes: int, max_in_flight: int,
                 max_in_flight_per_key: int, retry_after_s: int):
        self.app = app
        self.keys = [k for k in api_keys if k.key]
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.max_in_flight_per_key = max_in_flight_per_key
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.in_flight_of: Counter[str] = Counter()  # by key; none with no keys set

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIX):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope) or self._overloaded(scope)
        if refusal is not None:
            await _send_all(send, refusal)
            return
        body = await self._read_body(receive)
        if body is Unread.GONE:
            return  # nobody to answer
        if body is Unread.TOO_LARGE:
            await _send_all(send, self._too_large())
            return
        refusal = self._overloaded(scope)  # again: others may have taken the places while this body came
        if refusal is not None:
            await _send_all(send, refusal)
            return
        key = _key_name(scope)
        self.in_flight += 1
        if key is not None:
            self.in_flight_of[key] += 1
        try:
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # later: only the disconnect, which a streamed answer listens for

            await self.app(scope, replay, send)
        finally:
            self.in_flight -= 1
            if key is not None:
                self.in_flight_of[key] -= 1
                if not self.in_flight_of[key]:
                    del self.in_flight_of[key]

    async def _read_body(self, receive) -> bytes | Unread:
        """The whole body; TOO_LARGE once it passes the limit (the rest is not read); GONE if the client left."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return Unread.GONE
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                return Unread.TOO_LARGE
            if not message.get("more_body", False):
                return bytes(body)

    def _refusal(self, scope):
        headers = dict(scope["headers"])
        if self.keys:
            given = headers.get(b"authorization", b"")
            scheme, _, key = given.partition(b" ")
            found = match(self.keys, key.strip()) if scheme.lower() == b"bearer" else None
            if found is None:
                return error_message(401, "Unauthorized", "a valid API key is needed: Authorization: Bearer <key>",
                                     {"WWW-Authenticate": "Bearer"})
            scope.setdefault("state", {})[KEY_STATE] = found  # what it may do: the routes and tools ask
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return error_message(400, "BadRequest", "Content-Length is not a number")
            if int(length) > self.max_body_bytes:
                return self._too_large()
        return None

    def _overloaded(self, scope):
        """429 for a key with its share in flight, 503 for a full gateway; None when there is a place."""
        retry = {"Retry-After": str(self.retry_after_s)}
        key = _key_name(scope)
        if key is not None and self.in_flight_of[key] >= self.max_in_flight_per_key:
            return error_message(
                429, "TooManyRequests", f"{self.in_flight_of[key]} requests of this key in flight, the most one key "
                                        "may have ([gateway] max_in_flight_per_key); retry later", retry)
        if self.in_flight >= self.max_in_flight:
            return error_message(
                503, "Overloaded", f"{self.in_flight} requests in flight, the most this gateway takes; retry later",
                retry)
        return None

    def _too_large(self):
        return error_message(413, "BodyTooLarge", f"the request body is over max_body_bytes={self.max_body_bytes} "
                                                  "([gateway] max_body_bytes)")


def _key_name(scope) -> str | None:
    """The key a request's places are counted under; None with no keys set."""
    key = key_of(scope)
    return key.key if key is not None else None


async def _send_all(send, messages) -> None:
    for message in messages:
        await send(message)
