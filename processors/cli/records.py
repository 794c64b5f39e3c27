"""``ragbus record`` and ``ragbus replay``: topics to a JSON Lines file, and back onto a bus."""

from __future__ import annotations

import argparse
import sys

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.recording import record, replay

from .common import add_bus_options, positive_float, positive_int, positive_seconds, warn_if_private
from .progress import progress_bar


def _parse_rename(pairs: list[str]) -> dict[str, str]:
    rename = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise SystemExit(f"--rename wants OLD=NEW, got {pair!r}")
        rename[old] = new
    return rename


async def _record(args: argparse.Namespace) -> int:
    async with await connect(args.bus, load_settings().bus) as bus:
        warn_if_private("record", bus.url)

        progress = progress_bar(unit="msg")
        count = 0

        def show(item) -> None:
            nonlocal count
            count += 1
            progress(count, args.limit, f"last on {item.topic}")

        try:
            n = await record(bus, args.topics, args.out, limit=args.limit, idle_timeout=args.idle, on_message=show)
        finally:
            progress.close()
    print(f"recorded {n} message(s) from {', '.join(args.topics)} to {args.out}", file=sys.stderr)
    return 0


async def _replay(args: argparse.Namespace) -> int:
    async with await connect(args.bus, load_settings().bus) as bus:
        warn_if_private("replay", bus.url)
        n = await replay(bus, args.file, rename=_parse_rename(args.rename), speed=args.speed)
    print(f"replayed {n} message(s) from {args.file} onto {args.bus or bus.url}", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("record", help="record messages published on topics to a JSON Lines file")
    p.add_argument("topics", nargs="+")
    add_bus_options(p, config=False)
    p.add_argument("-o", "--out", required=True, help="file to append to")
    p.add_argument("--limit", type=positive_int, help="stop after this many messages")
    p.add_argument("--idle", type=positive_seconds, help="stop after this many seconds without a message")
    p.set_defaults(run=_record)

    p = sub.add_parser("replay", help="publish a recording onto a bus")
    p.add_argument("file")
    add_bus_options(p, config=False)
    p.add_argument("--speed", type=positive_float, help="keep recorded timing, sped up by this factor")
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="publish OLD's messages on NEW")
    p.set_defaults(run=_replay)
