"""Time-scoped graph context: what the graph said at one instant.

``TemporalGraphRetriever`` wraps any retriever (``retrieve(query, **kwargs)
-> list[RetrievedContext]``) and, given an ``at_time``, keeps in each
context only the entities and relationships valid then:

- an entity is kept when ``valid_from <= at_time < valid_until`` (a validity
  interval is half-open, a missing bound is open; ``times.py`` reads both);
- a relationship is kept when its own interval covers ``at_time`` and no
  endpoint refers to an entity of the same context that was filtered out.
  An endpoint (``source``/``target``, or ``source_id``/``target_id``) refers
  to an entity by its ``id``, or by its ``name`` when it has no ``id``; an
  endpoint naming no entity of the context is unconstrained. When several
  entities share a key (versions of one entity), one kept version keeps
  the endpoint alive;
- an item whose interval cannot be read, or ends before it starts, or that
  is not a mapping, is dropped and reported (a warning on this module's
  logger, and a ``DroppedItem`` from ``filter_contexts``/``retrieve_scoped``)
  while the rest is filtered as usual.

Every context comes back, as a new object with filtered copies of its lists
(items are shallow-copied dicts, metadata a shallow copy); content, score,
source and metadata are equal to the base's, and the base's objects are
never mutated. Without an effective ``at_time`` the base's result is
returned as it is. The retriever keeps no per-call state.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ragbus.schema.times import (
    DEFAULT_HEADER_TEMPLATE,
    DEFAULT_SOURCE,
    Instant,
    TimeError,
    covers,
    parse_instant,
    parse_interval,
    render_header,
)

__all__ = [
    "DEFAULT_HEADER_TEMPLATE",
    "DEFAULT_SOURCE",
    "DroppedItem",
    "RetrievedContext",
    "Retriever",
    "ScopedContexts",
    "TemporalGraphRetriever",
    "filter_contexts",
    "render_header",
]

log = logging.getLogger(__name__)


@dataclass
class RetrievedContext:
    """One piece of context for a prompt, with the graph items it rests on."""

    content: str = ""
    score: float = 0.0
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    related_entities: list[dict[str, Any]] = field(default_factory=list)
    related_relationships: list[dict[str, Any]] = field(default_factory=list)


class Retriever(Protocol):
    # Whatever keywords its own retrieve takes (the store's: k, as_of): the caller's pass through, and a
    # wrong one is that retriever's TypeError. A method with **kwargs here would admit only catch-alls.
    @property
    def retrieve(self) -> Callable[..., list[Any]]: ...


@dataclass(frozen=True)
class DroppedItem:
    """An entity or relationship left out because its validity could not be read."""

    context_index: int
    kind: str  # "entity" or "relationship"
    item: Any
    reason: str


@dataclass(frozen=True)
class ScopedContexts:
    """One time-scoped retrieval: what the base returned, what was kept, what was unreadable."""

    at_time: datetime | None
    contexts: list[Any]
    base: list[Any]
    dropped: list[DroppedItem]


def filter_contexts(contexts: Iterable[Any], at_time: Instant) -> tuple[list[RetrievedContext], list[DroppedItem]]:
    """Each context scoped to ``at_time`` (module docstring), and the items dropped as unreadable."""
    at = parse_instant(at_time, what="at_time")
    kept: list[RetrievedContext] = []
    dropped: list[DroppedItem] = []
    for index, context in enumerate(contexts):
        kept.append(_scope(index, context, at, dropped))
    return kept, dropped


def _scope(index: int, context: Any, at: datetime, dropped: list[DroppedItem]) -> RetrievedContext:
    alive: set[Any] = set()
    gone: set[Any] = set()
    entities = []
    for item in getattr(context, "related_entities", None) or ():
        valid = _valid(index, "entity", item, at, dropped)
        if isinstance(item, Mapping):
            key = item.get("id") if item.get("id") is not None else item.get("name")
            if _hashable(key):
                (alive if valid else gone).add(key)
        if valid:
            entities.append(dict(item))
    gone -= alive
    relationships = []
    for item in getattr(context, "related_relationships", None) or ():
        if not _valid(index, "relationship", item, at, dropped):
            continue
        ends = [item.get(k) for k in ("source", "target", "source_id", "target_id") if item.get(k) is not None]
        if any(_hashable(end) and end in gone for end in ends):
            continue
        relationships.append(dict(item))
    return _copy_with(context, entities, relationships)


def _valid(index: int, kind: str, item: Any, at: datetime, dropped: list[DroppedItem]) -> bool:
    try:
        if not isinstance(item, Mapping):
            raise TimeError(f"expected a mapping, got {type(item).__name__}")
        start, end = parse_interval(item.get("valid_from"), item.get("valid_until"))
    except TimeError as e:
        reason = str(e)
        log.warning("dropped %s %r of context %d: %s", kind, _label(item), index, reason)
        dropped.append(DroppedItem(index, kind, item, reason))
        return False
    return covers(start, end, at)


def _label(item: Any) -> Any:
    if isinstance(item, Mapping):
        for key in ("id", "name", "type"):
            if item.get(key) is not None:
                return item[key]
    return item


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _copy_with(context: Any, entities: list[dict[str, Any]], relationships: list[dict[str, Any]]) -> Any:
    """A copy of the retriever's own dataclass where it has our fields (its callers keep their type), else ours."""
    metadata = copy.copy(getattr(context, "metadata", None))
    if dataclasses.is_dataclass(context) and not isinstance(context, type):
        try:
            return dataclasses.replace(
                context, metadata=metadata, related_entities=entities, related_relationships=relationships
            )
        except TypeError:
            pass  # a dataclass of another shape: build ours below
    return RetrievedContext(
        content=getattr(context, "content", ""),
        score=getattr(context, "score", 0.0),
        source=getattr(context, "source", ""),
        metadata=metadata if metadata is not None else {},
        related_entities=entities,
        related_relationships=relationships,
    )


