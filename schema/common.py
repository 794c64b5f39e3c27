"""Structs shared by several topics."""

from __future__ import annotations

import msgspec


class Error(msgspec.Struct, frozen=True):
    """A business failure, carried in a response instead of crashing a worker.

    ``type`` is a stable, machine-readable name (``ValidationError``,
    ``Timeout``, ``NotFound``, the handler's exception class...); ``message``
    is for people.
    """

    type: str
    message: str


class ChunkMatch(msgspec.Struct):
    """A chunk a retrieval store found; ``ChunkMatch("c1")`` is valid.

    Stores fill ``text`` and the metadata when they have them, so the
    orchestrator needs no extra fetch round trip.
    """

    chunk_id: str
    score: float = 0.0
    text: str | None = None
    document_id: str | None = None
    title: str | None = None
    position: int | None = None
    collection: str | None = None


class Fact(msgspec.Struct, frozen=True):
    """A knowledge-graph triple, with the time it holds (ISO 8601) and where it came from."""

    head: str
    relation: str
    tail: str
    valid_from: str | None = None
    valid_until: str | None = None
    source: str | None = None


class RejectedFact(msgspec.Struct, frozen=True):
    fact: Fact
    reasons: list[str]
