"""``ragbus ask``: the main job. A question in, a cited answer out.

On ``memory://`` (the default) every processor runs in this process; on
first use, when the collection has no documents or no graph yet, the
default corpus (the Python language reference) is ingested and the sample
graph loaded, with progress shown. With a Kafka or Pulsar URL the command
only publishes the question and waits for the workers' answer.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from config import pipelines
from config.settings import load_settings
from processors.bus import connect
from processors.runtime.client import RequestClient
from processors.runtime.clients import DocumentRagClient
from schema import DocumentRagResponse

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
from .seed import first_use


def show(r: DocumentRagResponse, out=sys.stdout) -> None:
    print(r.answer, file=out)
    by_id = {c.chunk_id: c for c in r.chunks}
    if r.cited:
        print("\nSources:", file=out)
        for chunk_id in r.cited:
            c = by_id[chunk_id]
            print(f"  [{chunk_id}] {c.title or c.document_id or ''}", file=out)
    if r.facts:
        print(f"\nFacts{f' valid at {r.at_time}' if r.at_time else ''}:", file=out)
        for f in r.facts:
            print(f"  {f.text}  ({f.source or 'no source'})", file=out)
    if r.degraded:
        print(f"\nDegraded: {'; '.join(r.problems or r.degraded)}", file=sys.stderr)


async def ask(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    embedded = url.startswith("memory")
    async with embedded_processors(settings, pipelines.EVERYTHING, url):
        async with await connect(url, settings.bus) as bus:
            if embedded:
                async with RequestClient(bus, name="ingest") as loader:  # no resending: loads are slow
                    await first_use(loader, settings, args.collection)
            timeout = call_timeout(args, settings)
            client = command_client(bus, settings, "ask", timeout_s=timeout,
                                    resend_after_s=settings.client.resend_after_s or None)
            async with client:
                rag = DocumentRagClient(client, timeout=timeout)
                response = await rag.ask(args.question, mode=args.mode, at_time=args.at,
                                         doc_limit=args.doc_limit, collection=args.collection)
    if args.json:
        print(msgspec.json.encode(response).decode())
    else:
        show(response)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ask", help="answer a question from the documents and the knowledge graph, with sources")
    p.add_argument("question", type=question)
    p.add_argument("--mode", choices=["vector", "keyword", "hybrid"], help="retrieval mode (default: vector)")
    p.add_argument("--at", type=instant, help="graph facts valid at this time (ISO 8601, e.g. 2020-01-01)")
    p.add_argument("--doc-limit", type=positive_int, help="chunks the answer is drawn from (at least 1)")
    add_collection_option(p)
    add_timeout_option(p, "the answer", "request_timeout_s")
    p.add_argument("--json", action="store_true", help="print the whole response as JSON")
    add_bus_options(p)
    p.set_defaults(run=ask)
