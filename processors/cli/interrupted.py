"""What Ctrl-C leaves of ``ragbus ingest``: the documents stored before it are kept, the one being sent keeps
its earlier version, and what was staged of its new version goes.

A document's new version is staged beside the stores and switched to only once whole
(``processors/stores/staging.py``), so an interrupted load changed nothing queries see; only
its staged parts are left, up to a whole document's chunks and vectors.

On ``memory://`` the processors run in this process: they are stopped first (not drained, see
``common.embedded_processors``), and the staged files are then removed here. Asking
document-delete to discard them while document-load's handler was still embedding would race
with the writes that handler had yet to make. On a broker the workers go on: the command asks
them to discard the version (waiting at most ``[client] interrupt_timeout_s``); a part a worker
is still storing may stage after that, and the next load of the document clears it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable

from ragbus.config.settings import Settings, data_dir
from ragbus.ingestion import DocumentSource
from ragbus.runtime.request_client import RequestClient
from ragbus.stores.staging import STAGING_WRITERS, Staging
from ragbus.stores.layout import staging_dir
from ragbus.schema import DeleteDocument, IngestResult, parts_generation
from ragbus.schema import topics as t




def drop_staged(settings: Settings, documents: Iterable[DocumentSource]) -> None:
    """Remove the staged versions the interrupted loads of ``documents`` left, in this data dir."""
    for name, store in STAGING_WRITERS:
        root = data_dir(settings.processors.get(name, {}).get("data_dir", ""))
        for doc in documents:
            Staging(staging_dir(root, doc.collection, store)).drop(doc.document_id, parts_generation(doc.content_hash))


async def discard_staged(client: RequestClient, documents: Iterable[DocumentSource], timeout: float) -> list[str]:
    """Ask the workers to discard what the interrupted loads staged; returns what could not be discarded."""
    async def one(doc: DocumentSource) -> str | None:
        request = DeleteDocument(document_id=doc.document_id, collection=doc.collection,
                                 discard=parts_generation(doc.content_hash))
        try:
            result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
        except Exception as exc:  # whatever failed is reported; the interrupt goes on
            return f"{doc.source or doc.document_id}: {exc}"
        if result.error is not None:
            return f"{doc.source or doc.document_id}: {result.error.type}: {result.error.message}"
        return None

    return [problem for problem in await asyncio.gather(*(one(d) for d in documents)) if problem]


def report(documents: int, chunks: int, unchanged: int, interrupted: list[DocumentSource], not_sent: int,
           undiscarded: list[str], *, on_broker: bool) -> None:
    """Say on stderr what the interrupt kept and what it discarded."""
    for doc in interrupted:
        print(f"  interrupted: {doc.source or doc.document_id}: not stored; its earlier version, if it had one, "
              "stays as queries saw it", file=sys.stderr)
    for problem in undiscarded:
        print(f"  interrupted: staged parts left (the next load of the document clears them): {problem}",
              file=sys.stderr)
    kept = f"kept {documents} document(s) stored before ({chunks} chunk(s))"
    if unchanged:
        kept += f", {unchanged} unchanged"
    dropped = f"; {len(interrupted)} interrupted, {not_sent} not sent"
    if interrupted and undiscarded:
        dropped += "; their staged parts could not all be discarded"
    elif interrupted and on_broker:
        dropped += ("; the workers discarded their staged parts (a part a worker was still storing stays "
                    "until the next load of the document)")
    elif interrupted:
        dropped += "; their staged parts were discarded"
    print(f"interrupted: {kept}{dropped}", file=sys.stderr)
