"""The request client: publish a request, await its response, correlated by request id.

Replies arrive in a reply inbox (``Bus.reply_inbox``): a private reply topic,
or on Kafka one partition of a shared one whose other callers' replies are
skipped by request id. Every client on one bus in a process shares one inbox
(``replies.py``): one reply consumer per process, however many clients, its
replies handed to each client by request id. A response thus reaches the
instance that asked, never every replica of the caller. One reader task
resolves the waiting futures; thousands of calls may be in flight. A call that times out raises
``RequestTimeout``; a response that arrives after that, or a second response
to one request, is dropped and counted.

With ``resend_after_s``, a call unanswered after that long is published again
under the same request id (``attempt`` 2, 3...) until its timeout: a request
held by a worker that died, or lost by a broker, is then served by another
replica. The first response wins; the others count as duplicates. Requests
must therefore be safe to serve twice, which every query topic is.

``stream`` asks for the answer in pieces (the ``stream`` header) and yields
them in order of their ``seq`` header until the ``final`` one, with the same
timeout (for the whole stream) and resending: the resend comes after
``resend_after_s`` without a new piece, so a worker that dies mid-stream is
replaced like one that dies before answering. A resent request is served
again from the start, and the pieces are told apart by number: each number
is yielded once, the first copy to arrive wins, later copies count as
duplicates ("restart and skip"); a replica whose stream ends before the
pieces already yielded ends the call with ``StreamDiverged``, carrying its
final piece, rather than being skipped. Chosen over resuming from a sequence number
because the replica that takes over has none of the dead one's state: it
must redo the work anyway, and the processors stay free of per-request
state. It needs a replica to give the same pieces for the same request, as
the extractive backend does and a model at temperature 0 does.

With ``served_check_s``, a call unanswered after that long asks the bus
whether anyone consumes its topic (``Bus.has_consumers``), and again as often
while it waits. If the bus says no, the call ends at once with ``NotServed``
naming the topic and the bus: nothing would ever answer it. Where the bus
cannot tell (Pulsar), the call waits out its time-out, whose message also
names the topic and asks whether a worker runs on that bus. A call that runs out
of time while the bus finds its broker unreachable (``Bus.unreachable``) raises
``BrokerUnreachable`` instead, naming the broker: no worker is to blame. Commands turn the
check on; processors' own sub-requests leave it off, since a replica that is
starting would otherwise fail requests it is about to serve.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from ragbus.config.settings import ClientSettings
from ragbus.schema import DecodeError, decode, encode
from ragbus.schema.errors import RagbusError

from ..bus import Bus, Delivery
from . import metrics, middleware, replies
from .envelope import ATTEMPT, new_request_id, piece_position, request_headers

log = logging.getLogger(__name__)

Resp = TypeVar("Resp", bound=msgspec.Struct)


class RequestTimeout(RagbusError, TimeoutError):
    """No answer came within the call's time: tried again later, a worker may be there to answer."""

    retriable = True

    def __init__(self, topic: str, request_id: str, timeout: float, bus_url: str = "the bus", *,
                 why: str | None = None, message: str | None = None) -> None:
        """``why``: what the message says after the time-out's facts; ``message``: all of it, instead."""
        super().__init__(message or f"no response on {topic!r} to request {request_id} within {timeout:g}s: "
                         + (why or f"is a worker serving {topic!r} running on {bus_url}?"))
        self.topic = topic
        self.request_id = request_id
        self.timeout = timeout


class BrokerUnreachable(RequestTimeout):
    """The call ran out of time while this process found the broker unreachable: it, not a worker, is why.

    ``problem`` is the bus's own sentence (``Bus.unreachable``), naming the broker and for how long.
    """

    def __init__(self, topic: str, request_id: str, timeout: float, problem: str) -> None:
        super().__init__(topic, request_id, timeout, why=problem)


class NotServed(RequestTimeout):
    """The bus says no consumer group reads the topic: no worker would ever answer the call (until one
    starts: retriable).

    A ``RequestTimeout``, so whoever handles a time-out handles this too, only sooner.
    """

    def __init__(self, topic: str, request_id: str, waited: float, bus_url: str) -> None:
        super().__init__(topic, request_id, waited, bus_url, message=(
            f"no worker consumes {topic!r} on {bus_url}, so nothing will answer request {request_id}: "
            f"start one (ragbus worker --all --bus {bus_url}) or check the bus URL"))


