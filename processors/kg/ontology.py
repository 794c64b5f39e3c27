"""The ontology: which facts make sense, checked before a fact reaches a prompt.

An ``Ontology`` has

- classes, each with at most one parent (``is_a`` walks up the chain); a
  class is an instance of itself and of all its ancestors;
- relations, each with an optional domain class (what its head must be), an
  optional range class (what its tail must be), and an optional
  ``irreflexive`` flag (nothing stands in it to itself);
- disjoint groups of classes: no entity is an instance of two classes of a
  group. Disjointness is inherited: if Person and Place are disjoint, so are
  Politician (a Person) and City (a Place).

``check_triple`` reads entity types from a mapping ``entity -> class name``
(or a collection of class names, for an entity with several types). An
untyped entity is unconstrained, by domain, range and disjointness alike. A
class name the ontology does not know is a root class of its own: it is
itself and nothing else, so it fails a domain or range but is disjoint with
nothing.

What "disjointness" means for one triple: a fact says its head is an instance
of the relation's domain and its tail of its range. The fact violates
disjointness when that, together with an entity's declared types, would make
the entity an instance of two disjoint classes; e.g. ``(Berlin, born_in,
Germany)`` with Berlin typed City, domain Person, and Person disjoint with
Place. An entity whose declared types are disjoint among themselves violates
it in every fact it appears in. Such a fact is usually also a domain or range
violation; disjointness adds that it is a contradiction, not a missing type.

Every reason ``check_triple`` returns starts with one of the names below and
a colon, in this order: ``unknown_relation``, ``domain_violation``,
``range_violation``, ``irreflexive_violation``, ``disjointness``.

A definition that cannot mean anything (a cycle of parents, a parent or a
domain that is not a class, a class disjoint with its own ancestor, an
unknown key) raises ``OntologyError`` when the ontology is built.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DISJOINTNESS",
    "DOMAIN_VIOLATION",
    "IRREFLEXIVE_VIOLATION",
    "RANGE_VIOLATION",
    "REASON_NAMES",
    "UNKNOWN_RELATION",
    "Ontology",
    "OntologyError",
    "Relation",
    "reason_name",
]

UNKNOWN_RELATION = "unknown_relation"
DOMAIN_VIOLATION = "domain_violation"
RANGE_VIOLATION = "range_violation"
IRREFLEXIVE_VIOLATION = "irreflexive_violation"
DISJOINTNESS = "disjointness"
REASON_NAMES = (UNKNOWN_RELATION, DOMAIN_VIOLATION, RANGE_VIOLATION, IRREFLEXIVE_VIOLATION, DISJOINTNESS)

Types = Mapping[str, str | Collection[str] | None]

_RELATION_KEYS = frozenset({"domain", "range", "irreflexive", "asked_by"})
_TOP_KEYS = frozenset({"classes", "relations", "disjoint"})


class OntologyError(ValueError):
    """An ontology definition that cannot be used, with what is wrong and where."""


def reason_name(reason: str) -> str:
    """The stable name a reason starts with: ``reason_name("range_violation: ...")`` is ``range_violation``."""
    return reason.partition(":")[0]


@dataclass(frozen=True)
class Relation:
    """A relation and its constraints; ``None`` domain or range leaves that side unconstrained."""

    name: str
    domain: str | None = None
    range: str | None = None
    irreflexive: bool = False
    asked_by: tuple[str, ...] = ()  # words a question asking for this relation uses ("capital", "born")


class Ontology:
    """Classes, relations and disjointness rules, checked once at construction; immutable after."""

    def __init__(
        self,
        classes: Mapping[str, str | None] | None = None,
        relations: Mapping[str, Relation | Mapping[str, Any] | None] | None = None,
        disjoint: Iterable[Iterable[str]] = (),
    ) -> None:
        self._parents = _read_classes(classes or {})
        self._ancestors = {name: self._chain(name) for name in self._parents}
        self._relations = {name: self._read_relation(name, spec) for name, spec in (relations or {}).items()}
        self._disjoint = self._read_disjoint(disjoint)

    # Building

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> Ontology:
        """From the shape of an ontology file: ``classes``, ``relations``, ``disjoint``, all optional."""
        if not isinstance(mapping, Mapping):
            raise OntologyError(f"an ontology is a mapping, got {type(mapping).__name__}")
        unknown = sorted(set(mapping) - _TOP_KEYS)
        if unknown:
            raise OntologyError(f"unknown ontology keys {unknown}; expected {sorted(_TOP_KEYS)}")
        for key, kind in (("classes", Mapping), ("relations", Mapping), ("disjoint", list | tuple)):
            if key in mapping and not isinstance(mapping[key], kind):
                raise OntologyError(f"ontology {key!r} has the wrong shape: {type(mapping[key]).__name__}")
        return cls(mapping.get("classes"), mapping.get("relations"), mapping.get("disjoint", ()))

    @classmethod
    def load(cls, path: str | Path) -> Ontology:
        """Read a ``.toml`` or ``.json`` ontology file; any problem is an ``OntologyError`` naming the file."""
        mapping = read_mapping(path)
        try:
            return cls.from_dict(mapping)
        except OntologyError as e:
            raise OntologyError(f"{path}: {e}") from e

    def _chain(self, name: str) -> tuple[str, ...]:
        chain = [name]
        parent = self._parents[name]
        while parent is not None:
            if parent in chain:
                cycle = " -> ".join([*chain[chain.index(parent) :], parent])
                raise OntologyError(f"the class hierarchy has a cycle: {cycle}")
            chain.append(parent)
            parent = self._parents[parent]
        return tuple(chain)

    def _read_relation(self, name: object, spec: Relation | Mapping[str, Any] | None) -> Relation:
        if not isinstance(name, str) or not name.strip():
            raise OntologyError(f"a relation name must be a non-empty string, got {name!r}")
        if isinstance(spec, Relation):
            fields = {"domain": spec.domain, "range": spec.range, "irreflexive": spec.irreflexive,
                      "asked_by": spec.asked_by}
        elif spec is None:
            fields = {}
        elif isinstance(spec, Mapping):
            unknown = sorted(set(spec) - _RELATION_KEYS)
            if unknown:
                raise OntologyError(f"relation {name!r}: unknown keys {unknown}; expected {sorted(_RELATION_KEYS)}")
            fields = dict(spec)
        else:
            raise OntologyError(f"relation {name!r}: expected a mapping, got {type(spec).__name__}")
        irreflexive = fields.get("irreflexive", False)
        if not isinstance(irreflexive, bool):
            raise OntologyError(f"relation {name!r}: irreflexive must be true or false, got {irreflexive!r}")
        sides = {}
        for side in ("domain", "range"):
            cls = fields.get(side) or None
            if cls is not None and cls not in self._parents:
                raise OntologyError(f"relation {name!r}: {side} {cls!r} is not a class")
            sides[side] = cls
        asked_by: Any = fields.get("asked_by", ())
        if not isinstance(asked_by, list | tuple) or not all(isinstance(a, str) and a.strip() for a in asked_by):
            raise OntologyError(f"relation {name!r}: asked_by is a list of words or phrases, got {asked_by!r}")
        return Relation(name, sides["domain"], sides["range"], irreflexive, tuple(asked_by))

    def _read_disjoint(self, groups: Iterable[Iterable[str]]) -> frozenset[frozenset[str]]:
        pairs = set()
        for group in groups:
            if isinstance(group, str | bytes | Mapping) or not isinstance(group, Iterable):
                raise OntologyError(f"a disjoint group is a list of class names, got {group!r}")
            members = list(group)
            if len(members) < 2 or len(set(members)) != len(members):
                raise OntologyError(f"a disjoint group needs two or more distinct classes, got {members!r}")
            for cls in members:
                if cls not in self._parents:
                    raise OntologyError(f"disjoint group {members!r}: {cls!r} is not a class")
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    if self.is_a(a, b) or self.is_a(b, a):
                        raise OntologyError(f"{a!r} and {b!r} cannot be disjoint: one is a subclass of the other")
                    pairs.add(frozenset((a, b)))
        return frozenset(pairs)

    # Reading

    @property
    def classes(self) -> frozenset[str]:
        """Every class the ontology defines."""
        return frozenset(self._parents)

    @property
    def relations(self) -> Mapping[str, Relation]:
        """Every relation the ontology defines, by name."""
        return dict(self._relations)

    def parent(self, cls: str) -> str | None:
        """The parent of ``cls``; ``None`` for a root class and for a class the ontology does not know."""
        return self._parents.get(cls)

    def ancestors(self, cls: str) -> tuple[str, ...]:
        """``cls`` and every class above it, nearest first; just ``(cls,)`` for an unknown class."""
        return self._ancestors.get(cls, (cls,))

    def is_a(self, cls: str, ancestor: str) -> bool:
        """Whether every instance of ``cls`` is an instance of ``ancestor`` (a class is one of itself)."""
        return ancestor in self.ancestors(cls)

    def are_disjoint(self, a: str, b: str) -> bool:
        """Whether no entity can be both an ``a`` and a ``b``, declared or inherited."""
        return any(frozenset((x, y)) in self._disjoint for x in self.ancestors(a) for y in self.ancestors(b))

    # Checking

    def check_triple(self, head: str, relation: str, tail: str, types: Types | None = None) -> list[str]:
        """Why ``(head, relation, tail)`` breaks the ontology, as named reasons; empty when it does not."""
        types = types or {}
        head_types, tail_types = _types_of(head, types), _types_of(tail, types)
        reasons = []
        rel = self._relations.get(relation)
        if rel is None:
            reasons.append(f"{UNKNOWN_RELATION}: {relation!r} is not a relation of the ontology")
            rel = Relation(relation)
        if rel.domain and head_types and not any(self.is_a(c, rel.domain) for c in head_types):
            reasons.append(
                f"{DOMAIN_VIOLATION}: head {head!r} is {_shown(head_types)}, not a {rel.domain!r} "
                f"(the domain of {relation!r})"
            )
        if rel.range and tail_types and not any(self.is_a(c, rel.range) for c in tail_types):
            reasons.append(
                f"{RANGE_VIOLATION}: tail {tail!r} is {_shown(tail_types)}, not a {rel.range!r} "
                f"(the range of {relation!r})"
            )
        if rel.irreflexive and head == tail:
            reasons.append(f"{IRREFLEXIVE_VIOLATION}: {relation!r} cannot relate {head!r} to itself")
        roles = (("head", head, head_types, rel.domain), ("tail", tail, tail_types, rel.range))
        for role, entity, declared, implied in roles:
            clash = self._clash(declared + ((implied,) if implied and declared else ()))
            if clash:
                reasons.append(
                    f"{DISJOINTNESS}: {role} {entity!r} would be both a {clash[0]!r} and a {clash[1]!r}, "
                    "which are disjoint"
                )
        return reasons

    def _clash(self, classes: tuple[str, ...]) -> tuple[str, str] | None:
        for i, a in enumerate(classes):
            for b in classes[i + 1 :]:
                if self.are_disjoint(a, b):
                    return a, b
        return None


def read_mapping(path: str | Path) -> dict[str, Any]:
    """A ``.toml`` or ``.json`` ontology file as the mapping ``Ontology.from_dict`` takes; unchecked."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise OntologyError(f"{path}: an ontology file must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise OntologyError(f"{path}: {e}") from e


