"""The graph store: a networkx multigraph of facts, bi-temporal, rebuilt from an append-only log.

Nodes are entity ids; every fact version is one edge ``head -> tail`` whose
key is its sequence number in the store (store order). Two times are kept
apart, so "what did we believe on X about Y" has an answer:

- validity, ``[valid_from, valid_until)``: when the fact holds in the world
  (entities have one too: a country that ceased to exist);
- recording, ``[recorded_at, superseded_at)``: when the store believed this
  version. A fact loaded again under the same ``id`` with other content is a
  revision, recorded when the store applies it (or at the ``recorded_at`` it
  carries), so an edited line of a file, loaded again, revises its fact: the
  earlier version is superseded from that instant but stays queryable with
  ``as_of``. A fact without ``id`` is identified by its content, so loading
  the same file twice changes nothing.

An item identical to the one held counts as unchanged, so a reload is a
no-op that says so. Bad items never abort a batch: no entity id, an entity
id declared again with other content (the first is kept), an empty part, a
control character in a name, a bad, inverted or empty interval are each
left out with why (``validation.py``). A fact the collection's ontology will
reject at query time is stored (the ontology may change) and reported as a
warning.

Within one batch an id's first fact that leaves ``recorded_at`` to the store
wins; a later one under that id is refused, whatever it says. Otherwise a
batch with two contents under one id would keep the first, then, sent again,
find it unchanged and take the second as a revision: a flip on every reload
(``ragbus kg load`` holds a whole file to this rule, across its batches). A
fact carrying its own ``recorded_at`` is a version of its own (a file may
hold a fact's history); two versions recorded at one instant are refused.

Persistence (``graph_log.py``): ``GraphLog`` appends what each batch changed
(the items accepted, stamped; never a refused one), length-prefixed msgpack,
to ``<data_dir>/<collection>/graph/log``, fsynced before the writer replies.
Readers replay it and pick up what was appended since (one ``stat`` per
query), so the writer and the query replicas share only the file. A replay
rebuilds the same store: the logged facts carry the ``recorded_at`` they
were stored with.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import networkx as nx

from ragbus.schema import Entity, Fact, LoadTriples, RejectedFact
from ragbus.schema.times import TimeError, covers, iso, parse_instant

from .answering import facts_that_answer
from ragbus.stores.graph_log import GraphLog
from .linking import EntityLinker
from .ontology import Ontology
from .validation import check_text, fact_content, fact_key, first_under_id, interval, normalised

__all__ = [
    "GraphStore", "QueryResult", "batch_item", "fact_text", "load_log",
]


@dataclass(slots=True)
class _Node:
    id: str
    name: str
    type: str | None = None
    aliases: tuple[str, ...] = ()
    valid_from: str | None = None
    valid_until: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    declared: bool = False  # by an entity record, not only named by a fact


@dataclass(slots=True)
class _Version:
    seq: int
    key: str
    fact: Fact
    start: datetime | None
    end: datetime | None
    recorded: datetime
    superseded: datetime | None = None
    retracted: bool = False  # ``superseded`` is when its source document was deleted

    def believed_at(self, when: datetime) -> bool:
        """False once its retraction had happened by ``when``; a revision after it does not count here."""
        return not (self.retracted and self.superseded is not None and self.superseded <= when)


@dataclass(slots=True)
class QueryResult:
    entities: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    rejected: list[RejectedFact] = field(default_factory=list)


@dataclass(slots=True)
class ApplyResult:
    count: int = 0  # entities declared + fact versions added
    unchanged: int = 0  # entities and facts already held exactly as they are
    retracted: int = 0  # fact versions no longer believed: their source document was deleted
    rejected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # stored facts the ontology rejects at query time
    ontology_changed: bool = False  # the batch brought an ontology other than the one held
    log: LoadTriples | None = None  # what the batch changed, to append to the log; None: nothing


def _item(kind: str, index: int, label: str) -> str:
    """How a rejection or a warning names its item: ``fact 3 ('ada knows bob')``; ``batch_item`` reads it."""
    return f"{kind} {index} ({label[:120]!r})"


_ITEM = re.compile(r"(entity|fact) ([0-9]+) ")


def batch_item(message: str) -> tuple[str, int, str] | None:
    """The kind and batch index of the item a rejection or warning names, and the rest of the message.

    So a client can say which line of its own input was refused: ``("fact", 3, "('ada knows bob'): ...")``.
    """
    m = _ITEM.match(message)
    return (m.group(1), int(m.group(2)), message[m.end():]) if m else None


def fact_text(head: str, relation: str, tail: str) -> str:
    """The citable fragment of a fact: ``Angela Merkel head_of_government_of Germany``."""
    return f"{head} {relation} {tail}"


class GraphStore:
    """Entities and fact versions of one collection, held in memory; ``GraphStore()`` is empty."""

    def __init__(self) -> None:
        self.graph = nx.MultiDiGraph()
        self.versions: list[_Version] = []  # by seq: store order
        self.nodes: dict[str, _Node] = {}
        self.ontology: Ontology | None = None
        self._ontology_source: dict | None = None  # the mapping it was read from, to tell a reload
        self._by_key: dict[str, list[int]] = {}  # fact key -> seqs ordered by recorded time
        self._by_source: dict[str, list[int]] = {}  # provenance (document id) -> seqs
        self._linker = EntityLinker()
        self._ids_by_name: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self.versions)

    # -- writing -------------------------------------------------------------------------------

    def apply(self, batch: LoadTriples, *, now: datetime | None = None, warn: bool = True) -> ApplyResult:
        """Add a batch's ontology, entities and facts; facts without ``recorded_at`` get ``now``.

        ``warn=False`` skips the ontology check of each fact: a replay of the log already warned once.
        ``result.log`` is what the batch changed, stamped, for the log: replaying it rebuilds the same store.
        """
        result = ApplyResult()
        stamp = now or datetime.now(UTC)
        # Read before anything changes: a bad time refuses the whole batch, not its second half.
        when = parse_instant(batch.recorded_at, what="recorded_at") if batch.recorded_at else stamp
        if batch.ontology is not None and batch.ontology != self._ontology_source:
            self.ontology = Ontology.from_dict(batch.ontology)  # OntologyError: the whole batch is refused
            self._ontology_source = batch.ontology
            result.ontology_changed = True
        entities: list[Entity] = []
        for i, entity in enumerate(batch.entities):
            try:
                added = self._declare(entity)
            except (TimeError, ValueError) as exc:
                result.rejected.append(f"{_item('entity', i, entity.id)}: {exc}")
                continue
            if added:
                entities.append(entity)
            result.count += added
            result.unchanged += not added
        facts: list[Fact] = []
        first: dict[str, int] = {}  # fact id -> the batch's first fact under it that the store stamps
        for i, f in enumerate(batch.facts):
            what = _item("fact", i, fact_text(f.head, f.relation, f.tail))
            try:
                if (kept := first_under_id(f, i, first)) is not None:
                    fact_id = (f.id or "").strip()
                    raise ValueError(f"fact id {fact_id!r} is given twice in this batch; fact {kept} is kept")
                fact, added = self._add_fact(f, stamp)
            except (TimeError, ValueError) as exc:
                result.rejected.append(f"{what}: {exc}")
                continue
            if added:
                facts.append(fact)
            result.count += added
            result.unchanged += not added
            reasons = self._check(fact) if warn else []
            if reasons:
                result.warnings.append(
                    f"{what}: stored, but the collection's ontology rejects it: {'; '.join(reasons)}"
                )
        if batch.retract_sources:
            result.retracted = self._retract(batch.retract_sources, when)
        if result.count or result.retracted or result.ontology_changed:
            result.log = LoadTriples(
                facts=facts, entities=entities, collection=batch.collection,
                ontology=batch.ontology if result.ontology_changed else None,
                retract_sources=list(batch.retract_sources) if result.retracted else [],
                recorded_at=iso(when) if result.retracted else None,
            )
        return result

    def _retract(self, sources: list[str], when: datetime) -> int:
        """Stop believing, from ``when`` on, the versions believed then whose source is one of ``sources``."""
        retracted = 0
        for source in dict.fromkeys(sources):
            for seq in self._by_source.get(source, ()):
                v = self.versions[seq]
                if v.recorded <= when and (v.superseded is None or v.superseded > when):
                    v.superseded, v.retracted = when, True
                    retracted += 1
        return retracted

    def _declare(self, entity: Entity) -> bool:
        """Declare ``entity``: True if added, False if held already exactly so; ValueError if it clashes."""
        entity_id = entity.id.strip()
        if not entity_id:
            raise ValueError("an entity needs a non-empty id")
        start, end = interval(entity.valid_from, entity.valid_until)
        name = entity.name.strip() or entity_id
        aliases = tuple(dict.fromkeys(a.strip() for a in entity.aliases if a and a.strip()))
        for what, value in (("id", entity_id), ("name", name), ("type", entity.type)):
            check_text(what, value)
        for alias in aliases:
            check_text("alias", alias)
        node = self.nodes.get(entity_id)
        if node is not None and node.declared:
            declared = (node.name, node.type, node.aliases, node.start, node.end)
            if declared == (name, entity.type or None, aliases, start, end):
                return False
            raise ValueError(f"duplicate entity id {entity_id!r} with other content: the first declaration is kept")
        if node is None:
            node = self._node(entity_id)
        node.name, node.type, node.aliases, node.declared = name, entity.type or None, aliases, True
        node.valid_from, node.valid_until, node.start, node.end = entity.valid_from, entity.valid_until, start, end
        for label in (name, *aliases):
            self._index_name(label, entity_id)
        return True

    def _node(self, entity_id: str) -> _Node:
        node = self.nodes.get(entity_id)
        if node is None:
            # Named by a fact before (or without) being declared: its id is its name.
            node = self.nodes[entity_id] = _Node(id=entity_id, name=entity_id)
            self.graph.add_node(entity_id)
            self._index_name(entity_id, entity_id)
        return node

    def _index_name(self, label: str, entity_id: str) -> None:
        ids = self._ids_by_name.get(label)
        if ids is None:
            self._ids_by_name[label] = {entity_id}
            self._linker.add(label)
        else:
            ids.add(entity_id)

    def _add_fact(self, f: Fact, now: datetime) -> tuple[Fact, bool]:
        """The fact as stored, and whether it added a version (False: the store held it already)."""
        fact = normalised(f)
        start, end = interval(fact.valid_from, fact.valid_until)
        recorded = parse_instant(f.recorded_at, what="recorded_at") if f.recorded_at else now
        fact = msgspec.structs.replace(fact, recorded_at=iso(recorded))
        key = fact_key(fact)
        chain = self._by_key.setdefault(key, [])
        times = [self.versions[s].recorded for s in chain]
        at = bisect.bisect_right(times, recorded)
        before = self.versions[chain[at - 1]] if at else None
        if before is not None and before.believed_at(recorded) and fact_content(before.fact) == fact_content(fact):
            return fact, False  # what the store already believed then (a reload, a redelivery): nothing to revise
        if before is not None and times[at - 1] == recorded:
            raise ValueError(f"duplicate fact {fact.id or fact_text(fact.head, fact.relation, fact.tail)!r}: "
                             f"another version is recorded at {iso(recorded)}: the first is kept")
        version = _Version(len(self.versions), key, fact, start, end, recorded)
        if at < len(chain):
            version.superseded = self.versions[chain[at]].recorded
        if before is not None and (before.superseded is None or before.superseded > recorded):
            before.superseded, before.retracted = recorded, False  # revised (a retraction after this is its own)
        chain.insert(at, version.seq)
        self.versions.append(version)
        if fact.source:
            self._by_source.setdefault(fact.source, []).append(version.seq)
        self._node(fact.head)
        self._node(fact.tail)
        self.graph.add_edge(fact.head, fact.tail, key=version.seq)
        return fact, True

    # -- reading -------------------------------------------------------------------------------

    def link(self, question: str) -> list[str]:
        """Ids of the entities ``question`` names, in the order ``EntityLinker.link`` gives names."""
        ids: dict[str, None] = {}
        for name in self._linker.link(question):
            for entity_id in sorted(self._ids_by_name.get(name, ())):
                ids.setdefault(entity_id, None)
        return list(ids)

    def query(
        self,
        question: str,
        *,
        at_time: datetime | None = None,
        as_of: datetime | None = None,
        limit: int = 8,
        answering: bool = False,
    ) -> QueryResult:
        """Facts touching the entities ``question`` names, in store order, at most ``limit``.

        With ``answering``: only the facts that answer the question, best first (``answering.py``).

        With ``at_time``: only entities and facts valid then, and no fact whose
        other end was not. With ``as_of``: the versions recorded then, else the
        current ones. Facts that break the ontology go to ``rejected`` (also at
        most ``limit``), each with its reasons.
        """
        result = QueryResult()
        for entity_id in self.link(question):
            node = self.nodes[entity_id]
            if at_time is None or covers(node.start, node.end, at_time):
                result.entities.append(entity_id)
        seqs: set[int] = set()
        for entity_id in result.entities:
            seqs.update(k for _, _, k in self.graph.out_edges(entity_id, keys=True))
            seqs.update(k for _, _, k in self.graph.in_edges(entity_id, keys=True))
        seen: set[tuple] = set()
        wanted = len(seqs) if answering else limit  # answering ranks every fact before it cuts
        for seq in sorted(seqs):
            if len(result.facts) >= wanted and len(result.rejected) >= limit:
                break
            v = self.versions[seq]
            if as_of is None:
                if v.superseded is not None:
                    continue
            elif not covers(v.recorded, v.superseded, as_of):
                continue
            f = v.fact
            head, tail = self.nodes[f.head], self.nodes[f.tail]
            if at_time is not None and not (
                covers(v.start, v.end, at_time)
                and covers(head.start, head.end, at_time)
                and covers(tail.start, tail.end, at_time)
            ):
                continue
            same = (f.head, f.relation, f.tail, v.start, v.end)
            if same in seen:
                continue
            seen.add(same)
            cited = msgspec.structs.replace(f, text=fact_text(head.name, f.relation, tail.name))
            reasons = self._check(f)
            if reasons:
                if len(result.rejected) < limit:
                    result.rejected.append(RejectedFact(cited, reasons))
            elif len(result.facts) < wanted:
                result.facts.append(cited)
        if answering:
            linked_names = [n for e in result.entities for n in (self.nodes[e].name, *self.nodes[e].aliases)]
            ends = {e for f in result.facts for e in (f.head, f.tail)}
            result.facts = facts_that_answer(
                question, result.facts, linked=result.entities, linked_names=linked_names,
                types={e: self.nodes[e].type for e in ends}, ontology=self.ontology, limit=limit)
        return result

    def _check(self, f: Fact) -> list[str]:
        if self.ontology is None:
            return []
        types = {n: t for n in (f.head, f.tail) if (t := self.nodes[n].type) is not None}
        return self.ontology.check_triple(f.head, f.relation, f.tail, types)

    def entity(self, entity_id: str) -> dict:
        """An entity as the dicts of ``RetrievedContext.related_entities``."""
        n = self.nodes[entity_id]
        return {"id": n.id, "name": n.name, "type": n.type, "valid_from": n.valid_from, "valid_until": n.valid_until}

    def retrieve(self, query: str, *, k: int = 8, as_of: datetime | str | None = None) -> list:
        """One ``RetrievedContext`` per current fact touching an entity ``query`` names, unfiltered by time.

        The base retriever that ``TemporalGraphRetriever`` wraps: each context
        carries the fact's interval and its two entities', for the wrapper to
        filter on.
        """
        from .temporal import RetrievedContext

        when = parse_instant(as_of, what="as_of") if as_of is not None else None
        contexts = []
        for f in self.query(query, as_of=when, limit=k).facts:
            contexts.append(
                RetrievedContext(
                    content=f.text or "",
                    score=1.0,
                    source=f.source or "KnowledgeGraph",
                    metadata={"fact_id": f.id, "chunk_id": f.chunk_id, "recorded_at": f.recorded_at},
                    related_entities=[self.entity(f.head), self.entity(f.tail)],
                    related_relationships=[
                        {"source": f.head, "target": f.tail, "type": f.relation, "valid_from": f.valid_from,
                         "valid_until": f.valid_until, "id": f.id}
                    ],
                )
            )
        return contexts


def load_log(path: Path, on_progress: Callable[[int, int], None] | None = None) -> tuple[GraphStore, GraphLog]:
    store, log = GraphStore(), GraphLog(path)
    log.catch_up(store, on_progress)
    return store, log

