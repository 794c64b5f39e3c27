"""``ragbus topics create|describe``: the topics the wiring's processors use, provisioned and shown.

``create`` makes, ahead of any worker, every topic a processor's consumer group
uses (its request topic, its group's retry topic, its dead-letter topic), each
with its class's layout from ``[bus.kafka]`` (request_topics, retry_topics,
dead_letter_topics: partitions, replication factor, retention). A topic that
exists is left as it is and reported as such. ``describe`` shows what the
broker holds for them, and flags a topic whose partitions or retention differ
from the settings; ``--all`` shows every topic on the broker, reply topics
included. Only Kafka has topics to provision: memory:// and Pulsar say why not.
"""

from __future__ import annotations

import argparse
import json

from ragbus.config.settings import Settings, lanes, load_settings
from ragbus.bus import Bus, TopicInfo, connect

from .common import add_bus_options


def wiring_topics(bus: Bus, settings: Settings, names: list[str] | None = None) -> list[str]:
    """Every topic the consumer groups of the wiring's processors (or of ``names``) use, once each, in order."""
    sections = settings.processors
    unknown = sorted(set(names or ()) - set(sections))
    if unknown:
        raise ValueError(f"no processor named {', '.join(unknown)} in the wiring (known: {', '.join(sections)})")
    topics: dict[str, None] = {}
    for name in names or sections:
        for lane, group in lanes(name, sections[name]):
            for topic in bus.consumer_topics(lane, group):
                topics[topic] = None
    return list(topics)


def differences(info: TopicInfo, settings: Settings) -> str:
    """How a topic differs from its class's layout in the settings; "" when it does not."""
    layout = settings.bus.kafka.layout_of(info.kind)
    notes = []
    if info.partitions != layout.partitions:
        notes.append(f"settings say {layout.partitions} partitions")
    if layout.replication_factor is not None and info.replication_factor != layout.replication_factor:
        notes.append(f"settings say replication {layout.replication_factor}")
    if layout.retention_ms is not None and info.retention_ms != layout.retention_ms:
        notes.append(f"settings say retention {duration(layout.retention_ms)}")
    return "; ".join(notes)


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 0:
        return "forever"  # retention.ms = -1
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        whole, rest = divmod(ms, size)
        if whole and not rest:
            return f"{whole}{unit}"
    return f"{ms}ms"


def table(rows: list[dict], out=print) -> None:
    columns = ["topic", "kind", "partitions", "replication", "retention", "status"]
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    for line in [[c.upper() for c in columns], *cells]:
        out("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def rows_of(infos: list[TopicInfo], settings: Settings, status: dict[str, str]) -> list[dict]:
    rows = []
    for info in infos:
        note = differences(info, settings)
        rows.append({
            "topic": info.name, "kind": info.kind, "partitions": info.partitions,
            "replication": info.replication_factor, "retention_ms": info.retention_ms,
            "retention": duration(info.retention_ms),
            "status": ", ".join(s for s in (status.get(info.name, "exists"), note) if s),
        })
    return rows


def show(rows: list[dict], missing: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"topics": rows, "missing": missing}, indent=2))
        return
    table(rows)
    if missing:
        print(f"missing {len(missing)} topic(s), which ragbus topics create makes: {', '.join(missing)}")


async def _create(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        wanted = wiring_topics(bus, settings, args.processors)
        created = set(await bus.provision_topics(wanted))
        infos = await bus.describe_topics(wanted)
    found = {info.name for info in infos}
    show(rows_of(infos, settings, {name: "created" for name in created}),
         [t for t in wanted if t not in found], args.json)
    return 0 if found == set(wanted) else 1


async def _describe(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        wanted = None if args.all else wiring_topics(bus, settings, args.processors)
        infos = await bus.describe_topics(wanted)
    found = {info.name for info in infos}
    missing = [t for t in wanted or () if t not in found]
    show(rows_of(infos, settings, {}), missing, args.json)
    return 1 if missing else 0


def _processors(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no processor named")
    return names


def add_parsers(sub) -> None:
    p = sub.add_parser("topics", help="provision and show the Kafka topics the processors use")
    actions = p.add_subparsers(dest="action", required=True)
    for action, run, text in (
        ("create", _create, "create the missing topics with their class's layout ([bus.kafka] *_topics)"),
        ("describe", _describe, "show partitions, replication and retention as the broker holds them"),
    ):
        a = actions.add_parser(action, help=text, description=text)
        add_bus_options(a)
        a.add_argument("--processors", type=_processors, metavar="A,B",
                       help="only these processors' topics (default: every processor in the wiring)")
        a.add_argument("--json", action="store_true", help="one JSON document instead of a table")
        if action == "describe":
            a.add_argument("--all", action="store_true", help="every topic on the broker, reply topics included")
        a.set_defaults(run=run)
