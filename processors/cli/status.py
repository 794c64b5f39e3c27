"""``ragbus status``: per processor topic, who serves it, what waits, and what was dead-lettered.

What is shown is ``ragbus.runtime.pipeline_status`` (the gateway's ``GET /v1/status`` shows the same);
this module prints it as a table or as JSON, then, with stores from the log, each replica's lag
behind its log (records it has not applied, as it last said, and how old that report is), and with
sharded query hosts each shard's owner, its lag, whether it has caught up, how old its report
is, and the shard's standbys. "-" is what the backend cannot tell.
"""

from __future__ import annotations

import argparse
import json
import time

import msgspec

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.pipeline_status import statuses, wiring

from .common import add_bus_options, warn_if_private
from .dlq import shown, table
from .topics import _processors


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


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


def print_replicas(replicas: list[dict], now: float) -> None:
    """Each replica's latest report: how far it has applied its log and how old the report is."""
    table(
        [[r["replica"], r["log_topic"], str(r.get("applied", 0)), shown(r.get("behind")),
          "yes" if r.get("caught_up") else "no", age(max(0.0, now - r.get("reported_at", 0.0))) + " ago"]
         for r in replicas],
        ["replica", "log", "applied", "behind", "caught up", "reported"],
    )


def _standby(holder: dict) -> str:
    if holder.get("caught_up"):
        return holder["host"]
    behind = holder.get("behind")
    return f"{holder['host']} (catching up{'' if behind is None else f', {behind} behind'})"


def print_shards(shards: list[dict], now: float) -> None:
    """Each shard: a line per owner (its lag, whether caught up, its report's age), or "no owner"; its standbys.

    Reports are not judged stale: an owner killed without a word stays, its report growing old."""
    rows = []
    for s in shards:
        standbys = ", ".join(_standby(h) for h in s.get("standbys", [])) or "-"
        owners = s.get("owners", [])
        if not owners:
            rows.append([s["log_topic"], str(s["shard"]), "no owner", "-", "no", "-", standbys])
        for i, o in enumerate(owners):
            rows.append([s["log_topic"], str(s["shard"]), o["host"], shown(o.get("behind")),
                         "yes" if o.get("caught_up") else "no",
                         age(max(0.0, now - o.get("reported_at", 0.0))) + " ago", standbys if i == 0 else ""])
    table(rows, ["log", "shard", "owner", "behind", "ready", "reported", "standbys"])


async def _status(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        found = msgspec.to_builtins(await statuses(bus, wiring(settings, args.processors)))
        url = bus.url
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        print_table(found["topics"])
        if found["replicas"]:
            print()
            print_replicas(found["replicas"], time.time())
        if found["shards"]:
            print()
            print_shards(found["shards"], time.time())
    warn_if_private("status", url)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("status", help="who serves each processor topic, what waits, what was dead-lettered",
                       description="Per processor topic: the consumer group's live members, messages waiting "
                                   "(Kafka lag per partition, Pulsar backlog), the oldest waiting message's age, "
                                   "and dead letters not yet redriven; with stores from the log, each replica's "
                                   "records applied and behind its log, as it last reported; with sharded "
                                   "query hosts, each shard's owner (or 'no owner'), its lag, whether it has "
                                   "caught up, its report's age, and its standbys. '-': the backend cannot "
                                   "tell.")
    add_bus_options(p)
    p.add_argument("--processors", type=_processors, metavar="A,B",
                   help="only these processors (default: every processor in the wiring)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    p.set_defaults(run=_status)
