"""Retrieval quality of every mode, with LangChain's and LlamaIndex's hybrid retrievers beside it, in one run.

    python -m scripts.eval_retrieval [--split dev|test|both] [--slice N] [--modes vector,keyword,hybrid,...]
                                     [--peers | --no-peers] [--data-dir DIR] [--per-question FILE]

The corpus is the Python language reference (``pydoc_data.topics``),
ingested through the real pipeline (document-load, embed, faiss and tantivy
stores) on a ``memory://`` bus into a temporary data dir (``--data-dir``
keeps it, and reuses it when it already holds the corpus). The questions
are ``scripts/eval/questions.jsonl`` (see ``scripts/eval/evalset.py`` for
how they were made and what counts as relevant); ``--slice N`` takes a
fixed, kind-stratified subset. ``--split`` picks the half of the set
(``split`` field of each question, drawn once: ``evalset.assign_split``):
``dev`` to choose settings on, ``test`` to report, ``both`` (the default)
prints the two halves side by side. Choose on dev only.

Each mode asks its own document-rag processor through
``DocumentRagClient`` for 10 chunks (graph path off, so only retrieval and
the extractive answer run), one question at a time, the modes interleaved
question by question so machine noise hits them alike:

- ``vector``, ``keyword``, ``hybrid``: the configured defaults (today:
  hybrid fuses by RRF with vector_weight = keyword_weight = 1; vector
  embeds the question alone: the prompt processor's ``max_concepts = 0``);
- ``vector-c1``, ``vector-c3``, ``hybrid-c3``: the question plus at most
  1 or 3 concepts from extract-concepts (a prompt processor with concepts
  on), the measurement that set that default;
- ``hybrid-v2k1``, ``hybrid-v1k2``, ``hybrid-v1k3``: other RRF weightings
  (vector:keyword).

Peers (``--peers``, the default when their packages are installed: ``pip
install -e '.[eval]'``) run in this process on the very chunks the stores
hold and the same MiniLM vectors, k = 10: see ``scripts/eval/peers.py``.

Printed: one markdown table, per question kind and overall, of nDCG@10,
recall@5 and MRR@10 (computed by ``ir-measures`` on pytrec_eval, binary
relevance), the share of questions whose extractive answer contains one of
their evidence passages ("ans", ours only: peers retrieve, they do not
answer) and the median latency: end to end (a document-rag request over
the bus, including the extractive answer) and of retrieval alone (the
orchestrator's total minus its answer stage; for a peer, its call). With
``--split both`` every cell is "dev / test".
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import Settings, load_settings, processor_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.document_load.settings import DocumentLoadSettings
from ragbus.ingestion.markup import plain
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient, FetchChunkClient
from ragbus.runtime.worker import processors_running, put_stores_in
from scripts.eval import evalset
from scripts.eval.corpus import ingest_corpus
from scripts.eval.scoring import measures, per_question

K = 10
QUERY = [*pipelines.RETRIEVAL, "prompt"]  # document-rag sections of their own are added per mode
CONCEPTS_PROMPT = "prompt-with-concepts"
KINDS = (*evalset.KINDS, "all")


@dataclass(frozen=True, slots=True)
class Mode:
    """One configuration of the orchestrator; None keeps the configured default."""

    mode: str  # the request's retrieval mode
    vector_weight: float | None = None
    keyword_weight: float | None = None
    # Concepts from extract-concepts embedded beside the question: n = at most n (a prompt processor
    # with concepts on, and document-rag's max_concepts = n); None = the configured default.
    concepts: int | None = None
    fusion: str | None = None  # hybrid's fusion: rrf, minmax, dbsf
    depth: int | None = None  # hybrid_depth: chunks asked of each side before fusing


MODES: dict[str, Mode] = {
    "vector": Mode("vector"),
    "vector-c1": Mode("vector", concepts=1),
    "vector-c3": Mode("vector", concepts=3),
    "keyword": Mode("keyword"),
    "hybrid": Mode("hybrid"),
    "hybrid-c3": Mode("hybrid", concepts=3),
    "hybrid-v2k1": Mode("hybrid", 2.0, 1.0),
    "hybrid-v1k2": Mode("hybrid", 1.0, 2.0),
    "hybrid-v1k3": Mode("hybrid", 1.0, 3.0),
    "hybrid-rrf": Mode("hybrid", fusion="rrf"),
    "hybrid-d30": Mode("hybrid", depth=30),
    "hybrid-minmax": Mode("hybrid", fusion="minmax"),
    "hybrid-minmax-d30": Mode("hybrid", fusion="minmax", depth=30),
    "hybrid-minmax-v2k1": Mode("hybrid", 2.0, 1.0, fusion="minmax"),
    "hybrid-minmax-v3k2": Mode("hybrid", 3.0, 2.0, fusion="minmax"),
    "hybrid-minmax-v1k2": Mode("hybrid", 1.0, 2.0, fusion="minmax"),
    "hybrid-dbsf": Mode("hybrid", fusion="dbsf"),
    "hybrid-dbsf-d30": Mode("hybrid", fusion="dbsf", depth=30),
}


def processor_of(name: str) -> str:
    """The document-rag section that serves mode ``name``."""
    return f"document-rag-eval-{name}"


@dataclass
class Runs:
    """What each system retrieved per question, and how long it took."""

    ranked: dict[str, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(dict))
    latency_ms: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))  # end to end
    retrieval_ms: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    answers: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))  # ours only
    problems: list[str] = field(default_factory=list)


# -- settings and the pipeline -----------------------------------------------------------------


def parse_chunking(text: str) -> dict[str, object]:
    """``1000/150``: document-load's chunk_size and chunk_overlap (characters)."""
    import re

    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if m is None:
        raise ValueError(f"chunking {text!r}: write SIZE/OVERLAP, e.g. 800/120")
    return {"chunk_size": int(m.group(1)), "chunk_overlap": int(m.group(2))}


