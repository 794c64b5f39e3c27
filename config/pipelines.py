"""Which processors work together: every list of processor names is written here, once.

A name is a ``[processors.NAME]`` section of ``config/defaults.toml``;
``tests/unit/test_pipelines.py`` checks each list against it. Commands on the
embedded bus start the list they need in their own process; benchmarks,
tests and ``ragbus worker`` deployments use the same lists.
"""

from __future__ import annotations

# Write the stores: documents in, chunked, embedded and stored; documents out again.
# document-load has the stores switch a document's versions (and drop a failed load's) on their
# delete topics, so the delete side belongs here too;
# document-delete also retracts the document's facts from the graph, through kg-store.
# The library (document-record, documents-query) is told of every document stored and removed, and
# tells document-load which documents it holds unchanged.
DELETE = ("document-delete", "doc-embeddings-delete", "keyword-delete", "kg-store", "document-record")
# document-convert reads the files ingest sends it (PDFs and images, with [convert] on_bus): OCR is slow,
# so it scales with the ingestion hosts.
INGEST = ("embed", "document-load", "doc-embeddings-store", "keyword-store", "documents-query", *DELETE,
          "document-convert")

# List what the stores hold: `ragbus documents`, `ragbus collections` (on a deployment, answered by
# the documents-query of the ingestion workers: INGEST runs it for document-load).
LIST = ("documents-query",)

# Read the document stores directly: what retrieval benchmarks ask (with embed for the query vector).
RETRIEVAL = ("embed", "doc-embeddings-query", "fetch-chunk", "keyword-query")

# The knowledge graph: kg-store writes it, kg-query reads it.
GRAPH_LOAD = ("kg-store",)
GRAPH_QUERY = ("kg-query",)
GRAPH = (*GRAPH_LOAD, *GRAPH_QUERY)

# What writes the stores of a data directory: one process runs all of them for a data dir (the
# keyword and kg writers take a lock at start and refuse a second process; see processors/stores/writer_lock.py).
WRITERS = ("doc-embeddings-store", "doc-embeddings-delete", "keyword-store", "keyword-delete", *GRAPH_LOAD,
           "document-record")

# Answer questions: what every query replica runs.
QUERY = (*RETRIEVAL, *GRAPH_QUERY, "prompt", "document-rag")

# A query host whose stores come from the bus's logs (changelog = true): documents-replica writes the host's own
# data dir from the documents log, the query processors read it, kg-query makes its graphs from the graph log.
# Only for stores made from the logs: documents-replica is the writer of its host's data dir, so it never runs
# beside the writers of a data dir (EVERYTHING).
LOG_ONLY = ("documents-replica",)
LOG_REPLICA = (*LOG_ONLY, *QUERY, "documents-query")

# A query host of a sharded deployment ([stores] shards): shard-host keeps the shards the broker gives it, each
# served by its own doc-embeddings-query, fetch-chunk and keyword-query on the shard's topics; document-rag asks
# every shard. The library (documents-query) is the ingestion hosts' (they keep the whole log's).
SHARD_HOST = ("shard-host",)
SHARDED_QUERY = (*SHARD_HOST, "embed", *GRAPH_QUERY, "prompt", "document-rag")

# What makes a host's stores from the log, and so never runs beside a data dir's writers (``ragbus worker --all``).
FROM_THE_LOG = (*LOG_ONLY, *SHARD_HOST)

# Everything the embedded pipeline needs in one process (``ragbus ask`` on memory://).
EVERYTHING = tuple(dict.fromkeys((*INGEST, *GRAPH_LOAD, *QUERY)))


# A host of a deployment, one switch each (``ragbus worker --role``, ``[worker] role``): what it runs
# with the stores in the files of a data dir, and with the stores made from the log (``[stores] log``),
# where each host keeps a replica of its own (documents-replica: an ingestion host's library, which
# document-load asks, and a query host's every store).
ROLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ingest": ((*INGEST,), (*INGEST, *LOG_ONLY)),
    "query": ((*QUERY, *LIST), LOG_REPLICA),
    "all": (EVERYTHING, (*EVERYTHING, *LOG_ONLY)),
}


def role(name: str, *, log: bool, shards: int = 0) -> tuple[str, ...]:
    """The processors a host of role ``name`` runs (``ROLES``), with its stores on the log or not; a query
    host of a sharded deployment (``shards``, which needs the log) runs ``SHARDED_QUERY``."""
    try:
        files, from_log = ROLES[name]
    except KeyError:
        raise ValueError(f"unknown role {name!r}: one of {', '.join(ROLES)}") from None
    if shards and name != "ingest":
        if not log or name != "query":
            raise ValueError(f"[stores] shards = {shards} needs [stores] log = true and the query role: a sharded "
                             f"collection is served by query hosts that make their shards from the log")
        return SHARDED_QUERY
    return from_log if log else files

