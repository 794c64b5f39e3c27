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
from pathlib import Path

import msgspec

from config.settings import Settings, default_data_dir, load_settings
from schema import DocumentRagResponse

from .bus import connect
from .client import RequestClient
from .clients import DocumentRagClient

# Everything the embedded pipeline needs, in one process.
PIPELINE = [
    "embed", "document-load", "document-delete",
    "doc-embeddings-store", "doc-embeddings-delete", "doc-embeddings-query", "fetch-chunk",
    "keyword-store", "keyword-delete", "keyword-query",
    "kg-store", "kg-query", "prompt", "document-rag",
]


def _data_dir(settings: Settings, processor: str) -> Path:
    configured = settings.processors.get(processor, {}).get("data_dir", "")
    return Path(configured).expanduser() if configured else default_data_dir()


def missing_stores(settings: Settings, collection: str) -> tuple[bool, bool]:
    """Whether the collection lacks documents, and whether it lacks a graph."""
    from .keyword.index import exists, index_path
    from .kg.store import graph_path

    no_documents = not exists(index_path(_data_dir(settings, "keyword-query"), collection))
    no_graph = not graph_path(_data_dir(settings, "kg-query"), collection).exists()
    return no_documents, no_graph


async def first_use(client: RequestClient, settings: Settings, collection: str, out=sys.stderr) -> None:
    """Ingest the default corpus and load the sample graph into an empty collection."""
    from .ingest import builtin_corpus, ingest, progress_bar
    from .kg.load import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology

    no_documents, no_graph = missing_stores(settings, collection)
    if no_documents:
        documents = builtin_corpus(collection)
        print(f"first use: ingesting the Python language reference ({len(documents)} topics)", file=out)
        summary = await ingest(client, documents, on_progress=progress_bar(out))
        if summary.failed:
            raise RuntimeError(f"ingesting the default corpus failed: {summary.failed[0]}")
    if no_graph:
        print("first use: loading the sample knowledge graph", file=out)
        loaded = await load_graph(client, SAMPLE_GRAPH, collection=collection,
                                  ontology=read_ontology(SAMPLE_ONTOLOGY), on_progress=progress_bar(out))
        if loaded.rejected:
            raise RuntimeError(f"loading the sample graph failed: {loaded.rejected[0]}")


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
    from .cli import embedded_processors

    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    embedded = url.startswith("memory")
    async with embedded_processors(settings, PIPELINE, url):
        async with await connect(url, settings.bus) as bus:
            if embedded:
                async with RequestClient(bus, name="ingest") as loader:  # no resending: loads are slow
                    await first_use(loader, settings, args.collection)
            client = RequestClient(bus, name="ask", timeout_s=settings.client.request_timeout_s,
                                   resend_after_s=settings.client.resend_after_s or None)
            async with client:
                rag = DocumentRagClient(client, timeout=settings.client.request_timeout_s)
                response = await rag.ask(args.question, mode=args.mode, at_time=args.at,
                                         doc_limit=args.doc_limit, collection=args.collection)
    if args.json:
        print(msgspec.json.encode(response).decode())
    else:
        show(response)
    return 0


def add_parser(sub, default_bus: str, config_help: str) -> None:
    p = sub.add_parser("ask", help="answer a question from the documents and the knowledge graph, with sources")
    p.add_argument("question")
    p.add_argument("--mode", choices=["vector", "keyword", "hybrid"], help="retrieval mode (default: vector)")
    p.add_argument("--at", help="graph facts valid at this time (ISO 8601, e.g. 2020-01-01)")
    p.add_argument("--doc-limit", type=int, help="chunks the answer is drawn from")
    p.add_argument("--collection", default="default")
    p.add_argument("--json", action="store_true", help="print the whole response as JSON")
    p.add_argument("--bus", help=default_bus)
    p.add_argument("--config", help=config_help)
    p.set_defaults(run=ask)
