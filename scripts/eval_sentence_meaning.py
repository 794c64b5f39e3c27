"""Would a sentence model choose the extractive answer's sentences better than their words do?

    python -m scripts.eval_sentence_meaning [--data-dir DIR] [--inputs FILE]
        [--model ONNX --vocab VOCAB [--pooling cls] [--prefix TEXT]] [--weights 0.25,0.5,1,2] [--more 7,10]

The answer step's misses are the questions worded apart from the reference (``eval_answers`` prints
them by overlap band): "Why does ordering a list in place hand back nothing?" against "it does not
return the sorted sequence". This measures the signals that could close that gap, on both halves:

1. What the prompt is given for each question is recorded once through the real pipeline, as
   ``eval_answers`` does it (ingestion, document-rag in hybrid mode, graph off), into ``--inputs``
   (JSON; reused when it exists).
2. Each question is answered again from the record, offline, by the extractive backend:
   - as it is, the default;
   - with more sentences (``--more``): how far down the words rank the evidence;
   - with each passage's score re-weighed by a sentence model's cosine between the question's
     vector and the passage's: the score as a share of the request's best plus ``weight`` times the
     cosine (``add``), or plus ``weight`` times the cosine's z-score within the request (``z``).

The model is the embed processor's (all-MiniLM-L6-v2, int8, mean pooling) unless ``--model`` names
another ONNX sentence encoder with its WordPiece vocabulary (a vocab.txt or a tokenizer.json);
bge-small-en-v1.5, for one, wants ``--pooling cls`` and its query instruction as ``--prefix``.
The tables are ``eval_answers``'s, computed the same way (``eval_answers.report``), so a row here is
what ``eval_answers`` would print for that choice of sentences. Choose on dev, read test.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import msgspec
import numpy as np

from ragbus.embed.onnx_backend import default_model_path, default_vocab_path, load_vocab
from ragbus.embed.wordpiece import WordPiece
from ragbus.prompt.extractive.answer import Passage, compose
from ragbus.prompt.settings import ExtractiveSettings
from ragbus.prompt.variables import PromptInput
from ragbus.schema import ChunkMatch, DocumentRagResponse
from scripts.eval import evalset
from scripts.eval.corpus import ingest_corpus
from scripts.eval_answers import ask_all, report
from scripts.eval_conversations import settings_for

MAX_TOKENS = 256  # of a passage, as the embed processor truncates


class Recorded(msgspec.Struct):
    """What the prompt was given for one question: the chunks document-rag drew the answer from."""

    id: str
    query: str
    chunks: list[tuple[str, str]]  # (chunk id, text), in the order given


def record(path: Path, data_dir: Path, questions: list[evalset.Question]) -> list[Recorded]:
    if path.is_file():
        print(f"reusing the inputs recorded in {path}", file=sys.stderr)
        kept = msgspec.json.decode(path.read_bytes(), type=list[Recorded])
        if [(r.id, r.query) for r in kept] != [(q.id, q.question) for q in questions]:
            raise SystemExit(f"{path} was recorded for other questions than questions.jsonl holds now: "
                             "remove it to record them again")
        return kept
    got = asyncio.run(ask(data_dir, questions))
    out = []
    for q in questions:
        r = got[q.id]
        if isinstance(r, str):
            raise SystemExit(f"question {q.id} failed: {r}")
        out.append(Recorded(q.id, q.question, [(c.chunk_id, c.text or "") for c in r.chunks]))
    path.write_bytes(msgspec.json.encode(out))
    return out


async def ask(data_dir: Path, questions: list[evalset.Question]) -> dict[str, DocumentRagResponse | str]:
    settings = settings_for(data_dir, "hybrid")
    await ingest_corpus(settings, data_dir)
    print(f"recording what the prompt is given for {len(questions)} questions", file=sys.stderr)
    return await ask_all(settings, questions)


class SentenceModel:
    """Unit vectors of texts from an ONNX sentence encoder (one text a call: passages are short)."""

    def __init__(self, model: Path, vocab: Path, pooling: str, prefix: str) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = WordPiece(load_vocab(vocab), MAX_TOKENS)
        self.pooling, self.prefix = pooling, prefix
        self._vectors: dict[str, np.ndarray] = {}

    def vector(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            ids = np.array([self.tokenizer.encode(text)], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0][0]
            v = hidden[0] if self.pooling == "cls" else hidden.mean(axis=0)
            self._vectors[text] = v / max(float(np.linalg.norm(v)), 1e-12)
        return self._vectors[text]

    def cosines(self, query: str, found: list[Passage]) -> np.ndarray:
        q = self.vector(self.prefix + query)
        return np.array([self.vector(p.text) @ q for p in found])


def reweigh_by(model: SentenceModel, fusion: str, weight: float):
    def reweigh(found: list[Passage], scores: list[float], query: str) -> list[float]:
        if not found:
            return scores
        cos = model.cosines(query, found)
        if fusion == "z":
            cos = (cos - cos.mean()) / (cos.std() + 1e-6)
        top = max(scores) or 1.0
        return [s / top + weight * float(c) for s, c in zip(scores, cos, strict=True)]
    return reweigh


def answered(inputs: list[Recorded], settings: ExtractiveSettings, reweigh=None) -> dict[str, DocumentRagResponse]:
    out = {}
    for r in inputs:
        inp = PromptInput(query=r.query, documents=tuple(text for _, text in r.chunks),
                          citations=tuple(f"[{cid}]" for cid, _ in r.chunks), facts=(), header=None, raw={})
        text = compose(inp, settings, reweigh)
        out[r.id] = DocumentRagResponse(answer=text, chunks=[ChunkMatch(cid, text=t) for cid, t in r.chunks],
                                        cited=[cid for cid, _ in r.chunks if f"[{cid}]" in text])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="keep the ingested corpus here (reused when it holds it)")
    parser.add_argument("--inputs", help="the recorded inputs (JSON): written once, then reused")
    parser.add_argument("--model", help="an ONNX sentence encoder (default: the embed processor's)")
    parser.add_argument("--vocab", help="its WordPiece vocabulary (vocab.txt or tokenizer.json)")
    parser.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    parser.add_argument("--prefix", default="", help="written before the question (a query instruction)")
    parser.add_argument("--weights", default="0.25,0.5,1,2")
    parser.add_argument("--fusions", default="add,z")
    parser.add_argument("--more", default="7,10", help="sentence counts to try beyond the default's")
    args = parser.parse_args()
    if bool(args.model) != bool(args.vocab):
        parser.error("--model and --vocab go together")
    work = Path(tempfile.mkdtemp(prefix="ragbus-eval-meaning-"))  # what is not kept (no --inputs, --data-dir)
    try:
        questions = evalset.load_questions()
        relevant = evalset.resolve(questions, evalset.corpus_chunks())
        inputs = record(Path(args.inputs) if args.inputs else work / "inputs.json",
                        Path(args.data_dir) if args.data_dir else work / "data", questions)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    model = SentenceModel(Path(args.model or default_model_path()), Path(args.vocab or default_vocab_path()),
                          args.pooling, args.prefix)
    default = ExtractiveSettings()
    runs: list[tuple[str, dict[str, DocumentRagResponse]]] = [("the default", answered(inputs, default))]
    for n in (int(x) for x in args.more.split(",") if x):
        runs.append((f"max_sentences {n}", answered(inputs, msgspec.structs.replace(default, max_sentences=n))))
    for fusion in args.fusions.split(","):
        for weight in (float(x) for x in args.weights.split(",") if x):
            runs.append((f"{fusion}, weight {weight:g}", answered(inputs, default, reweigh_by(model, fusion, weight))))
    print(f"sentence model: {args.model or 'the embed processor model'} ({args.pooling} pooling"
          + (f", prefix {args.prefix!r})" if args.prefix else ")"))
    for name, got in runs:
        print(f"\n{name}:")
        print("\n".join(report(questions, relevant, got, ["dev", "test"], show=False)))

if __name__ == "__main__":
    main()
