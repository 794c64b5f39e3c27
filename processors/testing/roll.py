"""A deployment's processes on one broker, rolled one at a time the way the chart's controllers roll pods.

The roles as the chart runs them: gateways (``ragbus serve``), ingestion hosts (``ragbus worker --role
ingest``) and query hosts (``--role query``), each host with a data dir of its own and every store
from the log. A roll replaces each process in turn: a gateway or an ingestion host as a Deployment
does (the new one ready, then SIGTERM to the old), a query host as a StatefulSet does (SIGTERM, then
a new one on the same data dir, ready before the next, and seen ready by a readiness probe of
``probe_period_s``). The load asks through the gateways at a
fixed rate and writes documents; like a Service it sends only to gateways whose ``/ready`` said 200
when last read (every ``endpoints_s``), so a stopping gateway is dropped late, as in a cluster.
Used by ``scripts/bench_roll.py`` and ``tests/reliability/test_roll.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ragbus.config import pipelines
from ragbus.ingestion import builtin_corpus

from .chaos import WorkerProcess
from .gateway import GatewayProcess
from .log_hosts import host_env, var

COLLECTION = "roll"


@dataclass
class Host:
    """One process of the site: its role, its data dir's name, and the process."""

    role: str  # gateway | ingest | query
    name: str
    process: WorkerProcess | GatewayProcess

    @property
    def url(self) -> str:
        assert isinstance(self.process, GatewayProcess)
        return self.process.url


class Site:
    """``gateways``, ``ingest`` and ``query`` processes on ``broker_url``, their data dirs under ``workdir``."""

    def __init__(self, broker_url: str, workdir: Path, suffix: str, *, client_env: dict[str, str] | None = None,
                 shutdown_delay_s: float = 5.0, query_storage: str = "claim", probe_period_s: float = 0.0,
                 log=print) -> None:
        self.broker_url = broker_url
        self.workdir = workdir
        self.suffix = suffix
        self.client_env = dict(client_env or {})
        self.shutdown_delay_s = shutdown_delay_s
        self.probe_period_s = probe_period_s  # a roll's pause between steps: the readiness probe's period
        self.query_storage = query_storage  # claim: a query host restarts on its data dir; emptyDir: on none
        self.hosts: list[Host] = []
        self.log = log
        self._names = itertools.count()
        self.events: list[tuple[float, str]] = []  # (monotonic, what): each process started or told to stop

    def env(self, role: str, name: str) -> dict[str, str]:
        extra = {**self.client_env}
        if role == "query":
            extra[var("embed", "bulk_topic")] = ""  # ingestion's embedding is the ingestion hosts'
        if role == "ingest":
            extra[var("documents-replica", "tombstones")] = "true"
            extra[var("embed", "interactive")] = "false"  # questions' embedding is the query hosts'
        if role == "gateway":
            extra["RAGBUS_GATEWAY__SHUTDOWN_DELAY_S"] = str(self.shutdown_delay_s)
        # Hosts of one role share its groups, as a chart's pods do; the groups are this site's own.
        for processor in pipelines.EVERYTHING:
            extra[var(processor, "group")] = f"{processor}-{self.suffix}"
        return host_env(self.workdir, name, self.suffix, query=False, group=self.suffix, extra=extra)

    def new_host(self, role: str, name: str | None = None) -> Host:
        name = name or f"{role}-{next(self._names)}"
        env = self.env(role, name)
        if role == "gateway":
            log = self.workdir / f"{name}.log"
            return Host(role, name, GatewayProcess(self.broker_url, env=env, log_path=log, ready_timeout_s=300))
        return Host(role, name, WorkerProcess(["--role", role], self.broker_url, env))

    async def start_host(self, host: Host) -> Host:
        self.events.append((time.monotonic(), f"start {host.name}"))
        if isinstance(host.process, GatewayProcess):
            await asyncio.to_thread(host.process.start)
        else:
            await host.process.start(timeout=300)
        self.hosts.append(host)
        return host

    async def start(self, gateways: int, ingest: int, query: int) -> None:
        """Workers first (a gateway is ready once a question is answered), then the gateways."""
        await asyncio.gather(*(self.start_host(self.new_host(r)) for r, n in (("ingest", ingest), ("query", query))
                               for _ in range(n)))
        await asyncio.gather(*(self.start_host(self.new_host("gateway")) for _ in range(gateways)))

    async def stop_host(self, host: Host, timeout: float = 120.0) -> int | None:
        """SIGTERM, then wait for the process to end (SIGKILL past ``timeout``); its exit status."""
        self.hosts.remove(host)
        self.events.append((time.monotonic(), f"SIGTERM {host.name}"))
        p = host.process
        if isinstance(p, GatewayProcess):
            proc = p.process
            if proc is None:
                return None
            proc.send_signal(signal.SIGTERM)
            try:
                return await asyncio.to_thread(proc.wait, timeout)
            except Exception:
                p.stop()
                raise
        return await p.stop(timeout)

    def gateways(self) -> list[Host]:
        return [h for h in self.hosts if h.role == "gateway"]

    async def roll(self) -> list[str]:
        """Replace every process once, in the chart's order of roles; a line per step."""
        steps = []
        for role in ("ingest", "query", "gateway"):
            for old in [h for h in self.hosts if h.role == role]:
                if role == "query":  # a StatefulSet: the pod goes, then comes back on its claim (or empty)
                    status, stop_s = await self._timed(self.stop_host(old))
                    if self.query_storage == "emptyDir":
                        shutil.rmtree(self.workdir / old.name)
                    new, start_s = await self._timed(self.start_host(self.new_host(role, old.name)))
                else:  # a Deployment: surge one, then retire one
                    new, start_s = await self._timed(self.start_host(self.new_host(role)))
                    status, stop_s = await self._timed(self.stop_host(old))
                steps.append(f"{old.name} exit {status} in {stop_s:.1f} s, {new.name} ready in {start_s:.1f} s")
                self.log(f"  rolled: {steps[-1]}")
                # The controller takes the next step once the kubelet's readiness probe has seen this one ready.
                await asyncio.sleep(self.probe_period_s)
        return steps

    @staticmethod
    async def _timed(step):
        t0 = time.monotonic()
        result = await step
        return result, time.monotonic() - t0

    async def stop(self) -> None:
        for host in list(self.hosts):
            try:
                await self.stop_host(host, timeout=60)
            except Exception as exc:  # whatever failed, the others still stop
                print(f"stopping {host.name}: {exc}", file=sys.stderr)


