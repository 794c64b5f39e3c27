"""Partitions of a topic owned through a group: the broker's membership, with the caller's policy.

``Bus.join_assignment`` makes this process a member of ``group`` on ``topic``. Whenever members
come or go the broker's group protocol elects one member to run ``assign`` over every member's
metadata, and each member is told its partitions and the data ``assign`` gave it
(``on_assigned``). Kafka runs it as a consumer group's assignor; memory:// in the process.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence


# An assignment policy: (the topic's partition count, each member's metadata by member id) -> each
# member's partitions and the data it is to be told with them. Every member must have an entry.
Assign = Callable[[int, Mapping[str, bytes]], Mapping[str, tuple[Sequence[int], bytes]]]
# Told each new assignment: the member's partitions, and the data ``Assign`` gave it.
OnAssigned = Callable[[frozenset[int], bytes], Awaitable[None]]


class Membership(abc.ABC):
    """A member of a group on a topic, until ``close`` (which leaves at once, so the others take over)."""

    def __init__(self, topic: str, group: str) -> None:
        self.topic, self.group = topic, group
        self.owned: frozenset[int] = frozenset()  # the partitions of the latest assignment
        self.data = b""  # and its data

    @abc.abstractmethod
    async def close(self) -> None: ...


def check_assignment(partitions: int, members: Mapping[str, bytes],
                     assigned: Mapping[str, tuple[Sequence[int], bytes]]) -> None:
    """``ValueError`` unless ``assigned`` has every member, and only partitions that exist."""
    if set(assigned) != set(members):
        raise ValueError(f"the assignment names members {sorted(assigned)}, the group has {sorted(members)}")
    for member, (owned, _) in assigned.items():
        wrong = [p for p in owned if not 0 <= p < partitions]
        if wrong:
            raise ValueError(f"the assignment gives {member} partitions {wrong} of a topic of {partitions}")
