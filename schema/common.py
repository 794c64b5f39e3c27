"""Structs shared by several topics."""

from __future__ import annotations

from typing import Annotated

import msgspec

# The bounds of the numbers a request carries, checked when a processor decodes it, so a bad
# value is a ValidationError naming the field rather than a failure deeper in. A limit passed
# on from one processor to another has one bound on both sides: document-rag's doc_limit
# becomes the limit of its doc-embeddings-query and keyword-query calls (Limit), its
# fact_limit the limit of its kg-query call (Count; 0 = no facts).
# The upper bound is what a message can carry (a msgpack int64): a larger number is refused where
# it is read (say, a gateway's query string), naming its field, not failing when sent on.
WIRE_MAX = 2**63 - 1
Limit = Annotated[int, msgspec.Meta(ge=1, le=WIRE_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=WIRE_MAX)]
# Writes a request must see, for stores made from the bus's logs: the ``seen`` tokens (``topic@position``,
# schema/changelog.py) their ingest or load answered with. A replica answers only once it has applied
# each one of its own logs, waiting up to its ``fresh_wait_s``.
LOG_TOKEN_PATTERN = r"^ragbus\.changelog\.[^@]*@[0-9:-]+$"
LOG_TOKEN_MAX = 300
MUST_SEE_MAX = 100
LogToken = Annotated[str, msgspec.Meta(max_length=LOG_TOKEN_MAX, pattern=LOG_TOKEN_PATTERN)]
MustSee = Annotated[list[LogToken], msgspec.Meta(max_length=MUST_SEE_MAX)]


class BadRequest(ValueError):
    """The request itself is wrong (out of range, unparseable, empty): the caller's mistake.

    A handler (or a validator it calls: ``check_collection``, ``ragbus.schema.times``)
    raises it for bad input. The processor base answers it like any failure, but
    logs it without a stack and counts it in ``ragbus_bad_requests`` rather than
    in ``ragbus_errors``: a user's typo is not a fault of the worker. The error
    response's ``type`` is the exception's class name (``BadRequest``, ``TimeError``).
    """


class Error(msgspec.Struct, frozen=True):
    """A business failure, carried in a response instead of crashing a worker.

    ``type`` is a stable, machine-readable name (``ValidationError``,
    ``Timeout``, ``NotFound``, the handler's exception class...); ``message``
    is for people. ``caller``: the request itself is wrong (the processor refused it as a bad
    request), not the processor: a gateway answers it 400, and sending it again fails the same way.
    """

    type: str
    message: str
    caller: bool = False


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
    # The version of its document the chunk belongs to (``Chunk.generation``); "" or None where the
    # store predates versions. document-rag keeps one version per document in an answer.
    generation: str | None = None


class Fact(msgspec.Struct, frozen=True):
    """A knowledge-graph triple, with the time it holds (ISO 8601) and where it came from.

    ``head`` and ``tail`` are entity ids (an entity nobody declared has its
    name as id). ``[valid_from, valid_until)`` is when the fact holds in the
    world, half-open, a missing bound open. ``source`` (a document id) and
    ``chunk_id`` are its provenance. ``id`` lets a later load revise the fact;
    ``recorded_at`` is when the store learnt this version (the store stamps
    it when a load leaves it out). ``text`` is the citable fragment a query
    answers with, e.g. ``Angela Merkel head_of_government_of Germany``.
    """

    head: str
    relation: str
    tail: str
    valid_from: str | None = None
    valid_until: str | None = None
    source: str | None = None
    chunk_id: str | None = None
    id: str | None = None
    recorded_at: str | None = None
    text: str | None = None


class Entity(msgspec.Struct, frozen=True, kw_only=True):
    """A node of the knowledge graph: what questions name it by, its class, when it existed."""

    id: str
    name: str = ""  # "" = the id is the name
    type: str | None = None  # a class of the collection's ontology
    aliases: list[str] = []
    valid_from: str | None = None
    valid_until: str | None = None


class RejectedFact(msgspec.Struct, frozen=True):
    fact: Fact
    reasons: list[str]
