"""Hosts whose stores come from the log: the environment of an ingestion host and of a query host.

Each host has a data dir of its own and runs its processors with ``changelog = true`` on this
run's log topics; a query host also serves every query processor (and its orchestrator's calls)
on topics of its own, so a caller can ask one host. Used by ``tests/reliability`` (hosts in
network namespaces, chaos under load) and ``scripts/chaos_log.py``.
"""

from __future__ import annotations

from pathlib import Path

from ragbus.config import pipelines
from ragbus.testing.chaos import worker_env

# An ingestion host: the writers, and a replica with the library document-load asks (``--role ingest``).
INGESTION = pipelines.role("ingest", log=True)
# A query host (``--role query``).
QUERY_HOST = pipelines.role("query", log=True)
# The orchestrator's sub-requests, each to the processor on its own host.
SUB_TOPICS = {"prompt_topic": "prompt", "embed_topic": "embed", "doc_embeddings_topic": "doc-embeddings-query",
              "fetch_chunk_topic": "fetch-chunk", "keyword_topic": "keyword-query", "kg_topic": "kg-query"}
_DOCUMENTS_LOG = ("doc-embeddings-store", "doc-embeddings-delete", "keyword-store", "keyword-delete",
                  "document-record", "documents-replica", "keyword-query", "doc-embeddings-query", "fetch-chunk",
                  "documents-query", "shard-host", "document-rag")
# What each shard of a sharded query host serves: on topics every host shares, a shard's (``<topic>.shard-<k>``).
SHARD_SERVED = {"doc-embeddings-query": "doc_embeddings_topic", "fetch-chunk": "fetch_chunk_topic",
                "keyword-query": "keyword_topic"}


def var(name: str, key: str) -> str:
    return f"RAGBUS_PROCESSORS__{name.upper().replace('-', '_')}__{key.upper()}"


def role_args(query: bool) -> list[str]:
    """What ``ragbus worker`` is given for a query host or an ingestion host: its role, one switch."""
    return ["--role", "query" if query else "ingest"]


def host_topic(name: str, host: str) -> str:
    """The topic ``name`` is served on by a query host."""
    return f"{name}-{host}"


def shard_served_topic(name: str, suffix: str) -> str:
    """The topic a shard-served processor's shards are named from on a sharded run (``<it>.shard-<k>``)."""
    return f"{name}-{suffix}"


def host_env(workdir: Path, host: str, suffix: str, *, query: bool, group: str | None = None,
             extra: dict[str, str] | None = None, shards: int = 0) -> dict[str, str]:
    """A host's environment: its own data dir (``workdir/host``); the stores from this run's logs (named by
    ``suffix``); its query processors' groups named by ``group`` (the host's own unless given: ingestion
    hosts that share their work share one); on a query host, every query processor on topics of its own.
    With ``shards``, a sharded deployment: a query host owns shards as ``host`` (its host id), and the
    processors serving each shard are on the run's shard topics, which every host shares."""
    env = worker_env(str(workdir / host), group or f"{host}-{suffix}")
    env["RAGBUS_STORES__LOG"] = "true"  # every store from the log: one switch ([stores] log)
    for name in _DOCUMENTS_LOG:
        env[var(name, "log_topic")] = f"ragbus.changelog.documents-{suffix}"
    for name in ("kg-store", "kg-query"):
        env[var(name, "log_topic")] = f"ragbus.changelog.graph-{suffix}"
    for name in ("keyword-query", "doc-embeddings-query", "fetch-chunk"):
        env[var(name, "refresh_interval_s")] = "0"
    if query:
        for name in QUERY_HOST:
            env[var(name, "topic")] = host_topic(name, host)
        env[var("embed", "bulk_topic")] = ""  # ingestion's embedding is the ingestion host's
        for key, name in SUB_TOPICS.items():
            env[var("document-rag", key)] = host_topic(name, host)
    if shards:
        env["RAGBUS_STORES__SHARDS"] = str(shards)
        env[var("shard-host", "host_id")] = host
        env[var("shard-host", "topic")] = host_topic("shard-host", host)
        for name, key in SHARD_SERVED.items():
            env[var(name, "topic")] = env[var(name, "group")] = shard_served_topic(name, suffix)
            env[var("document-rag", key)] = shard_served_topic(name, suffix)
    env.update(extra or {})
    return env
