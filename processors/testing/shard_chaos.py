"""Shard owners killed with kill -9 under ingest and query load: answers partial meanwhile, never wrong.

The hosts of ``log_chaos.LogChaos`` with the query hosts sharded (``[stores] shards``): each owns
shards through the broker and serves them to every host's document-rag. The ingest load is
``LogChaos``'s. A reader per query host asks its document-rag, with the tokens of what was
acknowledged, for one document's chunks; an answer that says a shard was left out (``degraded``)
is partial, one that does not must hold exactly one whole version of the document, no older than
the one acknowledged before it was asked: else it is wrong. Every ``kill_every`` seconds the owner
of a shard gets SIGKILL; the time until that shard answers again (another host serving it) is kept,
and the host is started again ``restart_after`` seconds later. At the end every host answers each
document's last acknowledged version, whole.

Used by ``tests/reliability/test_shard_failover.py`` and ``scripts/chaos_shards.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from dataclasses import dataclass, field

from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.runtime.typed_clients import DocumentRagClient, KeywordClient, RemoteError
from ragbus.schema import ChunkMatch
from ragbus.schema.changelog import ReplicaStatusRequest, ShardsStatus
from ragbus.schema.shards import shard_topic
from ragbus.testing.chaos import WorkerProcess
from ragbus.testing.log_chaos import ChaosReport, LogChaos, ledger, version_of
from ragbus.testing.log_hosts import host_env, host_topic, role_args, shard_served_topic

PROBE_S = 2.0  # a probe of a shard unanswered this long is asked again


def round_of(doc) -> int:
    """The round of the ingest load ``doc`` (a ``ledger``) is the version of."""
    found = re.search(r"edition (\d+)", doc.text)
    if found is None:
        raise ValueError(f"{doc.document_id} is not a ledger of the load")
    return int(found.group(1))


@dataclass
class ShardReport(ChaosReport):
    answers: int = 0  # document-rag answers judged
    partial: int = 0  # of them, said partial (a shard left out)
    wrong: list[str] = field(default_factory=list)  # not partial, yet not the whole acknowledged version
    back_s: list[float] = field(default_factory=list)  # per kill: until the killed owner's shard answered again

    @property
    def ok(self) -> bool:
        return super().ok and not self.wrong

    def line(self) -> str:
        back = ", ".join(f"{s:.1f}" for s in self.back_s) or "none"
        return (f"{super().line()}; answers {self.answers}, partial {self.partial}, wrong {len(self.wrong)}; "
                f"shard answering again after its owner's kill -9 (s): {back}")


class ShardChaos(LogChaos):
    """``writers`` ingestion hosts and ``replicas`` sharded query hosts of ``shards`` shards (``standbys`` each)."""

    def __init__(self, url: str, workdir, suffix: str, *, shards: int = 2, standbys: int = 0, **kwargs) -> None:
        super().__init__(url, workdir, suffix, **kwargs)
        self.shards, self.standbys = shards, standbys
        self.report: ShardReport = ShardReport()
        self._generations: dict[int, dict[str, int]] = {}  # per document, a version's generation -> its round

    def _process(self, host: str) -> WorkerProcess:
        query = self.hosts[host]
        extra = dict(self.extra_env)
        if query:
            extra["RAGBUS_PROCESSORS__SHARD_HOST__STANDBYS"] = str(self.standbys)
            extra["RAGBUS_PROCESSORS__SHARD_HOST__REPORT_INTERVAL_S"] = "1"
        env = host_env(self.workdir, host, self.suffix, query=query, group=None if query else f"writers-{self.suffix}",
                       extra=extra, shards=self.shards)
        return WorkerProcess(role_args(query), self.url, env, wrap=self.wraps.get(host, []))

    def _round(self, generation: str | None, number: int) -> int:
        """The round of the ingest load a version of document ``number`` was written in (-1: none written yet)."""
        rounds = self._generations.setdefault(number, {})
        if generation not in rounds:  # the rounds written so far: up to one past the latest acknowledged
            top = 1 + max((round_of(d) for d in self.acked.values()), default=0)
            for r in range(len(rounds) + 1, top + 1):
                rounds[version_of(ledger(number, r, self.collection))] = r
        return rounds.get(generation or "", -1)

    async def _reader(self, client: RequestClient, host: str, rng: random.Random) -> None:
        rag = DocumentRagClient(client, topic=host_topic("document-rag", host), timeout=30)
        limit = min(50, 2 * self.chunks)
        while not self._stop.is_set():
            number = rng.randrange(self.documents)
            held = self.acked.get(number)
            seen = list(self.seen)
            try:
                answer = await rag.ask(f"ledger{number}", collection=self.collection, mode="keyword",
                                       doc_limit=limit, answer=False, must_see=seen)
            except (RequestTimeout, RemoteError):
                self.report.unavailable += 1
                await asyncio.sleep(0.2)
                continue
            self.report.reads["document-rag"] += 1
            self._judge_answer(host, number, held, answer.chunks, answer.degraded)

    def _judge_answer(self, host: str, number: int, held, chunks: list[ChunkMatch], degraded: list[str]) -> None:
        self.report.answers += 1
        if any(d.startswith("shard-") for d in degraded):
            self.report.partial += 1
            return
        document_id = f"ledger-{number}"
        mine = [c for c in chunks if c.document_id == document_id]
        rounds = {self._round(c.generation, number) for c in mine}
        least = 0 if held is None else round_of(held)
        if held is None and not mine:
            return  # nothing of it acknowledged yet, nothing held: right
        if len(mine) != self.chunks or len(rounds) != 1 or min(rounds) < least:
            self.report.wrong.append(f"{host} {document_id}: {len(mine)} chunks of rounds {sorted(rounds)} "
                                     f"(a version has {self.chunks}; round {least} was acknowledged), "
                                     f"degraded {degraded}")

    async def owners(self, client: RequestClient) -> dict[int, str]:
        """Each shard's owner, as the hosts that answer say (the latest assignment they were told)."""
        found: dict[int, str] = {}
        for host in self.replicas:
            with contextlib.suppress(RequestTimeout, RemoteError):
                status = await client.request(host_topic("shard-host", host), ReplicaStatusRequest(), ShardsStatus,
                                              timeout=5)
                for s in status.shards:
                    if s.here == "serving":
                        found[s.shard] = host
        return found

    async def _answers(self, client: RequestClient, shard: int) -> bool:
        keyword = KeywordClient(client, topic=shard_topic(shard_served_topic("keyword-query", self.suffix), shard),
                                timeout=PROBE_S)
        try:
            await keyword.query(query="ledger0", limit=1, collection=self.collection)
            return True
        except RequestTimeout:
            return False
        except RemoteError:  # answered, with an error: a host taking the shard over is not serving it yet
            await asyncio.sleep(0.1)
            return False

    async def _faults(self, kill_every: float, restart_after: float, rng: random.Random, progress) -> None:
        client = self._client
        while kill_every > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), kill_every)
            if self._stop.is_set():
                return
            owners = await self.owners(client)
            if not owners:
                continue
            shard = rng.choice(sorted(owners))
            host = owners[shard]
            killed_at = time.perf_counter()
            self.workers[host].kill()
            self.report.kills.append(host)
            if progress:
                progress(f"killed {host}, the owner of shard {shard} (kill -9), with {self.report.acknowledged} "
                         "versions acknowledged")
            restart = asyncio.ensure_future(self._restart_later(host, restart_after))
            while not await self._answers(client, shard):  # each unanswered probe takes up to PROBE_S
                pass
            self.report.back_s.append(time.perf_counter() - killed_at)
            if progress:
                progress(f"shard {shard} answers again {self.report.back_s[-1]:.1f} s after its owner's kill")
            await restart

    async def _restart_later(self, host: str, after: float) -> None:
        await asyncio.sleep(after)
        await self._restart(host)

    async def run(self, client: RequestClient, **kwargs) -> ShardReport:  # type: ignore[override]
        self._client = client
        report = await super().run(client, **kwargs)
        assert isinstance(report, ShardReport)
        return report

    async def _check_end(self, client: RequestClient) -> None:
        """Every host's document-rag answers each document's last acknowledged version, whole, from every shard."""
        for host in self.replicas:
            rag = DocumentRagClient(client, topic=host_topic("document-rag", host), timeout=60)
            for number, doc in sorted(self.acked.items()):
                answer = await rag.ask(f"ledger{number}", collection=self.collection, mode="keyword",
                                       doc_limit=min(50, 2 * self.chunks), answer=False, must_see=self.seen)
                mine = [c for c in answer.chunks if c.document_id == doc.document_id]
                versions = sorted({c.generation or "" for c in mine})
                if answer.degraded or len(mine) != self.chunks or versions != [version_of(doc)]:
                    self.report.missing.append(f"{host} {doc.document_id}: acknowledged {version_of(doc)}, answered "
                                               f"{len(mine)} chunks of {versions}, degraded {answer.degraded}")
