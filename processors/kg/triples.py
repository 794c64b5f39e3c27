"""Typed retrieval over a plain list of facts: the facts about what a question names.

``retrieve_triples`` is the whole graph path without a graph: link the
question against every head and tail name (``linking.py``), keep the facts
touching a linked entity, check them against the ontology (``ontology.py``).

Rules beyond the signature:

- ``triples`` is read exactly once (a generator is fine), before anything
  else is done with it; each item must be a sequence of three items (not a
  string, mapping or set), else ``ValueError`` naming its index.
- Facts are compared whole: the same ``(head, relation, tail)`` twice counts
  once, at its first position. Names that are not strings are never linked.
- ``facts``: the first ``k`` schema-valid touching facts, in store order.
- ``rejected``: the first ``k`` schema-violating touching facts, in store
  order, each ``{"fact": (h, r, t), "reasons": [...]}``. They do not count
  towards ``k`` for ``facts``, and they are capped at ``k`` on their own, so
  an answer never holds more than ``2 * k`` facts, and which facts are
  accepted does not depend on how many were rejected.
- ``entities``: the linked names, in ``link_entities`` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from .linking import EntityLinker
from .ontology import Ontology, Types

__all__ = ["Fact", "check_k", "materialise_triples", "retrieve_triples"]

Fact = tuple[Any, Any, Any]


def check_k(k: object, *, what: str = "k") -> int:
    """``k`` if it is an ``int`` >= 0; ``TypeError`` for any other type (``bool`` too), ``ValueError`` if negative."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"{what} must be an int >= 0, got {type(k).__name__} {k!r}")
    if k < 0:
        raise ValueError(f"{what} must be >= 0, got {k}")
    return k


def materialise_triples(triples: Iterable[Any]) -> list[Fact]:
    """Every item of ``triples`` as a ``(head, relation, tail)`` tuple, reading the iterable once."""
    if isinstance(triples, str | bytes | Mapping) or not isinstance(triples, Iterable):
        raise TypeError(f"triples must be an iterable of (head, relation, tail), got {type(triples).__name__}")
    facts = []
    for index, item in enumerate(triples):
        fact = _items(item)
        if fact is None:
            raise ValueError(f"triple at index {index} is not a (head, relation, tail) sequence: {item!r}")
        if len(fact) != 3:
            raise ValueError(f"triple at index {index} has {len(fact)} items, expected 3 (head, relation, tail)")
        try:
            hash(fact)
        except TypeError:
            raise ValueError(f"triple at index {index} has an unhashable item: {fact!r}") from None
        facts.append(fact)
    return facts


def _items(item: object) -> tuple[Any, ...] | None:
    # A string, mapping or set iterates, but not as (head, relation, tail) in a meaningful order.
    if isinstance(item, str | bytes | Mapping | AbstractSet) or not isinstance(item, Iterable):
        return None
    return tuple(item)


def retrieve_triples(
    triples: Iterable[Any],
    question: str,
    *,
    ontology: Ontology | None = None,
    types: Types | None = None,
    k: int = 8,
) -> dict[str, list[Any]]:
    """``{"entities", "facts", "rejected"}`` for ``question``: see the module docstring."""
    check_k(k)
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")
    facts = list(dict.fromkeys(materialise_triples(triples)))

    linker = EntityLinker()
    for head, _, tail in facts:
        for name in (head, tail):
            if isinstance(name, str):
                linker.add(name)
    entities = linker.link(question)
    linked = set(entities)

    kept: list[Fact] = []
    rejected: list[dict[str, Any]] = []
    for fact in facts:
        if len(kept) >= k and len(rejected) >= k:
            break
        head, relation, tail = fact
        if head not in linked and tail not in linked:
            continue
        reasons = ontology.check_triple(head, relation, tail, types or {}) if ontology is not None else []
        if not reasons:
            if len(kept) < k:
                kept.append(fact)
        elif len(rejected) < k:
            rejected.append({"fact": fact, "reasons": reasons})
    return {"entities": entities, "facts": kept, "rejected": rejected}
