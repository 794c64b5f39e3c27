"""The retrieval evaluation set: questions over the Python language reference, and what is relevant to each.

    python -m scripts.eval.evalset            # check the set, print counts and word overlap per kind
    python -m scripts.eval.evalset --write    # refresh the derived fields of questions.jsonl

``questions.jsonl`` holds one question a line: ``id``, ``kind``, ``question``,
``evidence`` (verbatim passages of the corpus that answer it), ``how_made``,
and two fields derived from the evidence, ``relevant_chunks`` and
``relevant_topics``, written by ``--write`` for the default chunking.

Relevance. A chunk is relevant to a question when it contains one of the
question's evidence passages (compared with white space collapsed). The
evidence, not a chunk id, is the judgement: it survives a change of chunk
size, and it follows duplicated text. The corpus repeats itself (the
``compound`` topic holds the ``if``/``for``/``try``/``with``... topics
again, ``specialnames`` holds ``customization``, ``attribute-access``...),
so one passage is often in two chunks of two topics, and both count.
Topic-level relevance (any chunk of a relevant topic) was rejected: a
question about ``__slots__`` would count every one of the 80 chunks of
``specialnames`` as a hit. The harness resolves the evidence against the
chunks actually ingested; an evidence passage found in no chunk is an
error, not a silently unanswerable question.

The kinds (every question written by hand, before any retrieval run, and
not edited after one):

- ``identifier``: names the exact token a user would type: a dunder
  (``__slots__``, ``__init_subclass__``), a keyword or statement
  (``nonlocal``, ``except*``, ``yield from``), an operator (``//``, ``~``,
  ``:=``), a method (``str.casefold``, ``dict.setdefault``), a pdb command
  (``tbreak``), a PEP number (``PEP 8``, ``PEP 570``);
- ``paraphrase``: the question of a user who does not know the term,
  written from the answer passage while avoiding its words (the
  ``overlap`` this script prints measures how far that went);
- ``multi-concept``: two or three concepts whose answers sit in different
  passages (or different parts of one), one evidence passage per concept.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ragbus.ingestion.markup import plain

QUESTIONS = Path(__file__).with_name("questions.jsonl")
KINDS = ("identifier", "paraphrase", "multi-concept")
SPLITS = ("dev", "test")
SPLIT_SEED = 16  # fixed once; the split is stored in questions.jsonl, never redrawn
_SPACE = re.compile(r"\s+")


@dataclass(slots=True)
class Question:
    id: str
    kind: str
    question: str
    evidence: list[str]
    how_made: str
    relevant_chunks: list[str] = field(default_factory=list)
    relevant_topics: list[str] = field(default_factory=list)
    split: str = ""  # "dev" (settings are chosen on it) or "test" (reported, never tuned on): see assign_split


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    questions = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        q = Question(**json.loads(line))
        if q.kind not in KINDS:
            raise ValueError(f"{path}:{n}: unknown kind {q.kind!r}")
        if not q.evidence:
            raise ValueError(f"{path}:{n}: {q.id} has no evidence")
        if q.split not in ("", *SPLITS):
            raise ValueError(f"{path}:{n}: unknown split {q.split!r}")
        questions.append(q)
    ids = Counter(q.id for q in questions)
    if dupes := [i for i, c in ids.items() if c > 1]:
        raise ValueError(f"{path}: duplicate ids {dupes}")
    return questions


def normalise(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def bare(text: str) -> str:
    """``text`` as its words stand, with or without the reference's markup: read as plain text (as the
    chunks store it and answers show it), then without quotes and stars, which a passage cut out of a
    sentence holds otherwise than the sentence (``*raw literal*`` at its start is quoted there)."""
    return normalise(plain(text).replace('"', "").replace("*", ""))


def corpus_chunks(chunk_size: int | None = None, chunk_overlap: int | None = None) -> dict[str, str]:
    """Chunk id -> text of the default corpus, cut by the project's own chunker (defaults: its settings)."""
    from ragbus.document_load.chunking import chunk_document
    from ragbus.document_load.settings import DocumentLoadSettings
    from ragbus.ingestion import builtin_corpus

    defaults = DocumentLoadSettings()
    size = defaults.chunk_size if chunk_size is None else chunk_size
    overlap = defaults.chunk_overlap if chunk_overlap is None else chunk_overlap
    return {c.chunk_id: c.text for d in builtin_corpus("default") for c in chunk_document(d, size, overlap)}


