"""Longer fault runs with the stores from the log: writers and replicas killed with kill -9 under ingest and read load.

    python -m scripts.chaos_log --backend kafka --seconds 300 --kill-every 10
    python -m scripts.chaos_log --backend pulsar --writers 2 --replicas 3 --documents 20
    python -m scripts.chaos_log --shards 2 --standbys 1 --replicas 3   # shard owners killed (Kafka)

Starts its own broker (Apache Kafka or Apache Pulsar) and ``--writers`` ingestion hosts and
``--replicas`` query hosts, each a worker process with a data dir of its own and nothing shared
but the broker (``processors/testing/log_chaos.py`` says what the load does and what it
checks). Prints each kill, then the report: versions acknowledged, reads per store, reads that
held half a version or two mixed, and acknowledged versions a replica lacked at the end.
Exits 1 if any read was half a version or any acknowledged version was missing. With ``--shards``,
the query hosts are sharded and the owner of a shard is what is killed
(``processors/testing/shard_chaos.py``): the report adds the answers said partial meanwhile, the
wrong ones (exit 1 if any), and how long each shard took to answer again after its owner's kill.
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
from ragbus.testing.shard_chaos import ShardChaos
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
    parser.add_argument("--shards", type=int, default=0, help="shard the query hosts (Kafka only; 0 = unsharded)")
    parser.add_argument("--standbys", type=int, default=0, help="with --shards: standby copies of each shard")
    args = parser.parse_args()
    if min(args.writers, args.replicas, args.documents) < 1:
        parser.error("--writers, --replicas and --documents must be at least 1")
    if args.shards and args.backend != "kafka":
        parser.error("--shards needs --backend kafka: Pulsar's client cannot own shards through a group")
    if args.shards and args.standbys >= args.replicas:
        parser.error("--standbys must be fewer than --replicas (a standby is another host than the owner)")
    logging.basicConfig(level=logging.ERROR)
    with brokers.temporary_workdir() as workdir:
        broker = broker_for(args.backend, workdir / "broker").start()
        hosts = dict(writers=args.writers, replicas=args.replicas, documents=args.documents,
                     extra_env=broker.client_env)
        chaos = (ShardChaos(broker.url, workdir, uuid.uuid4().hex[:8], shards=args.shards, standbys=args.standbys,
                            **hosts) if args.shards else LogChaos(broker.url, workdir, uuid.uuid4().hex[:8], **hosts))
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
    sharded = f", {args.shards} shards, {args.standbys} standby(s) each" if args.shards else ""
    print(f"{args.backend}: {args.writers} writer(s), {args.replicas} replica(s){sharded}, {args.documents} documents")
    print(report.line())
    for line in [*report.half[:20], *report.missing[:20], *getattr(report, "wrong", [])[:20]]:
        print(f"  {line}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
