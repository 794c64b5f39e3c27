"""The policy the shard owners' group leader runs: balanced, sticky to hosts that hold a shard, standbys apart."""

from __future__ import annotations

import msgspec
import pytest

from ragbus.stores.shard_assignment import HostAssignment, HostMetadata, assign_shards


def host(name: str, ready=(), standbys: int = 0) -> bytes:
    return msgspec.json.encode(HostMetadata(name, list(ready), standbys))


def dealt(shards: int, **members: bytes) -> dict[str, tuple[list[int], list[int]]]:
    """Each member's (owned, standby) shards."""
    out = assign_shards(shards, members)
    assert set(out) == set(members)
    return {m: (list(owned), msgspec.json.decode(data, type=HostAssignment).standby)
            for m, (owned, data) in out.items()}


@pytest.mark.parametrize(("shards", "hosts"), [(4, 1), (4, 2), (4, 3), (4, 4), (4, 6), (8, 3), (12, 5)])
def test_every_shard_has_one_owner_and_no_host_owns_two_more_than_another(shards, hosts):
    got = dealt(shards, **{f"m{i}": host(f"h{i}") for i in range(hosts)})
    owned = sorted(s for o, _ in got.values() for s in o)
    assert owned == list(range(shards))
    counts = [len(o) for o, _ in got.values()]
    assert max(counts) - min(counts) <= 1


def test_a_shard_stays_with_a_host_that_holds_it_caught_up():
    # c restarted holding shard 3 caught up, b holding 2: the balance allows both to keep theirs.
    got = dealt(4, m1=host("a", [0, 1, 2, 3]), m2=host("b", [2]), m3=host("c", [3]))
    assert got["m2"][0] == [2] and got["m3"][0] == [3] and got["m1"][0] == [0, 1]


def test_a_host_that_holds_every_shard_keeps_only_its_share_when_another_joins():
    got = dealt(4, m1=host("a", [0, 1, 2, 3]), m2=host("b"))
    assert got == {"m1": ([0, 1], []), "m2": ([2, 3], [])}


def test_each_shard_gets_its_standbys_on_other_hosts_those_that_hold_it_first():
    got = dealt(2, m1=host("a", [0], standbys=1), m2=host("b", [1]), m3=host("c", [0, 1]))
    for shard in range(2):
        owner = [m for m, (o, _) in got.items() if shard in o]
        standbys = [m for m, (_, s) in got.items() if shard in s]
        assert len(owner) == 1 and len(standbys) == 1 and owner != standbys
    assert got["m3"][1] == [0, 1]  # c holds both caught up: it stands by for both


def test_every_member_is_told_each_shards_owner_by_host_id():
    out = assign_shards(2, {"m1": host("a"), "m2": host("b")})
    told = {m: msgspec.json.decode(data, type=HostAssignment).owners for m, (_, data) in out.items()}
    assert told["m1"] == told["m2"] == {0: "a", 1: "b"}


def test_the_deal_is_the_same_whoever_leads():
    members = {"m2": host("b", [1]), "m1": host("a", [0], standbys=1), "m3": host("c")}
    assert assign_shards(4, members) == assign_shards(4, dict(reversed(members.items())))
