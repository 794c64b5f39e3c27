"""``ragbus status``: per processor topic, who serves it, what waits, and what was dead-lettered.

For each processor of the wiring, its request topic and consumer group: the
group's live members, the messages waiting for it (Kafka: committed-offset lag
per partition, over the request topic and the group's retry topic; Pulsar:
the subscription's backlog, from the broker's metrics, ``[bus.pulsar]
metrics_url``; memory: exact, but only for the bus of this process), the age
of the oldest waiting message where the backend tells it, and the dead letters
not yet redriven. "-" is what the backend cannot tell.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from config.settings import Settings, lanes, load_settings
from processors.bus import Bus, GroupStatus, connect
from processors.bus.dead_letters import pending

from .common import add_bus_options
from .dlq import shown, table
from .topics import _processors

# Topics asked about at once: each Kafka query starts a consumer of its own.
_AT_ONCE = 4


def wiring(settings: Settings, names: list[str] | None) -> list[tuple[str, str, str]]:
    """(processor, topic, group) of every processor in the wiring, or of ``names``."""
    sections = settings.processors
    unknown = sorted(set(names or ()) - set(sections))
    if unknown:
        raise ValueError(f"no processor named {', '.join(unknown)} in the wiring (known: {', '.join(sections)})")
    return [(n, topic, group) for n in names or sections for topic, group in lanes(n, sections[n])]


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


async def statuses(bus: Bus, rows: list[tuple[str, str, str]]) -> list[dict]:
    """Each processor's group status and dead-letter count, as ``--json`` shows them."""
    slots = asyncio.Semaphore(_AT_ONCE)

    async def one(name: str, topic: str, group: str) -> dict:
        async with slots:
            status: GroupStatus = await bus.group_status(topic, group)
            dead = len(await pending(bus, f"{topic}{bus.dead_letter_suffix}"))
        return {
            "processor": name, "topic": topic, "group": group, "members": status.members,
            "waiting": status.waiting, "lag": dict(status.lag) if status.lag is not None else None,
            "oldest_s": status.oldest_s, "dead_letters": dead,
        }

    return list(await asyncio.gather(*(one(*row) for row in rows)))


def lag_text(lag: dict[str, int] | None, topic: str) -> str:
    """Partitions with something waiting, ``0:5 retry:0:2``; "-" when the backend has no partitions."""
    if lag is None:
        return "-"
    parts = []
    for where, count in lag.items():
        name, _, partition = where.rpartition(":")
        if count:
            parts.append(f"{partition if name == topic else 'retry:' + partition}:{count}")
    return " ".join(parts) or "0"


def print_table(found: list[dict]) -> None:
    table(
        [[r["topic"], r["group"], shown(r["members"]), shown(r["waiting"]), age(r["oldest_s"]),
          str(r["dead_letters"]), lag_text(r["lag"], r["topic"])] for r in found],
        ["topic", "group", "members", "waiting", "oldest", "dead-letters", "lag by partition"],
    )


async def _status(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        found = await statuses(bus, wiring(settings, args.processors))
        url = bus.url
    if args.json:
        print(json.dumps({"bus": url, "topics": found}, indent=2))
    else:
        print_table(found)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("status", help="who serves each processor topic, what waits, what was dead-lettered",
                       description="Per processor topic: the consumer group's live members, messages waiting "
                                   "(Kafka lag per partition, Pulsar backlog), the oldest waiting message's age, "
                                   "and dead letters not yet redriven. '-': the backend cannot tell.")
    add_bus_options(p)
    p.add_argument("--processors", type=_processors, metavar="A,B",
                   help="only these processors (default: every processor in the wiring)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    p.set_defaults(run=_status)
