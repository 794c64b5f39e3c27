"""Graph files (``ragbus kg load``, first use, a user's own code): read one, and send it in batches over the bus
to kg-store.

Formats, by suffix:

- ``.jsonl``: one object a line. A fact has ``head``, ``relation``, ``tail``
  and optionally ``valid_from``, ``valid_until``, ``source``, ``chunk_id``,
  ``id``, ``recorded_at``; an entity has ``id`` and optionally ``name``,
  ``type``, ``aliases``, ``valid_from``, ``valid_until``. ``"kind": "fact"``
  or ``"entity"`` says which; without it, a line with ``head``, ``relation``
  or ``tail`` is a fact, and any other line is refused (an entity line must
  say so, else a mistyped fact would be stored as an entity).
- ``.csv``: facts, one a row, under a header naming the same fields.
- ``.nt``: N-Triples facts; an IRI becomes its last path or fragment segment.

With no file, the sample graph and its ontology (``config/kg/``) are loaded.
A line that cannot be read (not UTF-8 among them: the files are read with
``surrogateescape`` so one bad byte costs its line, not the load) is
reported with its number and skipped; so is a
later fact line under an id given already (``load_graph``), and each item
the store refuses (it says why). Entities are sent before facts,
so a fact's ends are declared before they are named.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ragbus import config
from ragbus.config.settings import ClientSettings
from ragbus.kg.ontology import Ontology, OntologyError, read_mapping
from ragbus.kg.store import batch_item, fact_text
from ragbus.kg.validation import first_under_id
from ragbus.runtime.request_client import RequestClient
from ragbus.schema import DEFAULT_COLLECTION, Entity, Fact, IngestResult, LoadTriples
from ragbus.schema import topics as t

SAMPLE_GRAPH = Path(config.__file__).with_name("kg") / "sample.jsonl"
SAMPLE_ONTOLOGY = SAMPLE_GRAPH.with_name("ontology.toml")
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".nt": "nt"}


Item = Fact | Entity

# What a line of a graph file may name: the fields of the Struct it becomes (a fact's ``text`` is the store's
# to make), and its ``kind``.
_FACT_KEYS = frozenset(Fact.__struct_fields__) - {"text"}
_ENTITY_KEYS = frozenset(Entity.__struct_fields__)


def _line(raw: dict, kind: type[Item], keys: frozenset[str]) -> Item:
    """A fact or entity from one line's fields, refusing a field it does not have, as a Struct would."""
    fields = {k: v for k, v in raw.items() if k != "kind"}
    unknown = sorted(set(fields) - keys)
    if unknown:
        raise ValueError(f"Object contains unknown field `{unknown[0]}`")
    return msgspec.convert(fields, kind)


