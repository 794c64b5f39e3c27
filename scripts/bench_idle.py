"""What a ready, idle `ragbus worker --all` costs: CPU of the worker and of its broker, side by side.

    python -m scripts.bench_idle [--seconds 20] [--backends kafka pulsar] [--rounds 1]
        [--variant NAME[@TREE]:ENV=VALUE[,ENV=VALUE...] ...]

For each backend it starts a fresh test broker (Apache Kafka and Apache Pulsar;
Tansu and Pulsar Lite with ``RAGBUS_TEST_KAFKA=light`` / ``RAGBUS_TEST_PULSAR=light``),
measures the idle broker alone, then starts one worker process
per variant in turn (each on a fresh data dir and its own consumer groups),
waits for `ready`, lets it settle, and samples user+system CPU time of the
worker and of the broker over the window. Variants are environment overrides
(RAGBUS_* settings), so defaults and a tuned setting are compared in one run:
the machine is shared and noisy, so compare rows of one run, not runs.
A variant may also name another checkout of ragbus (``@TREE``, a directory)
to run its worker from, so a change is measured against the code before it
in the same run, on the same broker: e.g. ``before@/tmp/ragbus-main:`` and
``after:``. ``--rounds`` repeats the variants, in reverse order every other
round (A B, B A, ...), so neither always runs first on a broker that ages.
The ``conns`` column counts the worker's open TCP connections to the broker:
what the broker sees of its consumers (on Kafka one or more per consumer).
Default variants: the settings as shipped, and Tansu's low-latency test
setting (fetch_max_wait_ms=5), whose cost shows beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ragbus.config.settings import load_settings
from ragbus.testing import selection
from ragbus.testing.processes import stop_process
from scripts.bench.brokers import broker_for
from scripts.bench.cpu import cpu_of
from scripts.bench.paths import REPO as ROOT

DEFAULT_VARIANTS = ["defaults:", "fetch-wait-5ms:RAGBUS_BUS__KAFKA__FETCH_MAX_WAIT_MS=5"]


def share_of_a_core(pids: list[int], seconds: float) -> list[float]:
    before = [cpu_of(p) for p in pids]
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    return [100 * (cpu_of(p) - b) / elapsed for p, b in zip(pids, before, strict=True)]


def connections_to(pid: int, port: int) -> int:
    """The established TCP connections of process ``pid`` to ``port``, from /proc (Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                remote_port, state, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[3], fields[9]
                count += remote_port == port and state == "01" and inode in inodes
    return count


def parse_variant(text: str) -> tuple[str, Path, dict[str, str]]:
    name, _, assignments = text.partition(":")
    name, _, tree = name.partition("@")
    root = Path(tree).resolve() if tree else ROOT
    if not (root / "processors" / "cli").is_dir():
        raise SystemExit(f"--variant {text!r}: {root} is not a ragbus checkout")
    env = {}
    for pair in filter(None, assignments.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--variant wants NAME:ENV=VALUE[,ENV=VALUE], got {text!r}")
        env[key] = value
    return name, root, env


def start_worker(url: str, root: Path, env_over: dict[str, str], workdir: Path) -> subprocess.Popen:
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "PYTHONPATH": str(root), "RAGBUS_DATA_DIR": str(workdir / f"data-{suffix}"), **env_over}
    for name in load_settings(environ={}).processors:  # groups of this run's own: a fresh join, no old offsets
        env[f"RAGBUS_PROCESSORS__{name.upper().replace('-', '_')}__GROUP"] = f"{name}-{suffix}"
    for name, value in selection.broker_env().items():  # a light broker's own settings, only on it
        env.setdefault(name, value)
    proc = subprocess.Popen([sys.executable, "-m", "ragbus.cli", "worker", "--all", "--bus", url],
                            env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.strip() == "ready":
            return proc
    proc.wait()
    raise RuntimeError(f"worker exited with {proc.returncode} before it was ready")


def stop(proc: subprocess.Popen) -> None:
    stop_process(proc, timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="sampling window per row")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after `ready` before sampling")
    parser.add_argument("--backends", nargs="+", choices=["kafka", "pulsar"], default=["kafka", "pulsar"])
    parser.add_argument("--variant", action="append",
                        help="NAME[@TREE]:ENV=VALUE[,...]; TREE: a ragbus checkout to run the worker from; repeat")
    parser.add_argument("--rounds", type=int, default=1, help="run the variants in turn this many times")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    with tempfile.TemporaryDirectory(prefix="ragbus-bench-idle-") as tmp:  # the brokers' data and logs
        return measure(args, variants, Path(tmp))


def measure(args, variants, workdir: Path) -> int:
    print(f"idle CPU, % of one core, sampled over {args.seconds:g}s after {args.settle:g}s of settling")
    print(f"{'backend':<8} {'variant':<16} {'worker':>7} {'broker':>7} {'conns':>6}")
    for backend in args.backends:
        broker = broker_for(backend, workdir).start()
        try:
            assert broker.process is not None
            time.sleep(args.settle)
            (alone,) = share_of_a_core([broker.process.pid], args.seconds)
            print(f"{backend:<8} {'(broker alone)':<16} {'-':>7} {alone:>6.1f}%", flush=True)
            rows = [v for r in range(args.rounds) for v in (variants if r % 2 == 0 else variants[::-1])]
            for name, root, env in rows:
                worker = start_worker(broker.url, root, env, workdir)
                try:
                    time.sleep(args.settle)
                    w, b = share_of_a_core([worker.pid, broker.process.pid], args.seconds)
                    conns = connections_to(worker.pid, broker.port)
                finally:
                    stop(worker)
                print(f"{backend:<8} {name:<16} {w:>6.1f}% {b:>6.1f}% {conns:>6}", flush=True)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