class ClientClosed(RagbusError, RuntimeError):
    """The client was closed before the call was answered."""


class NotStreamed(RagbusError, RuntimeError):
    """A streamed call got a whole response: the processor of that topic does not answer in pieces."""


class StreamDiverged(RagbusError, RuntimeError):
    """A replica serving a resent stream ended it (``body``, its final piece, numbered ``seq``) before the
    pieces the call had already yielded: the two answers cannot be stitched. Mostly an error answer from a
    replica that lacks what the first one held (document-convert's ``RestartUpload``)."""

    def __init__(self, seq: int, yielded: int, body: bytes) -> None:
        super().__init__(f"a replica ended the stream at piece {seq}, after {yielded} pieces had come from another")
        self.seq, self.yielded, self.body = seq, yielded, body

class _Unserved(Exception):
    """Inside a call: the bus said nobody consumes the topic (the call raises ``NotServed``)."""


@dataclass(slots=True)
class ClientStats:
    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    late: int = 0
    duplicates: int = 0
    undecodable: int = 0
    resent: int = 0
    unserved: int = 0  # calls ended early because the bus said nobody consumes their topic
    foreign: int = 0  # replies on its inbox to requests no client of this process sent (another process's)


class _Stream:
    """The pieces of one streamed call: kept by sequence number until they can be yielded in order."""

    __slots__ = ("arrived", "failure", "final_seq", "held", "next_seq")

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.next_seq = 0  # the next number to yield
        self.final_seq: int | None = None
        self.held: dict[int, bytes] = {}
        self.arrived = asyncio.Event()  # set when a new piece is held

    def offer(self, seq: int, final: bool, body: bytes) -> bool:
        """Hold a piece; False for a number already held or yielded (a duplicate)."""
        if seq < self.next_seq or seq in self.held or (self.final_seq is not None and seq > self.final_seq):
            return False
        if final:
            self.final_seq = seq
        self.held[seq] = body
        self.arrived.set()
        return True

    def take(self) -> list[bytes]:
        """The held pieces that come next in order, removed from the hold."""
        out = []
        while self.next_seq in self.held:
            out.append(self.held.pop(self.next_seq))
            self.next_seq += 1
        return out

    @property
    def done(self) -> bool:
        return self.final_seq is not None and self.next_seq > self.final_seq