_UNDECODED = re.compile(r"[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8
_FACT_FIELDS = ("head", "relation", "tail")


def _check_utf8(text: str) -> None:
    m = _UNDECODED.search(text)
    if m is not None:
        raise ValueError(f"not UTF-8: byte 0x{ord(m.group()) - 0xDC00:02X} at character {m.start() + 1}")


def _check_encodable(text: str) -> None:
    """A ``\\ud800`` escape decodes to a lone surrogate, which no message or log can hold."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"a lone surrogate (U+{ord(exc.object[exc.start]):04X}) is not text") from None


def _open(path: Path, **kwargs):
    return path.open(encoding="utf-8", errors="surrogateescape", **kwargs)


def _kind(raw: dict) -> str:
    if "kind" in raw:
        return raw["kind"]
    if any(name in raw for name in _FACT_FIELDS):
        return "fact"
    raise ValueError('no "kind": a line must say "kind": "entity" or "fact", or have head, relation and tail '
                     "to be a fact")


def _read_jsonl(path: Path, bad: list[str]) -> Iterator[tuple[int, Item]]:
    with _open(path) as fh:
        for number, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                _check_utf8(text)
                raw = json.loads(text)
                if not isinstance(raw, dict):
                    raise ValueError("not a JSON object")
                _check_encodable(json.dumps(raw, ensure_ascii=False))
                kind = _kind(raw)
                if kind == "fact":
                    yield number, _line(raw, Fact, _FACT_KEYS)
                elif kind == "entity":
                    yield number, _line(raw, Entity, _ENTITY_KEYS)
                else:
                    raise ValueError(f"kind must be 'fact' or 'entity', got {kind!r}")
            except (ValueError, msgspec.ValidationError) as exc:
                bad.append(f"{path}:{number}: {exc}")


def _read_csv(path: Path, bad: list[str]) -> Iterator[tuple[int, Item]]:
    with _open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        try:
            _check_utf8(",".join(reader.fieldnames or ()))
        except ValueError as exc:
            bad.append(f"{path}:1: the header is {exc}")
            return
        missing = set(_FACT_FIELDS) - set(reader.fieldnames or ())
        if missing:
            bad.append(f"{path}:1: the header needs the columns {', '.join(sorted(missing))}")
            return
        for row in reader:
            try:
                for value in row.values():
                    for v in value if isinstance(value, list) else [value]:
                        _check_utf8(v or "")
                values = {k: (v or None) for k, v in row.items() if k is not None}
                if None in row:
                    raise ValueError("more values than columns")
                values = {k: v for k, v in values.items() if v is not None}
                yield reader.line_num, _line(values, Fact, _FACT_KEYS)
            except (ValueError, msgspec.ValidationError) as exc:
                bad.append(f"{path}:{reader.line_num}: {exc}")


_NT_TERM = r'(<[^>]*>|_:\S+|"(?:[^"\\]|\\.)*"(?:@[\w-]+|\^\^<[^>]*>)?)'
_NT_LINE = re.compile(rf"^\s*{_NT_TERM}\s+{_NT_TERM}\s+{_NT_TERM}\s*\.\s*(#.*)?$")


def _nt_value(term: str) -> str:
    if term.startswith("<"):
        iri = term[1:-1].rstrip("/#")
        return re.split(r"[/#]", iri)[-1] or iri
    if term.startswith("_:"):
        return term
    literal = term[: term.rindex('"') + 1]
    return json.loads(literal)


def _read_nt(path: Path, bad: list[str]) -> Iterator[tuple[int, Item]]:
    with _open(path) as fh:
        for number, text in enumerate(fh, 1):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            try:
                _check_utf8(text)
            except ValueError as exc:
                bad.append(f"{path}:{number}: {exc}")
                continue
            m = _NT_LINE.match(text)
            if m is None:
                bad.append(f"{path}:{number}: not an N-Triples line")
                continue
            try:
                head, relation, tail = (_nt_value(m.group(i)) for i in (1, 2, 3))
                _check_encodable(head + relation + tail)
                yield number, Fact(head, relation, tail, source=str(path))
            except ValueError as exc:
                bad.append(f"{path}:{number}: {exc}")


def read_items(path: Path, bad: list[str]) -> Iterator[Item]:
    """Every entity and fact of ``path``, in file order; unreadable lines go to ``bad``."""
    return (item for _, item in numbered_items(path, bad))


def numbered_items(path: Path, bad: list[str]) -> Iterator[tuple[int, Item]]:
    """``read_items`` with the line each item is on (a CSV row's last line)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown graph format (known: {', '.join(sorted(FORMATS))})")
    return {"jsonl": _read_jsonl, "csv": _read_csv, "nt": _read_nt}[fmt](path, bad)


@dataclass
class LoadSummary:
    sent: int = 0  # items sent
    stored: int = 0  # entities declared + fact versions added
    unchanged: int = 0  # items the collection held already exactly as sent
    rejected: list[str] = field(default_factory=list)  # unreadable lines and refused items
    warnings: list[str] = field(default_factory=list)  # stored facts the collection's ontology rejects
    seconds: float = 0.0


def read_ontology(path: Path) -> dict:
    """The ontology file as the mapping ``LoadTriples.ontology`` carries, checked here first.

    The file is read once; a problem is an ``OntologyError`` (a ValueError) naming it.
    """
    mapping = read_mapping(path)
    try:
        Ontology.from_dict(mapping)
    except OntologyError as e:
        raise OntologyError(f"{path}: {e}") from e
    return mapping


async def load_graph(
    client: RequestClient,
    path: Path,
    *,
    collection: str = DEFAULT_COLLECTION,
    ontology: dict | None = None,
    batch_size: int = 1000,
    timeout: float | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> LoadSummary:
    """Send ``path``'s entities, then its facts, to ``triples-load`` one batch at a time.

    A first pass reads the entities and counts the facts (so progress has a
    total); the second streams the facts. Within the file an id's first fact
    line that leaves ``recorded_at`` to the store wins: the first pass refuses
    any later one, before anything is sent, as the store would within a
    batch, so a file decides the same way whatever the batch size and on
    every load (a reload finds the first unchanged, never the second a
    revision). One batch in flight: the store applies them in the order sent.
    Each item refused is reported as ``path:line: ...``, as an unreadable
    line is.
    """
    wait = timeout if timeout is not None else ClientSettings().store_timeout_s  # each batch's bound
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    summary = LoadSummary()
    started = time.perf_counter()
    entities: list[tuple[int, Entity]] = []
    facts_total = 0
    first: dict[str, int] = {}  # fact id -> the line of the file's first fact under it that the store stamps
    twice: set[int] = set()  # the lines of the later ones, refused here
    for number, item in numbered_items(path, summary.rejected):
        if isinstance(item, Entity):
            entities.append((number, item))
        elif (kept := first_under_id(item, number, first)) is not None:
            twice.add(number)
            fact_id = (item.id or "").strip()  # an id first_under_id found: never None here
            summary.rejected.append(f"{path}:{number}: fact ({fact_text(item.head, item.relation, item.tail)[:120]!r})"
                                    f": fact id {fact_id!r} is given twice in this load; line {kept} is kept")
        else:
            facts_total += 1
    total = len(entities) + facts_total

    def located(message: str, lines: dict[str, list[int]]) -> str:
        """The store names an item by its index in the batch; the user needs its line."""
        found = batch_item(message)
        if found is None:
            return message
        kind, index, rest = found
        return f"{path}:{lines[kind][index]}: {kind} {rest}"

    async def send(items: list[tuple[int, Item]], extra: dict | None) -> None:
        es = [(n, i) for n, i in items if isinstance(i, Entity)]
        fs = [(n, i) for n, i in items if isinstance(i, Fact)]
        lines = {"entity": [n for n, _ in es], "fact": [n for n, _ in fs]}
        batch = LoadTriples(facts=[i for _, i in fs], entities=[i for _, i in es], ontology=extra,
                            collection=collection)
        result = await client.request(t.TRIPLES_LOAD, batch, IngestResult, timeout=wait)
        if result.error is not None:
            raise ValueError(f"kg-store refused a batch: {result.error.type}: {result.error.message}")
        summary.sent += len(items)
        summary.stored += result.count
        summary.unchanged += result.unchanged
        summary.rejected.extend(located(r, lines) for r in result.rejected)
        summary.warnings.extend(located(w, lines) for w in result.warnings)
        if on_progress is not None:
            on_progress(summary.sent, total, "facts" if fs else "entities")

    pending: list[tuple[int, Item]] = []
    facts: Iterator[tuple[int, Item]] = (
        (n, i) for n, i in numbered_items(path, []) if isinstance(i, Fact) and n not in twice
    )
    for numbered in itertools.chain(entities, facts):
        pending.append(numbered)
        if len(pending) >= batch_size:
            await send(pending, ontology)
            pending, ontology = [], None
    if pending or ontology is not None:
        await send(pending, ontology)
    summary.seconds = time.perf_counter() - started
    return summary


def report(summary: LoadSummary, out=sys.stderr, shown: int = 20) -> None:
    """What the load did: the first ``shown`` refused items and warnings, then one line of counts."""
    for label, lines in (("rejected", summary.rejected), ("warning", summary.warnings)):
        for line in lines[:shown]:
            print(f"  {label}: {line}", file=out)
        if len(lines) > shown:
            print(f"  ... and {len(lines) - shown} more", file=out)
    print(f"sent {summary.sent} item(s), stored {summary.stored}, rejected {len(summary.rejected)}, "
          f"unchanged {summary.unchanged} in {summary.seconds:.1f}s", file=out)
    if summary.sent and summary.unchanged == summary.sent:
        print("nothing new: the collection already holds every item as sent", file=out)
    if summary.warnings:
        print(f"warning: {len(summary.warnings)} fact(s) stored that the collection's ontology rejects at query "
              "time; load them with an --ontology that covers them, or into another --collection", file=out)


async def load_sample_graph(
    client: RequestClient, collection: str = DEFAULT_COLLECTION, *,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> LoadSummary:
    """The sample graph (``config/kg/``) with its ontology; fails on the first item refused."""
    loaded = await load_graph(client, SAMPLE_GRAPH, collection=collection, ontology=read_ontology(SAMPLE_ONTOLOGY),
                              on_progress=on_progress)
    if loaded.rejected:
        raise RuntimeError(f"loading the sample graph failed: {loaded.rejected[0]}")
    return loaded
