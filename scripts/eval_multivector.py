"""Would several vectors per chunk pay? Each chunk scored by its best sentence window, offline, beside today's rows.

    python scripts/eval_multivector.py --data-dir DIR [--split dev|test] [--windows s1,s2,s3,s3/2,t64/32,t128/64]
                                       [--blends 0,0.3,0.5,max] [--json FILE]

all-MiniLM-L6-v2 was trained on sentences of up to 128 tokens; a 1,000-character chunk (about 210 tokens)
pooled into one vector blurs what each of its sentences says (issue 16). Here a chunk keeps its one vector
and gains one per window of its text, embedded by the project's own embedder (``OnnxBackend.embed_sync``,
the embed processor's settings); its vector score for a question is its best window's cosine, blended with
its whole-chunk cosine. The chunk stays the unit of retrieval, relevance, BM25 and ids.

Windows (``--windows``): ``sN`` (``sN/M``) = N consecutive sentences, a window starting every M (default 1)
sentences (the extractive answer's splitter, ``processors/prompt/lexical.py``; a chunk of N sentences or
fewer is one window); ``tN/M`` = runs of whole words of at most N WordPiece tokens (the embedder's
tokenizer), a window starting every M tokens or so. Blends (``--blends``): ``b`` scores a chunk
``(1 - b) * best window + b * whole chunk``; ``max`` takes the better of the two (the whole chunk as one
more window).

Today's rows come from the real processors on a ``memory://`` bus (``eval_rerank.candidates``: the stores
``eval_retrieval.py`` ingests into ``--data-dir``, doc-embeddings-query and keyword-query, 10 a side, as
document-rag asks at ``hybrid_depth`` 0). Every multi-vector ranking is exact (every window of every chunk
scored, as a flat index does) and fused with the same keyword list as document-rag fuses (``fuse``, its
configured fusion and weights). nDCG@10 and R@5 by ``ir-measures`` as in ``eval_retrieval.py``.

Cost. "ms p50" is the vector side's query cost in this process: the question's embedding (one
``embed_sync`` call) plus a faiss ``IndexFlatIP`` search, over the chunk vectors (today) or over the
windows (``k * m`` rows, m = twice the mean windows per chunk, grouped to each chunk's first = best
window; blends other than 0 also score the candidates' whole-chunk vectors). Ingest cost: windows per
chunk and the seconds to embed them all, beside the seconds for the chunks themselves. The machine is
shared: the load average is printed with them. Choose on ``--split dev``; read test once.

Measured for issue 16 (dev 96 / test 94 questions; nDCG@10 / R@5; hybrid = min-max fusion + stemmed BM25).
Dev grid: s1, s2, s3, s3/2, t64/32, t128/64 x b = 0, 0.3, 0.5, max, then s2/2, s3/2, s4/2 x 0.2, 0.3, 0.4.
The best window alone (b = 0) lifts identifier questions most (vector .496 -> .72-.75 with s1/s2) and loses
paraphrases (.476 -> .34-.45); blending the whole chunk back in (b = 0.3-0.5) keeps them. Rule fixed before
reading test: the best dev hybrid nDCG@10 whose dev paraphrase hybrid nDCG@10 is not below today's:
``--windows s2/2 --blends 0.3`` (2,759 windows, 4.5 a chunk). Dev: hybrid .709/.748 (today .627/.692),
paraphrase .507/.507 (.485/.507). Test, read once: hybrid .640/.702 (today .617/.668; per question 22
better, 11 worse, bootstrap 95% interval of the nDCG gain -.010..+.058), identifier .774/.788 (.698/.712),
multi-concept .799/.761 (.787/.795), paraphrase .375/.561 (.408/.530); vector .606/.678 (.554/.619).
Paraphrase nDCG@10 fell on test, so it was not wired into the stores (the bar: +.02 hybrid nDCG@10 on test
and paraphrases no worse). Cost: the windows embed in 24-32 s beside 28-49 s for the 609 chunks (ingest's
embedding +60-100%); a query's vector side 6.4 vs 6.1 ms p50, nearly all the question's embedding (search
of the windows and grouping 0.22 ms vs 0.04 ms for the chunk vectors; load average ~2 on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "scripts", ROOT / "scripts" / "eval"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import eval_rerank as rr  # noqa: E402  (scripts/eval_rerank.py)
import evalset  # noqa: E402

from config.settings import processor_settings  # noqa: E402
from processors.document_rag.fusion import fuse  # noqa: E402
from processors.document_rag.settings import DocumentRagSettings  # noqa: E402
from processors.embed.onnx_backend import OnnxBackend  # noqa: E402
from processors.embed.settings import EmbedSettings  # noqa: E402
from processors.prompt.lexical import sentences  # noqa: E402
from schema import ChunkMatch  # noqa: E402

K = rr.K
_SPEC = re.compile(r"([st])(\d+)(?:/(\d+))?")


def _starts(n: int, size: int, stride: int) -> list[int]:
    """Window starts over ``n`` units: every ``stride``, the last window ending at the end."""
    if n <= size:
        return [0]
    starts = list(range(0, n - size + 1, stride))
    if starts[-1] + size < n:
        starts.append(n - size)
    return starts


def sentence_windows(text: str, size: int, stride: int = 1) -> list[str]:
    """Runs of ``size`` sentences of ``text``, one starting every ``stride``; the text itself if it has none."""
    parts = list(sentences(text))
    if not parts:
        return [text]
    return [" ".join(parts[s : s + size]) for s in _starts(len(parts), size, stride)]


def token_windows(text: str, tokenizer, size: int, stride: int) -> list[str]:
    """Runs of whole words of at most ``size`` WordPiece tokens, one starting about every ``stride`` tokens.

    The words are the tokenizer's own normalised ones, so each window tokenizes to exactly its pieces."""
    words = [w for w in tokenizer.words(text) if w]
    if not words:
        return [text]
    ends = np.cumsum([len(tokenizer.pieces(w)) for w in words])  # tokens up to and including word i
    windows, start = [], 0
    while True:
        before = ends[start - 1] if start else 0
        end = max(start + 1, int(np.searchsorted(ends, before + size, side="right")))
        windows.append(" ".join(words[start:end]))
        if end >= len(words):
            return windows
        start = max(start + 1, int(np.searchsorted(ends, before + stride, side="right")))


