"""The limits of HTTP/1.1 itself that uvicorn's httptools protocol lacks: a bound on a request's head, and time
limits on a head, on a body and on a silent connection.

httptools (llhttp) takes a head of any size, keeping a header's value whole until it ends, and uvicorn arms
no timer before a connection's first response is sent (its keep-alive timer), so a client that never ends
its head holds a connection, and as much memory as it sends, for ever; so does one that sends a body a byte at
a time. uvicorn offers none of these for httptools (its ``h11_max_incomplete_event_size`` is h11's, answers 400,
and has no time limit), nor does Starlette, which only sees a request once its head is whole and has no time
limit on reading a body. Hence a subclass of uvicorn's protocol, ``HeadLimitedProtocol``:

- a head (request line and headers) is counted as it is given to the parser, which gets at most what the
  limit leaves while a head is read, so a body that shares a read with its head is not counted. Past
  ``max_head_bytes``: 431 and the connection closed. A request pipelined behind another, starting in the
  read that ends the one before, is counted from the next read: its head may pass the limit by at most
  one more limit's worth before it is refused;
- ``head_timeout_s`` from a head's first byte to its end: 408 and the connection closed;
- ``body_timeout_s`` from a head's end to its body's end, however steadily the bytes come: 408 (if the
  request is not answered yet; its app then finds the client gone) and the connection closed, logged once.
  Time in which the server itself does not read the body does not count: a request pipelined behind
  another's answer, or reading paused because the app has not taken what came;
- ``idle_timeout_s`` of silence closes a connection: before its first request (uvicorn's keep-alive timer,
  armed at once rather than after the first response), between requests (the keep-alive timer itself),
  and in the middle of a body (while the body is awaited and reading is not paused by the server).

A refusal due while an earlier request's answer is still being written waits for that answer and those
pipelined before it. Every connection is written with Nagle's algorithm off (TCP_NODELAY), whatever socket
uvicorn was given. Everything else is HttpToolsProtocol's own: pipelining, keep-alive, flow control.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

import msgspec
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ragbus.schema.http import ErrorBody, ErrorDetail

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadLimits:
    max_head_bytes: int
    head_timeout_s: float
    idle_timeout_s: float
    body_timeout_s: float


def refusal(status: int, type_: str, message: str, default_headers=()) -> bytes:
    """A whole HTTP answer that closes its connection, with the gateway's JSON error body."""
    body = msgspec.json.encode(ErrorBody(error=ErrorDetail(type=type_, message=message)))
    head = [STATUS_LINE[status]]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n"]
    return b"".join(head) + b"\r\n" + body


