"""The document-rag processor with ``shards = 2`` on a memory:// bus, over stand-ins of each shard's processors.

Each shard's doc-embeddings-query, keyword-query and fetch-chunk are stand-ins on ``<topic>.shard-<k>``
(the per-shard query processors are the replica side's), holding the documents the documents log's
partitions put in that shard. document-rag must merge both shards' hits, fetch each chunk's text from
the shard of its document, and, when a shard has no processor at all, answer from the other and say
``shard-1`` in ``degraded``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.config.settings import ProcessorSettings, SettingsError
from ragbus.document_rag import DocumentRagProcessor, DocumentRagSettings
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.schema import SCHEMAS, ChunkMatch, DocEmbeddingsResponse, EmbedResponse, FetchChunkResponse
from ragbus.schema import KeywordQueryResponse, PromptResult
from ragbus.schema import topics as t
from ragbus.schema.changelog import document_order, token
from ragbus.schema.shards import shard_of, shard_topic

from ..helpers.serving import client_on, serving

SHARDS = 2
QUESTION = "which shard holds it?"
SEEN = token(t.DOCUMENTS_LOG, "7")


class StandIn(Processor):
    """Serves ``topic`` with the request and response types of ``kind``'s topic; answers ``answer(request)``."""

    def __init__(self, topic: str, kind: str, answer: Callable) -> None:
        super().__init__(topic, ProcessorSettings(topic=topic, group=topic))
        self.request_type, self.response_type = SCHEMAS[kind]
        self.answer = answer
        self.requests: list = []

    async def handle(self, request, context: RequestContext):
        self.requests.append(request)
        return self.answer(request)


async def documents_by_shard(bus) -> dict[int, list[str]]:
    """Two documents of the default collection in each shard, by the bus's own partition of their records."""
    held: dict[int, list[str]] = {k: [] for k in range(SHARDS)}
    for n in range(100):
        document = f"doc{n}"
        shard = shard_of(await bus.partition_of(t.DOCUMENTS_LOG, document_order("default", document)), SHARDS)
        if len(held[shard]) < 2:
            held[shard].append(document)
    assert all(len(documents) == 2 for documents in held.values()), held
    return held


def shard_stand_ins(shard: int, documents: list[str]) -> list[StandIn]:
    """One shard's query processors: chunks ``<document>#0`` and ``#1`` of its documents, found without
    their text (so document-rag fetches it), and fetched with a text that names the shard."""
    chunks = [f"{d}#{p}" for d in documents for p in range(2)]
    # Distinct scores across shards: shard k's chunk i scores (10 * k + i + 1); keyword reversed.
    vector = [ChunkMatch(c, (10 * shard + i + 1) / 100, document_id=c.split("#")[0]) for i, c in enumerate(chunks)]
    keyword = [ChunkMatch(c, float(40 - 10 * shard - i), document_id=c.split("#")[0]) for i, c in enumerate(chunks)]

    def best(matches: list[ChunkMatch], limit: int) -> list[ChunkMatch]:
        return sorted(matches, key=lambda m: -m.score)[:limit]

    def fetched(request) -> FetchChunkResponse:  # only its own chunks: a fetch sent to the wrong shard finds none
        return FetchChunkResponse(chunks=[ChunkMatch(c, text=f"shard-{shard} text of {c}")
                                          for c in request.chunk_ids if c in chunks])

    return [
        StandIn(shard_topic(t.DOC_EMBEDDINGS_QUERY, shard), t.DOC_EMBEDDINGS_QUERY,
                lambda r: DocEmbeddingsResponse(matches=best(vector, r.limit))),
        StandIn(shard_topic(t.KEYWORD_QUERY, shard), t.KEYWORD_QUERY,
                lambda r: KeywordQueryResponse(matches=best(keyword, r.limit))),
        StandIn(shard_topic(t.FETCH_CHUNK, shard), t.FETCH_CHUNK, fetched),
    ]


def document_rag(**settings) -> DocumentRagProcessor:
    name = f"rag-{uuid.uuid4().hex[:8]}"
    return DocumentRagProcessor(t.DOCUMENT_RAG, DocumentRagSettings(
        topic=name, group=name, shards=SHARDS, retrieval_mode="hybrid", max_concepts=0, use_graph=False,
        resend_after_s=0, **settings))


@pytest.fixture
async def bus():
    name = f"shards-{uuid.uuid4().hex[:12]}"
    opened = await connect(f"memory://{name}")
    yield opened
    await opened.close()
    drop_memory_broker(name)


