"""Every default of document-load (document-load and document-delete)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.bounds import PositiveSeconds
from ragbus.config.settings import ProcessorSettings
from ragbus.schema import topics as t


class DocumentLoadSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    # Characters per chunk and shared between neighbours: about 200 MiniLM tokens,
    # under the 256 the embedder reads.
    chunk_size: Annotated[int, msgspec.Meta(ge=50)] = 1000
    chunk_overlap: Annotated[int, msgspec.Meta(ge=0)] = 150
    # Texts per embed request (fewer when they would not fit one message).
    embed_batch: Annotated[int, msgspec.Meta(ge=1)] = 32
    # Embed requests one document part keeps in flight: enough to keep the embedder busy, few
    # enough that a part of thousands of chunks does not queue requests past call_timeout_s.
    embed_concurrency: Annotated[int, msgspec.Meta(ge=1)] = 4
    # A document of any size is accepted: the sender splits it into parts that fit the bus
    # (schema/ingest.py). Each sub-request (embed, store, delete) waits at most this long.
    call_timeout_s: PositiveSeconds = 120.0
    # The embedder's bulk lane: a question's vectors (on t.EMBED) never wait behind a document's.
    embed_topic: str = t.EMBED_BULK
    store_topics: list[str] = msgspec.field(default_factory=lambda: [t.DOC_EMBEDDINGS_STORE, t.KEYWORD_STORE])
    delete_topics: list[str] = msgspec.field(default_factory=lambda: [t.DOC_EMBEDDINGS_DELETE, t.KEYWORD_DELETE])
    # document-delete also has the graph retract the deleted document's facts (a recorded event of the
    # graph's log, so ``as_of`` before the deletion still shows them) by a LoadTriples with
    # ``retract_sources`` on this topic, kg-store's; "" = a deployment without a graph.
    retract_topic: str = t.TRIPLES_LOAD
    # The library (processors/library): told of each document stored whole and each removed, on
    # record_topic; asked on documents_topic whether a document with a content_hash is held already
    # with that hash, which then is neither chunked nor embedded again. "" = no library.
    record_topic: str = t.DOCUMENT_RECORD
    documents_topic: str = t.DOCUMENTS_QUERY
    # Document-load's own deadline (per part) must cover its calls.
    handler_timeout_s: PositiveSeconds = 600.0
