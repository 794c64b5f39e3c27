"""The graph path's facts, measured: precision and recall of the facts an answer is given.

    python -m scripts.eval_facts [--split dev|test|both] [--show]

``scripts/eval/graph_questions.jsonl``: who/when/which questions over the sample graph
(``config/kg/sample.jsonl``), each with the facts that answer it (head, relation, tail, at its
``at_time``), and documentation questions that only name Python, which no fact answers. The
questions were written before the rule that picks facts (``processors/kg/answering.py``) and
``split`` was drawn once with a seed; choose on dev, report test.

Each question is put to the sample graph as an answer's graph path puts it (``answering``, the
default ``fact_limit``) and, for the figures before, as every fact about what it names (the
path's old behaviour). Precision: served facts that answer / served facts; recall: facts that
answer and were served / facts that answer; both over all the questions of a split.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ragbus.document_rag.settings import DocumentRagSettings
from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, read_items, read_ontology
from ragbus.kg.store import GraphStore
from ragbus.schema import Fact, LoadTriples
from ragbus.schema.times import parse_instant

QUESTIONS = Path(__file__).parent / "eval" / "graph_questions.jsonl"
SPLITS = ("dev", "test")


@dataclass(frozen=True)
class GraphQuestion:
    question: str
    facts: list[list[str]]
    split: str
    at_time: str | None = None


def questions(path: Path = QUESTIONS) -> list[GraphQuestion]:
    found = [GraphQuestion(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for q in found:
        if q.split not in SPLITS or any(len(f) != 3 for f in q.facts):
            raise ValueError(f"{path}: {q.question!r} needs a split (dev or test) and facts of three parts")
    return found


def sample_graph() -> GraphStore:
    bad: list[str] = []
    items = list(read_items(SAMPLE_GRAPH, bad))
    if bad:
        raise ValueError(f"{SAMPLE_GRAPH}: {bad[:3]}")
    store = GraphStore()
    store.apply(LoadTriples(facts=[i for i in items if isinstance(i, Fact)],
                            entities=[i for i in items if not isinstance(i, Fact)],
                            ontology=read_ontology(SAMPLE_ONTOLOGY)), now=datetime(2026, 1, 1))
    return store


def served(store: GraphStore, q: GraphQuestion, *, answering: bool, limit: int) -> list[tuple[str, str, str]]:
    at = parse_instant(q.at_time, what="at_time") if q.at_time else None
    found = store.query(q.question, at_time=at, limit=limit, answering=answering)
    return [(f.head, f.relation, f.tail) for f in found.facts]


def measure(store: GraphStore, qs: list[GraphQuestion], *, answering: bool, limit: int, show: bool = False):
    right = given = wanted = 0
    for q in qs:
        got = served(store, q, answering=answering, limit=limit)
        expected = {tuple(f) for f in q.facts}
        hits = len(set(got) & expected)
        right, given, wanted = right + hits, given + len(got), wanted + len(expected)
        if show and (hits < len(expected) or len(got) > hits):
            print(f"  {q.split}: {q.question!r}: served {got}, expected {sorted(expected)}")
    return (right / given if given else 1.0), (right / wanted if wanted else 1.0), given


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    p.add_argument("--show", action="store_true", help="print each question whose facts are not exactly right")
    args = p.parse_args(argv)
    store, limit = sample_graph(), DocumentRagSettings().fact_limit
    splits = SPLITS if args.split == "both" else (args.split,)
    print("| split | n | | fact precision | fact recall | facts served |")
    print("|---|---|---|---|---|---|")
    for split in splits:
        qs = [q for q in questions() if q.split == split]
        for label, answering in (("every fact (before)", False), ("facts that answer", True)):
            precision, recall, given = measure(store, qs, answering=answering, limit=limit,
                                               show=args.show and answering)
            print(f"| {split} | {len(qs)} | {label} | {precision:.3f} | {recall:.3f} | {given} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
