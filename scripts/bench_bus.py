"""Benchmark the bus's request/response path against what each backend is built on,
and the processor runtime against the bare bus.

    python -m scripts.bench_bus [--quick]

It starts the Kafka and Pulsar test brokers on loopback (Apache Kafka and Apache Pulsar,
or the light ones: scripts/bench/brokers.py), measures each backend beside its baseline, and stops
them (also on error). The
workload is what processors put on the bus: a client publishes requests with
``request-id`` and ``reply-to`` headers; a server on its own connection (group
"server") echoes each body to ``reply-to`` and acks; one client reader task
resolves waiting futures by ``request-id``. Measured: latency (p50/p99, one
request in flight) and throughput (round trips/s, 64 requesters, the server
running up to 64 deliveries at once, a task each).

Baselines run the very same client and server loops, so a ratio shows what our
layer adds, not what the broker costs: memory vs a direct ``await`` of the
server function (reply through a future resolved by a separate task, no bus);
Kafka vs raw aiokafka (group consumers, fetch_max_wait_ms=5, no commits,
4-partition topics like ours); Pulsar vs raw pulsar.asyncio (unbatched
producers, Shared consumers, one client for both sides, as our buses share one
per process).

Beside each backend's bus round trip it measures the processor path, what a
real caller gets: ``RequestClient.request`` sends a typed request Struct (a
128-character text) to a ``Processor`` subclass, 64 handlers at once, whose
handler answers with a response Struct holding the same text, which the client
decodes. Same buses, same methodology, so "processor / bus" is what the runtime
costs on top of the transport: envelope headers, msgspec encode/decode, the
consume loop, per-request futures and timeouts, metrics. It has no goal; it is
there so runtime overhead shows apart from transport overhead. Every setup
gets fresh topics and warm-up rounds first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys

from ragbus.config.bus import BusSettings
from ragbus.config.settings import bus_settings
from ragbus.testing import brokers, selection
from scripts.bench.brokers import broker_for
from scripts.bench.pingpong import (
    BODY,
    CONCURRENCY,
    FULL,
    QUICK,
    Plan,
    Result,
    SetupFactory,
    bus_setup,
    direct_setup,
    echo_bench,
    processor_setup,
    raw_kafka_setup,
    raw_pulsar_setup,
    run,
)

GOALS = {"memory": 1.5, "kafka": 2.0, "pulsar": 2.0}


def ratios(slow: Result, fast: Result) -> tuple[float, float, float]:
    return slow.p50_ms / fast.p50_ms, slow.p99_ms / fast.p99_ms, fast.rate / slow.rate


def table(backend: str, baseline_name: str, ours: Result, base: Result, proc: Result) -> None:
    goal = GOALS[backend]
    print(f"\n{backend}  (baseline: {baseline_name}; goal: bus within {goal}x of it)")
    print(f"  {'setup':<22}{'p50 ms':>10}{'p99 ms':>10}{'msg/s':>11}{'n lat':>8}")
    for name, r in ((f"{backend} bus", ours), (baseline_name, base), ("processor path", proc)):
        print(f"  {name:<22}{r.p50_ms:>10.3f}{r.p99_ms:>10.3f}{r.rate:>11,.0f}{r.samples:>8}")
    bus_ratios = ratios(ours, base)
    misses = [n for n, x in zip(("p50", "p99", "msg/s"), bus_ratios, strict=True) if x > goal]
    verdict = "within goal" if not misses else "over goal: " + ", ".join(misses)
    for name, xs, note in (("ratio bus/baseline", bus_ratios, verdict),
                           ("ratio processor/bus", ratios(proc, ours), "runtime overhead")):
        print(f"  {name:<22}{xs[0]:>9.2f}x{xs[1]:>9.2f}x{xs[2]:>10.2f}x  {note}", flush=True)


async def bench(kafka_url: str, pulsar_url: str, plan: Plan) -> None:
    test_broker = bus_settings(environ=selection.broker_env())  # the test brokers' quirks, not production's
    bootstrap = kafka_url.removeprefix("kafka://")
    contests: list[tuple[str, str, str, BusSettings, SetupFactory]] = [
        ("memory", "direct await", "memory://", BusSettings(), direct_setup),
        ("kafka", "raw aiokafka", kafka_url, test_broker, raw_kafka_setup(bootstrap)),
        ("pulsar", "raw pulsar-client", pulsar_url, test_broker, raw_pulsar_setup(pulsar_url)),
    ]
    for backend, baseline_name, url, settings, baseline in contests:
        base = await run(echo_bench(baseline), plan)
        ours = await run(echo_bench(bus_setup(url, settings)), plan)
        table(backend, baseline_name, ours, base, await run(processor_setup(url, settings), plan))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (under a minute in all)")
    plan = QUICK if parser.parse_args().quick else FULL
    print(f"cpu_count={os.cpu_count()}  python {sys.version.split()[0]}  mode={'quick' if plan is QUICK else 'full'}")
    print(f"latency: up to {plan.lat_rounds} sequential round trips (at most {plan.lat_cap_s:g}s); "
          f"throughput: {plan.total} round trips, {CONCURRENCY} in flight; {len(BODY)} B bodies "
          f"(processor path: a {len(BODY)}-character text in msgpack Structs)")
    print("goals: memory bus within 1.5x of direct await, Kafka and Pulsar within 2x of their raw clients;\n"
          "ratio a/b = a/b for latency, b/a for throughput (>1 means a is slower); processor/bus has no goal")
    workdir = brokers.make_workdir()
    started: list[brokers.BrokerProcess] = []
    try:
        for backend in ("kafka", "pulsar"):
            started.append(broker_for(backend, workdir / backend))
            started[-1].start()
        asyncio.run(bench(started[0].url, started[1].url, plan))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        for broker in reversed(started):
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
