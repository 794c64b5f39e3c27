"""Members joining and leaving a group while messages flow: the broker moves the work, nothing is lost.

On Kafka the broker's group coordinator rebalances the topic's partitions when the second member
joins (each member then owns some) and again when the first leaves (the survivor owns them all);
what the first had finished is committed on the way out, what it had not is delivered again to
the survivor. On Pulsar the Shared subscription dispatches to whichever consumers are connected.
"""

from __future__ import annotations

import asyncio
import collections

import pytest

TOTAL = 300
JOIN_AT, LEAVE_AT = 60, 200  # the second member joins, then the first leaves, at these messages
EVERY_S = 0.02  # 6 s of publishing: each rebalance has seconds to settle
KEYS = 24


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["kafka", "pulsar"])
async def test_members_joining_and_leaving_under_load_lose_nothing(open_bus, topic):
    group = f"rebalance-{topic}"
    publisher = await open_bus()
    handled: dict[int, list[str]] = collections.defaultdict(list)  # message number -> members that handled it
    all_in = asyncio.Event()
    tasks: list[asyncio.Task] = []

    async def member(name: str, sub) -> None:
        while True:
            d = await sub.receive()
            await d.ack()
            handled[int(d.body)].append(name)
            if len(handled) == TOTAL:
                all_in.set()

    first_bus = await open_bus()
    first = await first_bus.subscribe(topic, group)
    tasks.append(asyncio.ensure_future(member("first", first)))
    second = None
    try:
        for n in range(TOTAL):
            if n == JOIN_AT:
                second = await (await open_bus()).subscribe(topic, group)
                tasks.append(asyncio.ensure_future(member("second", second)))
            if n == LEAVE_AT:
                tasks[0].cancel()
                await first_bus.close()  # leaves the group: its partitions go to the second member
            await publisher.publish(topic, str(n).encode(), key=f"k{n % KEYS}")
            await asyncio.sleep(EVERY_S)
        await asyncio.wait_for(all_in.wait(), 60)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    twice = sorted(n for n, names in handled.items() if len(names) > 1)
    print(f"\n{len(handled)} of {TOTAL} handled; handled twice: {len(twice)} {twice[:10]}")
    assert sorted(handled) == list(range(TOTAL))  # nothing lost
    assert {names[0] for n, names in handled.items() if n < JOIN_AT} <= {"first"}
    # While both were members, the second took a share of the work; once the first left, all of it.
    assert any("second" in handled[n] for n in range(JOIN_AT, LEAVE_AT)), "the second member never got work"
    late = [n for n in range(LEAVE_AT + 20, TOTAL) if handled[n] != ["second"]]
    assert late == [], f"after the first member left, handled elsewhere or twice: {late[:10]}"
    assert len(twice) <= TOTAL // 20, twice  # redeliveries are those in flight at a rebalance, a few