def parse_override(text: str) -> tuple[str, str, object]:
    """``keyword-query.stem_boost=1`` -> (section, key, value); the value is JSON, else a string."""
    import json

    target, _, raw = text.partition("=")
    section, _, key = target.rpartition(".")
    if not section or not key or not raw:
        raise ValueError(f"--set {text!r}: write SECTION.KEY=VALUE, e.g. keyword-query.stem_boost=1")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return section, key, value


def eval_settings(data_dir: Path, modes: Mapping[str, Mode], chunking: str | None = None,
                  overrides: Sequence[str] = ()) -> Settings:
    """The packaged defaults, the stores in ``data_dir``, one document-rag section per mode (graph off)."""
    settings = load_settings(environ={})
    put_stores_in(settings, data_dir)
    procs = {name: dict(section) for name, section in settings.processors.items()}
    if chunking:
        procs["document-load"].update(parse_chunking(chunking))
    for section, key, value in map(parse_override, overrides):
        procs.setdefault(section, {})[key] = value
    for name in ("keyword-query", "doc-embeddings-query", "fetch-chunk"):
        procs[name]["refresh_interval_s"] = 0
    procs[CONCEPTS_PROMPT] = {**procs["prompt"], "max_concepts": 8}
    for name, m in modes.items():
        rag = {**procs["document-rag"], "use_graph": False, "max_doc_limit": max(K, 50)}
        if m.vector_weight is not None:
            rag["vector_weight"] = m.vector_weight
        if m.keyword_weight is not None:
            rag["keyword_weight"] = m.keyword_weight
        if m.fusion is not None:
            rag["fusion"] = m.fusion
        if m.depth is not None:
            rag["hybrid_depth"] = m.depth
        if m.concepts is not None:
            rag["prompt_topic"] = CONCEPTS_PROMPT
            rag["max_concepts"] = m.concepts
        procs[processor_of(name)] = rag
    settings.processors = procs
    return settings


