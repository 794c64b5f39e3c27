"""Requests and responses of embed, doc-embeddings-query, fetch-chunk and keyword-query."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from .common import BadRequest, ChunkMatch, Count, Error, Limit, MustSee

DEFAULT_COLLECTION = "default"

# Stores keep a collection in a directory of that name: no separators, no
# leading dot, nothing that could reach outside the data directory.
_COLLECTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_collection(name: str) -> str:
    """Return ``name`` if it is a valid collection name, else raise ``BadRequest`` (a ValueError) saying why."""
    if not _COLLECTION.fullmatch(name):
        raise BadRequest(
            f"invalid collection name {name[:200]!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class EmbedRequest(msgspec.Struct, kw_only=True):
    texts: list[str]


class EmbedResponse(msgspec.Struct, kw_only=True):
    vectors: list[list[float]] = []
    model: str = ""
    error: Error | None = None


class DocEmbeddingsRequest(msgspec.Struct, kw_only=True):
    """Nearest chunks to each vector; the matches of all vectors, best score per chunk."""

    vectors: list[list[float]]
    limit: Limit = 10
    collection: str = DEFAULT_COLLECTION
    must_see: MustSee = []


class DocEmbeddingsResponse(msgspec.Struct, kw_only=True):
    matches: list[ChunkMatch] = []
    error: Error | None = None


class FetchChunkRequest(msgspec.Struct, kw_only=True):
    chunk_ids: list[str]
    collection: str = DEFAULT_COLLECTION
    must_see: MustSee = []


class FetchChunkResponse(msgspec.Struct, kw_only=True):
    """The chunks found, in request order; ids not found are simply absent."""

    chunks: list[ChunkMatch] = []
    error: Error | None = None


# A query's terms are its words, stems and identifiers in a few fields, each field's capped by keyword-query's
# max_query_terms; statistics of more are refused. A token is at most 40 characters (the analysers' own cap),
# an identifier a few hundred.
TERMS_MAX = 4096
TERM_MAX = 1024
# The searched fields of an index (title, text, stem, ident today), with room for more.
FIELDS_MAX = 64
FIELD_NAME_MAX = 64


class TermCount(msgspec.Struct, array_like=True):
    """How many chunks hold ``term`` in ``field`` of a keyword index."""

    field: Annotated[str, msgspec.Meta(max_length=FIELD_NAME_MAX)]
    term: Annotated[str, msgspec.Meta(max_length=TERM_MAX)]
    chunks: Count


class FieldTokens(msgspec.Struct, array_like=True):
    """How many tokens ``field`` of a keyword index holds over all its chunks: BM25's average field length
    is this over the chunks."""

    field: Annotated[str, msgspec.Meta(max_length=FIELD_NAME_MAX)]
    tokens: Count


class KeywordStatistics(msgspec.Struct, kw_only=True):
    """The BM25 statistics of a query's terms: the chunks of an index (or of every shard's, summed), how many
    hold each term, and how many tokens each searched field holds (its average length is that over ``chunks``).
    A sharded collection's shards score with the sums, so they score as one index would. As tantivy counts
    them, ``chunks``, ``terms`` and ``lengths`` include deleted chunks its segments still hold. ``lengths``
    empty: not known (the length normalisation stays each index's own)."""

    chunks: Count = 0
    terms: Annotated[list[TermCount], msgspec.Meta(max_length=TERMS_MAX)] = []
    lengths: Annotated[list[FieldTokens], msgspec.Meta(max_length=FIELDS_MAX)] = []


class KeywordQueryRequest(msgspec.Struct, kw_only=True):
    """``query`` is the user's raw text; the store escapes it, never the caller.

    ``statistics_only``: no search, the index's own ``statistics`` of the query's terms. ``statistics``:
    score with these (a sharded collection's, summed over its shards) instead of the index's own."""

    query: str
    limit: Limit = 10
    collection: str = DEFAULT_COLLECTION
    must_see: MustSee = []
    statistics_only: bool = False
    statistics: KeywordStatistics | None = None


class KeywordQueryResponse(msgspec.Struct, kw_only=True):
    matches: list[ChunkMatch] = []
    statistics: KeywordStatistics | None = None  # asked with ``statistics_only``
    error: Error | None = None