async def load_corpus(http: httpx.AsyncClient, endpoints: Endpoints, count: int, timeout_s: float = 300.0) -> None:
    """The first ``count`` documents of the built-in corpus written into ``COLLECTION`` through a gateway."""
    for doc in builtin_corpus(COLLECTION)[:count]:
        r = await http.post(f"{endpoints.pick()}/v1/documents", timeout=timeout_s,
                            json={"document_id": doc.document_id, "text": doc.text, "title": doc.title,
                                  "collection": COLLECTION})
        r.raise_for_status()


class Endpoints:
    """The gateways a Service would send to: those whose ``/ready`` said 200 when last read."""

    def __init__(self, site: Site, every_s: float = 1.0) -> None:
        self.site = site
        self.every_s = every_s
        self.ready: list[str] = []
        self.some = asyncio.Event()  # set once a gateway has been ready
        self._turn = itertools.count()

    def pick(self) -> str | None:
        ready = self.ready
        return ready[next(self._turn) % len(ready)] if ready else None

    async def follow(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            urls = [h.url for h in self.site.gateways()]
            answers = await asyncio.gather(*(http.get(f"{u}/ready", timeout=5) for u in urls), return_exceptions=True)
            self.ready = [u for u, a in zip(urls, answers, strict=True)
                          if isinstance(a, httpx.Response) and a.status_code == 200]
            if self.ready:
                self.some.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.every_s)


@dataclass
class Call:
    started: float  # monotonic
    seconds: float
    ok: bool
    what: str  # "" or why it failed
    phase: str
    timings_ms: dict[str, float] = field(default_factory=dict)  # an answer's, per stage (DocumentRagResponse)


@dataclass
class Written:
    document_id: str
    word: str
    seen: list[str]


