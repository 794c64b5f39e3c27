"""The latest of many log positions: what a read that must see many writes needs to carry.

A replica applies each partition of a log in order, so once it has applied a partition's latest
position it has applied every earlier one of that partition: a thousand documents ingested need
one token per partition of the log, not one each. Positions are each backend's own
(``Bus.append``): ``<offset>`` on memory://, ``<partition>:<offset>`` on Kafka,
``<ledger>:<entry>:<batch>:<partition>`` on Pulsar; told apart by their shape, since a
deployment uses one bus.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragbus.schema.changelog import parse_token, token


def place(position: str) -> tuple[str, tuple[int, ...]]:
    """(the partition, the place in it) of a position: two positions of one partition compare by their places."""
    parts = [int(p) for p in position.split(":")]
    if len(parts) == 1:
        return "", (parts[0],)
    if len(parts) == 2:
        return str(parts[0]), (parts[1],)
    if len(parts) == 4:
        return str(parts[3]), tuple(parts[:3])
    raise ValueError(f"{position[:100]!r} is not a log position of memory://, Kafka or Pulsar")


def latest(tokens: Iterable[str]) -> list[str]:
    """The latest token of each log topic and partition among ``tokens``, in the order first met."""
    best: dict[tuple[str, str], tuple[tuple[int, ...], str]] = {}
    for value in tokens:
        topic, position = parse_token(value)
        partition, where = place(position)
        held = best.get((topic, partition))
        if held is None or where > held[0]:
            best[(topic, partition)] = (where, position)
    return [token(topic, position) for (topic, _), (_, position) in best.items()]
