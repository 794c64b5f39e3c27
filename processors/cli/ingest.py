"""``ragbus ingest`` and ``ragbus delete``: documents sent through the bus to be chunked, embedded and stored.

The sending is the ingestion layer's (``processors/ingestion``); this side parses the arguments,
finds the files, shows progress and reports each failure with its file, going on with the rest;
the command exits non-zero at the end if any failed. Ctrl-C ends it at once, saying what was kept
and discarded (``interrupted.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from pathlib import Path

import msgspec

from ragbus.config import pipelines
from ragbus.config.bounds import LANGUAGE_PATTERN
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import DocumentSource, IngestSummary, ingest, load_documents
from ragbus.ingestion import document_id as make_document_id
from ragbus.runtime.request_client import RequestClient
from ragbus.schema import DeleteDocument, IngestResult
from ragbus.schema import topics as t

from .common import (
    add_bus_options,
    add_collection_option,
    add_timeout_option,
    call_timeout,
    command_client,
    describe,
    embedded_processors,
    positive_int,
)
from .interrupted import discard_staged, drop_staged, report
from .library import list_documents
from .printable import printable
from .progress import progress_bar

__all__ = ["add_parsers", "ingest"]  # ``ingest`` is the library's, here for callers that knew it here


async def _ingest(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    convert = settings.convert
    if args.language is not None:
        convert = msgspec.structs.replace(convert, language=args.language)
    documents, skipped = load_documents(args.paths, args.collection, convert)
    url = args.bus or settings.bus.url
    for problem in skipped:  # before anything is sent: the user sees at once what will not be read
        print(f"  skipped: {printable(problem)}", file=sys.stderr)
    summary, progress, undiscarded = IngestSummary(), progress_bar(interval_s=settings.client.progress_interval_s), []
    try:
        async with embedded_processors(settings, pipelines.INGEST, url):
            print(f"ingesting {len(documents)} document(s) into collection {args.collection!r} over {url}",
                  file=sys.stderr)
            async with await connect(url, settings.bus) as bus, command_client(bus, settings, "ingest") as client:
                try:
                    await ingest(client, documents, concurrency=args.concurrency, timeout=call_timeout(args, settings),
                                 on_progress=progress, summary=summary, describe=lambda exc: describe(exc, args, url))
                except asyncio.CancelledError:  # Ctrl-C: on a broker the workers go on, and can still discard
                    if summary.interrupted and not url.startswith("memory"):
                        undiscarded = await discard_staged(client, summary.interrupted,
                                                           settings.client.interrupt_timeout_s)
                    raise
                vanished = await _vanished(client, args, documents, call_timeout(args, settings))
    except asyncio.CancelledError:  # the embedded processors have stopped: nothing stages any more
        progress.close()
        if url.startswith("memory"):
            drop_staged(settings, summary.interrupted)
        ended = summary.documents + summary.unchanged + len(summary.failed) + len(summary.interrupted)
        report(summary.documents, summary.chunks, summary.unchanged, summary.interrupted, len(documents) - ended,
               undiscarded, on_broker=not url.startswith("memory"))
        raise
    for problem in summary.failed:
        print(f"  failed: {printable(problem)}", file=sys.stderr)
    for line in summary.superseded:
        print(f"  {printable(line)}", file=sys.stderr)
    parts = f" (sent in {summary.parts} parts)" if summary.parts > summary.documents else ""
    print(f"{summary.documents} document(s), {summary.chunks} chunk(s) in {summary.seconds:.1f}s{parts}"
          f"{f', {summary.unchanged} unchanged (held already with the same content)' if summary.unchanged else ''}"
          f"{f', {len(skipped)} skipped' if skipped else ''}"
          f"{f', {len(summary.failed)} failed' if summary.failed else ''}", file=sys.stderr)
    if args.seen:
        for seen in summary.seen:
            print(seen)  # stdout: what an ask that must see these documents carries (`ragbus ask --must-see`)
    return 1 if summary.failed or skipped or (args.prune and not all(vanished.values())) else 0


async def _vanished(client: RequestClient, args: argparse.Namespace, found: list[DocumentSource],
                    timeout: float) -> dict[str, bool]:
    """Documents ingested from a folder named now whose files are gone: reported, and removed with ``--prune``.

    Returns each such document id and whether it was removed."""
    # The file system is asked in a thread: the embedded processors share this event loop.
    folders = await asyncio.to_thread(_folders, args.paths)
    seen = {d.document_id for d in found}
    listed: list[str] = []
    for folder in folders:
        for d in await list_documents(client, args.collection, timeout=timeout, id_prefix=f"{folder}{os.sep}"):
            if d.document_id not in seen:
                listed.append(d.document_id)
    gone = dict.fromkeys(await asyncio.to_thread(_missing, listed), False)
    for document_id in gone:
        if not args.prune:
            print(f"  vanished: {printable(document_id)}: ingested before, no longer in its folder "
                  "(--prune removes it)", file=sys.stderr)
            continue
        request = DeleteDocument(document_id=document_id, collection=args.collection)
        result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
        if result.error is not None:
            print(f"  vanished: {printable(document_id)}: could not be removed: {result.error.type}: "
                  f"{result.error.message}", file=sys.stderr)
        else:
            gone[document_id] = True
            print(f"  pruned: {document_id}: no longer in its folder; removed {result.count} chunk(s)", file=sys.stderr)
    return gone


def _folders(paths: list[str]) -> list[Path]:
    """The folders among ``paths``, resolved as the ids made of their files are."""
    return [Path(p).resolve() for p in paths if Path(p).is_dir()]


def _missing(document_ids: list[str]) -> list[str]:
    """Each id once, in order, that names no file (any more)."""
    return [i for i in dict.fromkeys(document_ids) if not Path(i).exists()]


async def _delete_one(client: RequestClient, name: str, collection: str, timeout: float) -> tuple[str, IngestResult]:
    """Delete the document ``name`` names: the id ingest made of it (an absolute path, ``pydoc:TOPIC``),
    else ``name`` itself, as a library caller may have stored a document under any id. Returns the id
    that answered (or the first) and the result."""
    tried: list[tuple[str, IngestResult]] = []
    for document_id in dict.fromkeys((make_document_id(name), name)):
        request = DeleteDocument(document_id=document_id, collection=collection)
        tried.append((document_id, await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)))
        if tried[-1][1].error is not None or tried[-1][1].count or tried[-1][1].retracted:
            return tried[-1]
    return tried[0]


async def _delete(args: argparse.Namespace) -> int:
    """Delete each named document (or, with ``--all``, every document of the collection); exit 1 if one
    could not be deleted, or was not there to delete."""
    if bool(args.all) == bool(args.document_ids):
        raise ValueError("name the documents to delete, or --all for every document of the collection (not both)")
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    failed = 0
    async with (
        embedded_processors(settings, (*pipelines.DELETE, *pipelines.LIST), url),
        await connect(url, settings.bus) as bus,
        command_client(bus, settings, "delete") as client,
    ):
        timeout = call_timeout(args, settings)
        names = args.document_ids
        if args.all:
            names = [d.document_id for d in await list_documents(client, args.collection, timeout=timeout)]
            print(f"deleting all {len(names)} document(s) of collection {args.collection!r}", file=sys.stderr)
        for name in names:
            document_id, result = await _delete_one(client, name, args.collection, timeout)
            shown = name if document_id == name else f"{name} ({document_id})"
            if result.error is not None:
                failed += 1
                print(f"{shown}: {result.error.type}: {result.error.message}", file=sys.stderr)
            elif not result.count and not result.retracted:
                failed += 1
                print(f"{shown}: no such document in collection {args.collection!r}; nothing removed",
                      file=sys.stderr)
            else:
                facts = f", retracted {result.retracted} graph fact(s)" if result.retracted else ""
                print(f"{shown}: removed {result.count} chunk(s){facts}", file=sys.stderr)
    return 1 if failed else 0


def _language(value: str) -> str:
    if re.fullmatch(LANGUAGE_PATTERN, value) is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not Tesseract language codes (eng, or eng+deu)")
    return value


def add_parsers(sub) -> None:
    p = sub.add_parser("ingest", help="chunk, embed and store documents (default: the Python language reference)")
    p.add_argument("paths", nargs="*", help="files or folders of .pdf .docx .pptx .html .md .txt .rst .png .jpg .tiff; "
                   "links under a folder are followed, also to folders elsewhere (a loop or a broken link is skipped)")
    p.add_argument("--language", type=_language, default=None,
                   help="the language of scans and images, as Tesseract names it, several joined by + (eng+deu); "
                        "default [convert] language (eng)")
    add_bus_options(p)
    add_collection_option(p)
    p.add_argument("--concurrency", type=positive_int, default=4, help="documents in flight at once")
    p.add_argument("--seen", action="store_true",
                   help="print where the stores hold the documents stored (log positions, or a write to a data "
                        "dir's files), one token a line, for `ragbus ask --must-see`")
    p.add_argument("--prune", action="store_true",
                   help="remove documents ingested from a folder named here whose files are gone")
    add_timeout_option(p, "each document to be stored", "store_timeout_s")
    p.set_defaults(run=_ingest)

    p = sub.add_parser("delete", help="remove documents from every store (exit 1 if one was not there)")
    p.add_argument("document_ids", nargs="*", metavar="document",
                   help="a file as it was ingested (any path to it), pydoc:TOPIC, or a document id")
    p.add_argument("--all", action="store_true", help="every document of the collection (see `ragbus documents`)")
    add_bus_options(p)
    add_collection_option(p)
    add_timeout_option(p, "each document to be removed", "store_timeout_s")
    p.set_defaults(run=_delete)
