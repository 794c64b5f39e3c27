"""Faults under ingest and query load with the stores from the log: nothing acknowledged lost, no half version read.

Writers (ingestion hosts) and replicas (query hosts, ``pipelines.LOG_REPLICA``) are worker
processes, each with a data dir of its own (``processors/testing/log_hosts.py``); nothing is
shared between them but the broker. The ingest load writes version after version of a set of
documents, each version the same number of chunks, and retries a version until it is
acknowledged (stored, or held already: its first answer was lost). A reader per replica asks
that host's keyword-query (tantivy) and fetch-chunk (the faiss store's chunks) for one
document's chunks again and again, and keeps every read that holds two versions of it, or part
of one. Every ``kill_every`` seconds a random writer or replica gets SIGKILL and is started
again ``restart_after`` seconds later (a replica catches up before it says ready). Once the
load ends, every replica must hold each document's last acknowledged version, whole, and answer
a question about it citing it.

Used by ``tests/reliability/test_log_chaos.py`` (bounded, in CI) and ``scripts/chaos_log.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragbus.bus.positions import latest
from ragbus.document_load.chunking import chunk_part
from ragbus.document_load.settings import DocumentLoadSettings
from ragbus.ingestion import DocumentSource, ingest
from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.runtime.typed_clients import DocumentRagClient, FetchChunkClient, KeywordClient, RemoteError
from ragbus.testing.chaos import WorkerProcess
from ragbus.testing.log_hosts import host_env, host_topic, role_args
from ragbus.schema import ChunkMatch, Document, generation_of


def ledger(number: int, version: int, collection: str) -> Document:
    """Version ``version`` of document ``number``: the same length (so the same chunk count) in every version;
    every chunk holds the document's own word ``ledgerN``, which no other document has."""
    tag = f"ledger{number}"
    lines = " ".join(f"The {tag} line {j} records edition {version:06d} of sample {j} with its measured weight."
                     for j in range(32))
    return Document(document_id=f"ledger-{number}", title=f"Ledger {number}", text=lines, collection=collection)


def chunk_count(doc: Document) -> int:
    defaults = DocumentLoadSettings()
    return len(chunk_part(doc, defaults.chunk_size, defaults.chunk_overlap)[0])


def version_of(doc: Document) -> str:
    """The version (``Chunk.generation``) the stores hold ``doc``'s chunks under."""
    return generation_of(DocumentSource.of(doc).content_hash)


@dataclass
class ChaosReport:
    acknowledged: int = 0  # versions the ingest load was told are stored
    retried: int = 0  # ingest calls that failed or timed out and were sent again
    reads: Counter = field(default_factory=Counter)  # answered reads, by store
    unavailable: int = 0  # reads a host did not answer (it was down) or answered with an error
    half: list[str] = field(default_factory=list)  # reads that held part of a version, or two versions mixed
    kills: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # at the end: a replica without an acknowledged version
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.half and not self.missing

    def line(self) -> str:
        reads = ", ".join(f"{k} {v}" for k, v in sorted(self.reads.items()))
        return (f"{self.acknowledged} versions acknowledged ({self.retried} ingest calls retried), "
                f"{len(self.kills)} kills ({', '.join(self.kills) or 'none'}); reads: {reads}, "
                f"{self.unavailable} unanswered; half versions read: {len(self.half)}; "
                f"acknowledged versions missing at the end: {len(self.missing)}; {self.seconds:.0f} s")


