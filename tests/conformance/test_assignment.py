"""Partitions owned through a group with the caller's policy (``Bus.join_assignment``), on every backend.

What a sharded query host relies on: members of one group are each told a part of the topic's
partitions by one member's run of the policy over every member's metadata, with the data the
policy gave it; when a member joins or leaves, the others are told their new parts. Pulsar has
no such assignment in its Python client, and says so.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping

import pytest

from ragbus.bus import AssignmentUnsupported, BusError

from ..helpers.receiving import RECEIVE_TIMEOUT

PARTITIONS = 4


def by_name(partitions: int, members: Mapping[str, bytes]) -> dict[str, tuple[list[int], bytes]]:
    """Partitions dealt round-robin in the order of the members' names (their metadata), each told
    how many members there are and the names of the others."""
    named = sorted(members, key=lambda m: members[m])
    out = {}
    for i, member in enumerate(named):
        others = sorted(members[m].decode() for m in named if m != member)
        out[member] = (list(range(i, partitions, len(named))), json.dumps(others).encode())
    return out


class Member:
    def __init__(self, name: str) -> None:
        self.name = name
        self.told: list[tuple[frozenset[int], list[str]]] = []
        self.changed = asyncio.Event()
        self.membership = None

    async def on_assigned(self, owned: frozenset[int], data: bytes) -> None:
        self.told.append((owned, json.loads(data)))
        self.changed.set()

    async def join(self, bus, topic: str, group: str):
        self.membership = await bus.join_assignment(topic, group, PARTITIONS, metadata=self.name.encode,
                                                    assign=by_name, on_assigned=self.on_assigned)
        return self

    async def told_to_own(self, partitions: set[int], others: list[str]) -> None:
        async def until() -> None:
            while not self.told or self.told[-1] != (frozenset(partitions), others):
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(until(), RECEIVE_TIMEOUT * 4)


@pytest.mark.timeout(240)
async def test_members_are_told_their_parts_as_they_join_and_leave(open_bus, backend):
    topic, group = f"ragbus.owners.t-{uuid.uuid4().hex[:8]}", f"owners-{uuid.uuid4().hex[:8]}"
    bus_a = await open_bus()
    if backend == "pulsar":
        with pytest.raises(AssignmentUnsupported):
            await Member("a").join(bus_a, topic, group)
        return
    a = await Member("a").join(bus_a, topic, group)
    assert a.membership.owned == frozenset(range(PARTITIONS))  # known when join_assignment returns
    await a.told_to_own({0, 1, 2, 3}, [])

    bus_b = await open_bus()
    b = await Member("b").join(bus_b, topic, group)
    await a.told_to_own({0, 2}, ["b"])
    await b.told_to_own({1, 3}, ["a"])
    assert b.membership.data == b'["a"]'

    await a.membership.close()  # leaves at once: the survivor owns everything without waiting for a timeout
    await b.told_to_own({0, 1, 2, 3}, [])

    with pytest.raises(BusError, match="partitions"):  # a group's topic is for one partition count
        await bus_b.join_assignment(topic, group, PARTITIONS + 1, metadata=lambda: b"c", assign=by_name,
                                    on_assigned=b.on_assigned)
