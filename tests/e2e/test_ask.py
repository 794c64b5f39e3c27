"""End to end: a small corpus and the sample graph, asked through document-rag in every mode.

On the memory bus and on Kafka and Pulsar against the real brokers; every
processor is the real one (extractive prompt backend, MiniLM embeddings,
faiss, tantivy, networkx).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import uuid

import pytest

from ragbus.cli.ask import show
from ragbus.runtime.typed_clients import RemoteError

from ..helpers.brokers import settings_for_tests
from ..helpers.rag_pipeline import pipeline


async def check_modes(ask) -> None:
    for mode, question, doc in [
        ("vector", "How does a context manager wrap a block of code?", "with"),
        ("keyword", "__slots__", "slots"),
        ("hybrid", "What does the else clause of a for loop do?", "loops"),
    ]:
        r = await ask(question, mode=mode)
        assert r.error is None and r.degraded == [], (mode, r.problems)
        assert r.cited, (mode, r.answer)
        assert r.cited[0].startswith(f"{doc}#"), (mode, r.cited, r.answer)
        assert f"[{r.cited[0]}]" in r.answer
        expected_paths = {"vector": ["vector"], "keyword": ["keyword"], "hybrid": ["vector", "keyword"]}[mode]
        assert [p for p in r.paths if p != "kg"] == expected_paths
        assert r.timings_ms["total"] > 0


async def check_time_scoped_facts(ask) -> None:
    r = await ask("Who was head of government of the United Kingdom?", at_time="2012-03-01")
    assert [f.text for f in r.facts if "head_of_government_of" in f.text] == \
        ["David Cameron head_of_government_of United Kingdom"]
    assert r.at_time == "2012-03-01T00:00:00Z"
    assert r.header is not None and "Graph context valid as of 2012-03-01" in r.header
    assert r.header in r.answer and "David Cameron" in r.answer
    # `ragbus ask` prints each fact once: the answer cites it, Sources gives where it came from.
    shown = io.StringIO()
    show(r, out=shown)
    printed = shown.getvalue()
    for f in r.facts:
        assert printed.count(f.text) == 1, (f.text, printed)
    assert "sample:offices" in printed
    timeless = await ask("Who was head of government of the United Kingdom?")
    assert timeless.header is None and "Graph context valid as of" not in timeless.answer
    assert len([f for f in timeless.facts if "head_of_government_of" in f.text]) > 1
    # A question that names Python only in passing: the graph path runs and serves none of its facts.
    passing = await ask("How does Python resolve a name inside a nested function?")
    assert passing.error is None and "kg" in passing.paths and passing.facts == []


async def test_ask_in_every_mode_on_the_memory_bus(tmp_path, monkeypatch):
    async with pipeline(f"memory://{tmp_path.name}", tmp_path, monkeypatch) as ask:
        await check_modes(ask)
        await check_time_scoped_facts(ask)
        # Bad input: an error response that says what is wrong.
        for kwargs, message in [
            ({"query": "  "}, "empty"),
            ({"query": "x" * 100_000}, "over the limit"),
            ({"query": "with", "mode": "semantic"}, "unknown retrieval mode 'semantic'"),
            ({"query": "with", "at_time": "the day before"}, "at_time 'the day before'"),
            ({"query": "with", "doc_limit": -1}, "ValidationError: .*>= 1 - at `\\$.doc_limit`"),
            ({"query": "with", "doc_limit": 0}, "ValidationError: .*>= 1 - at `\\$.doc_limit`"),
        ]:
            with pytest.raises(RemoteError, match=message):
                await ask(kwargs.pop("query"), **kwargs)


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_ask_in_every_mode_against_a_real_broker(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    collection = f"e2e-{uuid.uuid4().hex[:8]}"
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=settings_for_tests(), collection=collection) as ask:
        await check_modes(ask)
        await check_time_scoped_facts(ask)
        # `ragbus ask --bus URL` starts nothing: it publishes the question and waits for these workers.
        env = {**os.environ, "RAGBUS_DATA_DIR": str(tmp_path / "unused"), "RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD": "8"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ragbus.cli", "ask", "What does the else clause of a for loop do?",
            "--bus", url, "--collection", collection, "--mode", "hybrid", "--json",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        answer = json.loads(out)
        assert answer["cited"] and answer["cited"][0].startswith("loops#")
        assert not (tmp_path / "unused").exists()  # no store was opened: no processor ran there


async def ragbus_on(url: str, *args: str, data_dir) -> tuple[int, str, str]:
    """``ragbus ARGS --bus URL`` in a process of its own: its exit status, output and errors."""
    env = {**os.environ, "RAGBUS_DATA_DIR": str(data_dir)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ragbus.cli", *args, "--bus", url,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_collection_that_holds_nothing_is_refused_on_kafka_as_on_the_embedded_bus(
        kafka_broker, tmp_path, monkeypatch):
    """On a broker, no first use asks documents-query before the question (that is memory://'s), so the
    pipeline itself refuses: document-rag for a question, whole or streamed, kg-query for a graph question."""
    url = kafka_broker.url
    empty = f"empty-{uuid.uuid4().hex[:8]}"
    says = (f"collection {empty!r} has no documents: ingest some with `ragbus ingest PATH... --collection {empty}` "
            f"(or load a graph with `ragbus kg load FILE --collection {empty}`)")
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=settings_for_tests(),
                        without=("document-load",)) as ask:  # nothing ingested: every collection holds nothing
        with pytest.raises(RemoteError) as whole:
            await ask("What does the else clause of a for loop do?", collection=empty)
        with pytest.raises(RemoteError) as streamed:
            async for _ in ask.stream("What does the else clause of a for loop do?", collection=empty):
                pass
        for refused in (whole.value, streamed.value):
            assert (refused.error.type, refused.error.message) == ("EmptyCollection", says)
        code, out, err = await ragbus_on(url, "ask", "What does the else clause of a for loop do?",
                                         "--collection", empty, data_dir=tmp_path / "unused")
        assert (code, out, err) == (2, "", f"ragbus: error: {says}\n")
        code, out, err = await ragbus_on(url, "kg", "query", "Who was head of government of the United Kingdom?",
                                         "--collection", empty, data_dir=tmp_path / "unused")
        assert (code, out, err) == (2, "", f"ragbus: error: {says}\n")
    assert not (tmp_path / "unused").exists()


async def test_hybrid_survives_a_dead_keyword_worker(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    async with pipeline(url, tmp_path, monkeypatch):
        pass  # ingest once with every processor
    env = {"RAGBUS_PROCESSORS__DOCUMENT_RAG__PATH_TIMEOUT_S": "1"}
    async with pipeline(f"{url}-2", tmp_path, monkeypatch, without=("keyword-query", "document-load"), env=env) as ask:
        r = await ask("What does the else clause of a for loop do?", mode="hybrid")
        assert r.degraded == ["keyword"] and "timed out" in r.problems[0]
        assert r.cited and r.cited[0].startswith("loops#")
        assert r.timings_ms["total"] < 30_000  # within the handler timeout, not stuck on the dead path


async def test_a_dead_embed_worker_gets_an_error_response_within_the_call_timeout(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    async with pipeline(url, tmp_path, monkeypatch):
        pass
    env = {"RAGBUS_PROCESSORS__DOCUMENT_RAG__CALL_TIMEOUT_S": "1",
           "RAGBUS_PROCESSORS__DOCUMENT_RAG__PATH_TIMEOUT_S": "1"}
    async with pipeline(f"{url}-2", tmp_path, monkeypatch, without=("embed", "document-load"), env=env) as ask:
        # The vector path cannot degrade in vector mode: the answer is an error that says what timed out.
        with pytest.raises(RemoteError, match="embed"):
            await ask("What does the else clause of a for loop do?", mode="vector")
        # Hybrid answers from the keyword path alone, and says the vector path degraded.
        r = await ask("What does the else clause of a for loop do?", mode="hybrid")
        assert r.degraded == ["vector"] and r.cited and r.cited[0].startswith("loops#")
