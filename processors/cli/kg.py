"""``ragbus kg load`` and ``ragbus kg query``: the graph from the command line, over the bus.

On ``memory://`` the command starts the processor it talks to in its own
process (``kg query`` documents-query too, which tells kg-query that a
collection holds nothing at all); the graph persists in the data directory
either way, so a later command (or a worker) sees what an earlier one loaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.typed_clients import KgClient
from ragbus.schema import KgQueryResponse

from .common import (
    add_bus_options,
    add_collection_option,
    add_timeout_option,
    call_timeout,
    command_client,
    embedded_processors,
    instant,
    non_negative_int,
    positive_int,
    question,
)
from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_ontology, report
from .printable import printable
from .progress import progress_bar
from .seed import said_plainly


async def kg_load(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    path = Path(args.file) if args.file else SAMPLE_GRAPH
    ontology_path = Path(args.ontology) if args.ontology else (None if args.file else SAMPLE_ONTOLOGY)
    ontology = read_ontology(ontology_path) if ontology_path is not None else None
    print(f"loading {path} into collection {args.collection!r} over {url}", file=sys.stderr)
    async with (
        embedded_processors(settings, pipelines.GRAPH_LOAD, url),
        await connect(url, settings.bus) as bus,
        command_client(bus, settings, "kg-load") as client,
    ):
        summary = await load_graph(
            client, path, collection=args.collection, ontology=ontology,
            batch_size=args.batch_size, timeout=call_timeout(args, settings),
            on_progress=progress_bar(unit="item", interval_s=settings.client.progress_interval_s),
        )
    report(summary)
    return 1 if summary.rejected else 0


async def kg_query(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    async with (
        embedded_processors(settings, (*pipelines.GRAPH_QUERY, *pipelines.LIST), url),
        await connect(url, settings.bus) as bus,
        command_client(bus, settings, "kg-query") as client,
    ):
        kg = KgClient(client, timeout=call_timeout(args, settings))
        with said_plainly():
            response = await kg.query(
                args.question, at_time=args.at, as_of=args.as_of, limit=args.limit, collection=args.collection
            )
    if args.json:
        print(msgspec.json.encode(response).decode())
    else:
        _show(response)
    return 0


def _show(r: KgQueryResponse) -> None:
    when = "".join(f" {k} {v}" for k, v in (("at", r.at_time), ("as of", r.as_of)) if v)
    print(f"entities: {printable(', '.join(r.entities)) or '(none linked)'}")
    for f in r.facts:
        span = f" [{f.valid_from or '...'}, {f.valid_until or '...'})" if f.valid_from or f.valid_until else ""
        print(f"  {printable(f.text or '')}{span}  ({printable(f.source or 'no source')})")
    for rejected in r.rejected:
        print(f"  rejected: {printable(rejected.fact.text or '')}: {printable('; '.join(rejected.reasons))}")
    if not r.facts:
        print(f"  no facts{when}")


def add_parsers(sub) -> None:
    kg = sub.add_parser("kg", help="load or query the knowledge graph").add_subparsers(dest="kg_command", required=True)

    p = kg.add_parser("load", help="load a graph file (.jsonl, .csv, .nt); default: the sample graph and its ontology")
    p.add_argument("file", nargs="?")
    p.add_argument("--ontology", help="ontology file (.toml or .json) checked against every query's facts")
    add_collection_option(p)
    p.add_argument("--batch-size", type=positive_int, default=1000, help="items a message")
    add_timeout_option(p, "each batch to be stored", "store_timeout_s")
    add_bus_options(p)
    p.set_defaults(run=kg_load)

    p = kg.add_parser("query", help="the facts about what a question names")
    p.add_argument("question", type=question)
    p.add_argument("--at", type=instant, help="only facts valid at this time (ISO 8601)")
    p.add_argument("--as-of", type=instant, help="as the graph was recorded at this time (ISO 8601)")
    p.add_argument("--limit", type=non_negative_int, default=8, help="facts at most (0: entities only)")
    add_collection_option(p)
    add_timeout_option(p, "the answer", "request_timeout_s")
    p.add_argument("--json", action="store_true", help="print the whole response as JSON")
    add_bus_options(p)
    p.set_defaults(run=kg_query)
