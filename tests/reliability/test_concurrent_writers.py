"""Two ingestion hosts write the same document ids at once, with stores from the log: nothing acknowledged is lost.

Two ingestion hosts and a query host, each a worker process with a data dir of its own, nothing
shared but the broker (Apache Kafka or Pulsar, the session's). Each writer takes document-load on
a topic of its own, so every pair of writes really is two hosts at once. For 40 ids, two versions
with different texts are sent together, one to each writer. The writers' replies say which
version is served (``IngestResult.superseded``); afterwards every host must serve, in faiss,
tantivy and the library alike, the version the replies name, and an ask carrying the served
write's ``must_see`` tokens must cite it.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.positions import latest, place
from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient, FetchChunkClient
from ragbus.testing.chaos import WorkerProcess
from ragbus.testing.log_hosts import host_env, host_topic, role_args, var
from ragbus.schema import Document, IngestResult, generation_of
from ragbus.schema.changelog import parse_token

from ..helpers.brokers import settings_for_tests
from ..helpers.log_documents import served_document

pytestmark = pytest.mark.brokers

PAIRS = 40
COLLECTION = "pairs"


def version_text(k: int, side: str) -> str:
    word = {"a": "amber", "b": "basalt"}[side]
    return (f"Record rc{k} in edition {side}: the {word} ledger of rc{k} holds the {word} weights "
            f"measured for sample rc{k}, and only edition {side} says {word}.")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_two_writers_of_one_id_at_once_agree_on_every_host_with_what_their_replies_say(which, tmp_path, request):
    broker = request.getfixturevalue(f"{which}_broker")
    suffix = uuid.uuid4().hex[:8]
    hosts = {"w1": False, "w2": False, "q1": True}
    workers: dict[str, WorkerProcess] = {}
    for host, query in hosts.items():
        extra = dict(broker.client_env)
        if not query:  # each writer takes document-load on a topic of its own: two hosts at once, every pair
            extra[var("document-load", "topic")] = f"document-load-{host}-{suffix}"
        env = host_env(tmp_path, host, suffix, query=query, group=None if query else f"writers-{suffix}", extra=extra)
        workers[host] = WorkerProcess(role_args(query), broker.url, env)
    try:
        await asyncio.gather(*(w.start(timeout=300) for w in workers.values()))
        async with await connect(broker.url, settings_for_tests(broker)) as bus, \
                RequestClient(bus, name="pairs", timeout_s=120) as client:
            replies = await _write_pairs(client, suffix)
            final = {k: _served_of(k, pair) for k, pair in replies.items()}
            superseded = sum(r.superseded is not None for pair in replies.values() for r in pair.values())
            print(f"\n{which}: {PAIRS} pairs, {superseded} writes answered superseded, "
                  f"{sum(v == _version(k, 'a') for k, (v, _) in final.items())} served edition a")
            await _ask_with_the_served_tokens(client, replies, final)
    finally:
        for w in workers.values():
            await w.stop(timeout=30)
    # Every host's data dir, brought to the log's end by a replica of the test's own (the hosts have stopped).
    log = f"ragbus.changelog.documents-{suffix}"
    async with await connect(broker.url, settings_for_tests(broker)) as bus:
        for host in hosts:
            replica = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
                data_dir=str(tmp_path / host), log_topic=log))
            replica.bus = bus
            await replica.start()
            await replica.close()
    disagree = []
    for host in hosts:
        for k, (version, _) in final.items():
            held = served_document(tmp_path / host, COLLECTION, f"rc{k}")[:3]
            if held != ({version: 1}, {version: 1}, version):
                disagree.append(f"{host} rc{k}: serves (faiss, tantivy, library) {held}, the replies say {version}")
    assert disagree == [], disagree[:10]


async def _write_pairs(client: RequestClient, suffix: str) -> dict[int, dict[str, IngestResult]]:
    slots = asyncio.Semaphore(8)

    async def send(k: int, side: str, host: str) -> IngestResult:
        doc = Document(document_id=f"rc{k}", text=version_text(k, side), title=f"rc{k}", collection=COLLECTION)
        result = await client.request(f"document-load-{host}-{suffix}", doc, IngestResult, timeout=120)
        assert result.error is None, (k, side, result.error)
        return result

    async def pair(k: int) -> tuple[int, dict[str, IngestResult]]:
        async with slots:
            a, b = await asyncio.gather(send(k, "a", "w1"), send(k, "b", "w2"))
            return k, {"a": a, "b": b}

    return dict(await asyncio.gather(*(pair(k) for k in range(PAIRS))))


def _served_of(k: int, pair: dict[str, IngestResult]) -> tuple[str, list[str]]:
    """The version the replies say is served, and the seen tokens of its write: the one not superseded, or
    (both served when they were answered) the one the log holds later."""
    versions = {side: _version(k, side) for side in pair}
    standing = [side for side, r in pair.items() if r.superseded is None]
    assert standing, f"rc{k}: both writes answered superseded: {pair}"
    for side, r in pair.items():
        if r.superseded is not None:  # it names the other's version, and where the log holds its switch
            other = "b" if side == "a" else "a"
            assert r.superseded.generation == versions[other], (k, side, r.superseded)
            assert r.superseded.seen and parse_token(r.superseded.seen), (k, side, r.superseded)
    if len(standing) == 2:
        standing.sort(key=lambda side: place(parse_token(pair[side].seen[0])[1]))
    side = standing[-1]
    return versions[side], pair[side].seen


def _version(k: int, side: str) -> str:
    """The version document-load builds of a one-part document sent without a content hash: from its title and text."""
    digest = hashlib.sha256(f"rc{k}".encode() + b"\0" + version_text(k, side).encode()).hexdigest()
    return generation_of("sha256:" + digest)


async def _ask_with_the_served_tokens(client: RequestClient, replies, final) -> None:
    """A read carrying the served write's tokens sees it: the chunk's text and the answer's citation."""
    fetch = FetchChunkClient(client, topic=host_topic("fetch-chunk", "q1"), timeout=120)
    rag = DocumentRagClient(client, topic=host_topic("document-rag", "q1"), timeout=120)
    for k, (version, seen) in sorted(final.items())[:10]:
        (chunk,) = await fetch.fetch([f"rc{k}#0"], collection=COLLECTION, must_see=latest(seen))
        assert chunk.generation == version, (k, chunk.generation, version)
        word = "amber" if _version(k, "a") == version else "basalt"
        answer = await rag.ask(f"Which ledger of rc{k} holds the weights?", collection=COLLECTION, mode="keyword",
                               must_see=latest(seen))
        assert word in answer.answer and f"rc{k}#0" in answer.cited, (k, word, answer.answer)
