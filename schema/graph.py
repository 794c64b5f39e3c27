"""Requests and responses of kg-query."""

from __future__ import annotations

import msgspec

from .common import Error, Fact, RejectedFact


class KgQueryRequest(msgspec.Struct, kw_only=True):
    question: str
    at_time: str | None = None  # ISO 8601; facts valid at that instant only
    limit: int = 8


class KgQueryResponse(msgspec.Struct, kw_only=True):
    entities: list[str] = []
    facts: list[Fact] = []
    rejected: list[RejectedFact] = []
    at_time: str | None = None  # the snapshot the facts come from, normalised
    error: Error | None = None