@contextlib.asynccontextmanager
async def running(bus, processors):
    async with contextlib.AsyncExitStack() as stack:
        for processor in processors:
            await stack.enter_async_context(serving(bus, processor))
        yield


def embed() -> StandIn:
    return StandIn(t.EMBED, t.EMBED, lambda r: EmbedResponse(vectors=[[1.0, 0.0] for _ in r.texts]))


async def test_document_rag_asks_both_shards_merges_them_and_fetches_each_chunk_from_its_shard(bus):
    held = await documents_by_shard(bus)
    stand_ins = [p for k in range(SHARDS) for p in shard_stand_ins(k, held[k])]
    rag = document_rag()
    async with running(bus, [embed(), *stand_ins, rag]), client_on(bus) as client:
        r = await DocumentRagClient(client, topic=rag.settings.topic, timeout=30).ask(
            QUESTION, doc_limit=8, answer=False, must_see=[SEEN])

    assert r.degraded == [] == r.problems
    assert r.paths == ["vector", "keyword"]
    every_chunk = {f"{d}#{p}" for k in range(SHARDS) for d in held[k] for p in range(2)}
    assert {c.chunk_id for c in r.chunks} == every_chunk
    for chunk in r.chunks:  # each text from the shard that holds its document
        shard = next(k for k in range(SHARDS) if chunk.chunk_id.split("#")[0] in held[k])
        assert chunk.text == f"shard-{shard} text of {chunk.chunk_id}"
    queries = [p for p in stand_ins if not p.settings.topic.startswith(t.FETCH_CHUNK)]
    # Every request carries the must_see: one to each doc-embeddings-query; to each keyword-query two, its
    # statistics of the question's terms, then the search with the statistics of both shards.
    assert all(p.requests and all(r.must_see == [SEEN] for r in p.requests) for p in queries)
    keywords = [p for p in queries if p.settings.topic.startswith(t.KEYWORD_QUERY)]
    assert [[r.statistics_only for r in p.requests] for p in keywords] == [[True, False]] * SHARDS
    # Each fetch went to one shard, for a chunk of that shard's own documents.
    fetches = [p for p in stand_ins if p.settings.topic.startswith(t.FETCH_CHUNK)]
    assert sum(len(p.requests) for p in fetches) == len(every_chunk)


async def test_a_shard_nobody_serves_is_left_out_and_the_answer_says_so(bus):
    held = await documents_by_shard(bus)
    rag = document_rag(call_timeout_s=1.0, path_timeout_s=0.5)
    prompt = StandIn(t.PROMPT, t.PROMPT, lambda r: PromptResult("text", "an answer"))
    async with running(bus, [embed(), prompt, *shard_stand_ins(0, held[0]), rag]), client_on(bus) as client:
        asker = DocumentRagClient(client, topic=rag.settings.topic, timeout=30)
        r = await asker.ask(QUESTION, doc_limit=8, answer=False)
        pieces = [p async for p in asker.ask_stream(QUESTION, doc_limit=8, answer_pieces=False)]

    assert r.degraded == ["shard-1"]
    assert sorted(r.problems) == ["shard-1: doc-embeddings-query: timed out", "shard-1: keyword-query: timed out"]
    assert {c.chunk_id for c in r.chunks} == {f"{d}#{p}" for d in held[0] for p in range(2)}
    # A streamed answer says it too, in its sources piece and its final one.
    sources = next(p for p in pieces if p.kind == "sources")
    assert sources.degraded == ["shard-1"]
    assert pieces[-1].response.answer == "an answer" and pieces[-1].response.degraded == ["shard-1"]


class NoPartitions:
    """A bus whose log topics have no partitions, as Pulsar's."""

    url = "pulsar://somewhere:6650"

    async def log_partitions(self, topic: str) -> int:
        from ragbus.bus import LogTopicsUnsupported

        raise LogTopicsUnsupported(f"{self.url}: log topics here have no partitions to read apart")


async def test_shards_on_a_bus_without_log_partitions_refuse_to_start():
    rag = document_rag()
    rag.bus = NoPartitions()  # type: ignore[assignment]

    with pytest.raises(SettingsError, match=r"shards = 2 needs a bus whose log topics have partitions "
                                            r"\(Kafka or memory://\).*pulsar://somewhere"):
        await rag.start()


async def test_shards_that_do_not_divide_the_logs_partitions_refuse_to_start(bus):
    rag = DocumentRagProcessor(t.DOCUMENT_RAG, DocumentRagSettings(shards=3))
    rag.bus = bus  # memory:// logs have 4 partitions

    with pytest.raises(SettingsError, match="a log of 4 partitions cannot be split into 3 equal shards"):
        await rag.start()
