"""First use: the default collection, while entirely empty, gets the default corpus and the sample graph.

Only the default collection, and only while it has neither documents nor a
graph: a mistyped ``--collection`` is an error that says how to fill it, and
a collection a user filled (the default one too) never gets the Python
reference or the sample graph mixed in.

All or resumed, never half, and known from the stores alone: documents-query
says which collections hold anything and which documents a collection holds
(as for ``ragbus collections`` and the gateway), so no processor's files are
read here and nothing is written beside them. The sample graph goes in right
after the corpus's first document, so a collection holding a part of the
corpus and nothing else is a first use to finish (Ctrl-C, a crash): the next
run sends the documents it lacks, and the graph again (a reload of the same
graph changes nothing). One holding the whole corpus has the graph too.
Re-ingesting a document replaces it, so the one in flight when the run
stopped is simply sent again.

``ragbus ask`` on the embedded bus calls ``first_use_plan`` before it starts
any writer (so an ask that needs no seeding starts none: documents-query
alone answers the plan) and ``FirstUse.run`` when there is one. Tests and benchmarks
fill a data directory of their own with ``ragbus.testing.stores.build_stores``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from ragbus.config import pipelines
from ragbus.config.settings import Settings
from ragbus.bus import connect
from ragbus.ingestion import builtin_corpus, empty_collection, ingest
from ragbus.kg.files import load_sample_graph
from ragbus.runtime.collection_check import EmptyCollection
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import DEFAULT_COLLECTION, Document, check_collection

from .common import embedded_processors
from .library import list_collections, list_documents
from .progress import progress_bar


@contextlib.contextmanager
def said_plainly() -> Iterator[None]:
    """The pipeline's ``EmptyCollection`` answer (on a broker, where no first use asks before) raised as the
    error the first-use check raises, so the command says it in the same words on every bus."""
    try:
        yield
    except RemoteError as exc:
        if exc.error.type != EmptyCollection.__name__:
            raise
        raise EmptyCollection(exc.error.message) from None


async def corpus_stored(client: RequestClient, collection: str, timeout: float) -> set[str] | None:
    """The ids of the corpus the collection holds when it holds nothing else (an empty set: nothing at
    all), else None: the user's own documents or graph, or the whole corpus (first use done)."""
    if collection not in await list_collections(client, timeout=timeout):
        return set()
    held = {d.document_id for d in await list_documents(client, collection, timeout=timeout)}
    corpus = {d.document_id for d in builtin_corpus(collection)}
    return held if held and held < corpus else None


class FirstUse:
    """The first use of one collection: what of the corpus it holds decides what is sent."""

    def __init__(self, settings: Settings, collection: str) -> None:
        self.settings = settings
        self.collection = check_collection(collection)

    async def run(self, client: RequestClient, out=None) -> None:
        """Store what is not in yet (all of it, the first time).

        Asks again with the writers started, so holding their locks: a first use another process
        finished meanwhile is seen here, and not begun again."""
        out = out or sys.stderr  # looked up now: a test or caller may have replaced it
        c = self.settings.client
        stored = await corpus_stored(client, self.collection, c.request_timeout_s)
        if stored is None:
            return
        corpus = builtin_corpus(self.collection)
        todo = [d for d in corpus if d.document_id not in stored]
        resumed = f", resuming: {len(corpus) - len(todo)} already in" if stored else ""
        print(f"first use: ingesting the Python language reference ({len(corpus)} topics{resumed})", file=out)
        progress = progress_bar(out, interval_s=c.progress_interval_s)
        first, rest = (todo[:1], todo[1:]) if not stored else ([], todo)
        await self._ingest(client, first, 0, len(todo), progress)
        # Before all but the first document: a collection holding the whole corpus has the graph too.
        print("first use: loading the sample knowledge graph", file=out)
        await load_sample_graph(client, self.collection, on_progress=progress_bar(out, unit="item"))
        await self._ingest(client, rest, len(first), len(todo), progress)

    async def _ingest(self, client: RequestClient, batch: list[Document], before: int, total: int,
                      progress: Callable[[int, int, str], None]) -> None:
        """Ingest ``batch``, the documents after the ``before`` first of ``total``; fail on the first problem."""
        if not batch:
            return

        def shown(done: int, _: int, label: str) -> None:
            progress(before + done, total, label)

        summary = await ingest(client, batch, timeout=self.settings.client.store_timeout_s, on_progress=shown)
        if summary.failed:
            raise RuntimeError(f"ingesting the default corpus failed: {summary.failed[0]}")


async def first_use_plan(settings: Settings, collection: str, url: str) -> FirstUse | None:
    """The first use to run before answering from ``collection``, if any; ``EmptyCollection`` if it is
    empty and not one that first use fills. Asks documents-query (started here alone on memory://)."""
    collection = check_collection(collection)
    async with embedded_processors(settings, pipelines.LIST, url), await connect(url, settings.bus) as bus, \
            RequestClient(bus, name="first-use") as client:
        stored = await corpus_stored(client, collection, settings.client.request_timeout_s)
    if stored is None:
        return None  # the user's own documents or graph, or a first use done: nothing of ours goes in
    if stored or collection == DEFAULT_COLLECTION:
        return FirstUse(settings, collection)  # empty, or interrupted: fill it, or finish what it stored
    raise EmptyCollection(f"{empty_collection(collection)}; first use fills only {DEFAULT_COLLECTION!r}")


async def first_use(client: RequestClient, settings: Settings, collection: str, out=None) -> None:
    """Run the first use ``collection`` needs, if any, with the ingestion processors already running."""
    stored = await corpus_stored(client, check_collection(collection), settings.client.request_timeout_s)
    if stored is not None and (stored or collection == DEFAULT_COLLECTION):
        await FirstUse(settings, collection).run(client, out)
