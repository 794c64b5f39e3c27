"""What a process's start costs the questions of the others, and whether it is CPU: a roll's start, apart.

    python -m scripts.bench_starts --backend kafka --cycles 6 --env RAGBUS_BUS__KAFKA__HEARTBEAT_INTERVAL_MS=100 \
        --env RAGBUS_BUS__KAFKA__FETCH_MAX_WAIT_MS=100

The site of scripts/bench_roll.py (a gateway, an ingestion host and two query hosts on a broker of its own,
20 questions a second), then ``--cycles`` times: an ingestion host started (until ready) and stopped, and
a stand-in that takes as much CPU but touches no bus (it imports what a worker imports, loads the embedding
model and spins for a second), each followed by a quiet spell. Per kind of event: how busy the machine's
cores were and the broker's share, the p99 of the asks that started meanwhile, and how many took over 3x
the steady p99; then each event's slowest asks. A start as bad as its stand-in is CPU taken from the
others on a machine they share; worse, it is what the start does on the bus.
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
from ragbus.testing.roll import Endpoints, Load, Site, load_corpus
from scripts.bench.brokers import broker_env, broker_for
from scripts.bench.cpu import cpu_of, machine_cpu
from scripts.bench.stats import percentile
from scripts.bench_roll import QUESTIONS, slowest_part

# The stand-in: a worker's imports, the model loaded, then a second of CPU; no bus.
STAND_IN = ("import ragbus.runtime.worker, ragbus.embed.onnx_backend as onnx, faiss, tantivy, networkx\n"
            "from ragbus.embed.settings import OnnxSettings\n"
            "onnx.OnnxBackend(OnnxSettings()).load()\n"
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n")
KINDS = ("ingest start", "ingest stop", "stand-in", "quiet")


class Meter:
    """Wall, machine and broker CPU seconds, summed by kind of span."""

    def __init__(self, broker_pid: int | None) -> None:
        self.pid = broker_pid
        self.spent: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        self._mark = self._now()

    def _now(self) -> tuple[float, float, float]:
        return time.monotonic(), machine_cpu(), cpu_of(self.pid)

    def close(self, kind: str) -> None:
        now = self._now()
        for i, (a, b) in enumerate(zip(self._mark, now, strict=True)):
            self.spent[kind][i] += b - a
        self._mark = now


async def run(args, broker, workdir) -> None:
    extra = dict(item.split("=", 1) for item in args.env)
    site = Site(broker.url, workdir, uuid.uuid4().hex[:8], client_env={**broker_env(broker), **extra},
                log=lambda line: print(line, file=sys.stderr))
    await site.start(1, 1, 2)
    endpoints = Endpoints(site)
    stop, following = asyncio.Event(), asyncio.Event()
    events: list[tuple[float, str]] = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=200)) as http:
        follow = asyncio.ensure_future(endpoints.follow(http, following))
        await endpoints.some.wait()
        await load_corpus(http, endpoints, 10)
        load = Load(endpoints, QUESTIONS, rate=args.rate, write_rate=0.5)
        running = asyncio.ensure_future(load.run(http, stop))
        await asyncio.sleep(10)
        meter = Meter(broker.process.pid if broker.process else None)
        load.phase = "steady"
        await asyncio.sleep(args.steady)
        meter.close("steady")

        async def span(kind: str, work) -> None:
            load.phase = kind
            events.append((time.monotonic(), kind))
            await work
            meter.close(kind)
            load.phase = "quiet"
            events.append((time.monotonic(), "quiet"))
            await asyncio.sleep(args.quiet)
            meter.close("quiet")

        async def stand_in() -> None:
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", STAND_IN)
            await proc.wait()

        for _ in range(args.cycles):
            host = site.new_host("ingest")
            await span("ingest start", site.start_host(host))
            await span("ingest stop", site.stop_host(host))
            await span("stand-in", stand_in())
        stop.set()
        await running
        following.set()
        await follow
    await site.stop()

    steady = [c.seconds for c in load.calls if c.phase == "steady" and c.ok]
    p99 = percentile(steady, 99)
    wall, cores, broker_cpu = meter.spent["steady"]
    print(f"\n{args.backend}, {args.rate:g} questions/s; steady: p50 {percentile(steady, 50) * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, cores busy {cores / wall:.2f} of 2 (broker {broker_cpu / wall:.2f})")
    print(f"{'after':13} {'asks':>5} {'p99 ms':>7} {'x steady':>8} {'over 3x':>7} {'cores':>6} {'broker':>6}  "
          "longest in")
    for kind in KINDS:
        calls = [c for c in load.calls if c.phase == kind and c.ok]
        if not calls:
            continue
        slow = [c for c in calls if c.seconds > 3 * p99]
        wall, cores, broker_cpu = meter.spent[kind]
        q = percentile([c.seconds for c in calls], 99)
        parts = collections.Counter(slowest_part(c) for c in slow)
        print(f"{kind:13} {len(calls):5} {q * 1000:7.0f} {q / p99:7.2f}x {len(slow):7} {cores / wall:6.2f} "
              f"{broker_cpu / wall:6.2f}  " + ", ".join(f"{k} {n}" for k, n in parts.most_common()))
    print("slowest asks after each event (ms):")
    for i, (t, kind) in enumerate(events):
        if kind == "quiet":
            continue
        end = events[i + 1][0] if i + 1 < len(events) else float("inf")
        worst = sorted((c.seconds for c in load.calls if t <= c.started < end and c.ok), reverse=True)[:4]
        print(f"  {kind:13} " + ", ".join(f"{s * 1000:.0f}" for s in worst))
    failed = sum(not c.ok for c in load.calls)
    print(f"failed {failed}; load average {os.getloadavg()[0]:.1f}")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["kafka", "pulsar"], default="kafka")
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--rate", type=float, default=20.0, help="questions a second")
    parser.add_argument("--steady", type=float, default=40.0, help="seconds of load before the first start")
    parser.add_argument("--quiet", type=float, default=4.0, help="seconds of load after each event")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of every process, e.g. RAGBUS_BUS__KAFKA__HEARTBEAT_INTERVAL_MS=100")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with brokers.temporary_workdir() as workdir:
        broker = broker_for(args.backend, workdir / "broker").start()
        try:
            await run(args, broker, workdir)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
