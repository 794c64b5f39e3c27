"""The ``ragbus`` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys

from config.settings import bus_settings

from .bus import BusError, connect
from .clients import RemoteError
from .recording import record, replay


def _parse_rename(pairs: list[str]) -> dict[str, str]:
    rename = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise SystemExit(f"--rename wants OLD=NEW, got {pair!r}")
        rename[old] = new
    return rename


async def _record(args: argparse.Namespace) -> int:
    async with await connect(args.bus) as bus:
        def show(item) -> None:
            print(f"\rrecorded {show.count} message(s), last on {item.topic}", end="", file=sys.stderr, flush=True)
            show.count += 1
        show.count = 1
        n = await record(bus, args.topics, args.out, limit=args.limit, idle_timeout=args.idle, on_message=show)
    print(f"\nrecorded {n} message(s) from {', '.join(args.topics)} to {args.out}", file=sys.stderr)
    return 0


async def _replay(args: argparse.Namespace) -> int:
    async with await connect(args.bus) as bus:
        n = await replay(bus, args.file, rename=_parse_rename(args.rename), speed=args.speed)
    print(f"replayed {n} message(s) from {args.file} onto {args.bus or bus.url}", file=sys.stderr)
    return 0


async def _check(args: argparse.Namespace) -> int:
    from .selfcheck import run_selfcheck

    return await run_selfcheck(args.bus)


async def _worker(args: argparse.Namespace) -> int:
    from config.settings import load_settings

    from .worker import run_workers

    settings = load_settings(args.config)
    names = sorted(settings.processors) if args.all else args.names
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


# What `ragbus ingest` runs in its own process on the embedded (memory://) bus.
INGEST_PROCESSORS = [
    "embed", "document-load", "document-delete",
    "doc-embeddings-store", "doc-embeddings-delete", "keyword-store", "keyword-delete",
]


def embedded_processors(settings, names: list[str], url: str):
    """On ``memory://`` the bus lives in this process, so must the processors a command needs."""
    from .worker import processors_running

    return processors_running(settings, names, url) if url.startswith("memory") else contextlib.nullcontext()


async def _delete(args: argparse.Namespace) -> int:
    from config.settings import load_settings
    from schema import DeleteDocument, IngestResult
    from schema import topics as t

    from .client import RequestClient

    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    failed = 0
    names = ["document-delete", "doc-embeddings-delete", "keyword-delete"]
    async with embedded_processors(settings, names, url):
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="delete") as client:
            for document_id in args.document_ids:
                request = DeleteDocument(document_id=document_id, collection=args.collection)
                result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=120)
                if result.error is not None:
                    failed += 1
                    print(f"{document_id}: {result.error.type}: {result.error.message}", file=sys.stderr)
                else:
                    print(f"{document_id}: removed {result.count} chunk(s)", file=sys.stderr)
    return 1 if failed else 0


async def _ingest(args: argparse.Namespace) -> int:
    from config.settings import load_settings

    from .client import RequestClient
    from .ingest import ingest, load_documents, progress_bar

    settings = load_settings(args.config)
    documents, failed = load_documents(args.paths, args.collection)
    url = args.bus or settings.bus.url
    async with embedded_processors(settings, INGEST_PROCESSORS, url):
        print(f"ingesting {len(documents)} document(s) into collection {args.collection!r} over {url}", file=sys.stderr)
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="ingest") as client:
            summary = await ingest(
                client, documents, concurrency=args.concurrency, on_progress=progress_bar(), failed=failed
            )
    for problem in summary.failed:
        print(f"  failed: {problem}", file=sys.stderr)
    print(f"{summary.documents} document(s), {summary.chunks} chunk(s) in {summary.seconds:.1f}s"
          f"{f', {len(summary.failed)} failed' if summary.failed else ''}", file=sys.stderr)
    return 1 if summary.failed else 0


def _brokers(args: argparse.Namespace) -> int:
    from .testing.serve import serve_brokers

    return serve_brokers(args.which)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragbus", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command")
    default_bus = "bus URL (default: RAGBUS_BUS__URL or memory://)"

    p = sub.add_parser("check", help="prove delivery, retry and dead-lettering work on a bus")
    p.add_argument("--bus", help=default_bus)
    p.set_defaults(run=_check)

    p = sub.add_parser("worker", help="run processors until SIGTERM/Ctrl-C")
    p.add_argument("names", nargs="*", help="processors to run (see [processors] in the settings)")
    p.add_argument("--all", action="store_true", help="run every configured processor in this process")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("--config", help="settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)")
    p.set_defaults(run=_worker)

    p = sub.add_parser("ingest", help="chunk, embed and store documents (default: the Python language reference)")
    p.add_argument("paths", nargs="*", help="files or folders of .txt/.md/.rst/.html/.pdf")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("--config", help="settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)")
    p.add_argument("--collection", default="default")
    p.add_argument("--concurrency", type=int, default=4, help="documents in flight at once")
    p.set_defaults(run=_ingest)

    p = sub.add_parser("delete", help="remove documents (by document id) from every store")
    p.add_argument("document_ids", nargs="+", help="as ingested: a file's absolute path, or pydoc:TOPIC")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("--config", help="settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)")
    p.add_argument("--collection", default="default")
    p.set_defaults(run=_delete)

    from .ask import add_parser as add_ask_parser
    from .kg.commands import add_parser as add_kg_parser

    config_help = "settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)"
    add_ask_parser(sub, default_bus, config_help)
    add_kg_parser(sub, default_bus, config_help)

    p = sub.add_parser("record", help="record messages published on topics to a JSON Lines file")
    p.add_argument("topics", nargs="+")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("-o", "--out", required=True, help="file to append to")
    p.add_argument("--limit", type=int, help="stop after this many messages")
    p.add_argument("--idle", type=float, help="stop after this many seconds without a message")
    p.set_defaults(run=_record)

    p = sub.add_parser("replay", help="publish a recording onto a bus")
    p.add_argument("file")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("--speed", type=float, help="keep recorded timing, sped up by this factor")
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="publish OLD's messages on NEW")
    p.set_defaults(run=_replay)

    p = sub.add_parser("brokers", help="run the Kafka (Tansu) and Pulsar (Pulsar Lite) test brokers until Ctrl-C")
    p.add_argument("which", nargs="*", choices=["kafka", "pulsar"], default=["kafka", "pulsar"])
    p.set_defaults(run=_brokers, sync=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "run", None):
        args = parser.parse_args(["check", *(argv or [])])
    try:
        bus_settings()  # fail early on bad RAGBUS_BUS_* variables
        if getattr(args, "sync", False):
            return args.run(args)
        return asyncio.run(args.run(args))
    except (BusError, RemoteError, ValueError, OSError) as exc:  # SettingsError is a ValueError
        print(f"ragbus: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """Console entry point.

    Ends the process with ``os._exit`` once the command is done and its
    output flushed: pulsar-client's C++ threads can abort the interpreter's
    own shutdown ("terminate called without an active exception", seen in
    about one run in ten of a short Pulsar command) after all work is done.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
