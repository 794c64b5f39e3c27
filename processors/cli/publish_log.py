"""``ragbus publish-log``: a data dir's stores onto the log topics, to move a deployment onto a broker.

A deployment on one data dir (the embedded default, or one writer process per data dir) keeps
its stores as files. One that moves onto Kafka or Pulsar with ``changelog = true`` keeps them on
the log, and every query host makes its own from there (docs/stores-from-the-log.md). This
command writes what the data dir holds as the log's writers would have written it:

- every document the library records and the vector store serves: its chunks with their text and
  vectors as one staged run, the switch to that version, then the library's record (as it was
  recorded, its ``ingested_at`` kept), on ``ragbus.changelog.documents``; the keyword index is
  made from the same run on every replica, as it is for a document ingested there;
- every batch of the collection's graph log, as it was stamped (``recorded_at`` kept, so a
  question ``--as-of`` a time before the move still sees what was known then), in order, on
  ``ragbus.changelog.graph``.

Nothing in the data dir changes. Publish onto a log that holds nothing of these collections yet:
the documents' records have keys of their own, so publishing them again changes nothing a replica
serves, but the graph's batches are a history, and a second copy of them is applied again.
Without the sources at hand, this is the move; with them, a re-ingest into the broker deployment
(``ragbus ingest`` with ``changelog = true``) is one too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragbus.config.settings import data_dir as data_dir_of
from ragbus.config.settings import load_settings
from ragbus.bus import Bus, connect
from ragbus.stores.vectors.store import VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.stores.graphs_from_log import append_batch
from ragbus.stores.graph_log import GraphLog
from ragbus.stores.layout import graph_path
from ragbus.stores.library import Library
from ragbus.stores.layout import collections, library_path
from ragbus.stores.seen import append_change
from ragbus.schema import Chunk, DeleteDocument, DocumentInfo, EmbeddedChunks, LoadTriples, RecordDocument
from ragbus.schema.changelog import CHUNKS, RECORD, SWITCH, chunks_key, document_order, record_key, state_key
from ragbus.schema.topics import DOCUMENTS_LOG, GRAPH_LOG

from .common import add_bus_options
from .progress import Progress, progress_bar


@dataclass
class Published:
    """What one collection put on the log."""

    documents: int = 0
    chunks: int = 0
    graph_batches: int = 0
    # Documents the library records that the vector store does not serve (or serves another version
    # of): a store written apart from the library; their record is left out, as is a version of no name.
    left_out: list[str] = field(default_factory=list)


class _Batches:
    """What a graph log is replayed into here: its batches, as they were stamped."""

    def __init__(self) -> None:
        self.batches: list[LoadTriples] = []

    def apply(self, batch: LoadTriples, *, warn: bool = True) -> Any:
        self.batches.append(batch)


_Stored = list[tuple[str, list[Chunk], np.ndarray]]


def _read(data_dir: Path, collection: str) -> tuple[dict[str, DocumentInfo], _Stored, list[LoadTriples]]:
    """What ``data_dir`` holds of ``collection``: the library's documents, each stored document's chunks
    and vectors, its graph's batches."""
    library = Library(library_path(data_dir, collection))
    library.catch_up()
    stored: _Stored = []
    if vectors_dir(data_dir, collection).is_dir():
        store = VectorStore(vectors_dir(data_dir, collection), collection, readonly=True, index_cache=False)
        stored = list(store.documents())
    batches = _Batches()
    if graph_path(data_dir, collection).exists():
        GraphLog(graph_path(data_dir, collection)).catch_up(batches)
    return dict(library.documents), stored, batches.batches