def chunker_of(settings: Settings) -> DocumentLoadSettings:
    return processor_settings(settings, "document-load", DocumentLoadSettings)


async def stored_chunks(client: RequestClient, expected: Mapping[str, str]) -> dict[str, str]:
    """The chunks as the store holds them; their ids and texts must be document-load's (read as plain text,
    as document-load stores them: ``processors/ingestion/markup.py``)."""
    fetch = FetchChunkClient(client, timeout=120)
    ids = list(expected)
    found: dict[str, str] = {}
    for i in range(0, len(ids), 200):
        found.update({c.chunk_id: c.text or "" for c in await fetch.fetch(ids[i : i + 200])})
    differ = [i for i in ids if found.get(i) != plain(expected[i])]
    if differ or len(found) != len(expected):
        raise RuntimeError(f"the store does not hold document-load's chunks: {len(differ)} differ, e.g. {differ[:3]}")
    return found


async def run_modes(settings: Settings, questions: Sequence[evalset.Question], modes: Mapping[str, Mode],
                    runs: Runs, expected: Mapping[str, str]) -> dict[str, str]:
    """Every question through every mode's document-rag, interleaved; returns the stored chunks."""
    url = f"memory://eval-query-{uuid.uuid4().hex[:8]}"
    names = [*QUERY, *([CONCEPTS_PROMPT] if any(m.concepts is not None for m in modes.values()) else []),
             *(processor_of(name) for name in modes)]
    try:
        async with (
            processors_running(settings, names, url, ready_timeout=300),
            await connect(url, settings.bus) as bus,
            RequestClient(bus, name="eval") as client,
        ):
            chunks = await stored_chunks(client, expected)
            clients = {name: DocumentRagClient(client, topic=processor_of(name), timeout=120) for name in modes}
            for q in questions[:3]:  # warm up: first loads, first connections
                for name, m in modes.items():
                    await clients[name].ask(q.question, mode=m.mode, doc_limit=K)
            for n, q in enumerate(questions, 1):
                for name, m in modes.items():
                    started = time.perf_counter()
                    r = await clients[name].ask(q.question, mode=m.mode, doc_limit=K)
                    runs.latency_ms[name][q.id] = (time.perf_counter() - started) * 1000
                    runs.retrieval_ms[name][q.id] = r.timings_ms.get("total", 0.0) - r.timings_ms.get("prompt", 0.0)
                    runs.ranked[name][q.id] = [c.chunk_id for c in r.chunks]
                    runs.answers[name][q.id] = r.answer
                    if r.degraded:
                        runs.problems.append(f"{name} {q.id}: degraded: {'; '.join(r.problems)}")
                if n % 25 == 0:
                    print(f"  {n}/{len(questions)} questions", file=sys.stderr)
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    return chunks


def run_peers(settings: Settings, questions: Sequence[evalset.Question], chunks: Mapping[str, str],
              runs: Runs, libraries: Sequence[str]) -> None:
    from ragbus.embed.onnx_backend import OnnxBackend
    from ragbus.embed.settings import EmbedSettings
    from scripts.eval import peers

    embed = processor_settings(settings, "embed", EmbedSettings)
    if embed.backend != "onnx":
        runs.problems.append(f"peers skipped: the embed backend is {embed.backend!r}, not onnx")
        return
    backend = OnnxBackend(embed.onnx)
    backend.load()
    ids = list(chunks)
    print(f"peers: embedding {len(ids)} chunks once for both libraries", file=sys.stderr)
    corpus = peers.Corpus(
        ids=ids, texts=[chunks[i] for i in ids], vectors=backend.embed_sync([chunks[i] for i in ids]),
        embed_one=lambda text: backend.embed_sync([text])[0].tolist(),
        embed_many=lambda texts: backend.embed_sync(list(texts)).tolist(),
    )
    retrievers, problems = peers.build(corpus, K, libraries)
    runs.problems += [f"peer {p}" for p in problems]
    for name, retrieve in retrievers.items():
        for q in questions[:3]:
            retrieve(q.question)
        for q in questions:
            started = time.perf_counter()
            runs.ranked[name][q.id] = retrieve(q.question)
            runs.retrieval_ms[name][q.id] = (time.perf_counter() - started) * 1000


