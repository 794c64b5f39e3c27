"""``ragbus documents`` and ``ragbus collections``: what the stores hold, asked of documents-query.

Over any bus: on ``memory://`` the command starts documents-query in its own process (it reads
the data directory's library), elsewhere the workers' documents-query answers. A collection's
documents come a page at a time, so a listing of any length fits the bus's messages.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import DEFAULT_COLLECTION, DocumentInfo, DocumentList, ListDocuments
from ragbus.schema import topics as t

from .common import add_bus_options, add_collection_option, add_timeout_option, call_timeout, embedded_processors
from .printable import printable


async def list_documents(
    client: RequestClient, collection: str, *, timeout: float, id_prefix: str = ""
) -> list[DocumentInfo]:
    """Every document of ``collection`` (whose id starts with ``id_prefix``), in id order, page by page."""
    documents: list[DocumentInfo] = []
    after = ""
    while True:
        request = ListDocuments(collection=collection, id_prefix=id_prefix, after=after)
        page = await client.request(t.DOCUMENTS_QUERY, request, DocumentList, timeout=timeout)
        if page.error is not None:
            raise RemoteError(t.DOCUMENTS_QUERY, page.error)
        documents.extend(page.documents)
        if not page.more or not page.documents:
            return documents
        after = page.documents[-1].document_id


async def list_collections(client: RequestClient, *, timeout: float) -> list[str]:
    request = ListDocuments(collection=DEFAULT_COLLECTION, collections=True)
    found = await client.request(t.DOCUMENTS_QUERY, request, DocumentList, timeout=timeout)
    if found.error is not None:
        raise RemoteError(t.DOCUMENTS_QUERY, found.error)
    return found.collections


async def _documents(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    async with (
        embedded_processors(settings, pipelines.LIST, url),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="documents") as client,
    ):
        documents = await list_documents(client, args.collection, timeout=call_timeout(args, settings))
    if args.json:
        print(msgspec.json.encode(documents).decode())
        return 0
    for d in documents:  # a tab or newline in an id, title or source is escaped too: one row a document
        print(f"{printable(d.document_id)}\t{printable(d.title)}\t{printable(d.source)}\t{d.chunks} chunk(s)\t"
              f"{d.content_hash}\t{d.ingested_at or ''}")
    print(f"{len(documents)} document(s) in collection {args.collection!r}", file=sys.stderr)
    return 0


async def _collections(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    async with (
        embedded_processors(settings, pipelines.LIST, url),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="collections") as client,
    ):
        names = await list_collections(client, timeout=call_timeout(args, settings))
    if args.json:
        print(msgspec.json.encode(names).decode())
    else:
        for name in names:
            print(name)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("documents", help="list a collection's documents: id, title, source, chunks, hash, ingested at")
    add_collection_option(p)
    p.add_argument("--json", action="store_true", help="print the documents as a JSON array")
    add_timeout_option(p, "each page of the listing", "request_timeout_s")
    add_bus_options(p)
    p.set_defaults(run=_documents)

    p = sub.add_parser("collections", help="list the collections that hold documents or a graph")
    p.add_argument("--json", action="store_true", help="print the names as a JSON array")
    add_timeout_option(p, "the listing", "request_timeout_s")
    add_bus_options(p)
    p.set_defaults(run=_collections)