class RequestClient:
    """``timeout_s``, a call's time-out unless it names its own, defaults to ``[client] request_timeout_s``'s
    default (``ragbus.config.settings.ClientSettings``), written there once; callers that honour files and
    ``RAGBUS_CLIENT__*`` variables pass the loaded value."""

    def __init__(
        self,
        bus: Bus,
        *,
        name: str = "client",
        timeout_s: float = ClientSettings().request_timeout_s,
        resend_after_s: float | None = None,
        served_check_s: float | None = None,
    ) -> None:
        if resend_after_s is not None and resend_after_s <= 0:
            raise ValueError(f"resend_after_s must be positive, got {resend_after_s}")
        if served_check_s is not None and served_check_s < 0:
            raise ValueError(f"served_check_s must be 0 (never) or more, got {served_check_s}")
        self.bus = bus
        self.timeout_s = timeout_s
        self.resend_after_s = resend_after_s
        self.served_check_s = served_check_s or None
        # topic -> (when asked, the answer): one question to the bus per topic and interval,
        # however many calls to that topic are waiting.
        self._served: dict[str, tuple[float, asyncio.Future[bool | None]]] = {}
        self.name = name
        self.reply_topic = ""  # the reply-to address its requests name, from the bus at start
        self.stats = ClientStats()
        self._pending: dict[str, asyncio.Future[bytes] | _Stream] = {}
        self._per_topic: dict[str, tuple] = {}  # labelled metric children, by topic
        self._router: replies.ReplyRouter | None = None  # the bus's shared inbox, once started
        self._routes: dict[str, replies.ReplyOwner] = {}  # the router's request id -> client, once started
        self._open = False

    async def start(self) -> RequestClient:
        if self._open:
            return self
        self._router = await replies.join(self.bus, self, self.name)
        self._routes = self._router.routes
        self.reply_topic = self._router.address
        self._open = True
        return self

    @property
    def _reader(self) -> asyncio.Task[None] | None:
        """The task reading this client's (shared) reply inbox."""
        return None if self._router is None else self._router.reader

    def _check_open(self, what: str = "request client is not started (or its reply reader stopped)") -> None:
        if not self._open or not self._router.reading:  # type: ignore[union-attr]
            raise ClientClosed(what)

    # Both on every call's path, so plain dict work on the router's routes rather than calls into it.
    def _expect(self, request_id: str, waiting: asyncio.Future[bytes] | _Stream) -> None:
        """Replies to ``request_id`` come to this client, for ``waiting``."""
        self._pending[request_id] = waiting
        self._routes[request_id] = self

    def _settle(self, request_id: str) -> None:
        """The call ``request_id`` takes no more replies."""
        del self._pending[request_id]
        self._routes.pop(request_id, None)

    async def __aenter__(self) -> RequestClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def request(
        self,
        topic: str,
        message: msgspec.Struct,
        response_type: type[Resp],
        *,
        timeout: float | None = None,
        traceparent: str | None = None,
        key: str | None = None,
    ) -> Resp:
        """Send ``message`` to ``topic`` and return the decoded response.

        ``key``: the bus key the request (and any resend) is published with, so requests with one key
        reach one replica (document-convert's parts); None, as by default, spreads them.
        Raises ``RequestTimeout``, or ``schema.DecodeError`` if the response is
        not a valid ``response_type``.
        """
        body = await self.request_bytes(topic, encode(message), timeout=timeout, traceparent=traceparent, key=key)
        try:
            return decode(body, response_type)
        except DecodeError:
            self.stats.undecodable += 1
            raise

    async def request_bytes(
        self, topic: str, body: bytes, *, timeout: float | None = None, traceparent: str | None = None,
        key: str | None = None,
    ) -> bytes:
        """The same round trip with an already encoded body; returns the response body."""
        if middleware.installed:
            return await middleware.around_call(self._call(topic, body, timeout, traceparent, key),
                                                self._hooked_round_trip)
        return await self._round_trip(topic, body, timeout, traceparent, key=key)

    def _call(self, topic: str, body: bytes, timeout: float | None, traceparent: str | None,
              key: str | None = None) -> middleware.Call:
        """A call as the installed middlewares see it."""
        return middleware.Call(self.bus.url, topic, body, timeout, traceparent, new_request_id(),
                               tuple(middleware.installed), key=key)

    def _hooked_round_trip(self, call: middleware.Call) -> Awaitable[bytes]:
        return self._round_trip(call.topic, call.body, call.timeout, call.traceparent, call.request_id, call,
                                key=call.key)

    async def _round_trip(
        self, topic: str, body: bytes, timeout: float | None, traceparent: str | None, request_id: str = "",
        call: middleware.Call | None = None, *, key: str | None = None,
    ) -> bytes:
        self._check_open()
        timeout = self.timeout_s if timeout is None else timeout
        # The caller's clock starts before the deadline is written (rounded up),
        # so it gives up no later than the processor stops working on the call.
        give_up_at = asyncio.get_running_loop().time() + timeout
        request_id = request_id or new_request_id()
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._expect(request_id, future)
        headers = request_headers(
            request_id=request_id, reply_to=self.reply_topic, timeout_s=timeout, traceparent=traceparent
        )
        started = time.perf_counter()
        counted = self._counted(topic)
        unserved = asyncio.ensure_future(self._until_unserved(topic)) if self.served_check_s else None
        try:
            async with asyncio.timeout_at(give_up_at):
                await self.bus.publish(topic, body, headers, key)
                self.stats.sent += 1
                counted[0].inc()
                response = await self._response(future, unserved, topic, body, headers, call, key)
        except _Unserved:
            self._remember(request_id, answered=False)
            self.stats.unserved += 1
            raise NotServed(topic, request_id, time.perf_counter() - started, self.bus.url) from None
        except TimeoutError:
            self.stats.timeouts += 1
            metrics.client_timeouts.labels(topic).inc()
            self._remember(request_id, answered=False)
            raise self._timed_out_error(topic, request_id, timeout) from None
        finally:
            if request_id in self._pending:  # unanswered: timed out, or cancelled
                self._settle(request_id)
                self._remember(request_id, answered=False)
            if unserved is not None:
                unserved.cancel()
        counted[1].observe(time.perf_counter() - started)
        return response

    async def stream(
        self,
        topic: str,
        message: msgspec.Struct,
        piece_type: type[Resp],
        *,
        timeout: float | None = None,
        traceparent: str | None = None,
        key: str | None = None,
    ) -> AsyncIterator[Resp]:
        """Send ``message`` to ``topic`` asking for pieces; yield each decoded piece once, in order.

        ``timeout`` bounds the whole stream; ``key`` as for ``request``. Raises ``RequestTimeout``,
        ``StreamDiverged`` (a resend's replica ended sooner), or ``schema.DecodeError`` for a piece that is
        not a valid ``piece_type``.
        """
        async for body in self.stream_bytes(topic, encode(message), timeout=timeout, traceparent=traceparent,
                                            key=key):
            try:
                piece = decode(body, piece_type)
            except DecodeError:
                self.stats.undecodable += 1
                raise
            yield piece

    def stream_bytes(
        self, topic: str, body: bytes, *, timeout: float | None = None, traceparent: str | None = None,
        key: str | None = None,
    ) -> AsyncIterator[bytes]:
        """The streamed round trip with an already encoded body; yields the pieces' bodies in order.

        The waits are bounded one by one rather than by a timeout around the
        whole generator: a deadline firing while the caller's own code runs
        between two pieces would cancel the caller, not this call.
        """
        if middleware.installed:
            return middleware.around_stream(self._call(topic, body, timeout, traceparent, key), self._hooked_pieces)
        return self._pieces(topic, body, timeout, traceparent, key=key)

    def _hooked_pieces(self, call: middleware.Call) -> AsyncGenerator[bytes, None]:
        return self._pieces(call.topic, call.body, call.timeout, call.traceparent, call.request_id, call,
                            key=call.key)

    async def _pieces(
        self, topic: str, body: bytes, timeout: float | None, traceparent: str | None, request_id: str = "",
        call: middleware.Call | None = None, *, key: str | None = None,
    ) -> AsyncGenerator[bytes, None]:
        self._check_open()
        timeout = self.timeout_s if timeout is None else timeout
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + timeout
        request_id = request_id or new_request_id()
        stream = _Stream()
        self._expect(request_id, stream)
        headers = request_headers(
            request_id=request_id, reply_to=self.reply_topic, timeout_s=timeout, traceparent=traceparent, stream=True
        )
        started = time.perf_counter()
        counted = self._counted(topic)
        try:
            async with asyncio.timeout_at(give_up_at):
                await self.bus.publish(topic, body, headers, key)
        except TimeoutError:
            self._timed_out(topic, request_id, stream)
            raise self._timed_out_error(topic, request_id, timeout) from None
        except BaseException:
            if self._pending.get(request_id) is stream:
                self._settle(request_id)
            raise
        self.stats.sent += 1
        counted[0].inc()
        attempt, last_news = 1, loop.time()
        # Until the first piece: does anyone consume the topic? After it, a worker plainly does.
        unserved = asyncio.ensure_future(self._until_unserved(topic)) if self.served_check_s else None
        try:
            while True:
                self._check_open("request client closed while a stream was open")
                stream.arrived.clear()
                for piece in stream.take():
                    if unserved is not None:
                        unserved.cancel()
                        unserved = None
                    yield piece
                if stream.failure is not None:
                    raise stream.failure
                if stream.done:
                    break
                wait_until = give_up_at
                if self.resend_after_s is not None:
                    wait_until = min(give_up_at, last_news + self.resend_after_s)
                try:
                    async with asyncio.timeout_at(wait_until):
                        await _arrival(stream, unserved, topic)
                    last_news = loop.time()
                    continue
                except TimeoutError:
                    pass
                if loop.time() >= give_up_at:
                    self._timed_out(topic, request_id, stream)
                    raise self._timed_out_error(topic, request_id, timeout)
                attempt += 1
                async with asyncio.timeout_at(give_up_at):
                    await self.bus.publish(topic, body, {**headers, ATTEMPT: str(attempt)}, key)
                self.stats.resent += 1
                metrics.client_resends.labels(topic).inc()
                if call is not None:
                    for hooks in call.middlewares:
                        hooks.resent(call, attempt)
                last_news = loop.time()
        except RequestTimeout:
            raise
        except TimeoutError:  # the resend's publish ran out of time
            self._timed_out(topic, request_id, stream)
            raise self._timed_out_error(topic, request_id, timeout) from None
        except _Unserved:
            self.stats.unserved += 1
            raise NotServed(topic, request_id, time.perf_counter() - started, self.bus.url) from None
        finally:
            if unserved is not None:
                unserved.cancel()
            if self._pending.get(request_id) is stream:  # not yet accounted for: finished or abandoned
                self._settle(request_id)
                self._remember(request_id, answered=stream.done)
                if stream.done:
                    self.stats.answered += 1
                    counted[1].observe(time.perf_counter() - started)

    def _timed_out_error(self, topic: str, request_id: str, timeout: float) -> RequestTimeout:
        """What a call that ran out of time raises: the broker's outage when there is one, else a time-out
        that asks whether a worker serves the topic."""
        problem = self.bus.unreachable()
        if problem is not None:
            return BrokerUnreachable(topic, request_id, timeout, problem)
        return RequestTimeout(topic, request_id, timeout, self.bus.url)

    def _counted(self, topic: str) -> tuple:
        counted = self._per_topic.get(topic)
        if counted is None:
            counted = self._per_topic[topic] = (
                metrics.client_requests.labels(topic), metrics.client_latency.labels(topic)
            )
        return counted

    def _timed_out(self, topic: str, request_id: str, stream: _Stream) -> None:
        self.stats.timeouts += 1
        metrics.client_timeouts.labels(topic).inc()
        if self._pending.get(request_id) is stream:
            self._settle(request_id)
        self._remember(request_id, answered=False)

    async def _response(
        self, future: asyncio.Future[bytes], unserved: asyncio.Future[None] | None, topic: str, body: bytes,
        headers: dict[str, str], call: middleware.Call | None = None, key: str | None = None,
    ) -> bytes:
        """The response body, resending every ``resend_after_s``; ``_Unserved`` if ``unserved`` finishes first."""
        waiting: set[asyncio.Future[Any]] = {future} if unserved is None else {future, unserved}
        attempt = 1
        while True:
            done, _ = await asyncio.wait(waiting, timeout=self.resend_after_s, return_when=asyncio.FIRST_COMPLETED)
            if future in done:
                return future.result()
            if unserved is not None and unserved in done:
                unserved.result()  # a failure of the check itself surfaces here
                raise _Unserved(topic)
            attempt += 1  # resend_after_s passed without an answer
            headers = {**headers, ATTEMPT: str(attempt)}
            await self.bus.publish(topic, body, headers, key)
            self.stats.resent += 1
            metrics.client_resends.labels(topic).inc()
            if call is not None:
                for hooks in call.middlewares:
                    hooks.resent(call, attempt)

    async def _until_unserved(self, topic: str) -> None:
        """Return once the bus says nobody consumes ``topic``; ask every ``served_check_s`` until then.

        A fresh "nobody" from an earlier call counts at once: the next of a thousand documents
        sent to a topic no worker reads fails now, not after a wait of its own.
        """
        assert self.served_check_s is not None
        while True:
            if not self._said_unserved(topic):
                await asyncio.sleep(self.served_check_s)
            if await self._has_consumers(topic) is False:
                return

    def _said_unserved(self, topic: str) -> bool:
        asked = self._served.get(topic)
        if asked is None or not asked[1].done() or asked[1].cancelled() or asked[1].exception() is not None:
            return False
        fresh = asyncio.get_running_loop().time() - asked[0] < (self.served_check_s or 0.0)
        return fresh and asked[1].result() is False

    async def _has_consumers(self, topic: str) -> bool | None:
        """The bus's answer for ``topic``, asked at most once per ``served_check_s`` for every waiting call."""
        loop = asyncio.get_running_loop()
        asked = self._served.get(topic)
        if asked is None or (asked[1].done() and loop.time() - asked[0] >= (self.served_check_s or 0.0)):
            asked = self._served[topic] = (loop.time(), asyncio.ensure_future(self.bus.has_consumers(topic)))
        try:
            return await asyncio.shield(asked[1])
        except Exception as exc:  # the question failed: that says nothing about the topic
            log.debug("could not ask who consumes %r: %r", topic, exc)
            return None

    def _remember(self, request_id: str, *, answered: bool) -> None:
        self._router.ended(request_id, self, answered=answered)  # type: ignore[union-attr]

    def _take_reply(self, request_id: str, d: Delivery) -> None:
        """A reply to a call of this client that waits for it (the router's ``expect``)."""
        waiting = self._pending.get(request_id)
        if waiting is None:  # cannot happen while routes and pending calls move together
            self._routes.pop(request_id, None)
            return
        if isinstance(waiting, _Stream):
            self._offer_piece(waiting, d.headers, d.body)
            return
        self._settle(request_id)
        if not waiting.done():  # else its call was cancelled
            waiting.set_result(d.body)
        self.stats.answered += 1
        self._remember(request_id, answered=True)

    def _offer_piece(self, stream: _Stream, headers, body: bytes) -> None:
        position = piece_position(headers)
        if position is None:  # a whole response, not a piece: a processor that cannot stream this topic
            self.stats.undecodable += 1
            stream.failure = NotStreamed("a whole response (no seq header) came to a streamed call: "
                                         "the processor of this topic does not answer in pieces")
            stream.arrived.set()
            return
        seq, final = position
        if final and seq < stream.next_seq and stream.final_seq is None:
            # The first replica went on past ``seq``; this one stopped there: ends the call, not skipped.
            stream.failure = StreamDiverged(seq, stream.next_seq, body)
            stream.arrived.set()
            return
        if not stream.offer(seq, final, body):
            self.stats.duplicates += 1
            metrics.client_duplicates.inc()

    def _count_unexpected(self, answered: bool | None) -> None:
        """A reply nobody waits for: to a call that was answered (a duplicate), that ended unanswered
        (late), or to none of this process's calls (foreign: another process's, on a shared inbox)."""
        if answered is None:
            self.stats.foreign += 1
        elif answered:
            self.stats.duplicates += 1
            metrics.client_duplicates.inc()
        else:
            self.stats.late += 1
            metrics.client_late.inc()

    async def close(self) -> None:
        """Fail the calls still waiting and leave the shared inbox (the last client to leave closes it).

        A reply to one of those calls that comes later is counted late here, and harms no other client.
        """
        for _, asked in self._served.values():
            asked.cancel()
        router, self._open = self._router, False
        for request_id, waiting in self._pending.items():
            if router is not None:
                router.forget(request_id)
                router.ended(request_id, self, answered=False)
            if isinstance(waiting, _Stream):
                waiting.arrived.set()  # its generator wakes, finds the client closed and stops
            elif not waiting.done():
                waiting.set_exception(ClientClosed("request client closed while waiting"))
        self._pending.clear()
        if router is not None:
            await router.leave(self)
        for hooks in tuple(middleware.installed):  # a copy: the list may change while one flushes
            await hooks.flush()


async def _arrival(stream: _Stream, unserved: asyncio.Future[None] | None, topic: str) -> None:
    """Return when a piece of ``stream`` arrives; ``_Unserved`` if ``unserved`` finishes first."""
    if unserved is None:
        await stream.arrived.wait()
        return
    arrived: asyncio.Future[Any] = asyncio.ensure_future(stream.arrived.wait())
    try:
        done, _ = await asyncio.wait({arrived, unserved}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        arrived.cancel()
    if arrived not in done:
        unserved.result()  # a failure of the check itself surfaces here
        raise _Unserved(topic)
