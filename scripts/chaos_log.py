"""Longer fault runs with the stores from the log: writers and replicas killed with kill -9 under ingest and read load.

    python -m scripts.chaos_log --backend kafka --seconds 300 --kill-every 10
    python -m scripts.chaos_log --backend pulsar --writers 2 --replicas 3 --documents 20

Starts its own broker (Apache Kafka or Apache Pulsar) and ``--writers`` ingestion hosts and
``--replicas`` query hosts, each a worker process with a data dir of its own and nothing shared
but the broker (``processors/testing/log_chaos.py`` says what the load does and what it
checks). Prints each kill, then the report: versions acknowledged, reads per store, reads that
held half a version or two mixed, and acknowledged versions a replica lacked at the end.
Exits 1 if any read was half a version or any acknowledged version was missing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid

from ragbus.config.settings import bus_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.testing import brokers, selection
from ragbus.testing.log_chaos import LogChaos
from scripts.bench.brokers import broker_for


def say(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["kafka", "pulsar"], default="kafka")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the load runs")
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills (0 = none)")
    parser.add_argument("--restart-after", type=float, default=2.0, help="seconds a killed host stays dead")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--documents", type=int, default=8, help="documents each version round writes")
    args = parser.parse_args()
    if min(args.writers, args.replicas, args.documents) < 1:
        parser.error("--writers, --replicas and --documents must be at least 1")
    logging.basicConfig(level=logging.ERROR)
    with brokers.temporary_workdir() as workdir:
        broker = broker_for(args.backend, workdir / "broker").start()
        chaos = LogChaos(broker.url, workdir, uuid.uuid4().hex[:8], writers=args.writers,
                         replicas=args.replicas, documents=args.documents, extra_env=broker.client_env)
        try:
            say(f"{args.backend} on {broker.url}: starting {args.writers} writer(s) and {args.replicas} replica(s)")
            await chaos.start()
            settings = bus_settings(environ={**selection.broker_env(), **broker.client_env})
            async with await connect(broker.url, settings) as bus, \
                    RequestClient(bus, name="chaos", timeout_s=60, resend_after_s=10) as client:
                report = await chaos.run(client, seconds=args.seconds, kill_every=args.kill_every,
                                         restart_after=args.restart_after, progress=say)
        finally:
            await chaos.stop()
            broker.stop()
    print(f"{args.backend}: {args.writers} writer(s), {args.replicas} replica(s), {args.documents} documents")
    print(report.line())
    for line in [*report.half[:20], *report.missing[:20]]:
        print(f"  {line}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
