"""Requests and responses of document-rag, the orchestrator."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .common import ChunkMatch, Error, Fact, Limit, MustSee, RejectedFact
from .retrieval import DEFAULT_COLLECTION


class Turn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One message of the conversation before a question: the user's question or the answer it got."""

    role: Literal["user", "assistant"]
    content: str


MAX_TURNS = 40
History = Annotated[list[Turn], msgspec.Meta(max_length=MAX_TURNS)]


class DocumentRagRequest(msgspec.Struct, kw_only=True):
    """A question. ``mode``: vector | keyword | hybrid (None = the processor's default).

    ``at_time`` (ISO 8601): graph facts valid at that instant only.

    ``doc_limit``: how many chunks the answer is drawn from, at least 1 (None =
    the processor's default; the processor's max_doc_limit is the most).

    ``fusion``: how hybrid mode fuses its vector and keyword lists: rrf | minmax |
    dbsf (None = the processor's default).

    ``as_of`` (ISO 8601): graph facts as they were recorded then, before later
    revisions (with ``at_time``: what was believed then about that instant).

    ``answer``: False asks for the sources only (the ranked chunks with their
    scores, and the facts), with no prompt call and an empty answer. A streamed
    request always answers.

    ``history``: the conversation before ``query``, oldest first. A follow-up ("and what
    does it return?") is made into a standalone question from it before retrieval, by the
    prompt processor's ``condense-question`` template; the response's ``standalone`` says
    what was asked in its place.

    ``answer_pieces``: in a stream, ``False`` leaves the ``answer`` pieces out (the sources,
    then the final piece with the whole answer): for a caller that reports progress but shows
    no text as it comes, so the answer does not cross the bus piece by piece for nobody.
    """

    query: str
    mode: str | None = None
    at_time: str | None = None
    doc_limit: Limit | None = None
    collection: str = DEFAULT_COLLECTION
    fusion: str | None = None
    as_of: str | None = None
    answer: bool = True
    history: History = []
    answer_pieces: bool = True
    must_see: MustSee = []


class DocumentRagResponse(msgspec.Struct, kw_only=True):
    answer: str = ""
    chunks: list[ChunkMatch] = []  # what the answer was drawn from, in fused order, with text
    cited: list[str] = []  # the chunk ids the answer cites
    facts: list[Fact] = []  # graph facts given to the answer, each with its citable text
    rejected: list[RejectedFact] = []  # facts about the question's entities that broke the ontology
    at_time: str | None = None  # the graph snapshot, normalised (UTC, ISO 8601)
    header: str | None = None  # the snapshot header the prompt carried (only with at_time)
    paths: list[str] = []  # retrieval paths that ran: vector, keyword, kg
    # Paths that failed and were left out (e.g. "keyword" when hybrid fell back to vector),
    # and why, one line each.
    degraded: list[str] = []
    problems: list[str] = []
    timings_ms: dict[str, float] = {}  # per stage, and "total"
    # The question retrieval and the answer used in the follow-up's place, when a history made it standalone.
    standalone: str | None = None
    error: Error | None = None


class DocumentRagPiece(msgspec.Struct, kw_only=True):
    """One piece of a streamed document-rag answer, in this order (``kind``):

    - ``sources``: one piece, before any answer text: what the answer will be drawn
      from (``chunks`` with text, ``facts``, ``rejected``), the ``paths`` that ran,
      those ``degraded`` and why (``problems``), the graph snapshot (``at_time``, ``header``);
    - ``answer``: zero or more pieces, each the next part of the answer (``text``);
    - ``final``: one piece whose ``response`` is the whole ``DocumentRagResponse`` a
      non-streaming call gets (answer, cited ids, timings...).

    A failure ends the stream with a piece carrying only ``error`` (kind ``error``).
    """

    kind: str = "error"
    text: str = ""
    chunks: list[ChunkMatch] = []
    facts: list[Fact] = []
    rejected: list[RejectedFact] = []
    paths: list[str] = []
    degraded: list[str] = []
    problems: list[str] = []
    at_time: str | None = None
    header: str | None = None
    response: DocumentRagResponse | None = None
    error: Error | None = None
