"""Slow and failing dependencies of the orchestrator: it times out, degrades as documented, leaks nothing.

The document-rag processor runs over the memory bus with the real retrieval
processors, except one, replaced by a stand-in with the real request and
response types that (a) hangs, (b) answers only after the caller gave up,
or (c) answers with an error:

- keyword-query, hybrid mode: the answer comes from the vector path alone,
  within about ``path_timeout_s``, with ``degraded == ["keyword"]`` and why
  in ``problems``;
- kg-query: the answer comes without facts, ``degraded == ["kg"]``;
- embed, vector mode: nothing to degrade to, so an error response: type
  ``Timeout`` naming embed for (a) and (b), the remote error for (c).

A hung handler is cut by the base class at its request's deadline and its
``Timeout`` error, like a late answer, reaches the orchestrator's
RequestClient after it gave up: dropped and counted in ``stats.late``. After
each batch has settled, the event loop's tasks and the client's pending
futures are back at their baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.config.settings import ProcessorSettings
from ragbus.bus import connect
from ragbus.document_rag import DocumentRagProcessor
from ragbus.document_rag.settings import DocumentRagSettings
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient, RemoteError
from ragbus.runtime.worker import processors_running
from ragbus.schema import ChunkMatch, EmbedResponse, KeywordQueryResponse, KgQueryResponse
from ragbus.schema import topics as t

from ..helpers.brokers import settings_for_tests
from ..helpers.rag_pipeline import ELSE_QUESTION, UK_QUESTION, ingest_corpus, query_settings
from ..helpers.serving import serving
from ..helpers.waiting import until

PATH_TIMEOUT_S = 1.0
# Well above the path timeout, so an answer within it shows that the path timeout cut the call.
CALL_TIMEOUT_S = 3.5
MARGIN_S = 3.0  # scheduling slack on a loaded 2-core CI machine
BATCH = 4  # concurrent questions per behaviour
BEHAVIOURS = ["hang", "late", "error"]


class Misbehaving(Processor):
    """Stands in for one processor; ``behaviour`` says how it fails the caller.

    - ``hang``: never answers by itself (the base class cuts it at the request's deadline);
    - ``late``: answers once ``release`` is set, which the test does after the caller gave up;
    - ``error``: raises, so the caller gets an error response at once.
    """

    behaviour = "hang"

    def __init__(self, name: str, settings: ProcessorSettings) -> None:
        super().__init__(name, settings)
        self.release = asyncio.Event()
        self.received = 0
        self.finished = 0  # handler runs over, however they ended

    async def handle(self, request, context: RequestContext):
        self.received += 1
        try:
            if self.behaviour == "error":
                raise RuntimeError(f"{self.name} stand-in is broken")
            if self.behaviour == "hang":
                await asyncio.Event().wait()  # nothing ever sets it
            await self.release.wait()
            return self.late_answer(request)
        finally:
            self.finished += 1

    def late_answer(self, request):
        raise NotImplementedError


class SlowKeyword(Misbehaving):
    request_type = t.SCHEMAS[t.KEYWORD_QUERY].request
    response_type = KeywordQueryResponse

    def late_answer(self, request):
        return KeywordQueryResponse(matches=[ChunkMatch("slots#0", 1.0, text="too late to matter")])


class SlowKg(Misbehaving):
    request_type = t.SCHEMAS[t.KG_QUERY].request
    response_type = KgQueryResponse

    def late_answer(self, request):
        return KgQueryResponse(entities=["late"])


class SlowEmbed(Misbehaving):
    request_type = t.SCHEMAS[t.EMBED].request
    response_type = EmbedResponse

    def late_answer(self, request):
        return EmbedResponse(vectors=[[1.0] + [0.0] * 383 for _ in request.texts], model="late")


STAND_INS = {t.KEYWORD_QUERY: SlowKeyword, t.KG_QUERY: SlowKg, t.EMBED: SlowEmbed}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("corpus")
    asyncio.run(ingest_corpus(data_dir))
    return data_dir


@contextlib.asynccontextmanager
async def pipeline_with(replaced: str, url: str):
    """document-rag (run here, so its client can be inspected), the real retrieval processors, one stand-in."""
    bus_settings = settings_for_tests()
    real = [n for n in pipelines.QUERY if n not in (replaced, t.DOCUMENT_RAG)]
    settings, topics = query_settings(bus_settings, rename_topics=False, names=real)
    rag_settings = dict(settings.processors[t.DOCUMENT_RAG], path_timeout_s=PATH_TIMEOUT_S,
                        call_timeout_s=CALL_TIMEOUT_S, group=f"rag-{uuid.uuid4().hex[:8]}", topic=t.DOCUMENT_RAG)
    rag_settings.pop("class")
    if replaced == t.EMBED:
        # A failed vector-mode query cancels the graph path; the answer of a kg call cancelled in
        # flight would then be one more late answer, or not, depending on timing. Without the
        # graph the late answers are exactly the stand-in's.
        rag_settings["use_graph"] = False
    if "resend_after_s" in DocumentRagSettings.__struct_fields__:
        rag_settings["resend_after_s"] = 0  # one request per call: late answers are counted exactly
    rag = DocumentRagProcessor(t.DOCUMENT_RAG, msgspec.convert(rag_settings, DocumentRagSettings))
    # Late answers must come back while the handler still waits, and cut answers must be late.
    assert rag.settings.handler_timeout_s > CALL_TIMEOUT_S + MARGIN_S
    stand_in = STAND_INS[replaced](replaced, ProcessorSettings(
        topic=topics[replaced], group=f"stand-in-{uuid.uuid4().hex[:8]}", drain_timeout_s=1.0))
    async with processors_running(settings, real, url, ready_timeout=120), \
            await connect(url, bus_settings) as bus, \
            serving(bus, stand_in), serving(bus, rag), \
            RequestClient(bus, name="asker") as asker:
        yield rag, stand_in, DocumentRagClient(asker, timeout=60)


def loop_state(rag: DocumentRagProcessor) -> tuple[int, int]:
    """Tasks of the event loop, and calls the orchestrator's client is waiting on."""
    return len(asyncio.all_tasks()), len(rag._client._pending)


async def ask_batch(ask, question: str, mode: str):
    """``BATCH`` questions at once; each result (or RemoteError) with its seconds."""

    async def one():
        started = time.perf_counter()
        try:
            result = await ask(question, mode=mode)
        except RemoteError as exc:
            result = exc
        return result, time.perf_counter() - started

    return await asyncio.gather(*(one() for _ in range(BATCH)))


async def settle(rag: DocumentRagProcessor, stand_in: Misbehaving, late_before: int, baseline) -> None:
    """Let every stand-in handler end and its late answer arrive; then the loop must be back at baseline."""
    expected_late = late_before + (0 if stand_in.behaviour == "error" else BATCH)
    stand_in.release.set()
    await until(lambda: stand_in.finished == stand_in.received, CALL_TIMEOUT_S + MARGIN_S,
                lambda: f"{stand_in.received - stand_in.finished} stand-in handler(s) still running")
    await until(lambda: rag._client.stats.late >= expected_late, MARGIN_S,
                lambda: f"late answers counted: {rag._client.stats.late}, expected {expected_late}")
    # The stand-in's consume tasks end right after publishing; nothing else may stay behind.
    await until(lambda: loop_state(rag) == baseline, MARGIN_S,
                lambda: f"(tasks, pending calls) = {loop_state(rag)}, baseline {baseline}: "
                        f"{[t.get_coro() for t in asyncio.all_tasks()]}")
    assert rag._client.stats.late == expected_late
    stand_in.release.clear()


async def run_behaviours(replaced: str, tmp_path, monkeypatch, corpus_dir, check) -> None:
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(corpus_dir))
    async with pipeline_with(replaced, f"memory://{tmp_path.name}") as (rag, stand_in, rag_client):
        mode = "vector" if replaced == t.EMBED else "hybrid"
        question = UK_QUESTION if replaced == t.KG_QUERY else ELSE_QUESTION
        stand_in.behaviour = "error"  # a warm-up: every lazily made thing exists before the baseline
        await ask_batch(rag_client.ask, question, mode)
        await settle(rag, stand_in, rag._client.stats.late, loop_state(rag))
        baseline = loop_state(rag)
        assert baseline[1] == 0
        for behaviour in BEHAVIOURS:
            stand_in.behaviour = behaviour
            late_before, received_before = rag._client.stats.late, stand_in.received
            results = await ask_batch(rag_client.ask, question, mode)
            assert stand_in.received - received_before == BATCH  # one call each: nothing resent
            for result, seconds in results:
                check(behaviour, result, seconds)
            await settle(rag, stand_in, late_before, baseline)


