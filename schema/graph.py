"""Requests and responses of kg-query."""

from __future__ import annotations

import msgspec

from .common import Count, Error, Fact, MustSee, RejectedFact
from .retrieval import DEFAULT_COLLECTION


class KgQueryRequest(msgspec.Struct, kw_only=True):
    """Facts about the entities a question names.

    ``at_time`` (ISO 8601): only facts, and entities, valid at that instant.
    ``as_of`` (ISO 8601): the graph as it was recorded then, before later
    revisions, so "what did we believe on X about Y" is ``as_of=X, at_time=Y``.
    """

    question: str
    at_time: str | None = None
    as_of: str | None = None
    limit: Count = 8  # facts at most; 0 = entities only
    collection: str = DEFAULT_COLLECTION
    answering: bool = False  # only the facts that answer the question, best first (an answer's graph path)
    must_see: MustSee = []


class KgQueryResponse(msgspec.Struct, kw_only=True):
    entities: list[str] = []  # ids of the entities the question names, in the order it names them
    facts: list[Fact] = []  # each with its citable ``text`` and provenance
    rejected: list[RejectedFact] = []  # facts about them that break the collection's ontology
    at_time: str | None = None  # the snapshot the facts come from, normalised (UTC, ISO 8601)
    as_of: str | None = None
    error: Error | None = None