class TemporalGraphRetriever:
    """A retriever whose contexts hold only what was valid at ``at_time`` (module docstring)."""

    def __init__(
        self,
        base_retriever: Retriever,
        at_time: Instant | None = None,
        header_template: str | None = DEFAULT_HEADER_TEMPLATE,
    ) -> None:
        if at_time is not None:
            parse_instant(at_time, what="at_time")  # refuse a bad time now, not at the first query
        if header_template is None:
            header_template = DEFAULT_HEADER_TEMPLATE
        if not isinstance(header_template, str):
            raise TypeError(f"header_template must be a str, got {type(header_template).__name__}")
        self.base_retriever = base_retriever
        self.at_time = at_time
        self.header_template = header_template

    def effective_time(self, at_time: Instant | None = None) -> datetime | None:
        """The instant a call with ``at_time`` is scoped to: the call's, else the constructor's, else None."""
        chosen = at_time if at_time is not None else self.at_time
        return None if chosen is None else parse_instant(chosen, what="at_time")

    def retrieve(self, query: str, at_time: Instant | None = None, **kwargs: Any) -> list[Any]:
        """The base's contexts for ``(query, **kwargs)``, scoped to the effective ``at_time``."""
        return self.retrieve_scoped(query, at_time, **kwargs).contexts

    def retrieve_scoped(self, query: str, at_time: Instant | None = None, **kwargs: Any) -> ScopedContexts:
        """Like ``retrieve``, with the base's own result and the items dropped as unreadable."""
        at = self.effective_time(at_time)
        base = self.base_retriever.retrieve(query, **kwargs)
        if at is None:
            return ScopedContexts(None, base, base, [])
        base = list(base)
        kept, dropped = filter_contexts(base, at)
        return ScopedContexts(at, kept, base, dropped)

    def header(self, at_time: Instant | None = None, source: str = DEFAULT_SOURCE) -> str | None:
        """The header for a prompt scoped like ``retrieve(..., at_time)``; None when there is no time."""
        at = self.effective_time(at_time)
        return None if at is None else render_header(self.header_template, at, source)
