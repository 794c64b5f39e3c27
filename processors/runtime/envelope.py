"""The envelope: what every request and response carries in its headers.

- ``request-id``: chosen by the caller, echoed on the response.
- ``reply-to``: where the caller reads responses (``Bus.reply_inbox``; must start with ``REPLY_PREFIX``).
- ``attempt``: the caller's own retry count of this request (1 = first try).
- ``deadline``: absolute, milliseconds since the Unix epoch; past it nobody waits
  for the answer, so a processor drops the request instead of working on it.
- ``traceparent``: W3C trace context; a processor continues the caller's trace, and every
  request it makes while handling one (``request_headers``, within the handler's task)
  carries a child of it, so one question is one trace across every hop and resend.
- ``content-type``: how the body is encoded.
- ``stream`` (request, ``1``): the caller takes the answer in pieces, if the
  processor can give it so (``ragbus.schema.topics.STREAMS``); else the one response.
- ``seq`` and ``final`` (response to a ``stream`` request): the piece's number,
  0, 1, 2... within its request id, and ``1`` on the last piece. A piece
  published again (a resent request served from the start by another replica)
  has the same number, so the caller keeps each number once.
"""

from __future__ import annotations

import math
import os
import random
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from ragbus.schema import CONTENT_TYPE

REQUEST_ID = "request-id"
REPLY_TO = "reply-to"
ATTEMPT = "attempt"
DEADLINE = "deadline"
TRACEPARENT = "traceparent"
CONTENT_TYPE_HEADER = "content-type"
STREAM = "stream"
SEQ = "seq"
FINAL = "final"

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


# The traceparent of the request the current task is handling (set by the processor before its
# handler runs; a task's children inherit it). Requests made meanwhile continue its trace.
handling_trace: ContextVar[str | None] = ContextVar("ragbus_handling_trace", default=None)


class EnvelopeError(ValueError):
    """A header that is present but malformed."""


def new_request_id() -> str:
    """128 random bits from the OS: unguessable, so a response cannot be forged by guessing."""
    return os.urandom(16).hex()


def _span_id() -> str:
    # Trace and span ids only need to be unique, not secret: the fast generator will do.
    return f"{random.getrandbits(64):016x}"


def now_ms() -> int:
    return int(time.time() * 1000)


def new_traceparent(trace_id: str | None = None) -> str:
    """A traceparent for a new span, in ``trace_id`` or a fresh trace."""
    return f"00-{trace_id or f'{random.getrandbits(128):032x}'}-{_span_id()}-01"


def _outgoing_traceparent() -> str:
    """A child of the request being handled (``handling_trace``), else a new trace."""
    parent = handling_trace.get()
    return child_traceparent(parent) if parent else new_traceparent()


def child_traceparent(parent: str | None) -> str:
    """Continue the caller's trace with a new span, or start one if the header is absent or bad."""
    m = _TRACEPARENT.match(parent or "")
    if m is None or m.group(1) == "0" * 32:
        return new_traceparent()
    return f"00-{m.group(1)}-{_span_id()}-{m.group(3)}"


@dataclass(frozen=True, slots=True)
class Envelope:
    request_id: str
    reply_to: str | None
    attempt: int
    deadline_ms: int | None
    traceparent: str
    stream: bool = False  # the caller takes the answer in pieces

    def remaining_s(self, now: int | None = None) -> float | None:
        """Seconds left before the deadline (negative once past), or None for no deadline."""
        if self.deadline_ms is None:
            return None
        return (self.deadline_ms - (now_ms() if now is None else now)) / 1000

    def expired(self, now: int | None = None) -> bool:
        left = self.remaining_s(now)
        return left is not None and left <= 0


def request_headers(
    *,
    request_id: str,
    reply_to: str | None,
    timeout_s: float | None,
    attempt: int = 1,
    traceparent: str | None = None,
    stream: bool = False,
) -> dict[str, str]:
    headers = {
        REQUEST_ID: request_id,
        ATTEMPT: str(attempt),
        TRACEPARENT: traceparent or _outgoing_traceparent(),
        CONTENT_TYPE_HEADER: CONTENT_TYPE,
    }
    if reply_to is not None:
        headers[REPLY_TO] = reply_to
    if stream:
        headers[STREAM] = "1"
    if timeout_s is not None:
        headers[DEADLINE] = str(math.ceil(time.time() * 1000 + timeout_s * 1000))
    return headers


def response_headers(envelope: Envelope, *, seq: int | None = None, final: bool = False) -> dict[str, str]:
    """The headers of a response; with ``seq``, of that piece of a stream (``final`` on the last)."""
    headers = {
        REQUEST_ID: envelope.request_id,
        TRACEPARENT: child_traceparent(envelope.traceparent),
        CONTENT_TYPE_HEADER: CONTENT_TYPE,
    }
    if seq is not None:
        headers[SEQ] = str(seq)
        if final:
            headers[FINAL] = "1"
    return headers


def piece_position(headers: Mapping[str, str]) -> tuple[int, bool] | None:
    """A stream piece's ``(seq, final)``; None when the headers carry no valid sequence number."""
    raw = headers.get(SEQ)
    if raw is None or len(raw) > 12 or not raw.isdigit():
        return None
    return int(raw), headers.get(FINAL) == "1"


# Epoch milliseconds of the year 9999: later deadlines are not times, they are garbage.
_MAX_DEADLINE_MS = 253_402_300_800_000


def parse_envelope(headers: Mapping[str, str]) -> Envelope:
    """Read the envelope of a received request; raises ``EnvelopeError`` on malformed values.

    A missing ``request-id`` is tolerated (fire-and-forget publishers need
    none) and replaced by a fresh id for logging; a missing deadline means
    no deadline.
    """
    request_id = headers.get(REQUEST_ID) or new_request_id()
    if len(request_id) > 200:
        raise EnvelopeError("request-id longer than 200 characters")
    try:
        attempt = int(headers.get(ATTEMPT, "1"))
    except ValueError:
        raise EnvelopeError(f"attempt header is not an integer: {headers.get(ATTEMPT)!r}") from None
    raw_deadline = headers.get(DEADLINE)
    deadline = None
    if raw_deadline is not None:
        if len(raw_deadline) > 40:  # int() of a megabyte of digits is itself slow
            raise EnvelopeError(f"deadline header is not epoch milliseconds: {raw_deadline[:100]!r}...")
        try:
            deadline = int(raw_deadline)
        except ValueError:
            raise EnvelopeError(f"deadline header is not epoch milliseconds: {raw_deadline!r}") from None
        # Past the year 9999 is no time at all: as good as no deadline, and no float overflows on it.
        deadline = min(deadline, _MAX_DEADLINE_MS)
    return Envelope(
        request_id=request_id,
        reply_to=headers.get(REPLY_TO) or None,
        attempt=attempt,
        deadline_ms=deadline,
        traceparent=headers.get(TRACEPARENT) or new_traceparent(),
        stream=headers.get(STREAM) == "1",
    )
