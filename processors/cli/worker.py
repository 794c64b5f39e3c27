"""``ragbus worker NAME... | --all``: run processors as workers of this process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from config import pipelines
from config.settings import load_settings
from processors.runtime.worker import run_workers

from .common import add_bus_options


async def _worker(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    # --all: a data dir's whole pipeline; documents-replica writes a host's dir from the log, never beside writers.
    names = [n for n in sorted(settings.processors) if n not in pipelines.LOG_ONLY] if args.all else args.names
    if not names:
        raise SystemExit("ragbus worker: name a processor or pass --all")
    print(f"serving {', '.join(names)} on {args.bus or settings.bus.url} (Ctrl-C or SIGTERM to stop)", file=sys.stderr)
    results = await run_workers(
        settings, names, bus_url=args.bus, on_ready=lambda: print("ready", file=sys.stderr, flush=True)
    )
    for name, stats in results.items():
        print(f"{name}: received {stats.received}, acked {stats.acked}, nacked {stats.nacked}, "
              f"dead-lettered {stats.dead_lettered}", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("worker", help="run processors until SIGTERM/Ctrl-C")
    p.add_argument("names", nargs="*", help="processors to run (see [processors] in the settings)")
    p.add_argument("--all", action="store_true",
                   help="run every configured processor in this process (documents-replica aside: it is for "
                        "stores made from the log)")
    add_bus_options(p)
    p.set_defaults(run=_worker)
