"""The request client: publish a request, await its response, correlated by request id.

Each client owns a private reply topic (``REPLY_PREFIX`` + a fresh id) that
it alone consumes, so a response reaches only the instance that asked, never
every replica of the caller. One reader task resolves the waiting futures;
thousands of calls may be in flight. A call that times out raises
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
duplicates ("restart and skip"). Chosen over resuming from a sequence number
because the replica that takes over has none of the dead one's state: it
must redo the work anyway, and the processors stay free of per-request
state. It needs a replica to give the same pieces for the same request, as
the extractive backend does and a model at temperature 0 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from schema import REPLY_PREFIX, DecodeError, decode, encode

from ..bus import Bus, SubscriptionClosed
from . import metrics
from .envelope import ATTEMPT, REQUEST_ID, new_request_id, piece_position, request_headers

log = logging.getLogger(__name__)

Resp = TypeVar("Resp", bound=msgspec.Struct)

# How many finished request ids are remembered to tell late and duplicate responses apart.
_REMEMBERED = 100_000


class RequestTimeout(TimeoutError):
    def __init__(self, topic: str, request_id: str, timeout: float) -> None:
        super().__init__(f"no response on {topic!r} to request {request_id} within {timeout:g}s")
        self.topic = topic
        self.request_id = request_id
        self.timeout = timeout


class ClientClosed(RuntimeError):
    pass


class NotStreamed(RuntimeError):
    """A streamed call got a whole response: the processor of that topic does not answer in pieces."""


@dataclass(slots=True)
class ClientStats:
    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    late: int = 0
    duplicates: int = 0
    undecodable: int = 0
    resent: int = 0


class _Stream:
    """The pieces of one streamed call: kept by sequence number until they can be yielded in order."""

    __slots__ = ("next_seq", "final_seq", "held", "arrived", "failure")

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
    def __init__(
        self, bus: Bus, *, name: str = "client", timeout_s: float = 30.0, resend_after_s: float | None = None
    ) -> None:
        if resend_after_s is not None and resend_after_s <= 0:
            raise ValueError(f"resend_after_s must be positive, got {resend_after_s}")
        self.bus = bus
        self.timeout_s = timeout_s
        self.resend_after_s = resend_after_s
        self.reply_topic = f"{REPLY_PREFIX}{name}.{uuid.uuid4().hex[:16]}"
        self.stats = ClientStats()
        self._pending: dict[str, asyncio.Future[bytes] | _Stream] = {}
        # request id -> True if it was answered, False if its call timed out.
        self._finished: OrderedDict[str, bool] = OrderedDict()
        self._reader: asyncio.Task[None] | None = None
        self._per_topic: dict[str, tuple] = {}  # labelled metric children, by topic
        self._subscription = None

    async def start(self) -> RequestClient:
        self._subscription = await self.bus.listen(self.reply_topic)
        self._reader = asyncio.ensure_future(self._read_replies())
        return self

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
    ) -> Resp:
        """Send ``message`` to ``topic`` and return the decoded response.

        Raises ``RequestTimeout``, or ``schema.DecodeError`` if the response is
        not a valid ``response_type``.
        """
        body = await self.request_bytes(topic, encode(message), timeout=timeout, traceparent=traceparent)
        try:
            return decode(body, response_type)
        except DecodeError:
            self.stats.undecodable += 1
            raise

    async def request_bytes(
        self, topic: str, body: bytes, *, timeout: float | None = None, traceparent: str | None = None
    ) -> bytes:
        """The same round trip with an already encoded body; returns the response body."""
        if self._reader is None or self._reader.done():
            raise ClientClosed("request client is not started (or its reply reader stopped)")
        timeout = self.timeout_s if timeout is None else timeout
        # The caller's clock starts before the deadline is written (rounded up),
        # so it gives up no later than the processor stops working on the call.
        give_up_at = asyncio.get_running_loop().time() + timeout
        request_id = new_request_id()
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        headers = request_headers(
            request_id=request_id, reply_to=self.reply_topic, timeout_s=timeout, traceparent=traceparent
        )
        started = time.perf_counter()
        counted = self._counted(topic)
        try:
            async with asyncio.timeout_at(give_up_at):
                await self.bus.publish(topic, body, headers)
                self.stats.sent += 1
                counted[0].inc()
                attempt = 1
                while self.resend_after_s is not None:
                    done, _ = await asyncio.wait([future], timeout=self.resend_after_s)
                    if done:
                        break
                    attempt += 1
                    headers = {**headers, ATTEMPT: str(attempt)}
                    await self.bus.publish(topic, body, headers)
                    self.stats.resent += 1
                response = await future
        except TimeoutError:
            self.stats.timeouts += 1
            metrics.client_timeouts.labels(topic).inc()
            self._remember(request_id, answered=False)
            raise RequestTimeout(topic, request_id, timeout) from None
        finally:
            self._pending.pop(request_id, None)
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
    ) -> AsyncIterator[Resp]:
        """Send ``message`` to ``topic`` asking for pieces; yield each decoded piece once, in order.

        ``timeout`` bounds the whole stream. Raises ``RequestTimeout``, or
        ``schema.DecodeError`` for a piece that is not a valid ``piece_type``.
        """
        async for body in self.stream_bytes(topic, encode(message), timeout=timeout, traceparent=traceparent):
            try:
                piece = decode(body, piece_type)
            except DecodeError:
                self.stats.undecodable += 1
                raise
            yield piece

    async def stream_bytes(
        self, topic: str, body: bytes, *, timeout: float | None = None, traceparent: str | None = None
    ) -> AsyncIterator[bytes]:
        """The streamed round trip with an already encoded body; yields the pieces' bodies in order.

        The waits are bounded one by one rather than by a timeout around the
        whole generator: a deadline firing while the caller's own code runs
        between two pieces would cancel the caller, not this call.
        """
        if self._reader is None or self._reader.done():
            raise ClientClosed("request client is not started (or its reply reader stopped)")
        timeout = self.timeout_s if timeout is None else timeout
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + timeout
        request_id = new_request_id()
        stream = _Stream()
        self._pending[request_id] = stream
        headers = request_headers(
            request_id=request_id, reply_to=self.reply_topic, timeout_s=timeout, traceparent=traceparent, stream=True
        )
        started = time.perf_counter()
        counted = self._counted(topic)
        try:
            async with asyncio.timeout_at(give_up_at):
                await self.bus.publish(topic, body, headers)
        except TimeoutError:
            self._timed_out(topic, request_id, stream)
            raise RequestTimeout(topic, request_id, timeout) from None
        except BaseException:
            self._pending.pop(request_id, None)
            raise
        self.stats.sent += 1
        counted[0].inc()
        attempt, last_news = 1, loop.time()
        try:
            while True:
                if self._reader is None or self._reader.done():
                    raise ClientClosed("request client closed while a stream was open")
                stream.arrived.clear()
                for piece in stream.take():
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
                        await stream.arrived.wait()
                    last_news = loop.time()
                    continue
                except TimeoutError:
                    pass
                if loop.time() >= give_up_at:
                    self._timed_out(topic, request_id, stream)
                    raise RequestTimeout(topic, request_id, timeout)
                attempt += 1
                async with asyncio.timeout_at(give_up_at):
                    await self.bus.publish(topic, body, {**headers, ATTEMPT: str(attempt)})
                self.stats.resent += 1
                last_news = loop.time()
        except RequestTimeout:
            raise
        except TimeoutError:  # the resend's publish ran out of time
            self._timed_out(topic, request_id, stream)
            raise RequestTimeout(topic, request_id, timeout) from None
        finally:
            if self._pending.get(request_id) is stream:  # not yet accounted for: finished or abandoned
                self._pending.pop(request_id)
                self._remember(request_id, answered=stream.done)
                if stream.done:
                    self.stats.answered += 1
                    counted[1].observe(time.perf_counter() - started)

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
            self._pending.pop(request_id)
        self._remember(request_id, answered=False)

    def _remember(self, request_id: str, *, answered: bool) -> None:
        self._finished[request_id] = answered
        if len(self._finished) > _REMEMBERED:
            self._finished.popitem(last=False)

    async def _read_replies(self) -> None:
        sub = self._subscription
        failures = 0
        while True:
            try:
                d = await sub.receive()
            except SubscriptionClosed:
                return
            except Exception:  # one bad read must not leave every waiting call to time out
                failures += 1
                log.exception("reading replies on %s failed (%d in a row)", self.reply_topic, failures)
                await asyncio.sleep(min(5.0, 0.05 * 2**failures))
                continue
            failures = 0
            await d.ack()  # a reply is consumed once, whatever happens to it
            request_id = d.headers.get(REQUEST_ID, "")
            waiting = self._pending.get(request_id)
            if waiting is None:
                self._count_unexpected(request_id)
                continue
            if isinstance(waiting, _Stream):
                self._offer_piece(waiting, d.headers, d.body)
                continue
            del self._pending[request_id]
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
        if not stream.offer(position[0], position[1], body):
            self.stats.duplicates += 1
            metrics.client_duplicates.inc()

    def _count_unexpected(self, request_id: str) -> None:
        if self._finished.get(request_id):
            self.stats.duplicates += 1
            metrics.client_duplicates.inc()
        else:
            self.stats.late += 1
            metrics.client_late.inc()
        log.debug("dropped response to %s (late or duplicate)", request_id)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._subscription is not None:
            await self._subscription.close()
        for future in self._pending.values():
            if isinstance(future, _Stream):
                future.arrived.set()  # its generator wakes, finds the reader gone and stops
            elif not future.done():
                future.set_exception(ClientClosed("request client closed while waiting"))
        self._pending.clear()