def windows_of(spec: str, tokenizer) -> Callable[[str], list[str]]:
    """``s2``, ``s3/2``, ``t64/32`` (module docstring) -> text -> its windows."""
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise ValueError(f"window {spec!r}: write sN[/M] (sentences) or tN/M (tokens), e.g. s2, s3/2, t64/32")
    size = int(m.group(2))
    stride = int(m.group(3) or (1 if m.group(1) == "s" else max(1, size // 2)))
    if m.group(1) == "s":
        return lambda text: sentence_windows(text, size, stride)
    return lambda text: token_windows(text, tokenizer, size, stride)


@dataclass
class Windows:
    """Every window of every chunk, embedded; a chunk's windows are consecutive rows."""

    vectors: np.ndarray  # windows x dimension, unit rows
    starts: np.ndarray  # chunk i's first row (np.maximum.reduceat's offsets)
    owner: np.ndarray  # row -> chunk index
    embed_s: float


def embed_windows(backend: OnnxBackend, texts: Sequence[str], split: Callable[[str], list[str]]) -> Windows:
    per_chunk = [split(t) for t in texts]
    counts = np.array([len(w) for w in per_chunk])
    started = time.perf_counter()
    vectors = backend.embed_sync([w for ws in per_chunk for w in ws])
    embed_s = time.perf_counter() - started
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return Windows(vectors, starts, np.repeat(np.arange(len(texts)), counts), embed_s)


def best_window(windows: Windows, question: np.ndarray) -> np.ndarray:
    """Each chunk's score for one question (a unit vector): the cosine of its best window."""
    return np.maximum.reduceat(windows.vectors @ question, windows.starts)


def blended(best: np.ndarray, whole: np.ndarray, blend: str) -> np.ndarray:
    if blend == "max":
        return np.maximum(best, whole)
    b = float(blend)
    return (1 - b) * best + b * whole


def top(ids: Sequence[str], scores: np.ndarray, k: int = K) -> list[ChunkMatch]:
    """The ``k`` best chunks, ties (the corpus repeats whole passages) broken by chunk id as the store does."""
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:k]
    return [ChunkMatch(ids[i], float(scores[i])) for i in order]


def search_cost(index, question: np.ndarray, rows: int, owner: np.ndarray | None) -> tuple[float, int]:
    """ms to search ``rows`` rows (and group them to chunks, best window first); how many chunks came back."""
    started = time.perf_counter()
    _, labels = index.search(question[None, :], rows)
    if owner is None:
        found = len(labels[0])
    else:
        found = len(dict.fromkeys(int(owner[i]) for i in labels[0] if i >= 0))
    return (time.perf_counter() - started) * 1000, found


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(questions: Sequence[evalset.Question], found: rr.Candidates, rag: DocumentRagSettings,
        backend: OnnxBackend, specs: Sequence[str], blends: Sequence[str],
        out=sys.stderr) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[float]]]:
    """System name -> question id -> its first K chunk ids; and system name -> per-question ms (vector side)."""
    import faiss

    ids = list(found.texts)
    texts = [found.texts[i] for i in ids]
    weights = [rag.vector_weight, rag.keyword_weight]
    started = time.perf_counter()
    whole = backend.embed_sync(texts)
    print(f"whole chunks: {len(ids)} embedded in {time.perf_counter() - started:.1f} s (load {load_average()})",
          file=out)
    q_ms, q_vectors = {}, {}
    for q in questions:  # one question a call, as the embed processor gets them
        started = time.perf_counter()
        q_vectors[q.id] = backend.embed_sync([q.question])[0]
        q_ms[q.id] = (time.perf_counter() - started) * 1000
    flat = faiss.IndexFlatIP(whole.shape[1])
    flat.add(whole)
    ranked: dict[str, dict[str, list[str]]] = {"vector": {}, "keyword": {}, "hybrid": {}}
    cost: dict[str, list[float]] = {}
    differ, flat_ms = 0, []
    for q in questions:
        vector, keyword = found.vector[q.id][:K], found.keyword[q.id][:K]
        ranked["vector"][q.id] = [m.chunk_id for m in vector]
        ranked["keyword"][q.id] = [m.chunk_id for m in keyword]
        ranked["hybrid"][q.id] = [m.chunk_id for m in fuse([vector, keyword], weights, K, rag.fusion)]
        flat_ms.append(search_cost(flat, q_vectors[q.id], K, None)[0])
        for system in ("vector", "hybrid"):
            cost.setdefault(system, []).append(q_ms[q.id] + flat_ms[-1])
        # Ranked here exactly; faiss cuts ties at the 10th place arbitrarily (the corpus repeats passages,
        # so chunks of one text tie): compared by text, equal texts being equally relevant.
        mine = [found.texts[m.chunk_id] for m in top(ids, whole @ q_vectors[q.id])]
        differ += mine != [found.texts[m.chunk_id] for m in vector]
    print(f"today's vector lists ranked again from the chunks' own vectors: {differ} of {len(questions)} differ "
          f"(by text); question embedding p50 {statistics.median(q_ms.values()):.1f} ms, search of the "
          f"{len(ids)} chunk vectors p50 {statistics.median(flat_ms):.2f} ms", file=out)
    for spec in specs:
        windows = embed_windows(backend, texts, windows_of(spec, backend._tokenizer))
        per_chunk = len(windows.owner) / len(ids)
        rows = min(len(windows.owner), K * math.ceil(2 * per_chunk))
        index = faiss.IndexFlatIP(windows.vectors.shape[1])
        index.add(windows.vectors)
        print(f"{spec}: {len(windows.owner)} windows, {per_chunk:.1f} a chunk, embedded in {windows.embed_s:.1f} s "
              f"(load {load_average()}); search {rows} rows", file=out)
        short, searches = 0, []
        for q in questions:
            qv = q_vectors[q.id]
            search_ms, chunks = search_cost(index, qv, rows, windows.owner)
            short += chunks < K
            searches.append(search_ms)
            best, whole_q = best_window(windows, qv), whole @ qv
            keyword = found.keyword[q.id][:K]
            for blend in blends:
                vector = top(ids, blended(best, whole_q, blend))
                name = f"{spec} b={blend}"
                ranked.setdefault(f"vector {name}", {})[q.id] = [m.chunk_id for m in vector]
                ranked.setdefault(f"hybrid {name}", {})[q.id] = [
                    m.chunk_id for m in fuse([vector, keyword], weights, K, rag.fusion)]
                extra = 0.0 if blend == "0" else search_cost(flat, qv, K, None)[0]  # whole-chunk side
                for system in (f"vector {name}", f"hybrid {name}"):
                    cost.setdefault(system, []).append(q_ms[q.id] + search_ms + extra)
        print(f"  search of the windows and grouping p50 {statistics.median(searches):.2f} ms", file=out)
        if short:
            print(f"  {short} question(s) got fewer than {K} chunks from {rows} rows: a search would need more",
                  file=out)
    return ranked, cost


