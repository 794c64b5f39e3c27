"""The figures of a FastStream/ragbus comparison: per turn, their mean over turns, their ratios, the table.

Apart from the setups so that this arithmetic is tested without FastStream installed.
"""

from __future__ import annotations

from collections.abc import Iterable

from scripts.bench.cpu import cpu_of
from scripts.bench.pingpong import Result

# A turn's figures: latency at one call in flight, then calls/s and CPU (all, and the broker's) at 64.
FIGURES = ("p50_ms", "p99_ms", "calls_s", "cpu_ms", "broker_ms")
PEER, OURS = "FastStream", "ragbus"


class BrokerCpu:
    """The broker JVM's CPU seconds for ``pingpong.measure``'s ``extra_cpu``, remembering its readings.

    ``measure`` reads it once as the pipelined phase starts and once as it ends, so the last two
    readings give the broker's share of that phase's CPU.
    """

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(cpu_of(self.pid))
        return self.readings[-1]

    def last_phase_ms(self, calls: int) -> float:
        """Broker CPU ms per call over the last pipelined phase."""
        if len(self.readings) < 2:
            raise RuntimeError("the broker's CPU was not read at both ends of a phase")
        return (self.readings[-1] - self.readings[-2]) / calls * 1000


def figures(result: Result, broker_ms: float) -> dict[str, float]:
    return {"p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "calls_s": result.rate, "cpu_ms": result.cpu_ms,
            "broker_ms": broker_ms}


def mean_figures(turns: Iterable[dict[str, float]]) -> dict[str, float]:
    """The mean of every figure over a setup's turns."""
    runs = list(turns)
    if not runs:
        raise ValueError("no turns to average")
    return {f: sum(run[f] for run in runs) / len(runs) for f in FIGURES}


def ratios(ours: dict[str, float], peer: dict[str, float]) -> dict[str, float]:
    """ragbus/FastStream for each figure: latency and CPU above 1 cost ragbus more; calls/s above 1 serve more."""
    return {f: ours[f] / peer[f] if peer[f] else float("nan") for f in FIGURES}


def print_table(turns: list[tuple[str, int, dict[str, float]]]) -> None:
    print(f"\n  {'setup':<18}{'turn':>5}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>9}{'CPU ms/call':>13}"
          f"{'of it broker':>14}")
    means = {name: mean_figures(f for n, _, f in turns if n == name) for name in (PEER, OURS)}
    rows = [*((name, str(turn), f) for name, turn, f in turns), *((name, "mean", f) for name, f in means.items())]
    for name, turn, f in rows:
        print(f"  {name:<18}{turn:>5}{f['p50_ms']:>9.3f}{f['p99_ms']:>9.3f}{f['calls_s']:>9,.0f}{f['cpu_ms']:>13.3f}"
              f"{f['broker_ms']:>14.3f}")
    x = ratios(means[OURS], means[PEER])
    print(f"  {'ragbus/FastStream':<18}{'':>5}{x['p50_ms']:>8.2f}x{x['p99_ms']:>8.2f}x{x['calls_s']:>8.2f}x"
          f"{x['cpu_ms']:>12.2f}x{x['broker_ms']:>13.2f}x", flush=True)
