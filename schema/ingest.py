"""Messages of the ingestion topics: documents in, chunks out to the stores, triples to the graph."""

from __future__ import annotations

from typing import Any

import msgspec

from .common import Count, Entity, Error, Fact
from .retrieval import DEFAULT_COLLECTION


class Document(msgspec.Struct, kw_only=True):
    document_id: str
    text: str
    title: str = ""
    collection: str = DEFAULT_COLLECTION
    source: str = ""


class DeleteDocument(msgspec.Struct, kw_only=True):
    document_id: str
    collection: str = DEFAULT_COLLECTION


class Chunk(msgspec.Struct, kw_only=True):
    chunk_id: str  # stable: the same document text gives the same ids
    document_id: str
    text: str
    position: Count  # the chunk's place in its document, from 0
    title: str = ""
    collection: str = DEFAULT_COLLECTION


class EmbeddedChunks(msgspec.Struct, kw_only=True):
    chunks: list[Chunk]
    vectors: list[list[float]]


class LoadTriples(msgspec.Struct, kw_only=True):
    """A batch for the graph of one collection: entities, facts, and optionally its ontology.

    ``ontology`` is the mapping ``processors.kg.Ontology.from_dict`` reads; a
    batch carrying one replaces the collection's ontology from then on.
    """

    facts: list[Fact] = []
    entities: list[Entity] = []
    ontology: dict[str, Any] | None = None
    collection: str = DEFAULT_COLLECTION


class IngestResult(msgspec.Struct, kw_only=True):
    """Reply to an ingestion request: how many items the store now holds for it."""

    count: int = 0
    # Items of the request that were left out, each with why (a graph load's bad lines, say).
    rejected: list[str] = []
    error: Error | None = None
