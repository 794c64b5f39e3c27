"""Faults under load: worker processes to kill and restart, and a query load that accounts for every answer.

Used by ``tests/reliability`` (bounded, in CI) and ``scripts/chaos.py``
(longer runs). The load is document-rag questions from one caller at a fixed
concurrency; each call ends exactly once, as an answer, a degraded answer,
an error response or a timeout (lost), and the caller's ``RequestClient``
counts the duplicate and late responses it dropped.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragbus.config import pipelines
from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.runtime.typed_clients import DocumentRagClient, RemoteError
from ragbus.testing import selection


class WorkerProcess:
    """``ragbus worker NAMES --bus URL`` in a process of its own, ready once it says so."""

    def __init__(self, names: Sequence[str], url: str, env: dict[str, str], wrap: Sequence[str] = ()) -> None:
        self.names = list(names)
        self.wrap = list(wrap)  # a prefix of its command: ``ip netns exec NS`` puts it on a test host
        self.url = url
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=50)
        self._drain: asyncio.Task | None = None
        self._ready: asyncio.Future[None] | None = None

    async def start(self, timeout: float = 120.0) -> WorkerProcess:
        """Spawn the worker and wait until it says ready."""
        await self.spawn()
        assert self._ready is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except asyncio.CancelledError:
            self.kill()  # a start given up leaves no worker behind
            raise
        except (TimeoutError, RuntimeError) as exc:
            self.kill()
            raise RuntimeError(f"worker {self.names} not ready: {exc}\n" + "\n".join(self.log)) from None
        return self

    async def spawn(self) -> WorkerProcess:
        """Spawn the worker without waiting for it (``ready`` tells whether it has said so yet)."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.wrap, sys.executable, "-m", "ragbus.cli", "worker", *self.names, "--bus", self.url,
            env=self.env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        self._ready = asyncio.get_running_loop().create_future()
        self._drain = asyncio.ensure_future(self._read(self._ready))
        return self

    @property
    def ready(self) -> bool:
        return self._ready is not None and self._ready.done() and self._ready.exception() is None

    async def _read(self, ready: asyncio.Future) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:  # drained to the end, so the pipe never fills
            line = raw.decode(errors="replace").rstrip()
            self.log.append(line)
            if line == "ready" and not ready.done():
                ready.set_result(None)
        if not ready.done():
            ready.set_exception(RuntimeError(f"exited with {await self.proc.wait()}"))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye to the broker."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, 5)
        return self.proc.returncode


@dataclass
class LoadReport:
    sent: int = 0
    answered: int = 0  # an answer with no degraded path
    degraded: int = 0  # an answer that says a path degraded
    grounded: int = 0  # answers (degraded or not) citing a chunk or carrying a fact
    errors: collections.Counter = field(default_factory=collections.Counter)  # error responses, by type
    lost: int = 0  # no response within the call's timeout
    max_latency_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    duplicates: int = 0  # responses dropped by the caller as second answers
    late: int = 0  # responses dropped because their call had given up
    resent: int = 0
    seconds: float = 0.0

    @property
    def finished(self) -> int:
        return self.answered + self.degraded + sum(self.errors.values()) + self.lost

    def line(self) -> str:
        p50 = sorted(self.latencies)[len(self.latencies) // 2] * 1000 if self.latencies else 0.0
        errors = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "0"
        return (f"sent {self.sent}, answered {self.answered}, degraded {self.degraded}, "
                f"grounded {self.grounded}, errors {errors}, "
                f"lost {self.lost}, duplicates dropped {self.duplicates}, late dropped {self.late}, "
                f"resent {self.resent}, p50 {p50:.0f} ms, max {self.max_latency_s:.1f} s, "
                f"{self.sent / self.seconds if self.seconds else 0:.0f} q/s")


class QueryLoad:
    """``total`` questions at ``concurrency``; ``done`` lets a test act at a point of the run."""

    def __init__(self, client: RequestClient, questions: Sequence[str], *, total: int, concurrency: int,
                 timeout: float, mode: str = "hybrid", collection: str = "default") -> None:
        self.client = client
        self.rag = DocumentRagClient(client, timeout=timeout)
        self.questions = questions
        self.total = total
        self.concurrency = concurrency
        self.timeout = timeout
        self.mode = mode
        self.collection = collection
        self.report = LoadReport()
        self._progress = asyncio.Condition()

    async def reached(self, finished: int) -> None:
        """Returns once ``finished`` calls have ended."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.report.finished >= finished)

    async def run(self) -> LoadReport:
        started = time.perf_counter()
        indexes = iter(range(self.total))
        await asyncio.gather(*(self._worker(indexes) for _ in range(self.concurrency)))
        r = self.report
        r.seconds = time.perf_counter() - started
        r.duplicates, r.late, r.resent = self.client.stats.duplicates, self.client.stats.late, self.client.stats.resent
        return r

    async def _worker(self, indexes) -> None:
        for i in indexes:
            question = self.questions[i % len(self.questions)]
            self.report.sent += 1
            t0 = time.perf_counter()
            try:
                response = await self.rag.ask(question, mode=self.mode, collection=self.collection)
            except RequestTimeout:
                self.report.lost += 1
            except RemoteError as exc:
                self.report.errors[exc.error.type] += 1
            else:
                self.report.grounded += bool(response.cited or response.facts)
                if response.degraded:
                    self.report.degraded += 1
                else:
                    self.report.answered += 1
            elapsed = time.perf_counter() - t0
            self.report.latencies.append(elapsed)
            self.report.max_latency_s = max(self.report.max_latency_s, elapsed)
            async with self._progress:
                self._progress.notify_all()


def worker_env(data_dir: str, suffix: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: the shared data dir, consumer groups of this run's own."""
    env = {**os.environ, **selection.broker_env(), "RAGBUS_DATA_DIR": data_dir}
    for name in pipelines.QUERY:
        env[f"RAGBUS_PROCESSORS__{name.upper().replace('-', '_')}__GROUP"] = f"{name}-{suffix}"
    env.update(extra or {})
    return env