async def test_a_slow_or_failing_keyword_path_degrades_hybrid_to_vector(tmp_path, monkeypatch, corpus):
    def check(behaviour, r, seconds):
        assert not isinstance(r, Exception), r
        assert r.degraded == ["keyword"], (behaviour, r.degraded, r.problems)
        assert r.paths[:2] == ["vector", "keyword"]
        [problem] = r.problems
        if behaviour == "error":
            assert problem.startswith("keyword: RemoteError") and "stand-in is broken" in problem
            assert seconds < CALL_TIMEOUT_S
        else:
            assert problem == "keyword: timed out"
            assert PATH_TIMEOUT_S <= seconds < CALL_TIMEOUT_S, seconds
        # The vector path alone still answers, with citations.
        assert r.cited and r.cited[0].startswith("loops#"), (r.cited, r.answer)
        assert "too late to matter" not in r.answer

    await run_behaviours(t.KEYWORD_QUERY, tmp_path, monkeypatch, corpus, check)


async def test_a_slow_or_failing_graph_path_degrades_to_an_answer_without_facts(tmp_path, monkeypatch, corpus):
    def check(behaviour, r, seconds):
        assert not isinstance(r, Exception), r
        assert r.degraded == ["kg"], (behaviour, r.degraded, r.problems)
        assert "kg" not in r.paths and r.facts == []
        [problem] = r.problems
        if behaviour == "error":
            assert problem.startswith("kg: RemoteError") and "stand-in is broken" in problem
            assert seconds < CALL_TIMEOUT_S
        else:
            assert problem == "kg: timed out"
            assert PATH_TIMEOUT_S <= seconds < CALL_TIMEOUT_S, seconds
        assert r.answer and r.chunks

    await run_behaviours(t.KG_QUERY, tmp_path, monkeypatch, corpus, check)


async def test_a_slow_or_failing_embed_is_an_error_response_in_vector_mode(tmp_path, monkeypatch, corpus):
    def check(behaviour, r, seconds):
        assert isinstance(r, RemoteError), f"vector mode cannot degrade, yet answered: {r}"
        if behaviour == "error":
            assert r.error.type == "RemoteError" and "embed" in r.error.message, r.error
            assert "stand-in is broken" in r.error.message
            assert seconds < CALL_TIMEOUT_S
        else:
            # The orchestrator's own call timed out, not its handler: reported as what it is.
            assert r.error.type == "Timeout", r.error
            assert r.error.message.startswith(f"no response on '{t.EMBED}'"), r.error.message
            assert f"within {CALL_TIMEOUT_S:g}s" in r.error.message
            assert CALL_TIMEOUT_S <= seconds < CALL_TIMEOUT_S + MARGIN_S, seconds

    await run_behaviours(t.EMBED, tmp_path, monkeypatch, corpus, check)
