"""Every topic name, and which Structs travel on it. The one place they are written down.

A request topic's responses go to the ``reply-to`` topic its caller names;
``*.dlq`` topics receive what could not be handled (see processors/bus/consume.py).
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from .changelog import ReplicaStatus, ReplicaStatusRequest, ShardsStatus
from .convert import ConvertPart, ConvertPiece, ConvertReply
from .graph import KgQueryRequest, KgQueryResponse
from .ingest import DeleteDocument, Document, EmbeddedChunks, IngestResult, LoadTriples
from .library import DocumentList, ListDocuments, RecordDocument
from .prompt import PromptPiece, PromptRequest, PromptResult
from .rag import DocumentRagPiece, DocumentRagRequest, DocumentRagResponse
from .retrieval import (
    DocEmbeddingsRequest,
    DocEmbeddingsResponse,
    EmbedRequest,
    EmbedResponse,
    FetchChunkRequest,
    FetchChunkResponse,
    KeywordQueryRequest,
    KeywordQueryResponse,
)

EMBED = "embed"  # the questions' vectors: the interactive lane
EMBED_BULK = "embed-bulk"  # ingestion's vectors: the same processor's bulk lane ([processors.embed] bulk_topic)
DOC_EMBEDDINGS_QUERY = "doc-embeddings-query"
FETCH_CHUNK = "fetch-chunk"
KEYWORD_QUERY = "keyword-query"
KG_QUERY = "kg-query"
PROMPT = "prompt"
DOCUMENT_RAG = "document-rag"
DOCUMENT_LOAD = "document-load"  # a document to chunk, embed and store (document-load)
DOCUMENT_DELETE = "document-delete"  # remove a document from every store (document-load)
DOCUMENT_CONVERT = "document-convert"  # a file's bytes in parts, its text back a page at a time (document-convert)
CHUNK_STORE = "chunk-store"  # generic name of a store's write topic
DOC_EMBEDDINGS_STORE = "doc-embeddings-store"
DOC_EMBEDDINGS_DELETE = "doc-embeddings-delete"
KEYWORD_STORE = "keyword-store"
KEYWORD_DELETE = "keyword-delete"
TRIPLES_LOAD = "triples-load"
DOCUMENT_RECORD = "document-record"  # a document stored whole, or removed: the library's writer
DOCUMENTS_QUERY = "documents-query"  # which documents a collection holds, which collections there are
DOCUMENTS_REPLICA = "documents-replica"  # a replica's document stores made from the log: where it stands
SHARD_HOST = "shard-host"  # a sharded query host's shards of the document stores: which it owns, which it stands by

# Reply topics are private to one client; processors publish only under this prefix.
REPLY_PREFIX = "ragbus.reply."

# Log topics: every change to a collection's stores, read whole by every query replica (``Bus.read_log``),
# never by a group. Records are keyed so what belongs together stays in order; Kafka compacts them.
CHANGELOG_PREFIX = "ragbus.changelog."


def is_changelog(topic: str) -> bool:
    return topic.startswith(CHANGELOG_PREFIX)


# The knowledge graph's history, every collection's: the batches kg-store took, stamped (processors/kg/from_log.py).
GRAPH_LOG = f"{CHANGELOG_PREFIX}graph"
# The document stores' and the library's changes: staged chunks with their vectors, switches, removals,
# the library's records (schema/changelog.py says how they are keyed).
DOCUMENTS_LOG = f"{CHANGELOG_PREFIX}documents"
# Where each replica of a log says how far it has applied it, every few seconds (a record per replica,
# keyed by it; a tombstone when it stops): ``ragbus status`` reads it (processors/stores/reports.py).
REPLICAS_LOG = f"{CHANGELOG_PREFIX}replicas"


class TopicSchema(NamedTuple):
    request: type[msgspec.Struct]
    response: type[msgspec.Struct]


SCHEMAS: dict[str, TopicSchema] = {
    EMBED: TopicSchema(EmbedRequest, EmbedResponse),
    EMBED_BULK: TopicSchema(EmbedRequest, EmbedResponse),
    DOC_EMBEDDINGS_QUERY: TopicSchema(DocEmbeddingsRequest, DocEmbeddingsResponse),
    FETCH_CHUNK: TopicSchema(FetchChunkRequest, FetchChunkResponse),
    KEYWORD_QUERY: TopicSchema(KeywordQueryRequest, KeywordQueryResponse),
    KG_QUERY: TopicSchema(KgQueryRequest, KgQueryResponse),
    PROMPT: TopicSchema(PromptRequest, PromptResult),
    DOCUMENT_RAG: TopicSchema(DocumentRagRequest, DocumentRagResponse),
    DOCUMENT_LOAD: TopicSchema(Document, IngestResult),
    DOCUMENT_DELETE: TopicSchema(DeleteDocument, IngestResult),
    DOCUMENT_CONVERT: TopicSchema(ConvertPart, ConvertReply),
    CHUNK_STORE: TopicSchema(EmbeddedChunks, IngestResult),
    DOC_EMBEDDINGS_STORE: TopicSchema(EmbeddedChunks, IngestResult),
    KEYWORD_STORE: TopicSchema(EmbeddedChunks, IngestResult),
    DOC_EMBEDDINGS_DELETE: TopicSchema(DeleteDocument, IngestResult),
    KEYWORD_DELETE: TopicSchema(DeleteDocument, IngestResult),
    TRIPLES_LOAD: TopicSchema(LoadTriples, IngestResult),
    DOCUMENT_RECORD: TopicSchema(RecordDocument, IngestResult),
    DOCUMENTS_QUERY: TopicSchema(ListDocuments, DocumentList),
    DOCUMENTS_REPLICA: TopicSchema(ReplicaStatusRequest, ReplicaStatus),
    SHARD_HOST: TopicSchema(ReplicaStatusRequest, ShardsStatus),
}

# Topics whose processors can answer in pieces (a request with the ``stream`` header), and the
# Struct every piece is; the last piece carries the whole response (see the piece's docstring).
STREAMS: dict[str, type[msgspec.Struct]] = {
    PROMPT: PromptPiece,
    DOCUMENT_RAG: DocumentRagPiece,
    DOCUMENT_CONVERT: ConvertPiece,
}
