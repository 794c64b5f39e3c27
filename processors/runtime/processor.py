"""The processor base class: all the transport work, so a processor file holds only its logic.

A concrete processor names its request and response Structs and implements
``handle``; everything else happens here, identically for every processor:

- join the request topic's consumer group and run handlers through
  ``consume`` (bounded concurrency, retries, dead letters);
- refuse a body over the size limit (the bus's ``max_message_bytes``, or the
  processor's own lower one): with an error response naming the limit and
  the setting to raise when the sender can be answered, else dead-lettered;
- read the envelope; drop (and count) a request whose deadline has passed;
  refuse a ``reply-to`` outside ``REPLY_PREFIX``;
- decode and validate the body: an invalid request gets an error response
  when it has a ``reply-to``, else it is dead-lettered;
- run ``handle`` within the handler time limit and the request's deadline; a
  raised exception or a timeout becomes an error response (a business
  failure is an answer, not a crash loop). A request refused as the caller's
  mistake (``schema.BadRequest`` from the handler, or a body that does not
  validate) is logged at INFO without a stack and counted in
  ``ragbus_bad_requests``; anything else is the processor's failure, logged
  with its stack and counted in ``ragbus_errors``;
- publish the response to ``reply-to`` with the same ``request-id``, and
  only then ack; if publishing fails the request is nacked and retried;
- a request with the ``stream`` header, to a processor that sets
  ``piece_type`` and writes ``stream``, is answered in pieces: each piece is
  published as soon as ``stream`` yields it, numbered (``seq``), the last one
  (``is_final``, or any piece with an error) marked ``final``. A failure
  mid-stream ends it with a final error piece; a failure before it (a bad
  body) is the one, final piece.

Nothing per request is stored on the processor object: what a handler needs
to know about its request arrives in ``RequestContext``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

import msgspec

from ragbus.config.settings import ProcessorSettings, bulk_group
from ragbus.config.settings import Settings as Deployment
from ragbus.schema import REPLY_PREFIX, BadRequest, DecodeError, Error, decode, encode
from ragbus.schema.errors import RagbusError

from ..bus import Bus, Delivery, Undecodable, consume
from ..bus.consume import ConsumeStats, Oversized, size_limit, too_large
from . import metrics, middleware
from .envelope import REQUEST_ID, Envelope, EnvelopeError, handling_trace, parse_envelope, response_headers

log = logging.getLogger(__name__)


class Unavailable(RagbusError, RuntimeError):
    """A failure the handler foresaw and says all of in its message (what it waits for is not there yet):
    answered as an error of the subclass's name, logged as a warning without a stack trace. Retriable unless
    a subclass says otherwise; a retriable one's name belongs in ``RETRIABLE_TYPES``."""

    retriable = True

