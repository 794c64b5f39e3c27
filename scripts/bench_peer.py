"""FastStream beside ragbus: one request/reply round trip, the same 128-byte body, on one Apache Kafka.

    python -m scripts.bench_peer [--quick] [--rounds N]

It starts an Apache Kafka broker (KRaft, one node) on loopback and measures, in turns (A B A B...,
so drift between the first and the last turn shows), two ways to ask and be answered:

- FastStream: a ``KafkaBroker`` publishes with ``reply_to`` and ``correlation_id`` to a subscriber that
  returns the body; FastStream publishes that back, and a reply subscriber resolves the call
  (scripts/bench/faststream_echo.py says why not ``KafkaBroker.request``);
- ragbus: ``RequestClient.request`` with a typed request holding the body as text, to an echo
  ``Processor`` on a bus of its own (as ``scripts.bench_bus``'s processor path), both with the
  production settings: config/defaults.toml alone, no test broker's overrides, no environment.

Each turn gets fresh topics and warm-up calls; then latency (p50/p99 over sequential calls, one in
flight) and, over pipelined calls with 64 in flight, calls/s and CPU ms per round trip: this
process (client and server both run in it) plus the broker JVM. The table shows every turn and the
mean over turns; the ratios are ragbus/FastStream (above 1: ragbus takes longer or costs more, but
for calls/s, where above 1 means ragbus serves more).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import sys
from collections.abc import Callable, Iterable

from config.settings import load_settings
from processors.testing import brokers
from processors.testing.apache import apache_kafka
from scripts.bench.cpu import cpu_of
from scripts.bench.faststream_echo import faststream_setup
from scripts.bench.pingpong import BODY, CONCURRENCY, Plan, Result, Setup, processor_setup, run

FULL = Plan(warm_calls=200, lat_rounds=500, lat_cap_s=30.0, total=8192, budget_s=180.0)
QUICK = Plan(warm_calls=50, lat_rounds=200, lat_cap_s=15.0, total=1024, budget_s=90.0)
FIGURES = ("p50_ms", "p99_ms", "rate", "cpu_ms")
PEER, OURS = "FastStream", "ragbus"


def mean_result(results: Iterable[Result]) -> Result:
    """The mean of every figure over a setup's turns; ``samples`` is their sum."""
    runs = list(results)
    if not runs:
        raise ValueError("no turns to average")
    means = {f: sum(getattr(r, f) for r in runs) / len(runs) for f in FIGURES}
    return Result(samples=sum(r.samples for r in runs), **means)


def ratios(ours: Result, peer: Result) -> dict[str, float]:
    """ragbus/FastStream for each figure: latency and CPU above 1 cost ragbus more, calls/s above 1 serve more."""
    return {f: getattr(ours, f) / getattr(peer, f) for f in FIGURES}


def print_table(turns: list[tuple[str, int, Result]]) -> None:
    print(f"\n  {'setup':<12}{'turn':>5}{'p50 ms':>10}{'p99 ms':>10}{'calls/s':>10}{'CPU ms/call':>13}{'n lat':>7}")
    rows = [(name, str(turn), r) for name, turn, r in turns]
    means = {name: mean_result(r for n, _, r in turns if n == name) for name in (PEER, OURS)}
    rows += [(name, "mean", r) for name, r in means.items()]
    for name, turn, r in rows:
        print(f"  {name:<12}{turn:>5}{r.p50_ms:>10.3f}{r.p99_ms:>10.3f}{r.rate:>10,.0f}{r.cpu_ms:>13.3f}"
              f"{r.samples:>7}")
    x = ratios(means[OURS], means[PEER])
    print(f"  {'ragbus/FastStream':<17}{x['p50_ms']:>9.2f}x{x['p99_ms']:>9.2f}x{x['rate']:>9.2f}x"
          f"{x['cpu_ms']:>12.2f}x", flush=True)


async def bench(url: str, broker_cpu: Callable[[], float], plan: Plan, rounds: int) -> list[tuple[str, int, Result]]:
    settings = load_settings(environ={}).bus  # production defaults: no file, no RAGBUS_* variable
    setups: dict[str, Setup] = {
        PEER: faststream_setup(url.removeprefix("kafka://"), settings.kafka.request_topics.partitions),
        OURS: processor_setup(url, settings),
    }
    turns = []
    for turn in range(1, rounds + 1):
        for name, setup in setups.items():
            print(f"turn {turn}: {name}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
                  file=sys.stderr, flush=True)
            turns.append((name, turn, await run(setup, plan, extra_cpu=broker_cpu)))
    return turns


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run, about a minute)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each setup, alternating (default 2)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {args.rounds}")
    plan = QUICK if args.quick else FULL
    print(f"cpu_count={os.cpu_count()}  python {sys.version.split()[0]}  mode={'quick' if args.quick else 'full'}  "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"Apache Kafka, one broker; {len(BODY)} B bodies; latency: {plan.warm_calls} warm-up calls, then up to "
          f"{plan.lat_rounds} sequential calls; throughput and CPU (this process + the broker JVM): "
          f"{plan.total} calls, {CONCURRENCY} in flight")
    workdir = brokers.make_workdir()
    broker = apache_kafka(workdir)
    try:
        broker.start()
        pid = broker.process.pid if broker.process else None
        turns = asyncio.run(bench(broker.url, functools.partial(cpu_of, pid), plan, args.rounds))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(turns)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
