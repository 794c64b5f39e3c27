"""``ragbus ingest`` and ``ragbus delete``: documents sent through the bus to be chunked, embedded and stored.

The chunker (document-load) does the work; this side reads the files,
keeps a few documents in flight and reports each failure with its file,
going on with the rest; the command exits non-zero at the end if any failed.
Ctrl-C ends it at once, saying what was kept and discarded (``interrupted.py``).

A document larger than one message goes in parts (the protocol is in
``schema/ingest.py``): each part fills what the bus's ``max_message_bytes``
leaves after headers and the document's other fields, the next is read and
sent once the chunker says where it must begin, so a file of any size streams
through in bounded memory, with progress shown per part. If sending stops
after a part was stored (a time-out, a file that changed under us), the
document is removed again rather than left half stored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec

from config import pipelines
from config.settings import load_settings
from processors.bus import connect
from processors.runtime.request_client import RequestClient
from processors.runtime.sizing import body_budget
from schema import DeleteDocument, Document, Error, IngestResult, Section, encode, parts_generation
from schema import topics as t

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
from .documents import DocumentSource, load_documents
from .documents import document_id as make_document_id
from .interrupted import discard_staged, drop_staged, report
from .library import list_documents
from .progress import progress_bar

# What a part's fields may grow by over the empty one sized below: the text's msgpack prefix
# (up to 5 bytes), and ``part`` and ``first_position`` (up to 9 bytes each).
_GROWTH = 5 + 9 + 9


@dataclass
class IngestSummary:
    documents: int = 0  # stored now (unchanged ones not counted)
    chunks: int = 0
    parts: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unchanged: int = 0  # held already with the same content hash: neither chunked nor embedded again
    # Being sent when the run was cancelled (Ctrl-C): not stored, parts of their new version may be staged.
    interrupted: list[DocumentSource] = field(default_factory=list)


class Sent(NamedTuple):
    chunks: int  # chunks stored (or held, when unchanged)
    parts: int  # parts sent
    unchanged: bool = False  # the stores held this content already: nothing was stored


class DocumentRejected(Exception):
    """document-load answered a part with an error (it has cleaned up after itself)."""

    def __init__(self, part: int, error: Error) -> None:
        super().__init__(f"{f'part {part}: ' if part else ''}{error.type}: {error.message}")


def _fill(buffer: str, blocks: Iterator[str], room: int) -> tuple[str, bool]:
    """``buffer`` plus blocks until it holds ``room`` characters (so at least ``room`` bytes); and whether
    the text ended."""
    pieces, held = [buffer], len(buffer)
    while held < room:
        block = next(blocks, None)
        if block is None:
            return "".join(pieces), True
        pieces.append(block)
        held += len(block)
    return "".join(pieces), False


def _fitting(text: str, room: int) -> int:
    """How many characters of ``text`` take at most ``room`` bytes in UTF-8."""
    if len(text) * 4 <= room:
        return len(text)
    head = text[:room]
    if head.isascii():  # a byte a character: no need to encode
        return len(head)
    return len(head.encode()[:room].decode("utf-8", "ignore"))


async def send_document(
    client: RequestClient,
    doc: DocumentSource,
    *,
    timeout: float,
    on_part: Callable[[int, int], None] | None = None,
) -> Sent:
    """Send ``doc`` to document-load in parts that fit the bus; returns chunks stored and parts sent,
    or that the stores hold this content already (its hash is the library's).

    Each part waits at most ``timeout``. ``on_part(characters done, parts done)`` follows a
    document of several parts. Raises ``DocumentRejected`` for an error answer, else what
    went wrong (a time-out, a read error), after discarding what was staged of this version (an earlier one stays).
    """
    empty = Document(
        document_id=doc.document_id, text="", title=doc.title, collection=doc.collection, source=doc.source,
        content_hash=doc.content_hash,
    )
    room = body_budget(client.bus.max_message_bytes) - len(encode(empty)) - _GROWTH
    if room < 1:
        raise ValueError(f"max_message_bytes={client.bus.max_message_bytes} leaves no room for text after its id")
    blocks = doc.read()
    buffer, ended, part, position, done = "", False, 0, 0, 0
    try:
        while True:
            if not ended:
                buffer, ended = _fill(buffer, blocks, room)
            cut = _fitting(buffer, room)
            if doc.sections:  # the headings travel with the text: leave them room (those of a longer cut, more)
                cut = _fitting(buffer, max(0, room - _section_bytes(doc, done, cut)))
            last = ended and cut == len(buffer)
            message = msgspec.structs.replace(
                empty, text=buffer[:cut], part=part, last=last, first_position=position,
                sections=_part_sections(doc, done, cut),
            )
            result = await client.request(t.DOCUMENT_LOAD, message, IngestResult, timeout=timeout)
            del message
            if result.error is not None:
                raise DocumentRejected(part, result.error)
            if part == 0 and result.unchanged:
                return Sent(result.count, 1, unchanged=True)
            part += 1
            position += result.count
            if last:
                return Sent(position, part)
            if not 0 < result.resume_at <= cut:
                raise ValueError(f"document-load answered part {part - 1} with resume_at={result.resume_at}, "
                                 f"outside its {cut} characters")
            buffer = buffer[result.resume_at:]
            done += result.resume_at
            if on_part is not None:
                on_part(done, part)
    except DocumentRejected:
        raise
    except Exception as exc:
        if part > 0:  # parts of this version are staged: drop them again
            exc.add_note(await _discard(client, doc, timeout))
        raise
    finally:
        if isinstance(blocks, Generator):
            blocks.close()  # the file now, not whenever the generator is collected


def _part_sections(doc: DocumentSource, start: int, length: int) -> list[Section]:
    """The sections of the part of ``doc``'s text at ``[start, start + length)``, offsets made the part's own:
    the one it starts in, then each that begins inside it."""
    sections: list[Section] = []
    for s in doc.sections:
        if s.offset <= start:
            sections[:] = [Section(offset=0, heading=list(s.heading))]
        elif s.offset < start + length:
            sections.append(Section(offset=s.offset - start, heading=list(s.heading)))
        else:
            break
    return sections


def _section_bytes(doc: DocumentSource, start: int, length: int) -> int:
    """About how many bytes the part's sections take in its message (so its text leaves them room)."""
    sections = _part_sections(doc, start, length)
    return len(encode(sections)) if sections else 0


async def _discard(client: RequestClient, doc: DocumentSource, timeout: float) -> str:
    """Have the stores drop the parts of this load staged so far; an earlier version stays as it was."""
    request = DeleteDocument(document_id=doc.document_id, collection=doc.collection,
                             discard=parts_generation(doc.content_hash))
    try:
        result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
    except Exception as exc:
        return f"the parts already staged could not be discarded: {exc}"
    if result.error is not None:
        return f"the parts already staged could not be discarded: {result.error.type}: {result.error.message}"
    return "the parts already staged were discarded; any earlier version stays"


async def ingest(
    client: RequestClient,
    documents: Iterable[Document | DocumentSource],
    *,
    concurrency: int = 4,
    timeout: float = 600.0,
    on_progress: Callable[[int, int, str], None] | None = None,
    failed: list[str] | None = None,
    on_stored: Callable[[DocumentSource], None] | None = None,
    summary: IngestSummary | None = None,
    describe: Callable[[BaseException], str] = str,
) -> IngestSummary:
    """Send each document to ``document-load`` (in parts when large) and wait for its chunk count.

    ``timeout`` bounds each part. ``on_progress(documents done, documents, label)`` is called after
    each document, and after each part of a document of several. ``on_stored`` is told of each
    document once every store holds it, so a caller can resume an interrupted run without sending
    those again. A caller that passes ``summary`` still has it when the run is cancelled: it lists
    the documents being sent then in ``interrupted``. ``describe`` words a document's failure.
    """
    sources = [d if isinstance(d, DocumentSource) else DocumentSource.of(d) for d in documents]
    if concurrency < 1:  # a semaphore of 0 would wait forever
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    summary = summary if summary is not None else IngestSummary()
    if failed is not None:
        summary.failed = failed
    started = time.perf_counter()
    slots = asyncio.Semaphore(concurrency)
    done = 0

    async def one(doc: DocumentSource) -> None:
        nonlocal done
        label = doc.title or doc.document_id

        def show_part(characters: int, parts: int) -> None:
            if on_progress is not None:
                percent = min(99, 100 * characters // max(doc.size, 1))
                on_progress(done, len(sources), f"{label} part {parts + 1} ({percent}%)")

        async with slots:
            try:
                sent = await send_document(client, doc, timeout=timeout, on_part=show_part)
            except asyncio.CancelledError:
                summary.interrupted.append(doc)
                raise
            except Exception as exc:  # an error answer, a timeout, a transport failure: report, go on
                notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
                summary.failed.append(f"{doc.source or doc.document_id}: {describe(exc)}{notes}")
            else:
                if sent.unchanged:
                    summary.unchanged += 1
                else:
                    summary.documents += 1
                    summary.chunks += sent.chunks
                    summary.parts += sent.parts
                if on_stored is not None:
                    on_stored(doc)
            done += 1
            if on_progress is not None:
                on_progress(done, len(sources), label)

    await asyncio.gather(*(one(d) for d in sources))
    summary.seconds = time.perf_counter() - started
    return summary


async def _ingest(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    documents, skipped = load_documents(args.paths, args.collection)
    url = args.bus or settings.bus.url
    for problem in skipped:  # before anything is sent: the user sees at once what will not be read
        print(f"  skipped: {problem}", file=sys.stderr)
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
        print(f"  failed: {problem}", file=sys.stderr)
    parts = f" (sent in {summary.parts} parts)" if summary.parts > summary.documents else ""
    print(f"{summary.documents} document(s), {summary.chunks} chunk(s) in {summary.seconds:.1f}s{parts}"
          f"{f', {summary.unchanged} unchanged (held already with the same content)' if summary.unchanged else ''}"
          f"{f', {len(skipped)} skipped' if skipped else ''}"
          f"{f', {len(summary.failed)} failed' if summary.failed else ''}", file=sys.stderr)
    return 1 if summary.failed or skipped or (args.prune and not all(vanished.values())) else 0


async def _vanished(client: RequestClient, args: argparse.Namespace, found: list[DocumentSource],
                    timeout: float) -> dict[str, bool]:
    """Documents ingested from a folder named now whose files are gone: reported, and removed with ``--prune``.

    Returns each such document id and whether it was removed."""
    folders = [Path(p).resolve() for p in args.paths if Path(p).is_dir()]
    seen = {d.document_id for d in found}
    gone: dict[str, bool] = {}
    for folder in folders:
        for d in await list_documents(client, args.collection, timeout=timeout, id_prefix=f"{folder}{os.sep}"):
            if d.document_id not in seen and d.document_id not in gone and not Path(d.document_id).exists():
                gone[d.document_id] = False
    for document_id in gone:
        if not args.prune:
            print(f"  vanished: {document_id}: ingested before, no longer in its folder (--prune removes it)",
                  file=sys.stderr)
            continue
        request = DeleteDocument(document_id=document_id, collection=args.collection)
        result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
        if result.error is not None:
            print(f"  vanished: {document_id}: could not be removed: {result.error.type}: {result.error.message}",
                  file=sys.stderr)
        else:
            gone[document_id] = True
            print(f"  pruned: {document_id}: no longer in its folder; removed {result.count} chunk(s)", file=sys.stderr)
    return gone


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
    async with embedded_processors(settings, (*pipelines.DELETE, *pipelines.LIST), url):
        async with await connect(url, settings.bus) as bus, command_client(bus, settings, "delete") as client:
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


def add_parsers(sub) -> None:
    p = sub.add_parser("ingest", help="chunk, embed and store documents (default: the Python language reference)")
    p.add_argument("paths", nargs="*", help="files or folders of .pdf .docx .pptx .html .md .txt .rst; links under "
                   "a folder are followed, also to folders elsewhere (a loop or a broken link is skipped)")
    add_bus_options(p)
    add_collection_option(p)
    p.add_argument("--concurrency", type=positive_int, default=4, help="documents in flight at once")
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
