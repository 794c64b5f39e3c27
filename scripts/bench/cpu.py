"""CPU seconds of a process, or of this process's threads, read from /proc.

Hand-written on /proc (Linux only, as every benchmark here is) because the project has no
dependency that reads another process's CPU time with its reaped children's (psutil would be
a new one for two functions).
"""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path


def _stat_cpu(stat: Path, *, reaped: bool = False) -> float | None:
    """CPU seconds (user + system; with ``reaped``, its reaped children's too) of a /proc stat file,
    or None once the process or thread is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in fields[11:15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system) of a process and its reaped children; 0 for no process or one that is gone."""
    if pid is None:
        return 0.0
    return _stat_cpu(Path(f"/proc/{pid}/stat"), reaped=True) or 0.0


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's live threads so far, by thread name.

    Python threads go by their own name without the pool's index (a processor's thread
    ``embed-onnx_0`` is ``embed-onnx``); the others, onnxruntime's intra-op pool and the bus
    clients' I/O and listener threads, together as ``native``.
    """
    names = {t.native_id: t.name.rsplit("_", 1)[0] if t.name[-1:].isdigit() else t.name
             for t in threading.enumerate()}
    cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
    for task in Path("/proc/self/task").iterdir():
        seconds = _stat_cpu(task / "stat")
        if seconds is not None:  # else it ended meanwhile
            cpu[names.get(int(task.name), "native")] += seconds
    return dict(cpu)


def jit_cpu(pid: int | None) -> float:
    """CPU seconds a JVM's JIT compiler threads (``C1 CompilerThre``, ``C2 CompilerThre``...) have used; 0 for none.

    A broker just started compiles its hot paths while it serves: measured on Apache Kafka at
    concurrency 1, its C2 thread took 11 of the broker's 17 CPU ms per query in the first 300
    queries after a 300-query warm-up, and under 1 ms after 900 more. A figure taken meanwhile
    is the JIT's, not the broker's steady state a long-running cluster serves with.
    """
    if pid is None:
        return 0.0
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text()
        except OSError:
            continue
        if name.startswith(("C1 Compiler", "C2 Compiler")):
            total += _stat_cpu(task / "stat") or 0.0
    return total


def machine_cpu() -> float:
    """CPU seconds every core of this machine has spent busy since boot (all but idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
