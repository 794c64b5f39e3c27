"""Which Kafka offsets may be committed while handlers finish out of order.

Kafka remembers one number per partition: the next offset the group should
read. Committing offset N claims that every message below N is done, so it
is safe only once the message at N-1 and every one before it has finished.
Handlers running concurrently finish in any order; this tracker holds back
the commit point until the oldest unfinished message is done.
"""

from __future__ import annotations

from collections import deque


class PartitionOffsets:
    """Offsets handed out for one partition, in the order they were delivered."""

    __slots__ = ("_done", "_inflight", "_next", "committed")

    def __init__(self) -> None:
        self._inflight: deque[int] = deque()
        self._done: set[int] = set()
        self._next: int | None = None  # first offset after the contiguous done prefix
        self.committed: int | None = None  # what was last sent to the broker

    def delivered(self, offset: int) -> None:
        self._inflight.append(offset)

    def done(self, offset: int) -> None:
        self._done.add(offset)
        inflight = self._inflight
        while inflight and inflight[0] in self._done:
            finished = inflight.popleft()
            self._done.discard(finished)
            self._next = finished + 1

    def committable(self) -> int | None:
        """The offset to commit now, or None when nothing new is safe to commit."""
        if self._next is None or self._next == self.committed:
            return None
        return self._next

    @property
    def pending(self) -> int:
        return len(self._inflight)
