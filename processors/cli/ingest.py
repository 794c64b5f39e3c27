"""``ragbus ingest`` and ``ragbus delete``: documents sent through the bus to be chunked, embedded and stored.

The chunker (document-load) does the work; this side reads the files,
keeps a few documents in flight and reports each failure with its file,
going on with the rest; the command exits non-zero at the end if any failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from config import pipelines
from config.settings import load_settings
from processors.bus import connect
from processors.runtime.client import RequestClient
from schema import DeleteDocument, Document, IngestResult
from schema import topics as t

from .common import add_bus_options, embedded_processors
from .documents import document_id as make_document_id
from .documents import load_documents
from .progress import progress_bar


@dataclass
class IngestSummary:
    documents: int = 0
    chunks: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0


async def ingest(
    client: RequestClient,
    documents: list[Document],
    *,
    concurrency: int = 4,
    timeout: float = 600.0,
    on_progress: Callable[[int, int, str], None] | None = None,
    failed: list[str] | None = None,
    on_stored: Callable[[Document], None] | None = None,
) -> IngestSummary:
    """Send each document to ``document-load`` and wait for its chunk count.

    ``on_stored`` is told of each document once every store holds it, so a
    caller can resume an interrupted run without sending those again.
    """
    summary = IngestSummary(failed=failed if failed is not None else [])
    started = time.perf_counter()
    slots = asyncio.Semaphore(concurrency)
    done = 0

    async def one(doc: Document) -> None:
        nonlocal done
        async with slots:
            try:
                result = await client.request(t.DOCUMENT_LOAD, doc, IngestResult, timeout=timeout)
            except Exception as exc:  # a timeout or a transport failure: report, go on
                summary.failed.append(f"{doc.source or doc.document_id}: {exc}")
            else:
                if result.error is not None:
                    summary.failed.append(f"{doc.source or doc.document_id}: {result.error.type}: {result.error.message}")
                else:
                    summary.documents += 1
                    summary.chunks += result.count
                    if on_stored is not None:
                        on_stored(doc)
            done += 1
            if on_progress is not None:
                on_progress(done, len(documents), doc.title or doc.document_id)

    await asyncio.gather(*(one(d) for d in documents))
    summary.seconds = time.perf_counter() - started
    return summary




async def _ingest(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    documents, failed = load_documents(args.paths, args.collection)
    url = args.bus or settings.bus.url
    async with embedded_processors(settings, pipelines.INGEST, url):
        print(f"ingesting {len(documents)} document(s) into collection {args.collection!r} over {url}", file=sys.stderr)
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="ingest") as client:
            summary = await ingest(
                client, documents, concurrency=args.concurrency, on_progress=progress_bar(), failed=failed
            )
    for problem in summary.failed:
        print(f"  failed: {problem}", file=sys.stderr)
    print(f"{summary.documents} document(s), {summary.chunks} chunk(s) in {summary.seconds:.1f}s"
          f"{f', {len(summary.failed)} failed' if summary.failed else ''}", file=sys.stderr)
    return 1 if summary.failed else 0


async def _delete_one(client: RequestClient, name: str, collection: str) -> tuple[str, IngestResult]:
    """Delete the document ``name`` names: the id ingest made of it (an absolute path, ``pydoc:TOPIC``),
    else ``name`` itself, as a library caller may have stored a document under any id. Returns the id
    that answered (or the first) and the result."""
    tried: list[tuple[str, IngestResult]] = []
    for document_id in dict.fromkeys((make_document_id(name), name)):
        request = DeleteDocument(document_id=document_id, collection=collection)
        tried.append((document_id, await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=120)))
        if tried[-1][1].error is not None or tried[-1][1].count:
            return tried[-1]
    return tried[0]


async def _delete(args: argparse.Namespace) -> int:
    """Delete each named document; exit 1 if one could not be deleted, or was not there to delete."""
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    failed = 0
    async with embedded_processors(settings, pipelines.DELETE, url):
        async with await connect(url, settings.bus) as bus, RequestClient(bus, name="delete") as client:
            for name in args.document_ids:
                document_id, result = await _delete_one(client, name, args.collection)
                shown = name if document_id == name else f"{name} ({document_id})"
                if result.error is not None:
                    failed += 1
                    print(f"{shown}: {result.error.type}: {result.error.message}", file=sys.stderr)
                elif not result.count:
                    failed += 1
                    print(f"{shown}: no such document in collection {args.collection!r}; nothing removed",
                          file=sys.stderr)
                else:
                    print(f"{shown}: removed {result.count} chunk(s)", file=sys.stderr)
    return 1 if failed else 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ingest", help="chunk, embed and store documents (default: the Python language reference)")
    p.add_argument("paths", nargs="*", help="files or folders of .txt/.md/.rst/.html/.pdf")
    add_bus_options(p)
    p.add_argument("--collection", default="default")
    p.add_argument("--concurrency", type=int, default=4, help="documents in flight at once")
    p.set_defaults(run=_ingest)

    p = sub.add_parser("delete", help="remove documents from every store (exit 1 if one was not there)")
    p.add_argument("document_ids", nargs="+", metavar="document",
                   help="a file as it was ingested (any path to it), pydoc:TOPIC, or a document id")
    add_bus_options(p)
    p.add_argument("--collection", default="default")
    p.set_defaults(run=_delete)
