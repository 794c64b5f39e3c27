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
process (client and server both run in it) plus the broker JVM, whose share shows apart. The
table shows every turn and the mean over turns; the ratios are ragbus/FastStream: above 1, ragbus
takes longer or costs more, except for calls/s, where above 1 means ragbus serves more.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys

from ragbus.config.settings import load_settings
from ragbus.testing import brokers
from ragbus.testing.apache import apache_kafka
from scripts.bench.faststream_compare import OURS, PEER, BrokerCpu, figures, print_table
from scripts.bench.pingpong import BODY, CONCURRENCY, Plan, Setup, processor_setup, run

FULL = Plan(warm_calls=200, lat_rounds=1000, lat_cap_s=60.0, total=8192, budget_s=180.0)
QUICK = Plan(warm_calls=50, lat_rounds=200, lat_cap_s=15.0, total=1024, budget_s=90.0)


async def bench(url: str, broker_cpu: BrokerCpu, plan: Plan, rounds: int) -> list[tuple[str, int, dict[str, float]]]:
    # FastStream (the `bench` extra) only when measuring: --help reads without it.
    from scripts.bench.faststream_echo import faststream_setup

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
            result = await run(setup, plan, extra_cpu=broker_cpu)
            turns.append((name, turn, figures(result, broker_cpu.last_phase_ms(plan.total))))
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
        turns = asyncio.run(bench(broker.url, BrokerCpu(pid), plan, args.rounds))
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
