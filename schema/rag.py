"""Requests and responses of document-rag, the orchestrator."""

from __future__ import annotations

import msgspec

from .common import ChunkMatch, Error, Fact
from .retrieval import DEFAULT_COLLECTION


class DocumentRagRequest(msgspec.Struct, kw_only=True):
    query: str
    mode: str = "vector"  # vector | keyword | hybrid
    at_time: str | None = None
    doc_limit: int | None = None
    collection: str = DEFAULT_COLLECTION


class DocumentRagResponse(msgspec.Struct, kw_only=True):
    answer: str = ""
    chunks: list[ChunkMatch] = []
    facts: list[Fact] = []
    # Paths that failed and were left out (e.g. "keyword" when hybrid fell back to vector).
    degraded: list[str] = []
    error: Error | None = None
