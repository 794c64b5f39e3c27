"""Which query host owns each shard, and which keep standby copies: the policy the group's leader runs.

Each host's metadata says its host id and the shards its data dir holds caught up (owned or
standby). Shards are dealt so every host owns as many as any other, give or take one; a shard
stays with a host that holds it caught up where the balance allows (a host restarted, or a
standby taking over, reads only what it missed). Then each shard gets ``standbys`` other hosts,
those that hold it first. The policy is deterministic: every host would deal the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec


class HostMetadata(msgspec.Struct, forbid_unknown_fields=False):
    host: str
    ready: list[int] = []  # shards held caught up on this host's disk
    standbys: int = 0  # how many standby copies of each shard the deployment asks for


class HostAssignment(msgspec.Struct, forbid_unknown_fields=False):
    standby: list[int] = []  # shards to keep following without serving them
    owners: dict[int, str] = {}  # every shard's owner (host id), for status


def assign_shards(shards: int, members: Mapping[str, bytes]) -> dict[str, tuple[Sequence[int], bytes]]:
    """``Bus.join_assignment``'s ``assign``: each member's shards (the group topic's partitions) and data."""
    hosts = {member: msgspec.json.decode(raw, type=HostMetadata) for member, raw in members.items()}
    order = sorted(hosts, key=lambda m: (hosts[m].host, m))
    if not order:
        return {}
    owned: dict[str, list[int]] = {m: [] for m in order}
    most = -(-shards // len(order))  # ceil: no host owns more
    top = shards - (most - 1) * len(order)  # how many hosts may own ``most``, the others one less

    def room(member: str) -> bool:
        have = len(owned[member])
        full = sum(1 for m in order if len(owned[m]) >= most)
        return have < most - 1 or (have == most - 1 and full < top)

    owner: dict[int, str] = {}
    for shard in range(shards):  # first, shards to a host that holds them, where the balance allows
        keeper = next((m for m in order if shard in hosts[m].ready and room(m)), None)
        if keeper is not None:
            owner[shard] = keeper
            owned[keeper].append(shard)
    for shard in range(shards):  # the rest to the hosts that own fewest
        if shard not in owner:
            keeper = min((m for m in order if room(m)), key=lambda m: (len(owned[m]), order.index(m)))
            owner[shard] = keeper
            owned[keeper].append(shard)

    standbys = max((h.standbys for h in hosts.values()), default=0)
    standby: dict[str, list[int]] = {m: [] for m in order}
    for shard in range(shards):
        others = [m for m in order if m != owner[shard]]
        others.sort(key=lambda m: (shard not in hosts[m].ready, len(standby[m]), order.index(m)))
        for m in others[:standbys]:
            standby[m].append(shard)

    owners = {shard: hosts[m].host for shard, m in owner.items()}
    return {m: (sorted(owned[m]), msgspec.json.encode(HostAssignment(sorted(standby[m]), owners)))
            for m in order}
