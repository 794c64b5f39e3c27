"""Stores from the log across hosts: a broker, an ingestion host and query hosts, each on a network of its own.

Each host is a network namespace (``processors/testing/netns.py``) with a data dir of its own,
and nothing is shared between them but the broker: every store processor runs with
``changelog = true``. The test itself is the caller, over the bridge. A document ingested on the
ingestion host is answered and cited by each query host (each answers from its own stores: its
orchestrator asks its own processors) as soon as an ask that must see it (the tokens the ingest
answered with) is asked, with no polling; a delete reaches every host, its graph facts too, while
``as_of`` before the delete still shows them; a query host killed with kill -9 while it catches
up restarts and catches up; a host added last catches up and answers.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.bus import connect
from ragbus.ingestion import ingest
from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.testing import brokers, log_hosts, netns
from ragbus.stores.documents_replica import CHECKPOINT
from ragbus.testing.chaos import WorkerProcess
from ragbus.schema import DeleteDocument, Document, Entity, Fact, IngestResult, LoadTriples

from ..helpers.brokers import own_broker, settings_for_tests
from ..helpers.rag_pipeline import DOCS, ELSE_QUESTION, UK_QUESTION

pytestmark = pytest.mark.brokers

FILLER = 150  # documents beside DOCS: enough records that catching up takes a moment
SLOW_KBIT = 800  # q3's cable while it is killed catching up: reading the log takes seconds


def host_env(tmp_path, host: str, suffix: str, broker) -> dict[str, str]:
    return log_hosts.host_env(tmp_path, host, suffix, query=host != "ingest", extra=broker.client_env)


@pytest.fixture
def network():
    why = netns.unavailable()
    if why:
        if brokers.in_ci():
            pytest.fail(f"separate-host tests must run in CI: {why}", pytrace=False)
        pytest.skip(why)
    with netns.Network(["broker", "ingest", "q1", "q2", "q3"]) as net:
        yield net


async def until(check, what: str, timeout: float = 60.0):
    """A host applies the log on its own time: the first result of ``check()`` that is not None, within a bound."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await check()
        if found is not None:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.2)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_query_hosts_of_their_own_make_their_stores_from_the_log(which, network, tmp_path):
    suffix, collection = uuid.uuid4().hex[:8], f"hosts-{uuid.uuid4().hex[:8]}"
    broker = own_broker(which, tmp_path, network["broker"].address, network["broker"].wrap)
    workers: dict[str, WorkerProcess] = {}

    async def start(host: str, names) -> WorkerProcess:
        workers[host] = await WorkerProcess(list(names), broker.url, host_env(tmp_path, host, suffix, broker),
                                            wrap=network[host].wrap).start(timeout=300)
        return workers[host]

    try:
        await start("ingest", log_hosts.role_args(query=False))
        await asyncio.gather(start("q1", log_hosts.role_args(query=True)), start("q2", log_hosts.role_args(query=True)))
        async with await connect(broker.url, settings_for_tests(broker)) as bus, \
                RequestClient(bus, name="caller") as client:
            def rag(host: str) -> DocumentRagClient:
                return DocumentRagClient(client, topic=f"document-rag-{host}", timeout=60)

            async def cites(host: str, question: str, chunk: str, **kw):
                r = await rag(host).ask(question, collection=collection, mode="hybrid", **kw)
                return r if chunk in r.cited else None

            docs = [msgspec.structs.replace(d, collection=collection) for d in DOCS]
            filler = [Document(document_id=f"filler-{i}", title=f"note {i}", collection=collection,
                               text=f"Note {i} records a measurement of sample {i} taken on day {i % 30}.")
                      for i in range(FILLER)]
            summary = await ingest(client, [*docs, *filler], timeout=120)
            assert summary.failed == [] and summary.documents == len(docs) + FILLER
            loaded = await load_graph(client, SAMPLE_GRAPH, ontology=read_ontology(SAMPLE_ONTOLOGY),
                                      collection=collection)
            assert loaded.rejected == []
            # A fact the document "loops" is the source of: its delete retracts it.
            fact = Fact("Ada Loops", "head_of_government_of", "United Kingdom", valid_from="2030-01-01",
                        source="loops", id="from-loops")
            added = await client.request("triples-load", LoadTriples(
                entities=[Entity(id="Ada Loops", type="Person")], facts=[fact], collection=collection),
                IngestResult, timeout=60)
            assert added.error is None and added.count == 2 and not added.warnings, added
            written = [*summary.seen, *added.seen]  # where the logs hold what was written
            for host in ("q1", "q2"):
                # An ask that must see the writes: each host answers once it has applied them, no polling.
                answer = await cites(host, ELSE_QUESTION, "loops#0", must_see=written)
                assert answer is not None and "else clause" in answer.answer.lower(), answer
                assert await _facts_from(rag(host), collection, "loops", must_see=written)
            # A query host killed with kill -9 while it catches up, then started again: it catches up.
            # Its cable is slow while it catches up and it publishes what it applied every half second, so
            # it has written some of its stores seconds before it has read the whole log (on a fast cable
            # the log is read before the first batch is published, and no moment is "mid-catch-up").
            network.throttle(network["q3"], kbit=SLOW_KBIT)
            slow = host_env(tmp_path, "q3", suffix, broker)
            slow[log_hosts.var("documents-replica", "batch_s")] = "0.5"
            killed = WorkerProcess(log_hosts.role_args(query=True), broker.url, slow, wrap=network["q3"].wrap)
            await killed.spawn()
            # Killed once a batch it applied is in its stores and its checkpoint, before it says ready.
            await until(lambda: _started(tmp_path / "q3"), "q3 begins to catch up", timeout=120)
            was_ready = killed.ready
            killed.kill()
            await killed.stop(timeout=15)
            network.unthrottle(network["q3"])
            assert not was_ready, "q3 caught up before it could be killed: the log is too short for this test"
            await start("q3", log_hosts.role_args(query=True))
            answer = await cites("q3", ELSE_QUESTION, "loops#0")  # ready means caught up: no waiting
            assert answer is not None, "q3 restarted without the ingested document"
            # A delete reaches every host, the graph facts it was the source of too.
            before = datetime.now(UTC).isoformat()
            await asyncio.sleep(0.05)
            deleted = await client.request("document-delete", DeleteDocument(document_id="loops",
                                                                              collection=collection),
                                           IngestResult, timeout=60)
            assert deleted.error is None and deleted.retracted == 1 and len(deleted.seen) == 2, deleted
            for host in ("q1", "q2", "q3"):
                r = await rag(host).ask(ELSE_QUESTION, collection=collection, mode="hybrid", must_see=deleted.seen)
                assert "loops#0" not in r.cited, (host, r.cited)
                assert not await _facts_from(rag(host), collection, "loops", must_see=deleted.seen)
                assert await _facts_from(rag(host), collection, "loops", as_of=before), "as_of before the delete"
            # A host added last catches up and answers, the delete included.
            await workers.pop("q1").stop(timeout=30)
            fresh = host_env(tmp_path, "q1", suffix, broker)
            fresh["RAGBUS_DATA_DIR"] = str(tmp_path / "q1-new")
            workers["q1"] = await WorkerProcess(list(pipelines.LOG_REPLICA), broker.url, fresh,
                                                wrap=network["q1"].wrap).start(timeout=300)
            answer = await rag("q1").ask("What does __slots__ save?", collection=collection, mode="hybrid")
            assert "slots#0" in answer.cited and "loops#0" not in answer.cited
            assert not await _facts_from(rag("q1"), collection, "loops")
    finally:
        for w in workers.values():
            w.kill()
            await w.stop(timeout=15)
        broker.stop()
    print(f"\n{which}: q3 killed while it caught up, restarted and caught up")


async def _facts_from(rag: DocumentRagClient, collection: str, source: str, as_of: str | None = None,
                      must_see: list[str] | None = None):
    r = await rag.ask(UK_QUESTION, collection=collection, mode="hybrid", at_time="2031-01-01", as_of=as_of,
                      must_see=must_see or [])
    found = [f for f in r.facts if f.source == source]
    return found or None


async def _started(host_dir) -> bool | None:
    """Whether the host's documents replica has recorded a batch applied (its checkpoint file is there)."""
    return True if (host_dir / ".replicas" / "documents-replica" / CHECKPOINT).is_file() else None