# Logged (INFO) with the processor's name and the request id for each request dropped past its deadline.
DROPPED_EXPIRED = "%s: dropped request %s, deadline passed"

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler may know about the request it is handling."""

    envelope: Envelope
    topic: str
    delivery_attempt: int  # how often the bus has delivered this message (1 = first)
    bulk: bool = False  # it came on the processor's bulk lane (ProcessorSettings.bulk_topic)

    @property
    def request_id(self) -> str:
        return self.envelope.request_id

    def remaining_s(self) -> float | None:
        return self.envelope.remaining_s()


# Empty values for required fields of an error response; called, so no two responses share a list.
_ZERO = {str: str, int: int, float: float, bool: bool, list: list, dict: dict}


def error_response(response_type: type[Resp], error: Error) -> Resp:
    """A response carrying only ``error``; required fields get empty values."""
    values: dict[str, Any] = {"error": error}
    for field in msgspec.structs.fields(response_type):
        if field.required and field.name != "error":
            origin = getattr(field.type, "__origin__", field.type)
            empty = _ZERO.get(origin)
            values[field.name] = empty() if empty is not None else None
    if "response_type" in values:  # PromptResult and kin say what their text is
        values["response_type"] = "error"
    return response_type(**values)


class Processor(Generic[Req, Resp]):
    """Subclass with ``request_type``, ``response_type`` (None: no reply) and ``handle``.

    To answer in pieces too, set ``piece_type`` and write ``stream`` and ``is_final``.
    """

    request_type: ClassVar[type[msgspec.Struct]]
    response_type: ClassVar[type[msgspec.Struct] | None]
    piece_type: ClassVar[type[msgspec.Struct] | None] = None
    Settings: ClassVar[type[ProcessorSettings]] = ProcessorSettings
    # Makes what the host's other processors read (a replica's data dir): a worker starts the others,
    # and so lets their groups send them work, only once this one is ready (caught up).
    starts_first: ClassVar[bool] = False
    # Requests with one bus key must reach one replica (document-convert's parts of one file): its groups
    # are subscribed ``keyed`` (a KeyShared subscription on Pulsar; Kafka and memory:// always do so).
    keyed: ClassVar[bool] = False
    # The middlewares installed when it started serving (``run``): their hooks see each delivery.
    _middlewares: tuple[middleware.Middleware, ...] = ()

    def __init__(self, name: str, settings: ProcessorSettings) -> None:
        self.name = name
        self.settings = settings
        # Labelled metric children, looked up once rather than per request.
        self._requests = metrics.requests.labels(name)
        self._expired = metrics.expired.labels(name)
        self._timeouts = metrics.timeouts.labels(name)
        self._latency = metrics.latency.labels(name)
        self._in_progress = metrics.in_progress.labels(name)
        # Series of what the base class itself reports, there at 0 from the start: Prometheus's rate() and
        # increase() count only what changes between scrapes, so a series born at 1 hides its first event.
        metrics.errors.labels(name, "Timeout")
        for reason in ("Undecodable", "MessageTooLarge"):
            metrics.dead_lettered.labels(name, reason)
        self._failed: asyncio.Future[None] | None = None  # while running: what ``fail`` says

    @classmethod
    def build(cls, name: str, settings: Any, pipeline: Deployment) -> Processor:
        """How a worker makes it: from its own section's ``settings``; one that builds processors of its own
        (a sharded query host) keeps ``pipeline``, the deployment's settings, for their sections."""
        return cls(name, settings)

    def fail(self, error: BaseException) -> None:
        """Stop serving for good: the worker drains every processor and exits with ``error`` (a state it
        cannot serve from, noticed outside a request, such as its data dir removed under it)."""
        if self._failed is not None and not self._failed.done():
            self._failed.set_exception(error)

    async def start(self) -> None:
        """Load models, open stores: called once before the first request."""

    async def close(self) -> None:
        """Release what ``start`` acquired: called once after the last request."""

    async def handle(self, request: Req, context: RequestContext) -> Resp | None:
        raise NotImplementedError

    def stream(self, request: Req, context: RequestContext) -> AsyncIterator[msgspec.Struct]:
        """The answer in ``piece_type`` pieces, the last one final; same time limit as ``handle``."""
        raise NotImplementedError

    def is_final(self, piece: Any) -> bool:  # Any: a piece of the subclass's own piece_type
        """Whether ``piece`` is the last of its stream (a piece with an error always is)."""
        raise NotImplementedError

    def handler_limit_s(self, context: RequestContext) -> float:
        """Seconds ``handle`` may run: handler_timeout_s, or less when the request's own deadline is nearer."""
        limit = self.settings.handler_timeout_s
        left = context.remaining_s()
        return limit if left is None else min(limit, left)

    def handler_deadline(self, context: RequestContext) -> float:
        """When ``handle`` is cut off, on the event loop's clock: a backend that retries stops before it
        and reports its last failure, which says more than the bare time-out it would otherwise get."""
        return asyncio.get_running_loop().time() + self.handler_limit_s(context)

    async def run(self, bus: Bus, stop: asyncio.Event, ready: asyncio.Event | None = None) -> ConsumeStats:
        """Serve the request topic (and the bulk lane's, if any) until ``stop`` is set, then drain and leave.

        ``ready`` is set once this replica has joined its group on every lane. Each lane is a
        consumer of its own with its own concurrency: bulk requests waiting on the bus never
        hold up interactive ones.
        """
        s = self.settings
        # A processor that calls others (document-load, the orchestrator) makes its clients in start().
        self.bus = bus
        self._failed = asyncio.get_running_loop().create_future()
        self._middlewares = tuple(middleware.installed)  # decided once per run: with none, a delivery pays nothing
        await self.start()
        subscriptions = []
        try:
            lanes = [(s.topic, s.group, s.concurrency, False)] if s.interactive else []
            if s.bulk_topic:
                lanes.append((s.bulk_topic, bulk_group(s.group), s.bulk_concurrency, True))
            loops = []
            for topic, group, concurrency, bulk in lanes:
                subscription = await bus.subscribe(topic, group, keyed=self.keyed)
                subscriptions.append(subscription)
                handler = middleware.wrap_handler(functools.partial(self._on_delivery, bus, bulk=bulk),
                                                  self._middlewares, processor=self.name, group=group, bus_url=bus.url)
                loops.append(functools.partial(  # started once every lane is subscribed
                    consume,
                    bus,
                    subscription,
                    handler,
                    concurrency=concurrency,
                    max_attempts=s.max_attempts,
                    max_message_bytes=s.max_message_bytes,
                    handler_checks_size=True,  # _on_delivery: it can tell whether the sender can be answered
                    stop=stop,
                    drain_timeout=s.drain_timeout_s,
                    on_dead_letter=lambda d, error: metrics.dead_lettered.labels(self.name, error).inc(),
                ))
            if ready is not None:
                ready.set()
            serving = asyncio.ensure_future(_all_or_none(loops))
            either: list[asyncio.Future[Any]] = [serving, self._failed]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if self._failed.done():
                stop.set()  # every processor of the worker drains, then the worker exits with the failure
                await asyncio.gather(serving, return_exceptions=True)
                self._failed.result()
            return _sum(await serving)
        finally:
            for subscription in subscriptions:
                await subscription.close()
            await self.close()
            for hooks in self._middlewares:
                await hooks.flush()

    async def _on_delivery(self, bus: Bus, d: Delivery, *, bulk: bool = False) -> None:
        self._in_progress.inc()
        try:
            await self._deliver(bus, d, bulk)
        finally:
            self._in_progress.dec()

    async def _deliver(self, bus: Bus, d: Delivery, bulk: bool = False) -> None:
        started = time.perf_counter()
        self._requests.inc()
        limit = size_limit(bus, self.settings.max_message_bytes)
        if len(d.body) > limit:
            await self._refuse_oversized(bus, d, limit)
            return
        try:
            envelope = parse_envelope(d.headers)
        except EnvelopeError as exc:
            raise Undecodable(f"bad envelope: {exc}") from None
        if envelope.reply_to is not None and not envelope.reply_to.startswith(REPLY_PREFIX):
            raise Undecodable(f"reply-to {envelope.reply_to[:200]!r} is outside {REPLY_PREFIX!r}")
        handling_trace.set(envelope.traceparent)  # this delivery's task: its sub-requests continue the trace
        if self.response_type is not None and (envelope.reply_to is None or not d.headers.get(REQUEST_ID)):
            # The answer would reach no one (no reply-to), or no caller could tell whose it is.
            raise Undecodable(f"a request to {self.name} needs a reply-to and a request-id header")
        if envelope.expired():
            self._expired.inc()
            for hooks in self._middlewares:
                hooks.outcome("expired")
            log.info(DROPPED_EXPIRED, self.name, envelope.request_id)
            return
        try:
            # A ClassVar cannot name Req: request_type is the subclass's Req, which decode checked.
            request = cast(Req, decode(d.body, self.request_type))
        except DecodeError as exc:
            if envelope.reply_to is None or self.response_type is None:
                raise Undecodable(str(exc)) from None
            await self._reply(bus, envelope, self._bad_request("ValidationError", str(exc), envelope.request_id))
            return
        context = RequestContext(envelope=envelope, topic=d.topic, delivery_attempt=d.attempt, bulk=bulk)
        if envelope.stream and self.piece_type is not None and envelope.reply_to is not None:
            await self._run_stream(bus, request, context)
            self._latency.observe(time.perf_counter() - started)
            return
        for hooks in self._middlewares:
            hooks.handle_started(context)
        try:
            response = await self._run_handler(request, context)
        finally:
            for hooks in self._middlewares:
                hooks.handle_ended(context)
        if response is not None and envelope.reply_to is not None:
            await self._reply(bus, envelope, response)
        self._latency.observe(time.perf_counter() - started)

    async def _refuse_oversized(self, bus: Bus, d: Delivery, limit: int) -> None:
        """Answer an oversized request with why and what to change; dead-letter it when no one can be told.

        The caller would otherwise wait out its whole timeout for an answer that never comes, and
        retrying cannot help: the same body is refused the same way. Its body is never decoded.
        """
        reason = too_large(len(d.body), limit)
        try:
            envelope = parse_envelope(d.headers)
        except EnvelopeError:
            raise Oversized(reason) from None
        answerable = (
            self.response_type is not None
            and envelope.reply_to is not None
            and envelope.reply_to.startswith(REPLY_PREFIX)
            and bool(d.headers.get(REQUEST_ID))
            and not envelope.expired()
        )
        if not answerable:
            raise Oversized(reason)
        own = self.settings.max_message_bytes
        if own is not None and own <= bus.max_message_bytes:
            env = f"RAGBUS_PROCESSORS__{self.name.upper().replace('-', '_')}__MAX_MESSAGE_BYTES"
            whose, raise_it = "this processor's", f"[processors.{self.name}] max_message_bytes ({env})"
        else:
            whose = "the bus's"
            raise_it = "RAGBUS_BUS__MAX_MESSAGE_BYTES ([bus] max_message_bytes) where the workers run"
        message = (
            f"{self.name}: the request is {len(d.body)} bytes, over {whose} max_message_bytes={limit}; "
            f"send less or raise {raise_it}"
        )
        await self._reply(bus, envelope, self._error("MessageTooLarge", message, caller=True))

    async def _run_handler(self, request: Req, context: RequestContext) -> Resp | None:
        limit = self.handler_limit_s(context)
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                return await self.handle(request, context)
        except TimeoutError as exc:
            if self.response_type is None:
                raise
            if deadline.expired():
                self._timeouts.inc()
                return self._error("Timeout", f"{self.name} did not finish within {limit:.3f}s")
            # Not this handler's limit: something it waited for (a sub-request) timed out.
            log.warning("%s: request %s: %s", self.name, context.request_id, exc or "timed out")
            return self._error("Timeout", str(exc) or "a call of the handler timed out")
        except BadRequest as exc:
            if self.response_type is None:
                raise Undecodable(f"bad request: {exc}") from None  # it would fail the same way again
            return self._bad_request(type(exc).__name__, str(exc) or type(exc).__name__, context.request_id)
        except Exception as exc:
            if self.response_type is None:
                raise  # no one to tell: retry, then dead-letter
            if isinstance(exc, Unavailable):
                log.warning("%s: request %s: %s: %s", self.name, context.request_id, type(exc).__name__, exc)
            else:
                log.exception("%s: handler failed on request %s", self.name, context.request_id)
            return self._error(type(exc).__name__, str(exc) or type(exc).__name__)

    async def _run_stream(self, bus: Bus, request: Req, context: RequestContext) -> None:
        """Publish the pieces of ``stream`` as they come; any failure becomes the final, error piece."""
        envelope = context.envelope
        limit = self.handler_limit_s(context)
        deadline = asyncio.timeout(limit)
        seq = 0
        try:
            async with deadline:
                async for piece in self.stream(request, context):
                    final = getattr(piece, "error", None) is not None or self.is_final(piece)
                    if await self._reply(bus, envelope, piece, seq=seq, final=final):
                        return
                    seq += 1
            failure = self._error("StreamError", f"{self.name} ended a stream without its final piece")
        except TimeoutError as exc:
            if deadline.expired():
                self._timeouts.inc()
                failure = self._error("Timeout", f"{self.name} did not finish within {limit:.3f}s")
            else:
                failure = self._error("Timeout", str(exc) or "a call of the stream timed out")
        except BadRequest as exc:
            failure = self._bad_request(type(exc).__name__, str(exc) or type(exc).__name__, context.request_id)
        except Exception as exc:
            log.exception("%s: stream failed on request %s", self.name, context.request_id)
            failure = self._error(type(exc).__name__, str(exc) or type(exc).__name__)
        await self._reply(bus, envelope, failure, seq=seq, final=True)

    def _error(self, error_type: str, message: str, *, caller: bool = False) -> Resp:
        """An error response for a failure of this processor, counted in ``ragbus_errors`` (``caller``: one
        the caller can mend, such as a request too large)."""
        metrics.errors.labels(self.name, error_type).inc()
        for hooks in self._middlewares:
            hooks.outcome("error", error_type)
        assert self.response_type is not None
        return cast(Resp, error_response(self.response_type, Error(error_type, message[:2000], caller=caller)))

    def _bad_request(self, error_type: str, message: str, request_id: str = "") -> Resp:
        """An error response for the caller's mistake: logged without a stack, counted in ``ragbus_bad_requests``.

        INFO, not WARNING or ERROR: the worker is fine, and the caller is told in the response.
        """
        metrics.bad_requests.labels(self.name, error_type).inc()
        for hooks in self._middlewares:
            hooks.outcome("bad_request", error_type)
        log.info("%s: refused request %s: %s: %s", self.name, request_id, error_type, message[:300])
        assert self.response_type is not None
        return cast(Resp, error_response(self.response_type, Error(error_type, message[:2000], caller=True)))

    async def _reply(
        self, bus: Bus, envelope: Envelope, response: msgspec.Struct, *, seq: int | None = None, final: bool = True
    ) -> bool:
        """Publish ``response`` (with ``seq``: that piece of a stream); True if it ends the stream.

        A whole response to a request that asked for pieces (only an error can be one: a bad
        body, an oversized one) goes as the one, final piece, in ``piece_type``.
        """
        assert envelope.reply_to is not None
        piece_type = self.piece_type if envelope.stream else None
        streamed = piece_type is not None
        if piece_type is not None and (seq is None or not isinstance(response, piece_type)):
            response = error_response(piece_type, getattr(response, "error", None) or Error("Error", "failed"))
            seq, final = seq or 0, True
        body = encode(response)
        if len(body) > bus.max_message_bytes and self.response_type is not None:
            # Doing the work again would give the same answer: tell the caller why instead.
            message = f"the answer is {len(body)} bytes, over max_message_bytes={bus.max_message_bytes}"
            error: msgspec.Struct = self._error("ResponseTooLarge", message)
            if piece_type is not None:
                error, final = error_response(piece_type, Error("ResponseTooLarge", message)), True
            body = encode(error)
        headers = response_headers(envelope, seq=seq if streamed else None, final=final)
        await bus.publish(envelope.reply_to, body, headers)
        return final


async def _all_or_none(loops: list) -> list[ConsumeStats]:
    """Run every lane's consume loop; when one fails, stop the others and raise its error."""
    tasks = [asyncio.ensure_future(loop()) for loop in loops]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _sum(stats: list[ConsumeStats]) -> ConsumeStats:
    total = ConsumeStats()
    for one in stats:
        for field in dataclasses.fields(ConsumeStats):
            setattr(total, field.name, getattr(total, field.name) + getattr(one, field.name))
    return total
