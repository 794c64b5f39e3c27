"""Messages of the ingestion topics: documents in, chunks out to the stores, triples to the graph.

A document too large for one message (the bus's ``max_message_bytes``) travels
as several ``Document`` parts, sent one after the other, each once the reply to
the one before has come back:

- every part carries the document's ``content_hash``, and with it its version
  (``generation``, below): document-load stages each part's chunks in every store
  as that version, beside the version queries see, and invisible to them;
- a part that is not the ``last`` is chunked only as far as its text settles
  the chunks: the reply's ``resume_at`` says where in the part's text the first
  chunk not yet stored begins, and the next part's text starts exactly there;
  its ``first_position`` is the number of chunks stored so far. Chunk ids
  (``<document_id>#<position>``) are therefore the same however the text was
  cut into parts: the same text and document-load settings give the same ids;
- once the last part is staged everywhere, document-load has each store switch
  the document to the new version (``DeleteDocument`` with ``activate``): in
  one commit of that store the staged chunks become visible and every other
  version of the document goes. A concurrent query of a store thus sees the
  whole old version or the whole new one, never a mix, never neither; across
  stores the switches are separate, and document-rag keeps one version per
  document in an answer (``ChunkMatch.generation``);
- if a part fails before the switch, document-load has every store discard the
  staged version (``DeleteDocument`` with ``discard``) before it answers with
  the error: the old version stays as it was, and no store keeps a partial
  document. If a switch fails after another store switched, the document is
  removed from every store (and the library), so none holds a different one.

A document that fits one message is a single part (0, ``last``), as before.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

import msgspec

from .common import BadRequest, Count, Entity, Error, Fact
from .library import DocumentInfo
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
    # 0 opens the document (a new version of it); 1, 2, ... follow in order.
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    # False: more parts follow, so the text's end is not the document's end.
    last: bool = True
    # The position (chunk number) of this part's first chunk: how many chunks earlier parts stored.
    first_position: Annotated[int, msgspec.Meta(ge=0)] = 0
    # "sha256:<hex>" of the document's content (schema/library.py): a document the library holds with
    # the same hash is not chunked and embedded again; its part 0 is answered ``unchanged=1``. It names
    # the version the parts build (``generation_of``): required when a document comes in several parts.
    content_hash: str = ""
    # The sections of this part, in order of offset: the one it starts in at offset 0, then each that
    # begins inside it (a converter's headings: ``processors/ingestion/convert``). Chunks carry theirs in their title.
    sections: list[Section] = []


class DeleteDocument(msgspec.Struct, kw_only=True):
    """Change what a chunk store holds of a document, in one commit of that store.

    - neither ``activate`` nor ``discard``: remove the document, every version queries could see;
    - ``activate=G``: version G, staged by ``EmbeddedChunks(staged=True)``, replaces whatever
      version queries saw, and its staging goes. ``chunks`` is how many G must have: a store
      holding fewer staged refuses (a batch was lost) and changes nothing. Sent again once G is
      active, it changes nothing and succeeds;
    - ``discard=G``: drop staged version G (a failed load); what queries see stays as it was.

    Neither a switch nor a removal drops another version staged meanwhile: a concurrent writer of
    the document may still switch to it, and the last switch (the log's order) must find it whole.
    """

    document_id: str
    collection: str = DEFAULT_COLLECTION
    activate: str = ""
    discard: str = ""
    chunks: Count = 0
    # With ``activate``: the library's entry of the version (document-load's). With stores from the log, a
    # replica applies it with the switch, so the library names the version the stores serve at once.
    document: DocumentInfo | None = None


class Chunk(msgspec.Struct, kw_only=True):
    chunk_id: str  # stable: the same document text gives the same ids
    document_id: str
    text: str
    position: Count  # the chunk's place in its document, from 0
    title: str = ""
    collection: str = DEFAULT_COLLECTION
    # The document's version (``generation_of``); "" for chunks stored before versions existed.
    generation: str = ""


class EmbeddedChunks(msgspec.Struct, kw_only=True):
    """Chunks and their vectors for a store. ``staged``: kept aside as their ``generation`` of their
    document, invisible to queries until a ``DeleteDocument(activate=...)`` switches to it."""

    chunks: list[Chunk]
    vectors: list[list[float]]
    staged: bool = False


_GENERATION = re.compile(r"[0-9A-Za-z_-]{1,64}")


def generation_of(content_hash: str) -> str:
    """The version name of a document with this content hash: 16 hex digits, as short as a chunk can carry.

    The hash's own digits when it is ``sha256:<hex>`` (what ``ragbus ingest`` sends), else its sha256's.
    """
    algorithm, _, digits = content_hash.partition(":")
    if algorithm == "sha256" and re.fullmatch(r"[0-9a-f]{16,}", digits):
        return digits[:16]
    return hashlib.sha256(content_hash.encode()).hexdigest()[:16]


# The version that parts sent without a content hash build: they cannot name their content.
UNHASHED = "unhashed"


def parts_generation(content_hash: str) -> str:
    """The version a document sent in several parts builds: its content hash's, or ``UNHASHED``."""
    return generation_of(content_hash) if content_hash else UNHASHED


def check_generation(generation: str) -> str:
    """``generation`` if it is a valid version name (it names files of the stores), else ``BadRequest``."""
    if not _GENERATION.fullmatch(generation):
        raise BadRequest(f"invalid generation {generation[:80]!r}: use 1-64 letters, digits, '_' or '-'")
    return generation


class LoadTriples(msgspec.Struct, kw_only=True):
    """A batch for the graph of one collection: entities, facts, and optionally its ontology.

    ``ontology`` is the mapping ``ragbus.kg.Ontology.from_dict`` reads; a
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
    # With stores made from the bus's logs: where the logs hold this write (``topic@position`` tokens); a
    # request that must see it carries them in ``must_see``.
    seen: list[str] = []
    # A document's last part: set when, once its write was applied, another writer's version of the
    # document was served instead (a concurrent write the log ordered after it, or a removal).
    superseded: Superseded | None = None
    error: Error | None = None


class Superseded(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What is served of a document instead of the version a writer stored: ``generation`` "" once removed."""

    generation: str = ""
    # With stores from the log: where the log holds the switch (or removal) that superseded it.
    seen: str = ""