# -- metrics and the table ---------------------------------------------------------------------


def _median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def answered(questions: Sequence[evalset.Question], answers: Mapping[str, str]) -> dict[str, float]:
    """Question id -> 1.0 when its extractive answer contains one of its evidence passages, else 0.0."""
    return {q.id: float(any(evalset.normalise(e) in evalset.normalise(answers.get(q.id, "")) for e in q.evidence))
            for q in questions if q.id in answers}


def rows_of(questions: Sequence[evalset.Question], scores: Mapping[str, Mapping[str, Mapping[str, float]]],
            runs: Runs, systems: Sequence[str]) -> dict[tuple[str, str], dict[str, float | None]]:
    """(kind, system) -> the means and medians over ``questions``; kind "all" is every question."""
    kinds = {q.id: q.kind for q in questions}
    rows: dict[tuple[str, str], dict[str, float | None]] = {}
    for kind in KINDS:
        ids = [q.id for q in questions if kind in ("all", kinds[q.id])]
        if not ids:
            continue
        for s in systems:
            row: dict[str, float | None] = {m: statistics.fmean(scores[s][m][i] for i in ids) for m in measures()}
            ans = answered([q for q in questions if q.id in ids], runs.answers.get(s, {}))
            row["ans"] = statistics.fmean(ans.values()) if ans else None
            row["e2e"] = _median(runs.latency_ms[s][i] for i in ids if i in runs.latency_ms.get(s, {}))
            row["retrieval"] = _median(runs.retrieval_ms[s][i] for i in ids if i in runs.retrieval_ms.get(s, {}))
            row["n"] = len(ids)
            rows[(kind, s)] = row
    return rows


