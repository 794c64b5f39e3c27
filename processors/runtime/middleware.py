"""Hooks around a processor's handling of a delivery and a client's round trip, as FastStream's middlewares.

A ``Middleware`` overrides the hooks it needs; the others do nothing. ``install`` puts one in the
process-wide ``installed`` list: a processor reads it as it starts serving, a request client on each
call. With none installed the runtime finds the list empty and goes on as it would without hooks.
OpenTelemetry's spans (``tracing.py``) are one middleware, installed when ``tracing.ENABLED``
(the runtime package loads it first thing).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..bus import Delivery
    from .processor import RequestContext

Handler = Callable[["Delivery"], Awaitable[None]]


@dataclass(slots=True, eq=False)
class Call:
    """One call of a request client, as the middlewares around it see it (made only when one is installed)."""

    bus_url: str
    topic: str
    body: bytes
    timeout: float | None  # None: the client's own
    traceparent: str | None  # what the request carries; a middleware may put its own before the round trip
    request_id: str
    middlewares: tuple[Middleware, ...]  # those installed when the call began: each of its hooks goes to these
    key: str | None = None  # the bus key the request is published with (None: spread over the replicas)
    state: dict[Middleware, Any] = field(default_factory=dict)  # a middleware's own, for its later hooks


RoundTrip = Callable[[Call], Awaitable[bytes]]  # a call's round trip, its answer's body
Pieces = Callable[[Call], AsyncGenerator[bytes, None]]  # a streamed call's round trip, its pieces' bodies


class Middleware:
    """Every hook, doing nothing: subclass and override those you need."""

    # A processor. The hooks below ``wrap_handler`` run inside the handler it returns, so what it sets in
    # a contextvar they see (tracing's current span).
    def wrap_handler(self, handler: Handler, *, processor: str, group: str, bus_url: str) -> Handler:
        """Once per lane as processor ``processor`` starts serving: what to run for each delivery instead
        of ``handler`` (all of the delivery's handling, up to the reply published; ack and retry are
        the bus's, outside)."""
        return handler

    def outcome(self, value: str, error_type: str | None = None) -> None:
        """Said from inside a delivery's handling when it ends otherwise than ``ok``: ``expired`` (dropped
        past its deadline), ``error`` (answered with the processor's failure) or ``bad_request`` (the
        caller's mistake), with the error's type."""

    def handle_started(self, context: RequestContext) -> None:
        """The processor's ``handle`` is about to run on a request (a whole answer, not a stream)."""

    def handle_ended(self, context: RequestContext) -> None:
        """``handle`` returned or raised; its answer is not yet published."""

    async def flush(self) -> None:
        """A processor stopped or a client closed: send on what is held (the commands end by ``os._exit``)."""

    # A request client.
    async def call(self, call: Call, call_next: RoundTrip) -> bytes:
        """Around one call's round trip, from publishing the request to its answer (or time-out)."""
        return await call_next(call)

    def stream(self, call: Call, pieces: Pieces) -> AsyncGenerator[bytes, None]:
        """Around one streamed call: the pieces' bodies as ``pieces(call)`` yields them, until the final one."""
        return pieces(call)

    def resent(self, call: Call, attempt: int) -> None:
        """The call went unanswered for ``resend_after_s`` and was published again as ``attempt``."""

    def reply_routed(self, delivery: Delivery) -> None:
        """The reply inbox received ``delivery`` and hands it to the call waiting for its request id
        (or counts it late, duplicate or foreign)."""


installed: list[Middleware] = []  # first installed, outermost


def install(middleware: Middleware) -> Middleware:
    """Hook ``middleware`` in, once; processors that already serve keep those they started with."""
    if middleware not in installed:
        installed.append(middleware)
    return middleware


def uninstall(middleware: Middleware) -> None:
    if middleware in installed:
        installed.remove(middleware)


def around_call(call: Call, round_trip: RoundTrip) -> Awaitable[bytes]:
    """``round_trip(call)`` inside every ``call`` hook of the call's middlewares, the first outermost."""
    run: RoundTrip = round_trip
    for middleware in reversed(call.middlewares):
        run = functools.partial(middleware.call, call_next=run)
    return run(call)


def around_stream(call: Call, pieces: Pieces) -> AsyncGenerator[bytes, None]:
    """``pieces(call)`` inside every ``stream`` hook of the call's middlewares, the first outermost."""
    run: Pieces = pieces
    for middleware in reversed(call.middlewares):
        run = functools.partial(middleware.stream, pieces=run)
    return run(call)


def wrap_handler(
    handler: Handler, middlewares: tuple[Middleware, ...], *, processor: str, group: str, bus_url: str
) -> Handler:
    """``handler`` inside every middleware's ``wrap_handler``, the first outermost."""
    for middleware in reversed(middlewares):
        handler = middleware.wrap_handler(handler, processor=processor, group=group, bus_url=bus_url)
    return handler

