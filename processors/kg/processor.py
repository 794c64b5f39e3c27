"""The knowledge-graph processors: kg-query answers questions, kg-store loads triples.

- ``KgQueryProcessor``: ``KgQueryRequest`` -> ``KgQueryResponse``: the
  entities a question names, the facts about them (each with its citable
  ``text`` and provenance), and the facts that break the ontology with why.
  Any number of replicas; each replays the collection's log at start (ready
  only once loaded) and picks up what was appended since before every query.
  A question to a collection whose graph is empty asks documents-query whether
  the collection holds anything (``processors/runtime/collection_check.py``):
  one that holds nothing is answered with an ``EmptyCollection`` error.
- ``KgStoreProcessor``: ``LoadTriples`` from ``triples-load`` -> applied, what
  it changed logged and fsynced -> ``IngestResult(count, rejected)``. One per ``data_dir``:
  it holds the data directory's kg writer lock (``processors/stores/writer_lock.py``)
  from start to close, so a second kg-store, in this process or another,
  refuses to start rather than append to logs whose writer keeps the graph in
  memory and would never see the other's batches.

Every graph call runs on a thread of the processor's own, never on the
event loop: replaying a million facts takes seconds, and a query touching a
hub entity walks thousands of edges. One thread, so the store needs no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ClassVar, TypeVar

import msgspec

from ragbus.config.settings import data_dir
from ragbus.stores.seen import wait_seen
from ragbus.runtime.collection_check import CollectionCheck
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import (
    BadRequest,
    IngestResult,
    KgQueryRequest,
    KgQueryResponse,
    LoadTriples,
    check_collection,
)
from ragbus.schema.times import iso, parse_instant
from ragbus.schema.topics import GRAPH_LOG

from ragbus.stores.graphs_from_log import GraphsFromLog, started
from ragbus.stores.graph_files import GraphFiles
from .ontology import Ontology
from .settings import KgSettings
from .store import GraphStore

log = logging.getLogger(__name__)
T = TypeVar("T")
Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)


class _GraphProcessor(Processor[Req, Resp]):
    """What both kg processors share: their graphs, opened in ``start`` and closed in ``close``."""

    Settings = KgSettings
    settings: KgSettings
    writer: ClassVar[bool]

    def __init__(self, name: str, settings: KgSettings) -> None:
        super().__init__(name, settings)
        self._graphs: GraphFiles[GraphStore] | None = None
        # With ``changelog``: the graphs made from the bus's log.
        self._from_log: GraphsFromLog[GraphStore] | None = None

    async def start(self) -> None:
        if self.settings.changelog:
            s = self.settings
            self._from_log = await started(self.name, data_dir(s.data_dir), self.bus, GraphStore, _check_ontology,
                                                    topic=s.log_topic or GRAPH_LOG,
                                                    apply_timeout_s=s.apply_timeout_s,
                                                    report_interval_s=s.report_interval_s)
        else:
            self._graphs = GraphFiles(self.name, data_dir(self.settings.data_dir), GraphStore, writer=self.writer)

    async def close(self) -> None:
        if self._graphs is not None:
            graphs, self._graphs = self._graphs, None
            await graphs.close()
        if self._from_log is not None:
            made, self._from_log = self._from_log, None
            await made.close()

    def _require_graphs(self) -> GraphFiles[GraphStore]:
        if self._graphs is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._graphs

    async def _on_graph(self, collection: str, fn: Callable[[GraphStore], T]) -> T:
        """``fn`` of the collection's graph, on the graphs' thread, wherever the graphs come from."""
        if self._from_log is not None:
            made = self._from_log
            return await made.run(lambda: fn(made.open(collection)))
        graphs = self._require_graphs()
        return await graphs.run(lambda: fn(graphs.open(collection)[0]))


class KgQueryProcessor(_GraphProcessor[KgQueryRequest, KgQueryResponse]):
    """Facts about what a question names, valid at ``at_time``, as recorded at ``as_of``.

    A negative ``limit`` is refused, one above ``max_limit`` clamped; a bad
    ``at_time`` or ``as_of``, an empty or overlong question are refused with
    an error response naming the field. A collection with no graph has no facts; one that holds no
    documents either is refused (``EmptyCollection``), unless the question is an answer's graph path
    (``answering``: document-rag checks the whole answer).
    """

    request_type = KgQueryRequest
    response_type = KgQueryResponse
    writer = False

    def __init__(self, name: str, settings: KgSettings) -> None:
        super().__init__(name, settings)
        self._holdings: CollectionCheck | None = None

    async def start(self) -> None:
        await super().start()
        self._holdings = CollectionCheck(self.bus, name=f"{self.name}-collections",
                                         topic=self.settings.documents_topic)
        if self._from_log is not None:
            return  # caught up with the log already
        graphs = self._require_graphs()
        for collection in graphs.existing():
            store, _ = await graphs.run(graphs.open, collection)
            log.info("%s: %s: %d fact versions, %d entities", self.name, collection, len(store), len(store.nodes))

    async def close(self) -> None:
        try:
            if self._holdings is not None:
                holdings, self._holdings = self._holdings, None
                await holdings.close()
        finally:
            await super().close()

    async def handle(self, request: KgQueryRequest, context: RequestContext) -> KgQueryResponse:
        if request.limit < 0:
            raise BadRequest(f"limit must be 0 or more, got {request.limit}")
        if len(request.question) > self.settings.max_question_chars:
            raise BadRequest(
                f"question is {len(request.question)} characters, "
                f"over max_question_chars={self.settings.max_question_chars}"
            )
        if not request.question.strip():
            raise BadRequest("question is empty")
        check_collection(request.collection)
        if request.must_see:
            s = self.settings
            await wait_seen(request.must_see, data_dir(s.data_dir), s.log_topic or GRAPH_LOG, s.fresh_wait_s,
                            from_log=s.changelog)
        at_time = parse_instant(request.at_time, what="at_time") if request.at_time is not None else None
        as_of = parse_instant(request.as_of, what="as_of") if request.as_of is not None else None
        limit = min(request.limit, self.settings.max_limit)

        def query(store: GraphStore):
            found = store.query(request.question, at_time=at_time, as_of=as_of, limit=limit,
                                answering=request.answering)
            return found, not store.nodes and not len(store)

        found, graphless = await self._on_graph(request.collection, query)
        if graphless and not request.answering and self._holdings is not None:
            await self._holdings.require(request.collection, request.must_see)
        return KgQueryResponse(
            entities=found.entities,
            facts=found.facts,
            rejected=found.rejected,
            at_time=iso(at_time) if at_time else None,
            as_of=iso(as_of) if as_of else None,
        )


class KgStoreProcessor(_GraphProcessor[LoadTriples, IngestResult]):
    """Apply a batch to its collection's graph and log it; reply with how much was added and what was not.

    ``count`` is entities declared plus fact versions added; ``unchanged``
    the entities and facts already held exactly as sent (they add nothing, so
    reloading a file or resending a batch is harmless); ``rejected`` lists
    the items left out, each with why; ``warnings`` the facts stored that the
    collection's ontology rejects at query time. A bad ontology refuses the
    whole batch (an error response) and logs nothing.
    """

    request_type = LoadTriples
    response_type = IngestResult
    writer = True

    async def handle(self, request: LoadTriples, context: RequestContext) -> IngestResult:
        check_collection(request.collection)
        if self._from_log is not None:
            return await self._from_log.load(request)
        graphs = self._require_graphs()

        def load() -> IngestResult:
            store, graph_log = graphs.open(request.collection)
            try:
                result = store.apply(request, now=datetime.now(UTC))  # an OntologyError refuses the batch first
                # What the batch changed, stamped; an identical reload, or a retraction of what is not
                # believed, changed nothing and leaves the log as it is.
                if result.log is not None:
                    graph_log.append(result.log)
            except BaseException:
                # The store may hold part of a batch the log does not (a full disk, say): forget it,
                # so the retry rebuilds from the log and applies the whole batch again.
                graphs.forget(request.collection)
                raise
            return IngestResult(
                count=result.count, unchanged=result.unchanged, rejected=result.rejected, warnings=result.warnings,
                retracted=result.retracted,
            )

        return await graphs.run(load)


def _check_ontology(batch: LoadTriples) -> None:
    """A batch whose ontology is bad is refused (``OntologyError``) before it is logged."""
    if batch.ontology is not None:
        Ontology.from_dict(batch.ontology)
