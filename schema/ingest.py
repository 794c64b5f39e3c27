"""Messages of the ingestion topics: documents in, chunks out to the stores, triples to the graph.

A document too large for one message (the bus's ``max_message_bytes``) travels
as several ``Document`` parts, sent one after the other, each once the reply to
the one before has come back:

- part 0 opens the document: the chunker drops the document's earlier version
  from every store before storing the part's chunks; later parts append;
- a part that is not the ``last`` is chunked only as far as its text settles
  the chunks: the reply's ``resume_at`` says where in the part's text the first
  chunk not yet stored begins, and the next part's text starts exactly there;
  its ``first_position`` is the number of chunks stored so far. Chunk ids
  (``<document_id>#<position>``) are therefore the same however the text was
  cut into parts: the same text and chunker settings give the same ids;
- if a part fails after an earlier one was stored, the chunker removes the
  document from every store before it answers with the error, so no store keeps
  a partial document.

A document that fits one message is a single part (0, ``last``), as before.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from .common import Count, Entity, Error, Fact
from .retrieval import DEFAULT_COLLECTION


class Section(msgspec.Struct, frozen=True):
    """A section of a document starts at ``offset`` of a part's text, under these headings (outermost first)."""

    offset: Count
    heading: list[str]


class Document(msgspec.Struct, kw_only=True):
    """A document for document-load, or one part of it (see the module's docstring)."""

    document_id: str
    text: str
    title: str = ""
    collection: str = DEFAULT_COLLECTION
    source: str = ""
    # 0 opens the document (its earlier version is dropped); 1, 2, ... follow in order.
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    # False: more parts follow, so the text's end is not the document's end.
    last: bool = True
    # The position (chunk number) of this part's first chunk: how many chunks earlier parts stored.
    first_position: Annotated[int, msgspec.Meta(ge=0)] = 0
    # "sha256:<hex>" of the document's content (schema/library.py): a document the library holds with
    # the same hash is not chunked and embedded again; its part 0 is answered ``unchanged=1``.
    content_hash: str = ""
    # The sections of this part, in order of offset: the one it starts in at offset 0, then each that
    # begins inside it (a converter's headings: ``processors/cli/convert``). Chunks carry theirs in their title.
    sections: list[Section] = []


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

    ``retract_sources``: documents deleted, whose facts (``Fact.source``) the graph stops
    believing at ``recorded_at`` (the writer stamps it when left out). A retraction is a
    recorded event of the graph's log, not an erasure: ``as_of`` an earlier time still
    shows the facts, and loading them again later believes them again.
    """

    facts: list[Fact] = []
    entities: list[Entity] = []
    ontology: dict[str, Any] | None = None
    collection: str = DEFAULT_COLLECTION
    retract_sources: list[str] = []
    recorded_at: str | None = None


class IngestResult(msgspec.Struct, kw_only=True):
    """Reply to an ingestion request: how many items the store now holds for it."""

    count: int = 0
    # Items of the request that were left out, each with why (a graph load's bad lines, say).
    rejected: list[str] = []
    # Items held already exactly as sent (a reload): neither stored again nor refused.
    unchanged: int = 0
    # Items stored that will not serve as sent, each with why (a fact the collection's ontology rejects).
    warnings: list[str] = []
    # A document part that is not the last: where in its text the next part must begin.
    resume_at: int = 0
    # Facts the graph stopped believing (a deleted document's, see ``LoadTriples.retract_sources``).
    retracted: int = 0
    error: Error | None = None
