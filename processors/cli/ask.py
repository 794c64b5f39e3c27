"""``ragbus ask``: the main job. A question in, a cited answer out.

On ``memory://`` (the default) the query processors run in this process;
on first use, while the default collection is entirely empty (or its first
use was interrupted), the writers start too, the default corpus (the Python
language reference) is ingested and the sample graph loaded, with progress
shown (``seed.py``). A question to another collection that holds nothing is
an error saying how to fill it. With a Kafka or Pulsar URL the command only
publishes the question and waits for the workers' answer; document-rag itself
refuses a collection that holds nothing (``EmptyCollection``), said as the same
error.

On a terminal the answer is printed as it is written (a streamed request);
piped, or with ``--json``, it is printed whole, once it is complete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator

import msgspec

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.schema import DocumentRagPiece, DocumentRagResponse, Fact

from .common import (
    add_bus_options,
    add_collection_option,
    add_timeout_option,
    call_timeout,
    command_client,
    embedded_processors,
    instant,
    positive_int,
    question,
)
from .printable import printable
from .seed import first_use_plan, said_plainly


def _cites_fact(answer: str, fact: Fact) -> bool:
    """Whether the answer cites the fact as the prompt asks, ``[fact: <its text on one line>]``."""
    return f"[fact: {' '.join((fact.text or '').split())}]" in answer


def show(r: DocumentRagResponse, out=sys.stdout) -> None:
    """The answer, then what it cites, then the facts it left out: each fact is printed once.

    The prompt already writes the facts it uses into the answer (``[fact: ...]``, after the
    snapshot header), so listing every fact again below it showed them twice; a cited fact
    only adds its source to ``Sources``.
    """
    print(printable(r.answer, lines=True), file=out)
    show_sources(r, out)


def show_sources(r: DocumentRagResponse, out=sys.stdout) -> None:
    """What ``show`` prints after the answer: its sources, the other facts, what degraded."""
    by_id = {c.chunk_id: c for c in r.chunks}
    cited_facts = [f for f in r.facts if _cites_fact(r.answer, f)]
    if r.cited or cited_facts:
        print("\nSources:", file=out)
        for chunk_id in r.cited:
            c = by_id[chunk_id]
            print(f"  [{printable(chunk_id)}] {printable(c.title or c.document_id or '')}", file=out)
        if cited_facts:
            sources = dict.fromkeys(printable(f.source or "no source") for f in cited_facts)
            print(f"  [fact: ...] {', '.join(sources)}", file=out)
    others = [f for f in r.facts if not _cites_fact(r.answer, f)]
    if others:
        when = f" valid at {r.at_time}" if r.at_time else ""
        print(f"\n{'Other facts' if cited_facts else 'Facts'}{when}:", file=out)
        for f in others:
            print(f"  {printable(f.text or '', lines=True)}  ({printable(f.source or 'no source')})", file=out)
    if r.degraded:
        print(f"\nDegraded: {'; '.join(r.problems or r.degraded)}", file=sys.stderr)


async def show_stream(pieces: AsyncIterator[DocumentRagPiece], out=sys.stdout) -> DocumentRagResponse:
    """Print the answer piece by piece as it arrives (flushed each time), then its sources; return the response."""
    async for piece in pieces:
        if piece.kind == "answer":
            out.write(printable(piece.text, lines=True))
            out.flush()
        elif piece.response is not None:
            print(file=out)
            show_sources(piece.response, out)
            return piece.response
    raise RuntimeError("the answer's stream ended without its final piece")


async def ask(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    # Decided before any writer starts (documents-query answers it): a mistyped collection fails at once,
    # and an ask with nothing to seed starts no writer, so it needs no writer lock and runs beside any other.
    seeding = await first_use_plan(settings, args.collection, url) if url.startswith("memory") else None
    async with (
        embedded_processors(settings, pipelines.EVERYTHING if seeding is not None else pipelines.QUERY, url),
        await connect(url, settings.bus) as bus,
    ):
        if seeding is not None:
            async with RequestClient(bus, name="ingest") as loader:  # no resending: loads are slow
                await seeding.run(loader)
        timeout = call_timeout(args, settings)
        client = command_client(bus, settings, "ask", timeout_s=timeout,
                                resend_after_s=settings.client.resend_after_s or None)
        async with client:
            rag = DocumentRagClient(client, timeout=timeout)
            question = dict(mode=args.mode, at_time=args.at, doc_limit=args.doc_limit, collection=args.collection,
                            must_see=args.must_see)
            with said_plainly():
                if not args.json and sys.stdout.isatty():  # someone is watching: show the answer as it comes
                    await show_stream(rag.ask_stream(args.question, **question))
                    return 0
                response = await rag.ask(args.question, **question)
    if args.json:
        print(msgspec.json.encode(response).decode())
    else:
        show(response)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ask", help="answer a question from the documents and the knowledge graph, with sources")
    p.add_argument("question", type=question)
    p.add_argument("--mode", choices=["vector", "keyword", "hybrid"],
                   help="retrieval mode (default: document-rag's retrieval_mode, hybrid as shipped)")
    p.add_argument("--at", type=instant, help="graph facts valid at this time (ISO 8601, e.g. 2020-01-01)")
    p.add_argument("--doc-limit", type=positive_int, help="chunks the answer is drawn from (at least 1)")
    p.add_argument("--must-see", action="append", default=[], metavar="TOKEN",
                   help="with stores from the log: a write the answer must see, as `ragbus ingest --seen` printed "
                        "it (repeatable); each replica answers once it has applied it")
    add_collection_option(p)
    add_timeout_option(p, "the answer", "request_timeout_s")
    p.add_argument("--json", action="store_true", help="print the whole response as JSON")
    add_bus_options(p)
    p.set_defaults(run=ask)
