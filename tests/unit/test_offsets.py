"""The Kafka commit rule: never past the oldest unfinished message of a partition."""

from __future__ import annotations

import random

from ragbus.bus.kafka.offsets import PartitionOffsets


def test_nothing_committable_until_the_first_message_is_done():
    p = PartitionOffsets()
    for o in range(10, 15):
        p.delivered(o)
    for o in (14, 13, 12, 11):
        p.done(o)
    assert p.committable() is None
    p.done(10)
    assert p.committable() == 15


def test_commit_point_stops_at_the_gap():
    p = PartitionOffsets()
    for o in range(5):
        p.delivered(o)
    p.done(0)
    p.done(1)
    p.done(3)
    assert p.committable() == 2
    p.committed = 2
    assert p.committable() is None  # nothing new since the last commit
    p.done(2)
    assert p.committable() == 4
    assert p.pending == 1


def test_random_completion_order_never_commits_an_unfinished_offset():
    rng = random.Random(7)
    for _ in range(200):
        offsets = list(range(100, 100 + rng.randint(1, 40)))
        p = PartitionOffsets()
        for o in offsets:
            p.delivered(o)
        finished: set[int] = set()
        order = offsets[:]
        rng.shuffle(order)
        for o in order:
            p.done(o)
            finished.add(o)
            c = p.committable()
            if c is not None:
                assert all(x in finished for x in range(offsets[0], c))
                assert c == offsets[-1] + 1 or c not in finished
        assert p.committable() == offsets[-1] + 1


def test_offsets_with_gaps_from_compaction_or_transactions():
    p = PartitionOffsets()
    for o in (3, 7, 8):
        p.delivered(o)
    p.done(7)
    p.done(8)
    assert p.committable() is None
    p.done(3)
    assert p.committable() == 9
