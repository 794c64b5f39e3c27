"""``ragbus worker NAME... | --role ROLE | --all``: run processors as workers of this process until SIGTERM."""

from __future__ import annotations

import argparse
import sys

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.runtime.worker import run_workers

from .common import add_bus_options


async def _worker(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    role = args.role or settings.worker.role
    if sum(map(bool, (args.names, args.all, args.role))) > 1:
        raise SystemExit("ragbus worker: name processors, or pass --all, or --role: one of them")
    if args.all:  # a data dir's whole pipeline; documents-replica makes a host's dir from the log, never beside writers
        names = [n for n in sorted(settings.processors) if n not in pipelines.FROM_THE_LOG]
    elif args.names:
        names = args.names
    elif role:
        names = list(pipelines.role(role, log=settings.stores.log, shards=settings.stores.shards))
    else:
        raise SystemExit("ragbus worker: name a processor, or pass --role (ingest, query, all; or [worker] role, "
                         "RAGBUS_WORKER__ROLE) or --all")
    where = f"the {role} role, stores {'from the log' if settings.stores.log else 'in files'}: " if role else ""
    print(f"serving {where}{', '.join(names)} on {args.bus or settings.bus.url} (Ctrl-C or SIGTERM to stop)",
          file=sys.stderr)
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
    p.add_argument("--role", choices=sorted(pipelines.ROLES), default=None,
                   help="run what a host of this role runs, with its stores in files or, with [stores] log, made "
                        "from the log (config/pipelines.py ROLES; default: [worker] role, RAGBUS_WORKER__ROLE)")
    add_bus_options(p)
    p.set_defaults(run=_worker)
