"""First use: a collection with no documents gets the default corpus, one with no graph the sample graph.

``ragbus ask`` on the embedded bus calls ``first_use``; reliability tests and
``scripts/chaos.py`` call ``build_stores`` to fill a data directory of their own
through the same real ingestion processors.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from config import pipelines
from config.settings import Settings, data_dir, load_settings
from processors.bus import connect
from processors.keyword.index import exists, index_path
from processors.kg.store import graph_path
from processors.runtime.client import RequestClient
from processors.runtime.worker import processors_running, put_stores_in
from schema import Document

from .documents import builtin_corpus
from .graph_files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology
from .ingest import ingest
from .progress import progress_bar


def missing_stores(settings: Settings, collection: str) -> tuple[bool, bool]:
    """Whether the collection lacks documents, and whether it lacks a graph."""
    def configured(name: str) -> Path:
        return data_dir(settings.processors.get(name, {}).get("data_dir", ""))

    no_documents = not exists(index_path(configured("keyword-query"), collection))
    no_graph = not graph_path(configured("kg-query"), collection).exists()
    return no_documents, no_graph


async def load_documents_and_graph(
    client: RequestClient, collection: str, documents: Sequence[Document] | None, *, graph: bool, out=None
) -> None:
    """Ingest ``documents`` (when given) and load the sample graph (when ``graph``); fail on the first problem."""
    if documents:
        if out is not None:
            print(f"first use: ingesting the Python language reference ({len(documents)} topics)", file=out)
        summary = await ingest(client, list(documents), on_progress=progress_bar(out) if out else None)
        if summary.failed:
            raise RuntimeError(f"ingesting the default corpus failed: {summary.failed[0]}")
    if graph:
        if out is not None:
            print("first use: loading the sample knowledge graph", file=out)
        loaded = await load_graph(client, SAMPLE_GRAPH, collection=collection, ontology=read_ontology(SAMPLE_ONTOLOGY),
                                  on_progress=progress_bar(out) if out else None)
        if loaded.rejected:
            raise RuntimeError(f"loading the sample graph failed: {loaded.rejected[0]}")


async def first_use(client: RequestClient, settings: Settings, collection: str, out=sys.stderr) -> None:
    """Ingest the default corpus and load the sample graph into an empty collection."""
    no_documents, no_graph = missing_stores(settings, collection)
    documents = builtin_corpus(collection) if no_documents else None
    await load_documents_and_graph(client, collection, documents, graph=no_graph, out=out)


async def build_stores(directory: str | Path, collection: str, documents: Sequence[Document]) -> None:
    """Documents and the sample graph written into ``directory`` by the real ingestion processors on memory://."""
    settings = load_settings(environ={})
    put_stores_in(settings, directory)  # every store in directory, whatever the environment says
    url = f"memory://seed-{uuid.uuid4().hex[:8]}"
    async with processors_running(settings, list(pipelines.EVERYTHING), url, ready_timeout=300):
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="load") as client:
            await load_documents_and_graph(client, collection, documents, graph=True)