def _read_classes(classes: Mapping[str, str | None]) -> dict[str, str | None]:
    if not isinstance(classes, Mapping):
        raise OntologyError(f"classes must map a class name to its parent, got {type(classes).__name__}")
    parents: dict[str, str | None] = {}
    for name, parent in classes.items():
        if not isinstance(name, str) or not name.strip():
            raise OntologyError(f"a class name must be a non-empty string, got {name!r}")
        if parent is not None and not isinstance(parent, str):
            raise OntologyError(f"class {name!r}: the parent must be a class name or empty, got {parent!r}")
        parents[name] = parent or None
    for name, parent in parents.items():
        if parent is not None and parent not in parents:
            raise OntologyError(f"class {name!r}: parent {parent!r} is not a class")
    return parents


def _types_of(entity: str, types: Types) -> tuple[str, ...]:
    declared = types.get(entity)
    if declared is None or declared == "":
        return ()
    if isinstance(declared, str):
        return (declared,)
    if isinstance(declared, Collection) and all(isinstance(c, str) for c in declared):
        return tuple(sorted(c for c in set(declared) if c))
    raise TypeError(f"the type of {entity!r} must be a class name or a collection of them, got {declared!r}")


def _shown(types: tuple[str, ...]) -> str:
    return "a " + " and a ".join(repr(c) for c in types)
