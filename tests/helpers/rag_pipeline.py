"""The end-to-end tests' documents and questions, and the whole pipeline running over them."""

from __future__ import annotations

import contextlib
import functools
import uuid
from pathlib import Path

import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology
from ragbus.ingestion import ingest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import Document
from ragbus.schema import topics as t

DOCS = [
    Document(document_id="with", title="with statement",
             text="The with statement wraps the execution of a block with methods defined by a context "
                  "manager. The context manager's __enter__ method is called before the block runs, and its "
                  "__exit__ method is called after it, even when the block raises an exception."),
    Document(document_id="loops", title="for statement",
             text="The for statement iterates over the elements of a sequence such as a string, tuple or "
                  "list. The else clause of a loop runs when the loop finishes without break."),
    Document(document_id="slots", title="__slots__",
             text="The __slots__ declaration reserves space for declared variables and prevents the "
                  "automatic creation of __dict__ for each instance, which saves memory."),
]


@contextlib.asynccontextmanager
async def pipeline(url, data_dir, monkeypatch, *, bus_settings=None, without=(), env=None, collection="default"):
    """Every processor but ``without``, each in a consumer group of its own (brokers outlive tests).

    A new group reads a topic from its start, so on a broker shared by the session a test
    keeps to a collection of its own: earlier tests' ingestion messages then land elsewhere.
    """
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(data_dir))
    settings = load_settings(environ={
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
        **(env or {}),
    })
    suffix = uuid.uuid4().hex[:8]
    for name in pipelines.EVERYTHING:
        settings.processors[name]["group"] = f"{name}-{suffix}"
    if bus_settings is not None:
        settings.bus = bus_settings
    names = [n for n in pipelines.EVERYTHING if n not in without]
    async with (
        processors_running(settings, names, url, ready_timeout=120),
        await connect(url, bus_settings) as bus,
        RequestClient(bus, name="test") as client,
    ):
        if "document-load" not in without:
            docs = [msgspec.structs.replace(d, collection=collection) for d in DOCS]
            summary = await ingest(client, docs, timeout=120)
            assert summary.failed == [] and summary.documents == len(DOCS)
            loaded = await load_graph(client, SAMPLE_GRAPH, ontology=read_ontology(SAMPLE_ONTOLOGY),
                                      collection=collection)
            assert loaded.rejected == []
        rag = DocumentRagClient(client, timeout=60)
        ask = functools.partial(rag.ask, collection=collection)
        ask.stream = functools.partial(rag.ask_stream, collection=collection)  # type: ignore[attr-defined]
        yield ask


QUESTIONS = [
    "How does a context manager wrap a block of code?", "__slots__", "What does the else clause of a for loop do?",
    "Who was head of government of the United Kingdom?", "What saves memory per instance?",
    "When is __exit__ called?", "How do I iterate over a list?", "Who was chancellor of Germany?",
]


def documents(collection: str) -> list:
    return [msgspec.structs.replace(d, collection=collection) for d in DOCS]


ELSE_QUESTION = "What does the else clause of a for loop do?"


UK_QUESTION = "Who was head of government of the United Kingdom?"


async def ingest_corpus(data_dir: Path) -> None:
    """DOCS and the sample graph into ``data_dir``, through the real ingestion processors."""
    name = f"ingest-{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGBUS_DATA_DIR", str(data_dir))
        settings = load_settings(environ={})
        try:
            async with processors_running(settings, pipelines.EVERYTHING, f"memory://{name}", ready_timeout=120), \
                    await connect(f"memory://{name}") as bus, RequestClient(bus, name="ingest") as client:
                summary = await ingest(client, DOCS, timeout=120)
                assert summary.failed == [] and summary.documents == len(DOCS)
                loaded = await load_graph(client, SAMPLE_GRAPH, ontology=read_ontology(SAMPLE_ONTOLOGY))
                assert loaded.rejected == []
        finally:
            drop_memory_broker(name)


def query_settings(bus_settings, *, rename_topics: bool, names=pipelines.QUERY):
    """Settings running ``names`` in groups of their own; ``rename_topics`` gives them private topics too.

    On a broker shared by the test session a new group reads a topic from its start, so there
    each run uses topics of its own; on a private memory bus the real topic names are used.
    Returns the settings and the topic of each processor.
    """
    settings = load_settings(environ={})
    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"{name}-{suffix}" if rename_topics else name for name in pipelines.QUERY}
    for name in names:
        settings.processors[name]["group"] = f"{name}-{suffix}"
        settings.processors[name]["topic"] = topics[name]
    settings.processors[t.DOCUMENT_RAG].update(
        prompt_topic=topics[t.PROMPT], embed_topic=topics[t.EMBED],
        doc_embeddings_topic=topics[t.DOC_EMBEDDINGS_QUERY], fetch_chunk_topic=topics[t.FETCH_CHUNK],
        keyword_topic=topics[t.KEYWORD_QUERY], kg_topic=topics[t.KG_QUERY],
    )
    settings.bus = bus_settings
    return settings, topics