@dataclass
class Load:
    """Questions at ``rate`` a second and a document every ``1 / write_rate`` seconds, through ``endpoints``."""

    endpoints: Endpoints
    questions: list[str]
    rate: float = 20.0
    write_rate: float = 1.0
    timeout_s: float = 60.0
    phase: str = "warm-up"
    calls: list[Call] = field(default_factory=list)
    writes: list[Call] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    _progress: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wrote(self, n: int) -> None:
        """Returns once ``n`` writes have been acknowledged."""
        async with self._progress:
            await self._progress.wait_for(lambda: len(self.written) >= n)

    async def run(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        tasks: set[asyncio.Task] = set()
        started = time.monotonic()
        for n in itertools.count():
            if stop.is_set():
                break
            tasks.add(asyncio.ensure_future(self._ask(http, self.questions[n % len(self.questions)])))
            if self.write_rate and n % max(1, round(self.rate / self.write_rate)) == 0:
                tasks.add(asyncio.ensure_future(self._write(http, len(self.writes))))
            tasks = {t for t in tasks if not t.done()}
            # Open loop: the next question at its time whatever the answers do; late, it goes at once.
            wait = started + (n + 1) / self.rate - time.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        await asyncio.gather(*tasks)

    async def _post(self, http: httpx.AsyncClient, path: str, body: dict) -> tuple[bool, str, dict]:
        url = self.endpoints.pick()
        if url is None:
            return False, "no gateway ready", {}
        try:
            r = await http.post(f"{url}{path}", json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__}: {exc}"[:200], {}
        if r.status_code >= 300:
            return False, f"{r.status_code} {r.text[:200]}", {}
        return True, "", r.json()

    async def _ask(self, http: httpx.AsyncClient, question: str) -> None:
        phase, t0 = self.phase, time.monotonic()
        ok, what, body = await self._post(http, "/v1/ask", {"question": question, "collection": COLLECTION})
        if ok and not body.get("cited"):
            ok, what = False, f"no citation: {body.get('answer', '')[:100]!r} degraded {body.get('degraded')}"
        self.calls.append(Call(t0, time.monotonic() - t0, ok, what, phase, body.get("timings_ms") or {}))

    async def _write(self, http: httpx.AsyncClient, n: int) -> None:
        phase, t0 = self.phase, time.monotonic()
        document_id, word = f"roll-{n}", f"zorbex{n}quill"
        text = (f"Roll note {n}. The keeper of ledger roll-{n} writes the word {word} in its margin, and only "
                f"note {n} holds {word}.")
        ok, what, body = await self._post(http, "/v1/documents", {"document_id": document_id, "text": text,
                                                                  "title": f"roll note {n}",
                                                                  "collection": COLLECTION})
        self.writes.append(Call(t0, time.monotonic() - t0, ok, what, phase))
        if ok:
            self.written.append(Written(document_id, word, body.get("seen", [])))
            async with self._progress:
                self._progress.notify_all()


async def missing_writes(http: httpx.AsyncClient, endpoints: Endpoints, written: list[Written]) -> list[str]:
    """Each acknowledged write, asked for through a gateway: listed in the library, and cited by an ask
    that carries its tokens (so a query host has it in its stores). What is missing, said."""
    missing = []
    for w in written:
        url = endpoints.pick()
        if url is None:
            return ["no gateway ready to check the writes"]
        r = await http.get(f"{url}/v1/documents", params={"collection": COLLECTION, "document_id": w.document_id},
                           timeout=120)
        if r.status_code != 200 or not r.json().get("documents"):
            missing.append(f"{w.document_id}: not listed ({r.status_code} {r.text[:120]})")
            continue
        r = await http.post(f"{url}/v1/ask", json={"question": f"Which ledger has {w.word} in its margin?",
                                                   "collection": COLLECTION, "mode": "keyword",
                                                   "must_see": w.seen}, timeout=120)
        cited = r.json().get("cited", []) if r.status_code == 200 else []
        if not any(c.startswith(f"{w.document_id}#") for c in cited):
            missing.append(f"{w.document_id}: not cited ({r.status_code} {r.text[:120]})")
    return missing
