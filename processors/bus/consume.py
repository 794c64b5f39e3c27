"""Run a handler over a subscription: the retry and dead-letter rules in one place.

Every backend only has to deliver, ack and nack; what happens to a message
that fails is decided here, identically for memory, Kafka and Pulsar:

- the handler returns: ack;
- the handler raises ``Undecodable``, or the body is over the size limit: the
  message goes to the dead-letter topic at once (retrying cannot help). A
  handler that can answer its sender (the processor base, which knows the
  envelope) checks sizes itself with ``handler_checks_size=True``, and raises
  ``Oversized`` for what it cannot answer;
- the handler raises anything else: nack, so it comes back with
  ``attempt + 1``; on the ``max_attempts``-th failure it is dead-lettered;
- the consumer stops or is cancelled mid-handler: nack, so another member
  (or this one's restart) gets the message.

A dead-lettered message keeps its body, key and headers and gains
``x-dead-letter-*`` headers saying where it came from, after how many
attempts, and why. It is acked on its own topic only after the dead-letter
publish succeeded, so nothing is lost if the dead-letter topic is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .base import Bus, Delivery, Subscription, SubscriptionClosed

log = logging.getLogger(__name__)

Handler = Callable[[Delivery], Awaitable[None]]

H_REASON = "x-dead-letter-reason"
H_ERROR = "x-dead-letter-error"
H_ATTEMPTS = "x-dead-letter-attempts"
H_ORIGIN = "x-dead-letter-topic"
H_GROUP = "x-dead-letter-group"


class Undecodable(Exception):
    """Raised by a handler for a message it can never process (bad bytes, wrong schema)."""


class Oversized(Undecodable):
    """Raised by a handler that checks sizes itself for a body over the limit it cannot answer."""


def size_limit(bus: Bus, max_message_bytes: int | None = None) -> int:
    """The largest body a consumer takes: the bus's limit, or a consumer's own lower one (None: the bus's)."""
    return bus.max_message_bytes if max_message_bytes is None else min(max_message_bytes, bus.max_message_bytes)


def too_large(size: int, limit: int) -> str:
    """The dead-letter reason of an oversized body, the same wherever it is found."""
    return f"body of {size} bytes exceeds max_message_bytes={limit}"


def dead_letter_topic(topic: str, suffix: str = ".dlq") -> str:
    return f"{topic}{suffix}"


@dataclass(slots=True)
class ConsumeStats:
    received: int = 0
    acked: int = 0
    nacked: int = 0
    dead_lettered: int = 0


async def consume(
    bus: Bus,
    subscription: Subscription,
    handler: Handler,
    *,
    concurrency: int = 16,
    max_attempts: int | None = None,
    dead_letter_suffix: str | None = None,
    max_message_bytes: int | None = None,
    handler_checks_size: bool = False,
    stop: asyncio.Event | None = None,
    drain_timeout: float = 10.0,
    stats: ConsumeStats | None = None,
    on_dead_letter: Callable[[Delivery, str], None] | None = None,
) -> ConsumeStats:
    """Handle deliveries until ``stop`` is set or the subscription closes.

    At most ``concurrency`` handlers run at once; the next message is not
    even received until a slot is free, so a slow handler applies
    back-pressure instead of piling messages up in memory. On stop, handlers
    in flight get ``drain_timeout`` seconds to finish; the rest are cancelled
    and their messages nacked. ``on_dead_letter(delivery, error_type)`` is
    called for each message dead-lettered (for metrics). ``max_attempts`` and
    ``dead_letter_suffix`` default to the bus's own (``BusSettings``), and
    ``max_message_bytes`` (None) to the bus's limit. With ``handler_checks_size``
    every body reaches the handler, which must apply ``size_limit`` itself.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    max_attempts = bus.max_attempts if max_attempts is None else max_attempts
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    stats = stats if stats is not None else ConsumeStats()
    stop = stop or asyncio.Event()
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task[None]] = set()
    suffix = bus.dead_letter_suffix if dead_letter_suffix is None else dead_letter_suffix
    dlq = dead_letter_topic(subscription.topic, suffix)

    async def dead_letter(d: Delivery, reason: str, error: str) -> None:
        headers = dict(d.headers)
        headers.update(
            {
                H_REASON: reason[:1000],
                H_ERROR: error,
                H_ATTEMPTS: str(d.attempt),
                H_ORIGIN: d.topic,
                H_GROUP: subscription.group,
            }
        )
        try:
            await bus.publish(dlq, d.body if len(d.body) <= bus.max_message_bytes else b"", headers, d.key)
        except Exception:
            log.exception("dead-letter publish to %s failed; message goes back to %s", dlq, d.topic)
            await d.nack()
            stats.nacked += 1
            return
        log.warning("dead-lettered a message of %s after %d attempt(s): %s", d.topic, d.attempt, reason)
        await d.ack()
        stats.dead_lettered += 1
        if on_dead_letter is not None:
            on_dead_letter(d, error)

    # A consumer may accept less than the bus carries (a processor's own max_message_bytes).
    limit = size_limit(bus, max_message_bytes)

    async def handle(d: Delivery) -> None:
        try:
            if not handler_checks_size and len(d.body) > limit:
                await dead_letter(d, too_large(len(d.body), limit), "MessageTooLarge")
                return
            try:
                await handler(d)
            except asyncio.CancelledError:
                await d.nack()
                stats.nacked += 1
                raise
            except Oversized as exc:
                await dead_letter(d, str(exc), "MessageTooLarge")
            except Undecodable as exc:
                await dead_letter(d, f"undecodable: {exc}", type(exc).__name__)
            except Exception as exc:
                if d.attempt >= max_attempts:
                    await dead_letter(d, f"failed {d.attempt} time(s): {exc!r}", type(exc).__name__)
                else:
                    log.info("handler failed on %s (attempt %d): %r", d.topic, d.attempt, exc)
                    await d.nack()
                    stats.nacked += 1
            else:
                await d.ack()
                stats.acked += 1
        finally:
            slots.release()

    async def pump() -> None:
        # One long-lived receive loop: no task or wait() per message. It is
        # cancelled only while awaiting a slot or an incoming message, never
        # between receiving a delivery and handing it to a handler.
        while True:
            await slots.acquire()
            try:
                d = await subscription.receive()
            except BaseException:
                slots.release()
                raise
            stats.received += 1
            task = asyncio.ensure_future(handle(d))
            running.add(task)
            task.add_done_callback(running.discard)

    receiver = asyncio.ensure_future(pump())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({receiver, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if receiver.done() and not isinstance(receiver.exception(), SubscriptionClosed):
            receiver.result()  # a transport failure: let the caller see it
    except asyncio.CancelledError:
        # Killed rather than stopped: abandon handlers now; their messages are nacked.
        for task in running:
            task.cancel()
        raise
    finally:
        stopping.cancel()
        if not receiver.done():
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver
        if running:
            _, late = await asyncio.wait(set(running), timeout=drain_timeout)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
    return stats