class LogChaos:
    """``writers`` ingestion hosts and ``replicas`` query hosts on ``url``, with their data dirs under ``workdir``."""

    def __init__(self, url: str, workdir: Path, suffix: str, *, writers: int = 2, replicas: int = 2,
                 documents: int = 8, collection: str = "chaos", extra_env: dict[str, str] | None = None) -> None:
        self.url, self.workdir, self.suffix = url, workdir, suffix
        self.collection = collection
        self.documents = documents
        self.chunks = chunk_count(ledger(0, 0, collection))
        self.hosts = {f"w{i + 1}": False for i in range(writers)} | {f"q{i + 1}": True for i in range(replicas)}
        self.extra_env = extra_env or {}
        self.workers: dict[str, WorkerProcess] = {}
        self.wraps: dict[str, list[str]] = {}  # a host's command prefix: ``ip netns exec NS`` puts it on a host
        self.acked: dict[int, Document] = {}  # each document's last acknowledged version
        self.seen: list[str] = []  # where the log holds the acknowledged versions
        self.report = ChaosReport()
        self._stop = asyncio.Event()

    @property
    def replicas(self) -> list[str]:
        return [h for h, query in self.hosts.items() if query]

    def _process(self, host: str) -> WorkerProcess:
        query = self.hosts[host]
        env = host_env(self.workdir, host, self.suffix, query=query,
                       group=None if query else f"writers-{self.suffix}", extra=self.extra_env)
        return WorkerProcess(role_args(query), self.url, env, wrap=self.wraps.get(host, []))

    async def start(self, timeout: float = 300.0) -> None:
        async def one(host: str) -> None:
            self.workers[host] = await self._process(host).start(timeout=timeout)
        await asyncio.gather(*(one(h) for h in self.hosts))

    async def stop(self) -> None:
        for w in self.workers.values():
            w.kill()
            await w.stop(timeout=15)

    async def run(self, client: RequestClient, *, seconds: float, kill_every: float, restart_after: float,
                  seed: int = 1, progress=None, until: Callable[[ChaosReport], bool] | None = None,
                  deadline: float | None = None) -> ChaosReport:
        """The load for ``seconds`` with a kill every ``kill_every`` (0: none), then the final check.

        With ``until``, the load goes on past ``seconds`` until ``until(report)`` holds (looked at every
        second), for at most ``deadline`` seconds in all: a run that must have done something (so many
        kills, versions, reads) is not judged on how much of it a machine got done in a fixed time.
        """
        started = time.perf_counter()
        self._stop.clear()
        tasks = [asyncio.ensure_future(self._ingest_load(client))]
        tasks += [asyncio.ensure_future(self._reader(client, host, random.Random(seed + i)))
                  for i, host in enumerate(self.replicas)]
        faults = asyncio.ensure_future(self._faults(kill_every, restart_after, random.Random(seed), progress))
        try:
            await asyncio.sleep(seconds)
            end = started + max(seconds, deadline or 0.0)
            while until is not None and time.perf_counter() < end:
                if until(self.report):  # a condition of the report, which no one signals: looked at each second
                    break
                await asyncio.sleep(1.0)
        finally:
            self._stop.set()  # a restart under way is finished, not cancelled: no worker is left behind
            await asyncio.gather(faults, *tasks)
        await self._restart_dead()
        await self._check_end(client)
        self.report.seconds = time.perf_counter() - started
        return self.report

    async def _ingest_load(self, client: RequestClient) -> None:
        version = 0
        while not self._stop.is_set():
            version += 1
            pending = {n: ledger(n, version, self.collection) for n in range(self.documents)}
            while pending:  # a version is sent until it is acknowledged, even after the load ends
                await asyncio.gather(*(self._ingest_one(client, n, doc, pending) for n, doc in pending.items()))
                if pending:
                    self.report.retried += len(pending)
                    await asyncio.sleep(1.0)

    async def _ingest_one(self, client: RequestClient, number: int, doc: Document, pending: dict) -> None:
        summary = await ingest(client, [doc], concurrency=1, timeout=60)
        if summary.failed or summary.documents + summary.unchanged != 1:
            return
        self.acked[number] = doc
        self.seen = latest([*self.seen, *summary.seen])
        self.report.acknowledged += 1
        del pending[number]

    async def _reader(self, client: RequestClient, host: str, rng: random.Random) -> None:
        keyword = KeywordClient(client, topic=host_topic("keyword-query", host), timeout=5)
        fetch = FetchChunkClient(client, topic=host_topic("fetch-chunk", host), timeout=5)
        ids = [f"#{p}" for p in range(self.chunks)]
        while not self._stop.is_set():
            number = rng.randrange(self.documents)
            document_id = f"ledger-{number}"
            try:
                found = await keyword.query(query=f"ledger{number}", limit=4 * self.chunks,
                                            collection=self.collection)
                self._judge(host, "keyword", document_id, found)
                found = await fetch.fetch([document_id + i for i in ids], collection=self.collection)
                self._judge(host, "fetch", document_id, found)
            except (RequestTimeout, RemoteError):
                self.report.unavailable += 1
                await asyncio.sleep(0.2)

    def _judge(self, host: str, store: str, document_id: str, found: list[ChunkMatch]) -> None:
        self.report.reads[store] += 1
        mine = [m for m in found if m.document_id == document_id]
        versions = {m.generation for m in mine}
        if mine and (len(versions) != 1 or len(mine) != self.chunks):
            self.report.half.append(f"{host} {store} {document_id}: {len(mine)} chunks of versions "
                                    f"{sorted(v or '' for v in versions)}, a version has {self.chunks}")

    async def _faults(self, kill_every: float, restart_after: float, rng: random.Random, progress) -> None:
        while kill_every > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), kill_every)
            if self._stop.is_set():
                return
            # replicas and writers in turn, which of them at random
            kinds = [sorted(self.replicas), sorted(set(self.hosts) - set(self.replicas))]
            host = rng.choice(kinds[len(self.report.kills) % 2] or kinds[0])
            self.workers[host].kill()
            self.report.kills.append(host)
            if progress:
                progress(f"killed {host} (kill -9) with {self.report.acknowledged} versions acknowledged")
            await asyncio.sleep(restart_after)
            await self._restart(host)

    async def _restart(self, host: str) -> None:
        await self.workers[host].stop(timeout=15)
        self.workers[host] = await self._process(host).start(timeout=300)

    async def _restart_dead(self) -> None:
        for host, worker in list(self.workers.items()):
            if worker.proc is None or worker.proc.returncode is not None or not worker.ready:
                await self._restart(host)

    async def _check_end(self, client: RequestClient) -> None:
        """Every replica holds each document's last acknowledged version, whole, in both stores, and answers
        a question about it citing it."""
        for host in self.replicas:
            fetch = FetchChunkClient(client, topic=host_topic("fetch-chunk", host), timeout=60)
            keyword = KeywordClient(client, topic=host_topic("keyword-query", host), timeout=60)
            rag = DocumentRagClient(client, topic=host_topic("document-rag", host), timeout=60)
            for number, doc in sorted(self.acked.items()):
                want = version_of(doc)
                held = {
                    "fetch": await fetch.fetch([f"{doc.document_id}#{p}" for p in range(self.chunks)],
                                               collection=self.collection, must_see=self.seen),
                    "keyword": [m for m in await keyword.query(query=f"ledger{number}", limit=4 * self.chunks,
                                                               collection=self.collection, must_see=self.seen)
                                if m.document_id == doc.document_id],
                }
                wrong = {store: (len(found), sorted({m.generation or "" for m in found}))
                         for store, found in held.items()
                         if len(found) != self.chunks or {m.generation for m in found} != {want}}
                if wrong:
                    self.report.missing.append(f"{host} {doc.document_id}: acknowledged {want}, held (chunks, "
                                               f"versions) {wrong}")
                    continue
                answer = await rag.ask(f"What does ledger{number} record?", collection=self.collection,
                                       mode="keyword", must_see=self.seen)
                if not any(c.startswith(doc.document_id + "#") for c in answer.cited):
                    self.report.missing.append(f"{host} {doc.document_id}: the answer cites {answer.cited}")
