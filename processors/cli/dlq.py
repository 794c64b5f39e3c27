"""``ragbus dlq list|redrive``: what the dead-letter topics hold, and sending it back after a fix.

``list`` reads dead-letter topics without a consumer group (nothing is
acknowledged or committed, so it takes nothing from anyone) and shows each
message not yet redriven: the topic it came from, when, after how many
attempts, the error type and the reason. With no TOPIC it lists every
dead-letter topic the broker knows (Kafka, memory; on Pulsar those of the
wiring's processors, or every topic the broker's metrics name).

``redrive`` publishes them to the topic they came from, with a fresh delivery
count, and marks each redriven in its dead-letter topic so that a second
redrive does not send it again (processors/bus/dead_letters.py).

A TOPIC named that the bus does not have (``unknown_topic``) is refused with exit status 2, and
on memory:// both say on stderr that its bus lives in this one process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

from ragbus.config.settings import Settings, load_settings
from ragbus.bus import Bus, connect
from ragbus.bus.dead_letters import DeadLetter, dead_letter_topics, pending, redrive

from .common import add_bus_options, positive_int, warn_if_private


def dead_letter_topic_of(bus: Bus, topic: str) -> str:
    """``embed`` and ``embed.dlq`` both name the dead-letter topic ``embed.dlq``."""
    suffix = bus.dead_letter_suffix
    return topic if topic.endswith(suffix) else f"{topic}{suffix}"


def processor_topics(settings: Settings) -> list[str]:
    """The request topic of every processor in the wiring."""
    return [section.get("topic") or name for name, section in settings.processors.items()]


async def unknown_topic(bus: Bus, topic: str, settings: Settings) -> str | None:
    """Why ``topic`` is no dead-letter topic of this bus, or None when it is one: the broker lists it (Kafka,
    memory), or it is the dead-letter topic of a processor in the wiring where the broker cannot list its
    topics (Pulsar without ``[bus.pulsar] metrics_url``), or it holds anything (Pulsar's metrics name a
    topic only once refreshed)."""
    known = await bus.list_topics()
    if topic in (known if known is not None else await dead_letter_topics(bus, processor_topics(settings))):
        return None
    if await bus.read_retained(topic):
        return None
    if known is None:
        return (f"{topic!r} holds nothing on {bus.url} and is the dead-letter topic of no processor in the wiring "
                "(the broker cannot list its topics without [bus.pulsar] metrics_url)")
    letters = [t for t in known if t.endswith(bus.dead_letter_suffix)]
    listed = (", ".join(letters[:10]) + (" ..." if len(letters) > 10 else "")) if letters else "none"
    return f"no topic {topic!r} on {bus.url} (its dead-letter topics: {listed})"


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def table(rows: list[list[str]], columns: list[str], out=print) -> None:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    for line in [[c.upper() for c in columns], *rows]:
        out("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def shown(value: object) -> str:
    return "-" if value is None else str(value)


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def show(letters: list[DeadLetter], as_json: bool, note: str = "") -> None:
    if as_json:
        print(json.dumps({"dead_letters": [d.summary() for d in letters]}, indent=2))
        return
    if letters:
        table(
            [[d.topic, d.position, when(d.time), shown(d.attempts), str(d.redrives), d.error or "-", _short(d.reason)]
             for d in letters],
            ["topic", "position", "dead-lettered", "attempts", "redrives", "error", "reason"],
        )
    if note:
        print(note)


async def _list(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        url = bus.url
        if args.topic:
            topics = [dead_letter_topic_of(bus, args.topic)]
            if (why := await unknown_topic(bus, topics[0], settings)) is not None:
                return _refuse("list", why, url)
        else:
            topics = await dead_letter_topics(bus, processor_topics(settings))
        found = await asyncio.gather(*(pending(bus, topic, reason=args.reason) for topic in topics))
        letters: list[DeadLetter] = [d for of_topic in found for d in of_topic]
    total = len(letters)
    shown = letters[: args.limit] if args.limit else letters
    more = f" (showing {len(shown)}; --limit)" if len(shown) < total else ""
    show(shown, args.json, f"{total} dead letter(s) in {len({d.topic for d in letters})} topic(s){more}")
    warn_if_private("dlq list", url)
    return 0


def _refuse(action: str, why: str, url: str) -> int:
    print(f"ragbus dlq {action}: error: {why}", file=sys.stderr)
    warn_if_private(f"dlq {action}", url)
    return 2


async def _redrive(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    async with await connect(args.bus, settings.bus) as bus:
        topic = dead_letter_topic_of(bus, args.topic)
        if (why := await unknown_topic(bus, topic, settings)) is not None:
            return _refuse("redrive", why, bus.url)
        sent, skipped = await redrive(bus, topic, reason=args.reason, limit=args.limit)
        left = await pending(bus, topic)
    if args.json:
        print(json.dumps({"redriven": [d.summary() for d in sent], "skipped": [d.summary() for d in skipped],
                          "left": len(left)}, indent=2))
        return 0
    for d in sent:
        print(f"redriven {d.position} to {d.origin} (request {d.request_id or '-'}, {d.error or 'no error type'})")
    for d in skipped:
        print(f"skipped {d.position}: its body was over the size limit and was not kept")
    print(f"redrove {len(sent)} message(s) from {topic}; {len(left)} left in it")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("dlq", help="list dead-lettered messages, and redrive them after a fix",
                       description="List dead-lettered messages without consuming them, and redrive them to the "
                                   "topic they came from with a fresh attempt count.")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("list", help="show what the dead-letter topics hold (nothing is consumed)",
                           description="Show the dead letters not yet redriven: origin, time, attempts, error, "
                                       "reason. Read without a consumer group: nothing is consumed.")
    a.add_argument("topic", nargs="?", metavar="TOPIC",
                   help="a dead-letter topic (embed.dlq) or the topic it serves (embed); default: every one")
    add_bus_options(a)
    a.add_argument("--reason", metavar="R", help="only those whose error type is R or whose reason contains R")
    a.add_argument("--limit", type=positive_int, metavar="N", help="show at most N")
    a.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    a.set_defaults(run=_list)
    r = actions.add_parser("redrive", help="send dead letters back to their topic with a fresh attempt count",
                           description="Publish dead letters to the topic they came from, attempt count reset, "
                                       "oldest first; each is marked so a second redrive does not send it again.")
    r.add_argument("topic", metavar="TOPIC", help="a dead-letter topic (embed.dlq) or the topic it serves (embed)")
    add_bus_options(r)
    r.add_argument("--reason", metavar="R", help="only those whose error type is R or whose reason contains R")
    r.add_argument("--limit", type=positive_int, metavar="N", help="redrive at most N")
    r.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    r.set_defaults(run=_redrive)