async def main_async(args) -> list[str]:
    questions, settings, expected, relevant = await rr.prepared(args.split, args.data_dir)
    print(f"candidates of {len(questions)} {args.split} questions", file=sys.stderr)
    found = await rr.candidates(settings, questions, K, expected)
    embed = processor_settings(settings, "embed", EmbedSettings)
    if embed.backend != "onnx":
        raise SystemExit(f"the embed backend is {embed.backend!r}; this measures the onnx one")
    backend = OnnxBackend(embed.onnx)
    backend.load()
    rag = processor_settings(settings, "document-rag", DocumentRagSettings)
    specs = [s for s in args.windows.split(",") if s]
    blends = [b for b in args.blends.split(",") if b]
    for b in blends:
        if b != "max" and not 0 <= float(b) <= 1:
            raise SystemExit(f"blend {b!r}: a number from 0 to 1, or max")
    ranked, cost = run(questions, found, rag, backend, specs, blends)
    if args.json:
        args.json.write_text(json.dumps({"ranked": ranked, "cost_ms": cost}, indent=1))
    return rr.table(questions, relevant, ranked, cost, cost_header="vector ms p50")


def main() -> None:
    parser = rr.parser_of(__doc__)
    parser.add_argument("--windows", default="s1,s2,s3,s3/2,t64/32,t128/64", help="sN[/M] or tN/M, comma-separated")
    parser.add_argument("--blends", default="0,0.3,0.5,max", help="weights b of the whole-chunk score, or max")
    args = parser.parse_args()
    print("\n".join(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
