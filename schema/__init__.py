"""Every message on the bus, as msgspec Structs, and the topics they travel on."""

from .codec import CONTENT_TYPE, DecodeError, decode, encode, to_json
from .common import BadRequest, ChunkMatch, Entity, Error, Fact, RejectedFact
from .graph import KgQueryRequest, KgQueryResponse
from .ingest import (
    Chunk,
    DeleteDocument,
    Document,
    EmbeddedChunks,
    IngestResult,
    LoadTriples,
    Section,
    check_generation,
    generation_of,
    parts_generation,
)
from .library import DocumentInfo, DocumentList, ListDocuments, RecordDocument
from .prompt import PromptPiece, PromptRequest, PromptResult
from .rag import DocumentRagPiece, DocumentRagRequest, DocumentRagResponse
from .retrieval import (
    DEFAULT_COLLECTION,
    DocEmbeddingsRequest,
    DocEmbeddingsResponse,
    EmbedRequest,
    EmbedResponse,
    FetchChunkRequest,
    FetchChunkResponse,
    KeywordQueryRequest,
    KeywordQueryResponse,
    check_collection,
)
from .topics import REPLY_PREFIX, SCHEMAS, TopicSchema

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_COLLECTION",
    "REPLY_PREFIX",
    "SCHEMAS",
    "BadRequest",
    "Chunk",
    "ChunkMatch",
    "DecodeError",
    "DeleteDocument",
    "DocEmbeddingsRequest",
    "DocEmbeddingsResponse",
    "Document",
    "DocumentInfo",
    "DocumentList",
    "DocumentRagPiece",
    "DocumentRagRequest",
    "DocumentRagResponse",
    "EmbedRequest",
    "EmbedResponse",
    "EmbeddedChunks",
    "Entity",
    "Error",
    "Fact",
    "FetchChunkRequest",
    "FetchChunkResponse",
    "IngestResult",
    "KeywordQueryRequest",
    "KeywordQueryResponse",
    "KgQueryRequest",
    "KgQueryResponse",
    "ListDocuments",
    "LoadTriples",
    "PromptPiece",
    "PromptRequest",
    "PromptResult",
    "RecordDocument",
    "RejectedFact",
    "Section",
    "TopicSchema",
    "check_collection",
    "check_generation",
    "decode",
    "encode",
    "generation_of",
    "parts_generation",
    "to_json",
]