def resolve(questions: Sequence[Question], chunks: Mapping[str, str], *, split: list[str] | None = None
            ) -> dict[str, list[str]]:
    """Question id -> the chunk ids that contain one of its evidence passages, in chunk-id order.

    Raises ``ValueError`` naming every evidence passage found in no chunk. With ``split`` (a list),
    a passage that no chunk holds whole but that a chunk boundary cuts (smaller chunks than the
    default) resolves to the chunks holding its first or its second half, by words, and is named
    in ``split``; only a passage found in neither way is an error.
    """
    texts = {chunk_id: bare(text) for chunk_id, text in chunks.items()}
    relevant: dict[str, list[str]] = {}
    missing = []
    for q in questions:
        found: set[str] = set()
        for passage in q.evidence:
            wanted = bare(passage)
            hits = {chunk_id for chunk_id, text in texts.items() if wanted in text}
            if not hits and split is not None:
                words = wanted.split(" ")
                halves = [" ".join(words[: (len(words) + 1) // 2]), " ".join(words[len(words) // 2 :])]
                hits = {chunk_id for chunk_id, text in texts.items() if any(h and h in text for h in halves)}
                if hits:
                    split.append(f"{q.id}: {passage[:60]!r}")
            if not hits:
                missing.append(f"{q.id}: {passage[:80]!r}")
            found |= hits
        relevant[q.id] = sorted(found)
    if missing:
        raise ValueError(f"{len(missing)} evidence passage(s) are in no chunk: " + "; ".join(missing))
    return relevant


def topic_of(chunk_id: str) -> str:
    """``pydoc:with#3`` -> ``with``."""
    return chunk_id.split("#", 1)[0].removeprefix("pydoc:")


def stratified_slice(questions: Sequence[Question], n: int) -> list[Question]:
    """``n`` questions, the kinds as evenly represented as ``n`` allows, each kind's picks evenly spaced.

    Deterministic: it depends only on the file's order, never on any result.
    """
    if n >= len(questions):
        return list(questions)
    by_kind: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_kind[q.kind].append(q)
    kinds = [k for k in KINDS if by_kind[k]]
    quota = {k: n // len(kinds) + (1 if i < n % len(kinds) else 0) for i, k in enumerate(kinds)}
    picked = []
    for k in kinds:
        pool, want = by_kind[k], min(quota[k], len(by_kind[k]))
        picked += [pool[(i * len(pool)) // want] for i in range(want)]
    return picked


def assign_split(questions: Sequence[Question], seed: int = SPLIT_SEED) -> dict[str, str]:
    """Question id -> "dev" or "test": each kind shuffled with ``seed`` and halved (dev gets the odd one).

    Drawn once, before any setting was measured on it, and stored in the file's ``split`` field;
    ``--write`` keeps a stored split and draws only for questions that have none.
    """
    import random

    rng = random.Random(seed)
    split: dict[str, str] = {}
    for kind in KINDS:
        ids = [q.id for q in questions if q.kind == kind]
        rng.shuffle(ids)
        half = (len(ids) + 1) // 2
        split.update({i: "dev" if n < half else "test" for n, i in enumerate(ids)})
    return split


def of_split(questions: Sequence[Question], split: str) -> list[Question]:
    """The questions of ``split`` ("dev", "test"), or all of them for "both"."""
    if split == "both":
        return list(questions)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use dev, test or both")
    return [q for q in questions if q.split == split]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def content_words(text: str) -> set[str]:
    """Case-folded non-stopwords (the prompt processor's list), a plural 's' dropped."""
    from ragbus.prompt.extractive.lexical import STOPWORDS

    return {_stem(w) for w in re.findall(r"[^\W_]+", text.casefold()) if w not in STOPWORDS}


def overlap(q: Question) -> float:
    """Share of the question's content words that occur in its evidence passages."""
    words = content_words(q.question)
    if not words:
        return 0.0
    return len(words & content_words(" ".join(q.evidence))) / len(words)


def summary(questions: Iterable[Question]) -> list[str]:
    rows = defaultdict(list)
    for q in questions:
        rows[q.kind].append(q)
    lines = ["| kind | questions (dev/test) | mean relevant chunks | mean word overlap with evidence |",
             "|---|---|---|---|"]
    for kind in KINDS:
        qs = rows.get(kind, [])
        if qs:
            rel = sum(len(q.relevant_chunks) for q in qs) / len(qs)
            ov = sum(overlap(q) for q in qs) / len(qs)
            dev = sum(q.split == "dev" for q in qs)
            lines.append(f"| {kind} | {len(qs)} ({dev}/{len(qs) - dev}) | {rel:.1f} | {ov:.0%} |")
    return lines


def write(questions: Sequence[Question], path: Path = QUESTIONS) -> None:
    with path.open("w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(asdict(q), ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="refresh relevant_chunks/relevant_topics in the file")
    args = parser.parse_args(argv)
    questions = load_questions()
    relevant = resolve(questions, corpus_chunks())
    stale = []
    drawn = assign_split(questions)
    for q in questions:
        if not q.split:
            stale.append(q.id)
            q.split = drawn[q.id]
        topics = sorted({topic_of(c) for c in relevant[q.id]})
        if (q.relevant_chunks, q.relevant_topics) != (relevant[q.id], topics):
            stale.append(q.id)
            q.relevant_chunks, q.relevant_topics = relevant[q.id], topics
    if args.write:
        write(questions)
        print(f"wrote {QUESTIONS} ({len(stale)} question(s) changed)")
    elif stale:
        print(f"derived fields out of date for {len(stale)} question(s) (run with --write): {stale[:10]}")
    print("\n".join(summary(questions)))
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
