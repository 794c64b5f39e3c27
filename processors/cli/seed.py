"""First use: the default collection, while entirely empty, gets the default corpus and the sample graph.

Only the default collection, and only while it has neither documents nor a
graph: a mistyped ``--collection`` is an error that says how to fill it, and
a collection a user filled (the default one too) never gets the Python
reference or the sample graph mixed in.

All or resumed, never half: first use writes ``first-use.progress`` in the
collection's directory before it stores anything, adds each document's id
once every store holds it, and only when the corpus and the graph are both
in, writes ``first-use.done`` (atomically) and removes the progress file.
A run that finds the progress file without the done mark (Ctrl-C, a crash)
sends the documents not listed and the graph if its log holds nothing yet;
re-ingesting a document replaces it, so the one in flight when the run
stopped is simply sent again.

``ragbus ask`` on the embedded bus calls ``first_use_plan`` before it starts
any processor (so an ask that needs no seeding starts no writer) and
``FirstUse.run`` when there is one; reliability tests and ``scripts/chaos.py``
call ``build_stores`` to fill a data directory of their own through the same
real ingestion processors.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from config import pipelines
from config.settings import Settings, data_dir, load_settings
from processors.bus import connect
from processors.doc_embeddings.store import collection_dir
from processors.keyword.index import exists, index_path
from processors.kg.store import graph_path, load_log
from processors.runtime.request_client import RequestClient
from processors.runtime.worker import processors_running, put_stores_in
from schema import DEFAULT_COLLECTION, Document, check_collection

from .documents import builtin_corpus
from .graph_files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology
from .ingest import ingest
from .progress import progress_bar

DONE = "first-use.done"
PROGRESS = "first-use.progress"


class EmptyCollection(ValueError):
    """A question to a collection that holds nothing, and that first use does not fill."""


def _configured(settings: Settings, name: str) -> Path:
    return data_dir(settings.processors.get(name, {}).get("data_dir", ""))


def has_documents(settings: Settings, collection: str) -> bool:
    return exists(index_path(_configured(settings, "keyword-query"), collection)) or collection_dir(
        _configured(settings, "doc-embeddings-query"), collection
    ).is_dir()


def graph_log(settings: Settings, collection: str) -> Path:
    return graph_path(_configured(settings, "kg-query"), collection)


def _graph_loaded(settings: Settings, collection: str) -> bool:
    """Whether the collection's graph log holds a whole batch (first use sends the sample in one)."""
    path = graph_log(settings, collection)
    return path.exists() and load_log(path)[1].offset > 0


class FirstUse:
    """The first use of one collection: what is in already, and the marks that say so."""

    def __init__(self, settings: Settings, collection: str) -> None:
        self.settings = settings
        self.collection = check_collection(collection)
        # Beside the keyword index: the marks describe that data dir's collection, not another's.
        self.directory = _configured(settings, "keyword-query") / collection

    @property
    def done(self) -> bool:
        return (self.directory / DONE).exists()

    @property
    def begun(self) -> bool:
        return (self.directory / PROGRESS).exists()

    def stored(self) -> set[str]:
        """Ids of the documents every store holds; a line cut short by a crash is no id of the corpus."""
        try:
            return set((self.directory / PROGRESS).read_text().split("\n"))
        except FileNotFoundError:
            return set()

    def _begin(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / PROGRESS).touch()
        _fsync_dir(self.directory)  # the mark of a begun first use outlives whatever is stored next

    def _record(self, doc: Document) -> None:
        with open(self.directory / PROGRESS, "a") as f:
            f.write(doc.document_id + "\n")

    def _finish(self, documents: int) -> None:
        tmp = self.directory / (DONE + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{documents} topics of the Python language reference and the sample graph\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / DONE)
        _fsync_dir(self.directory)
        (self.directory / PROGRESS).unlink(missing_ok=True)

    async def run(self, client: RequestClient, out=None) -> None:
        """Store what is not in yet (all of it, the first time), then mark the collection done.

        Runs with the writers started, so holding their locks: a first use another process finished
        meanwhile is seen here, and not begun again.
        """
        if self.done:
            return
        out = out or sys.stderr  # looked up now: a test or caller may have replaced it
        if not self.begun:
            self._begin()
        corpus = builtin_corpus(self.collection)
        stored = self.stored()
        todo = [d for d in corpus if d.document_id not in stored]
        if todo:
            resumed = f", resuming: {len(corpus) - len(todo)} already in" if len(todo) < len(corpus) else ""
            print(f"first use: ingesting the Python language reference ({len(corpus)} topics{resumed})", file=out)
            progress = progress_bar(out, interval_s=self.settings.client.progress_interval_s)
            summary = await ingest(client, todo, on_progress=progress, on_stored=self._record)
            if summary.failed:
                raise RuntimeError(f"ingesting the default corpus failed: {summary.failed[0]}")
        if not _graph_loaded(self.settings, self.collection):
            await _load_sample_graph(client, self.collection, out)
        self._finish(len(corpus))


def first_use_plan(settings: Settings, collection: str) -> FirstUse | None:
    """The first use to run before answering from ``collection``, if any; ``EmptyCollection`` if it is
    empty and not one that first use fills."""
    first = FirstUse(settings, collection)
    if first.done:
        return None
    if first.begun:
        return first  # interrupted: finish it, whatever it stored so far
    empty = not has_documents(settings, collection) and not graph_log(settings, collection).exists()
    if not empty:
        return None  # the user's own documents or graph: nothing of ours goes in
    if collection == DEFAULT_COLLECTION:
        return first
    raise EmptyCollection(
        f"collection {collection!r} has no documents: ingest some with "
        f"`ragbus ingest PATH... --collection {collection}` (or load a graph with "
        f"`ragbus kg load FILE --collection {collection}`); first use fills only {DEFAULT_COLLECTION!r}"
    )


async def first_use(client: RequestClient, settings: Settings, collection: str, out=None) -> None:
    """Run the first use ``collection`` needs, if any, with the ingestion processors already running."""
    plan = first_use_plan(settings, collection)
    if plan is not None:
        await plan.run(client, out)


async def _load_sample_graph(client: RequestClient, collection: str, out=None) -> None:
    if out is not None:
        print("first use: loading the sample knowledge graph", file=out)
    loaded = await load_graph(client, SAMPLE_GRAPH, collection=collection, ontology=read_ontology(SAMPLE_ONTOLOGY),
                              on_progress=progress_bar(out, unit="item") if out else None)
    if loaded.rejected:
        raise RuntimeError(f"loading the sample graph failed: {loaded.rejected[0]}")


async def load_documents_and_graph(client: RequestClient, collection: str, documents: Sequence[Document]) -> None:
    """Ingest ``documents`` and load the sample graph; fail on the first problem."""
    summary = await ingest(client, list(documents))
    if summary.failed:
        raise RuntimeError(f"ingesting the documents failed: {summary.failed[0]}")
    await _load_sample_graph(client, collection)


async def build_stores(directory: str | Path, collection: str, documents: Sequence[Document]) -> None:
    """Documents and the sample graph written into ``directory`` by the real ingestion processors on memory://."""
    settings = load_settings(environ={})
    put_stores_in(settings, directory)  # every store in directory, whatever the environment says
    url = f"memory://seed-{uuid.uuid4().hex[:8]}"
    async with processors_running(settings, list(pipelines.EVERYTHING), url, ready_timeout=300):
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="load") as client:
            await load_documents_and_graph(client, collection, documents)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
