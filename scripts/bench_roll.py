"""A rolling restart of every process of a deployment under a steady load: what it fails, loses and costs.

    python -m scripts.bench_roll --backend kafka --env RAGBUS_BUS__KAFKA__HEARTBEAT_INTERVAL_MS=100 \
        --env RAGBUS_BUS__KAFKA__FETCH_MAX_WAIT_MS=100
    python -m scripts.bench_roll --backend pulsar --rate 20 --steady 60 --query-storage emptyDir

Starts its own broker (Apache Kafka or Pulsar), then the chart's roles as processes (processors/testing/
roll.py): ``--gateways`` gateways, ``--ingest`` ingestion hosts and ``--query`` query hosts, every store
from the log. It loads ten documents, then asks through the gateways at ``--rate`` questions a second and
writes a document every ``1 / --write-rate`` seconds: ``--steady`` seconds untouched, then a roll of every
process (each gateway and ingestion host surged and retired, each query host stopped and restarted on its
data dir or an empty one, each step ``--probe-period`` after the one before was ready), then ``--after``
seconds more. Each acknowledged write is then looked for through a gateway:
listed, and cited by an ask carrying its tokens. The report gives failures and p50/p99 per phase, and
the roll's p99 over the steady p99. Exits 1 if a request failed or a write was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import os
import sys
import time
import uuid

import httpx

from ragbus.testing import brokers
from ragbus.testing.roll import Call, Endpoints, Load, Site, load_corpus, missing_writes
from scripts.bench.brokers import broker_for, broker_env
from scripts.bench.stats import percentile

QUESTIONS = [
    "What does the with statement do?", "How does nonlocal differ from global?", "What is __slots__ for?",
    "When does the else clause of a for loop run?", "How are exceptions raised and caught?",
    "What does yield do in a function?", "What is a lambda expression?", "How does the assert statement work?",
    "How does the import statement find modules?", "What does the assert statement check?",
]


def summary(load: Load, phase: str) -> dict[str, float]:
    calls = [c for c in load.calls if c.phase == phase]
    ok = [c.seconds for c in calls if c.ok]
    return {"asks": len(calls), "failed": sum(not c.ok for c in calls),
            "p50_ms": percentile(ok, 50) * 1000 if ok else 0.0, "p99_ms": percentile(ok, 99) * 1000 if ok else 0.0,
            "max_ms": max(ok) * 1000 if ok else 0.0,
            "writes": sum(w.phase == phase for w in load.writes),
            "writes_failed": sum(w.phase == phase and not w.ok for w in load.writes)}


def slowest_part(call: Call) -> str:
    """Where most of an answer's time went: a stage of document-rag's (each a round trip on the bus, but
    ``fuse``), or outside it (the gateway, and the hops to document-rag and back)."""
    stages = {k: v for k, v in call.timings_ms.items() if k != "total"}
    outside = call.seconds * 1000 - call.timings_ms.get("total", 0.0)
    stage, ms = max(stages.items(), key=lambda kv: kv[1], default=("", 0.0))
    return "outside document-rag" if outside >= ms else stage


async def run(args, broker, workdir) -> int:
    extra = dict(item.split("=", 1) for item in args.env)
    site = Site(broker.url, workdir, uuid.uuid4().hex[:8], client_env={**broker_env(broker), **extra},
                shutdown_delay_s=args.shutdown_delay, query_storage=args.query_storage,
                probe_period_s=args.probe_period,
                log=lambda line: print(line, file=sys.stderr))
    try:
        t0 = time.monotonic()
        await site.start(args.gateways, args.ingest, args.query)
        print(f"{args.backend}: {args.gateways} gateways, {args.ingest} ingestion and {args.query} query hosts "
              f"ready in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        endpoints = Endpoints(site, every_s=args.endpoints)
        stop, following = asyncio.Event(), asyncio.Event()
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=100)
        async with httpx.AsyncClient(limits=limits) as http:
            follow = asyncio.ensure_future(endpoints.follow(http, following))
            await endpoints.some.wait()
            await load_corpus(http, endpoints, 10)
            load = Load(endpoints, QUESTIONS, rate=args.rate, write_rate=args.write_rate, timeout_s=args.timeout)
            running = asyncio.ensure_future(load.run(http, stop))
            await asyncio.sleep(args.warmup)  # the load's own pace: each phase is a span of its time
            load.phase = "steady"
            await asyncio.sleep(args.steady)
            load.phase = "roll"
            rolled = time.monotonic()
            steps = await site.roll()
            roll_s = time.monotonic() - rolled
            load.phase = "after"
            await asyncio.sleep(args.after)
            stop.set()
            await running
            missing = await missing_writes(http, endpoints, load.written)
            following.set()
            await follow
    finally:
        await site.stop()
    phases = {p: summary(load, p) for p in ("steady", "roll", "after")}
    print(f"\n{args.backend}, {args.rate:g} questions/s and {args.write_rate:g} write/s through {args.gateways} "
          f"gateways; {args.ingest} ingestion and {args.query} query hosts; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"roll of {len(steps)} processes in {roll_s:.0f} s: " + "; ".join(steps))
    print(f"{'phase':8} {'asks':>6} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'writes':>6} {'failed':>6}")
    for p, s in phases.items():
        print(f"{p:8} {s['asks']:6.0f} {s['failed']:6.0f} {s['p50_ms']:8.0f} {s['p99_ms']:8.0f} {s['max_ms']:8.0f} "
              f"{s['writes']:6.0f} {s['writes_failed']:6.0f}")
    ratio = phases["roll"]["p99_ms"] / phases["steady"]["p99_ms"] if phases["steady"]["p99_ms"] else float("inf")
    print(f"p99 during the roll / steady p99: {ratio:.2f}x")
    slow = [c for c in load.calls if c.phase == "roll" and c.ok and c.seconds * 1000 > 3 * phases["steady"]["p99_ms"]]
    if slow:  # where the roll's slow answers fell: after which event of the roll each one started
        print(f"asks over 3x the steady p99 during the roll, {len(slow)}, by the last event before each:")
        events = [e for e in site.events if e[0] >= rolled]
        for i, (t, what) in enumerate(events):
            end = events[i + 1][0] if i + 1 < len(events) else float("inf")
            inside = [c for c in slow if t <= c.started < end]
            if inside:
                spent = collections.Counter(slowest_part(c) for c in inside)
                print(f"  +{t - rolled:5.1f} s {what:24} {len(inside):4} asks, up to "
                      f"{max(c.seconds for c in inside) * 1000:.0f} ms; longest in: "
                      + ", ".join(f"{part} {n}" for part, n in spent.most_common()))
    failures = [c for c in load.calls + load.writes if not c.ok]
    for c in failures[:10]:
        print(f"  failed in {c.phase}: {c.what}")
    print(f"writes acknowledged {len(load.written)}, lost {len(missing)}")
    for line in missing[:10]:
        print(f"  {line}")
    return 1 if failures or missing else 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["kafka", "pulsar"], default="kafka")
    parser.add_argument("--rate", type=float, default=20.0, help="questions a second")
    parser.add_argument("--write-rate", type=float, default=0.5, help="documents written a second")
    parser.add_argument("--gateways", type=int, default=2)
    parser.add_argument("--ingest", type=int, default=1)
    parser.add_argument("--query", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds of load before the steady phase")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of load before the roll")
    parser.add_argument("--after", type=float, default=15.0, help="seconds of load after the roll")
    parser.add_argument("--shutdown-delay", type=float, default=5.0,
                        help="a gateway's [gateway] shutdown_delay_s: it answers this long after SIGTERM")
    parser.add_argument("--probe-period", type=float, default=5.0,
                        help="seconds between one step of the roll being ready and the next (the chart's readiness "
                             "probe period: when the controller sees it ready)")
    parser.add_argument("--query-storage", choices=["claim", "emptyDir"], default="claim",
                        help="a rolled query host restarts on its data dir (claim) or on an empty one (emptyDir)")
    parser.add_argument("--endpoints", type=float, default=1.0,
                        help="seconds between the load's reads of each gateway's /ready (a Service's endpoints)")
    parser.add_argument("--timeout", type=float, default=60.0, help="each request's deadline")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of every process, e.g. RAGBUS_BUS__KAFKA__HEARTBEAT_INTERVAL_MS=100 (the "
                             "chart's)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with brokers.temporary_workdir() as workdir:
        broker = broker_for(args.backend, workdir / "broker").start()
        try:
            return await run(args, broker, workdir)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
