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

from .common import (
    add_bus_options,
    add_collection_option,
    add_timeout_option,
    call_timeout,
    command_client,
    embedded_processors,
    positive_int,
)
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
) -> IngestSummary:
    """Send each document to ``document-load`` and wait for its chunk count."""
    if concurrency < 1:  # a semaphore of 0 would wait forever
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
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
        async with await connect(url, settings.bus) as bus, command_client(bus, settings, "ingest") as client:
            summary = await ingest(
                client, documents, concurrency=args.concurrency, timeout=call_timeout(args, settings),
                on_progress=progress_bar(), failed=failed,
            )
    for problem in summary.failed:
        print(f"  failed: {problem}", file=sys.stderr)
    print(f"{summary.documents} document(s), {summary.chunks} chunk(s) in {summary.seconds:.1f}s"
          f"{f', {len(summary.failed)} failed' if summary.failed else ''}", file=sys.stderr)
    return 1 if summary.failed else 0


async def _delete(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    failed = 0
    async with embedded_processors(settings, pipelines.DELETE, url):
        async with await connect(url, settings.bus) as bus, command_client(bus, settings, "delete") as client:
            timeout = call_timeout(args, settings)
            for document_id in args.document_ids:
                request = DeleteDocument(document_id=document_id, collection=args.collection)
                result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
                if result.error is not None:
                    failed += 1
                    print(f"{document_id}: {result.error.type}: {result.error.message}", file=sys.stderr)
                else:
                    print(f"{document_id}: removed {result.count} chunk(s)", file=sys.stderr)
    return 1 if failed else 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ingest", help="chunk, embed and store documents (default: the Python language reference)")
    p.add_argument("paths", nargs="*", help="files or folders of .txt/.md/.rst/.html/.pdf")
    add_bus_options(p)
    add_collection_option(p)
    p.add_argument("--concurrency", type=positive_int, default=4, help="documents in flight at once")
    add_timeout_option(p, "each document to be stored", "store_timeout_s")
    p.set_defaults(run=_ingest)

    p = sub.add_parser("delete", help="remove documents (by document id) from every store")
    p.add_argument("document_ids", nargs="+", help="as ingested: a file's absolute path, or pydoc:TOPIC")
    add_bus_options(p)
    add_collection_option(p)
    add_timeout_option(p, "each document to be removed", "store_timeout_s")
    p.set_defaults(run=_delete)