def table(questions: Sequence[evalset.Question], relevant: Mapping[str, Sequence[str]], runs: Runs,
          systems: Sequence[str], splits: Sequence[str] = ("all",)) -> tuple[list[str], dict]:
    """The markdown table, one "a / b" cell per split; "all" = every question given."""
    scores = {s: per_question(relevant, runs.ranked[s]) for s in systems}
    parts = {sp: questions if sp == "all" else evalset.of_split(questions, sp) for sp in splits}
    by_split = {sp: rows_of(qs, scores, runs, systems) for sp, qs in parts.items()}
    metrics = [*measures(), "ans"]
    head = " / ".join(splits) if len(splits) > 1 else ""
    title = f"({head}) " if head else ""
    lines = [f"| kind {title}(questions) | system | nDCG@10 | R@5 | MRR@10 | ans | p50 ms end to end "
             "| p50 ms retrieval |",
             "|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        present = [s for s in systems if all((kind, s) in by_split[sp] for sp in splits)]
        if not present:
            continue
        best = {(sp, m): max((v for s in present if (v := by_split[sp][(kind, s)][m]) is not None), default=None)
                for sp in splits for m in metrics}

        def cell(sp: str, s: str, m: str, kind: str = kind, best: dict = best) -> str:
            v = by_split[sp][(kind, s)][m]
            if v is None:
                return "-"
            return f"**{v:.3f}**" if m != "ans" and v >= best[(sp, m)] - 1e-12 else f"{v:.3f}"

        for s in present:
            cells = [" / ".join(cell(sp, s, m) for sp in splits) for m in metrics]
            ms = [" / ".join("-" if by_split[sp][(kind, s)][c] is None else f"{by_split[sp][(kind, s)][c]:.1f}"
                             for sp in splits) for c in ("e2e", "retrieval")]
            n = " / ".join(str(by_split[sp][(kind, s)]["n"]) for sp in splits)
            lines.append(f"| {kind} ({n}) | {s} | {' | '.join(cells)} | {' | '.join(ms)} |")
    all_rows = rows_of(questions, scores, runs, systems)
    return lines, {"rows": {f"{k}/{s}": r for (k, s), r in all_rows.items()},
                   "splits": {sp: {f"{k}/{s}": r for (k, s), r in rows.items()} for sp, rows in by_split.items()},
                   "per_question": scores}


# -- the run -----------------------------------------------------------------------------------


async def evaluate(questions: Sequence[evalset.Question], mode_names: Sequence[str], *, data_dir: Path,
                   peer_libraries: Sequence[str] = (),
                   splits: Sequence[str] = ("all",), chunking: str | None = None,
                   overrides: Sequence[str] = ()) -> tuple[list[str], dict, Runs]:
    """Ingest if needed, run the modes (and peers), and return the table's lines, the numbers and the runs."""
    modes = {name: MODES[name] for name in mode_names}
    settings = eval_settings(data_dir, modes, chunking, overrides)
    await ingest_corpus(settings, data_dir)
    chunker = chunker_of(settings)
    expected = evalset.corpus_chunks(chunker.chunk_size, chunker.chunk_overlap)
    cut: list[str] = []
    relevant = evalset.resolve(questions, expected, split=cut)
    if cut:
        print(f"{len(cut)} evidence passage(s) are cut by a chunk boundary, each half counts: {cut[:3]}",
              file=sys.stderr)
    runs = Runs()
    print(f"asking {len(questions)} questions in {len(modes)} modes", file=sys.stderr)
    chunks = await run_modes(settings, questions, modes, runs, expected)
    if peer_libraries:
        run_peers(settings, questions, chunks, runs, peer_libraries)
    systems = [*modes, *(s for s in runs.ranked if s not in modes)]
    lines, numbers = table(questions, relevant, runs, systems, splits)
    return lines, numbers, runs


def peers_installed() -> list[str]:
    import importlib.util

    def has(*modules: str) -> bool:
        try:
            return all(importlib.util.find_spec(m) for m in modules)
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            return False

    found = []
    if has("langchain_community", "rank_bm25"):
        found.append("langchain")
    if has("llama_index.core", "llama_index.retrievers.bm25"):
        found.append("llamaindex")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("dev", "test", "both"), default="both",
                        help="the half of the questions: dev (choose on it), test (report it), both side by side")
    parser.add_argument("--slice", type=int, default=0, help="a fixed kind-stratified subset of N questions")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                        help="run the LangChain / LlamaIndex peers that are installed (default: on)")
    parser.add_argument("--chunking", help="document-load's chunk_size/chunk_overlap for this run, e.g. 800/120 "
                        "(default: the configured)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a processor setting for this run, e.g. keyword-query.stem_boost=1 (repeatable)")
    parser.add_argument("--data-dir", type=Path, help="keep the ingested stores here (reused when present)")
    parser.add_argument("--per-question", type=Path, help="write every system's per-question scores as JSON")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    names = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := [m for m in names if m not in MODES]:
        parser.error(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    questions = evalset.of_split(evalset.load_questions(), args.split)
    if args.slice:
        questions = evalset.stratified_slice(questions, args.slice)
    libraries = peers_installed() if args.peers else []
    if args.peers and not libraries:
        print("no peer library installed (pip install -e '.[eval]'): ours only", file=sys.stderr)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="eval-retrieval-"))
    try:
        splits = ("dev", "test") if args.split == "both" else (args.split,)
        lines, numbers, runs = asyncio.run(evaluate(questions, names, data_dir=data_dir, peer_libraries=libraries,
                                                    splits=splits, chunking=args.chunking,
                                                    overrides=args.set))
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    for problem in runs.problems:
        print(f"note: {problem}", file=sys.stderr)
    if args.per_question:
        import json

        args.per_question.write_text(json.dumps({"numbers": numbers, "ranked": runs.ranked, "answers": runs.answers},
                                                indent=1))
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
