"""Where a Pulsar consumer's messages wait for ``receive``: pushed by the client's listener thread.

Pulling a message (``receive_async``) held the event loop ~0.1 ms whenever the
consumer's queue was empty: the client's core first tries its queue with a
timed wait, on the calling thread. At concurrency 1 the queue is always empty
when the next receive is asked for, and that ask comes right after a message
is taken: before the handler of a request starts, before the caller of a reply
resumes, twice per hop on the critical path. A message listener instead is
called by the core, on its listener thread, once per message as it arrives;
the message is handed to the loop (one wake-up, as a pending receive cost
too) and waits here, or goes straight to a waiting ``get``.

Back-pressure stays: once ``limit`` messages wait here unasked for, the
listener is paused, so the core stops taking more from its prefetch queue,
which fills, and the broker stops sending; it resumes when half have been
taken. The backend splits ``receiver_queue_size`` between the two, so a
consumer holds no more than it did when the core's queue alone held them.
Nothing here is acknowledged: a message still waiting when the consumer
closes goes to another member, as one in the core's queue does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading

import _pulsar

from ..base import BusError


class InboxClosed(BusError):
    """``get`` on (or waiting in) a closed inbox; the subscription reads it as the end of its stream."""


class Inbox:
    """Messages one consumer's listener delivered, oldest first; ``get`` waits for the next."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._limit = max(1, limit)
        self._messages: collections.deque[_pulsar.Message] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[_pulsar.Message]] = collections.deque()
        # The listener thread counts what it delivered, the loop what it handed out; the difference is
        # what is held here or on its way to the loop. Pausing (on the listener thread) and resuming
        # (on the loop) decide under one lock: else a resume could slip in between the decision to
        # pause and the pause itself, and the listener would stay paused with nobody to resume it.
        self._lock = threading.Lock()
        self._delivered = 0
        self._handed_out = 0
        self._paused: _pulsar.Consumer | None = None
        self._closed = False
        # Handed over by the listener, not yet taken in by the loop; one wake-up of the loop takes
        # in every message that came meanwhile, so a burst costs one, not one per message.
        self._incoming: collections.deque[_pulsar.Message] = collections.deque()
        self._woken = False

    def listener(self, consumer: _pulsar.Consumer, message: _pulsar.Message) -> None:
        """The core's message listener: runs on its listener thread, hands the message to the loop.

        It pauses itself here, on its own thread, once ``limit`` are held: paused from the loop
        instead, it would deliver (and the broker send) more meanwhile.
        """
        with self._lock:
            self._delivered += 1
            if self._delivered - self._handed_out >= self._limit and self._paused is None:
                self._paused = consumer
                consumer.pause_message_listener()
        self._incoming.append(message)
        if self._woken:
            return  # a wake-up is on its way and will take this one in too
        self._woken = True
        # A closed loop raises RuntimeError: unacknowledged, the messages go to another member.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._take_in)

    def _take_in(self) -> None:
        # Cleared before draining: a message the listener adds after this line either is drained
        # below or finds the flag down and wakes the loop again.
        self._woken = False
        while self._incoming:
            self._arrived(self._incoming.popleft())

    def _arrived(self, message: _pulsar.Message) -> None:
        if self._closed:
            return  # not acknowledged: the broker redelivers it once the consumer is closed
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # else its receive was cancelled
                waiter.set_result(message)
                self._handed()
                return
        self._messages.append(message)

    def _handed(self) -> None:
        with self._lock:
            self._handed_out += 1
            paused = self._paused
            if paused is not None and self._delivered - self._handed_out <= self._limit // 2:
                self._paused = None
                paused.resume_message_listener()

    async def get(self) -> _pulsar.Message:
        """The oldest message waiting, or the next to arrive; ``InboxClosed`` once closed."""
        if self._messages:
            message = self._messages.popleft()
            self._handed()
            return message
        if self._closed:
            raise InboxClosed("the consumer is closed")
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        return await waiter

    @property
    def waiting(self) -> int:
        """How many messages wait here to be taken."""
        return len(self._messages)

    def close(self) -> None:
        """Take no more: waiting ``get`` calls fail with ``InboxClosed``; messages held are dropped."""
        self._closed = True
        self._messages.clear()
        self._incoming.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(InboxClosed("the consumer is closed"))