async def publish_collection(data_dir: Path, collection: str, bus: Bus, *, documents_topic: str, graph_topic: str,
                             progress: Callable[[int, int | None, str], None] | None = None) -> Published:
    """Append ``collection``'s documents and graph, as ``data_dir`` holds them, to the log topics."""
    done = Published()
    write = f"publish-{uuid.uuid4().hex}"  # this publish's runs: keys no later write reuses (chunks_key)
    records, stored, batches = await asyncio.to_thread(_read, data_dir, collection)
    for n, (document_id, chunks, vectors) in enumerate(stored, 1):
        info = records.pop(document_id, None)
        version = chunks[0].generation
        if info is None or not version or info.generation not in ("", version):
            done.left_out.append(document_id)
            continue
        order = document_order(collection, document_id)
        run = EmbeddedChunks(chunks=chunks, vectors=vectors.tolist(), staged=True)
        await append_change(bus, documents_topic, CHUNKS, run, order_key=order,
                            key=chunks_key(collection, document_id, version, chunks[0].position, write))
        switch = DeleteDocument(document_id=document_id, collection=collection, activate=version, chunks=len(chunks),
                                document=info)  # the library's entry travels with the switch, as document-load's
        await append_change(bus, documents_topic, SWITCH, switch, key=state_key(collection, document_id),
                            order_key=order)
        await append_change(bus, documents_topic, RECORD, RecordDocument(document=info),
                            key=record_key(collection, document_id), order_key=order)
        done.documents += 1
        done.chunks += len(chunks)
        if progress is not None:
            progress(n, len(stored), f"{collection}: {document_id}")
    done.left_out += sorted(records)  # recorded, but no chunks stored
    for batch in batches:
        await append_batch(bus, graph_topic, batch, uuid.uuid4().hex)
        done.graph_batches += 1
    return done


async def _run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    if url.startswith("memory"):
        print(f"ragbus publish-log: error: {url} is a bus private to this command, and its log would end with it; "
              "name the broker with --bus (kafka://HOST:PORT, pulsar://HOST:PORT) or RAGBUS_BUS__URL",
              file=sys.stderr)
        return 2
    source = data_dir_of(args.data_dir or "")
    held = await asyncio.to_thread(collections, source)
    wanted = args.collection or held
    if not wanted:
        print(f"ragbus publish-log: error: {source} holds no collection (no library, no graph)", file=sys.stderr)
        return 2
    if missing := [c for c in wanted if c not in held]:
        print(f"ragbus publish-log: error: {source} holds no collection {', '.join(map(repr, missing))} (no library, "
              f"no graph); it holds: {', '.join(held) or 'none'}", file=sys.stderr)
        return 2
    procs = settings.processors
    documents_topic = procs.get("doc-embeddings-store", {}).get("log_topic") or DOCUMENTS_LOG
    graph_topic = procs.get("kg-store", {}).get("log_topic") or GRAPH_LOG
    progress: Progress = progress_bar(interval_s=settings.client.progress_interval_s)
    status = 0
    try:
        async with await connect(url, settings.bus) as bus:
            for collection in wanted:
                done = await publish_collection(source, collection, bus, documents_topic=documents_topic,
                                                graph_topic=graph_topic, progress=progress)
                print(f"{collection}: {done.documents} documents ({done.chunks} chunks) on {documents_topic}, "
                      f"{done.graph_batches} graph batches on {graph_topic}")
                if done.left_out:
                    status = 1
                    shown = ", ".join(done.left_out[:5]) + (" ..." if len(done.left_out) > 5 else "")
                    print(f"{collection}: {len(done.left_out)} documents left out, the library and the vector "
                          f"store disagree on them (re-ingest them): {shown}", file=sys.stderr)
    finally:
        progress.close()
    return status


def add_parsers(sub) -> None:
    p = sub.add_parser("publish-log", help="put a data dir's documents and graph on the log topics of a broker "
                                           "(to move a deployment onto changelog = true)")
    p.add_argument("--data-dir", help="the data dir to publish (default: RAGBUS_DATA_DIR, else the user's)")
    p.add_argument("--collection", action="append", help="only this collection (repeatable; default: every one)")
    add_bus_options(p)
    p.set_defaults(run=_run)
