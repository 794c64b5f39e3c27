"""Requests and responses of embed, doc-embeddings-query, fetch-chunk and keyword-query."""

from __future__ import annotations

import msgspec

from .common import ChunkMatch, Error

DEFAULT_COLLECTION = "default"


class EmbedRequest(msgspec.Struct, kw_only=True):
    texts: list[str]


class EmbedResponse(msgspec.Struct, kw_only=True):
    vectors: list[list[float]] = []
    model: str = ""
    error: Error | None = None


class DocEmbeddingsRequest(msgspec.Struct, kw_only=True):
    """Nearest chunks to each vector; the matches of all vectors, best score per chunk."""

    vectors: list[list[float]]
    limit: int = 10
    collection: str = DEFAULT_COLLECTION


class DocEmbeddingsResponse(msgspec.Struct, kw_only=True):
    matches: list[ChunkMatch] = []
    error: Error | None = None


class FetchChunkRequest(msgspec.Struct, kw_only=True):
    chunk_ids: list[str]
    collection: str = DEFAULT_COLLECTION


class FetchChunkResponse(msgspec.Struct, kw_only=True):
    """The chunks found, in request order; ids not found are simply absent."""

    chunks: list[ChunkMatch] = []
    error: Error | None = None


class KeywordQueryRequest(msgspec.Struct, kw_only=True):
    """``query`` is the user's raw text; the store escapes it, never the caller."""

    query: str
    limit: int = 10
    collection: str = DEFAULT_COLLECTION


class KeywordQueryResponse(msgspec.Struct, kw_only=True):
    matches: list[ChunkMatch] = []
    error: Error | None = None
