"""Where each store of a collection lives in a data dir: the one place the stores' paths are drawn.

    <data_dir>/<collection>/faiss/            the vectors (vectors/store.py)
    <data_dir>/<collection>/tantivy/          the keyword index (keywords/index.py)
    <data_dir>/<collection>/staged/<store>/   versions staged, not yet switched to (staging.py)
    <data_dir>/<collection>/documents.log     the library (library.py)
    <data_dir>/<collection>/graph/log         the graph's log (graph_log.py)
    <data_dir>/.<store>-writer.lock           a writer's lock (writer_lock.py)
    <data_dir>/.replicas/<processor>/         a replica's snapshot (snapshots.py)
    <data_dir>/shard-<k>/                     a shard's own data dir, laid out as this one (shards.py)
"""

from __future__ import annotations

from pathlib import Path

from ragbus.schema import check_collection

LIBRARY = "documents.log"
GRAPH = ("graph", "log")


def vectors_dir(data_dir: str | Path, collection: str) -> Path:
    return Path(data_dir) / check_collection(collection) / "faiss"


def keywords_dir(data_dir: str | Path, collection: str) -> Path:
    return Path(data_dir) / check_collection(collection) / "tantivy"


def staging_dir(data_dir: str | Path, collection: str, store: str) -> Path:
    """Where ``store`` (``staging.FAISS_STAGING``, ``staging.KEYWORD_STAGING``) stages the collection's versions."""
    return Path(data_dir) / check_collection(collection) / "staged" / store


def library_path(data_dir: str | Path, collection: str) -> Path:
    return Path(data_dir) / check_collection(collection) / LIBRARY


def graph_path(data_dir: str | Path, collection: str) -> Path:
    return Path(data_dir).joinpath(check_collection(collection), *GRAPH)


def lock_path(data_dir: str | Path, store: str) -> Path:
    return Path(data_dir) / f".{store}-writer.lock"


def replica_dir(data_dir: str | Path, processor: str) -> Path:
    return Path(data_dir) / ".replicas" / processor


def shard_dir(data_dir: str | Path, shard: int) -> Path:
    return Path(data_dir) / f"shard-{shard}"


def graph_collections(data_dir: Path) -> list[str]:
    """The collections of a data dir with a graph."""
    return sorted(p.name for p in _collection_dirs(data_dir) if p.joinpath(*GRAPH).exists())


def collections(data_dir: Path) -> list[str]:
    """Every collection of a data dir: one with documents or a graph."""
    return sorted(p.name for p in _collection_dirs(data_dir)
                  if (p / LIBRARY).exists() or p.joinpath(*GRAPH).exists())


def _collection_dirs(data_dir: Path) -> list[Path]:
    if not data_dir.is_dir():
        return []
    return [p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