class HeadLimitedProtocol(HttpToolsProtocol):
    limits: HeadLimits  # set by ``protocol_with``: uvicorn makes each connection's protocol from the class alone

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head_used: int | None = 0  # bytes of the head being read; None while a body is
        self.head_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None  # while a body is read: _body_check
        self.body_deadline = 0.0  # loop time by which the body being read must end
        self.body_checked = 0.0  # when body_timer was last armed
        self.close_timer: asyncio.TimerHandle | None = None  # after a refusal
        self.last_read = 0.0
        self.refusal: bytes | None = None  # due once the answers before it are written

    # -- the connection

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # An answer is written in pieces (head, body, each streamed event). asyncio turns Nagle's algorithm off
            # only on sockets whose proto says TCP, and a listening socket from socket.create_server (which
            # ``ragbus serve`` binds before uvicorn starts) says 0: on a kept-alive connection each answer then
            # waited for the client's delayed ACK, 40 ms.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self.close_timer is not None:
            self.close_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return  # the connection ends with the refusal: what follows is not read
        self.last_read = self.loop.time()
        view = memoryview(data)
        limit = self.limits.max_head_bytes
        while view:
            if self.head_used is not None:
                piece, view = view[:limit - self.head_used], view[limit - self.head_used:]
                self.head_used += len(piece)  # before the parser runs: the head may end inside the piece
            else:
                piece, view = view[:limit], view[limit:]
            super().data_received(piece)  # type: ignore[arg-type]  # httptools reads any buffer
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # a parse error answered, or an upgrade
            if self.head_used is not None and self.head_used >= limit:
                self._refuse(431, "HeadTooLarge", f"the request line and headers are over max_head_bytes={limit} "
                                                  "([gateway] max_head_bytes)")
                return

    # -- the parser's callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self.head_used = None
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        super().on_headers_complete()
        if self.body_timer is None:
            now = self.loop.time()
            self.body_deadline = now + self.limits.body_timeout_s
            self._arm_body_check(now, min(self.limits.idle_timeout_s, self.limits.body_timeout_s))

    def on_message_complete(self) -> None:
        self.head_used = 0
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self.refusal is not None and not self.pipeline:
            self.server_state.total_requests += 1
            self._send_refusal()
            return
        super().on_response_complete()

    # -- the limits

    def _head_timed_out(self) -> None:
        self.head_timer = None
        self._refuse(408, "HeadTimeout", f"the request line and headers took over head_timeout_s="
                                         f"{self.limits.head_timeout_s:g} ([gateway] head_timeout_s)")

    def _arm_body_check(self, now: float, after: float) -> None:
        self.body_checked = now
        self.body_timer = self.loop.call_later(after, self._body_check)

    def _body_check(self) -> None:
        """While a body is read, at least every idle_timeout_s: ends a body that is silent too long or too late."""
        self.body_timer = None
        if self.transport.is_closing():
            return
        now, idle = self.loop.time(), self.limits.idle_timeout_s
        if self.flow.read_paused or self.pipeline:  # the server is not reading this body: its clock stops
            self.body_deadline += now - self.body_checked
            self._arm_body_check(now, idle)
            return
        if now >= self.body_deadline:
            self._body_too_late()
            return
        silent = now - self.last_read
        if silent < idle:  # a byte came meanwhile: wait for the rest of the interval, or the deadline
            self._arm_body_check(now, min(idle - silent, self.body_deadline - now))
            return
        if self.cycle is not None and not self.cycle.response_started:
            self.transport.write(refusal(408, "BodyTimeout", f"no byte of the request body for idle_timeout_s="
                                         f"{self.limits.idle_timeout_s:g} ([gateway] idle_timeout_s)",
                                         self.server_state.default_headers))
        self.transport.close()

    def _body_too_late(self) -> None:
        timeout, cycle = self.limits.body_timeout_s, self.cycle
        if cycle is None or cycle.response_started:  # answered without the body, or answering: nothing to say
            log.warning("gateway: a request body from %s took over body_timeout_s=%g: connection closed",
                        _peer(self.client), timeout)
            self.transport.close()
            return
        log.warning("gateway: a request body from %s took over body_timeout_s=%g: answered 408, connection closed",
                    _peer(self.client), timeout)
        cycle.disconnected = True  # for its app, the client is gone: receive says so, an answer goes nowhere
        cycle.message_event.set()
        self.refusal = refusal(408, "BodyTimeout", f"the request body took over body_timeout_s={timeout:g} "
                                                   "([gateway] body_timeout_s)", self.server_state.default_headers)
        self._send_refusal()

    def _refuse(self, status: int, type_: str, message: str) -> None:
        self.refusal = refusal(status, type_, message, self.server_state.default_headers)
        self.flow.pause_reading()
        if self.cycle is None or self.cycle.response_complete:
            self._send_refusal()
        # else: on_response_complete sends it, after the answers already owed

    def _send_refusal(self) -> None:
        self._cancel_timers()
        if self.transport.is_closing():
            return
        self.transport.write(self.refusal or b"")
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        # Half-closed, and still read (and dropped) for a while: a socket closed with bytes unread sends a
        # reset, which can destroy the answer before the client has read it.
        self.transport.write_eof()
        self.flow.resume_reading()
        self.close_timer = self.loop.call_later(self.limits.idle_timeout_s, self.transport.close)

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.body_timer, self.timeout_keep_alive_task):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = self.timeout_keep_alive_task = None


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"


def protocol_with(limits: HeadLimits) -> type[HeadLimitedProtocol]:
    """What ``uvicorn.Config(http=...)`` takes: the protocol class, with these limits bound."""
    return type("HeadLimitedProtocol", (HeadLimitedProtocol,), {"limits": limits})
