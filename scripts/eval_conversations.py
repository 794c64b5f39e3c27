"""Follow-ups in a conversation: R@5 of each asked with its history, alone, and as rewritten by hand, in one run.

    python -m scripts.eval_conversations [--split dev|test|both] [--mode hybrid] [--data-dir DIR] [--show]

The conversations are ``scripts/eval/conversations.jsonl``: a first question (``history``), a follow-up
that leans on it (``question``: "Can it contain statements?"), its standalone rewrite by hand
(``rewrite``), and the reference's sentence(s) that answer the follow-up (``evidence``: a chunk holding
one is relevant, as in ``scripts/eval/evalset.py``). Each was written before any run; ``split`` was drawn
once (seeded) and is stored: choose on dev, report test.

The corpus goes through the real ingestion processors into a data dir (``--data-dir`` keeps it for
the next run), then one document-rag processor (graph off, ``--mode``, 10 chunks) is asked, over the
memory bus, each follow-up three ways, interleaved conversation by conversation:

- ``history``: the follow-up with its conversation (``history``: the first question and the answer
  document-rag gave it), so document-rag condenses it first (``condense-question``);
- ``alone``: the follow-up with no history, as a chat endpoint that reads only the last message asks;
- ``rewrite``: the hand rewrite, no history: the bound a condenser aims at.

Printed: R@5 per way and split, and history / rewrite (the issue's goal: at least 0.9); ``--show``
adds each follow-up's standalone question as document-rag made it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import Settings, load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running, put_stores_in
from ragbus.schema import Turn
from scripts.eval import evalset
from scripts.eval.corpus import ingest_corpus
from scripts.eval.scoring import per_question

CONVERSATIONS = Path(__file__).parent / "eval" / "conversations.jsonl"
K = 10
WAYS = ("history", "alone", "rewrite")
GOAL = 0.9  # history / rewrite


@dataclass(slots=True)
class Conversation:
    id: str
    history: list[str]
    question: str
    rewrite: str
    evidence: list[str]
    how_made: str
    split: str


def load(path: Path = CONVERSATIONS) -> list[Conversation]:
    found = [Conversation(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for c in found:
        if not c.history or not c.evidence or c.split not in evalset.SPLITS:
            raise ValueError(f"{path}: {c.id} needs a history, evidence and a split (dev or test)")
    return found


def settings_for(data_dir: Path, mode: str) -> Settings:
    settings = load_settings(environ={})
    put_stores_in(settings, data_dir)
    procs = {name: dict(section) for name, section in settings.processors.items()}
    for name in ("keyword-query", "doc-embeddings-query", "fetch-chunk"):
        procs[name]["refresh_interval_s"] = 0
    procs["document-rag"] = {**procs["document-rag"], "use_graph": False, "retrieval_mode": mode,
                             "max_doc_limit": K}
    settings.processors = procs
    return settings


async def ask_all(settings: Settings, conversations: list[Conversation]) -> tuple[dict, dict]:
    """Way -> conversation id -> the ranked chunk ids; and conversation id -> the standalone question."""
    url = f"memory://eval-conv-{uuid.uuid4().hex[:8]}"
    ranked: dict[str, dict[str, list[str]]] = {w: {} for w in WAYS}
    standalone: dict[str, str] = {}
    try:
        async with (
            processors_running(settings, [*pipelines.RETRIEVAL, "prompt", "document-rag"], url, ready_timeout=300),
            await connect(url, settings.bus) as bus,
            RequestClient(bus, name="eval-conv") as client,
        ):
            rag = DocumentRagClient(client, timeout=120)
            for n, c in enumerate(conversations, 1):
                turns: list[Turn] = []
                for asked in c.history:  # the conversation as it went: each question with the answer it got
                    first = await rag.ask(asked, doc_limit=K, history=turns)
                    turns += [Turn(role="user", content=asked), Turn(role="assistant", content=first.answer)]
                with_history = await rag.ask(c.question, doc_limit=K, history=turns)
                alone = await rag.ask(c.question, doc_limit=K)
                rewrite = await rag.ask(c.rewrite, doc_limit=K)
                for way, r in zip(WAYS, (with_history, alone, rewrite), strict=True):
                    ranked[way][c.id] = [m.chunk_id for m in r.chunks]
                    if r.degraded:
                        print(f"  {c.id} {way}: degraded: {'; '.join(r.problems)}", file=sys.stderr)
                standalone[c.id] = with_history.standalone or c.question
                if n % 10 == 0:
                    print(f"  {n}/{len(conversations)} conversations", file=sys.stderr)
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    return ranked, standalone


def relevant_chunks(conversations: list[Conversation]) -> dict[str, list[str]]:
    as_questions = [evalset.Question(id=c.id, kind="identifier", question=c.question, evidence=c.evidence,
                                     how_made=c.how_made) for c in conversations]
    return evalset.resolve(as_questions, evalset.corpus_chunks())


def report(conversations: list[Conversation], relevant: dict, ranked: dict, splits: list[str]) -> list[str]:
    recall = {way: per_question(relevant, ranked[way])["R@5"] for way in WAYS}
    lines = ["| split | n | R@5 with history | R@5 alone | R@5 hand rewrite | history / rewrite |",
             "|---|---|---|---|---|---|"]
    for split in splits:
        ids = [c.id for c in conversations if split in ("all", c.split)]
        means = {way: statistics.fmean(recall[way][i] for i in ids) for way in WAYS}
        ratio = means["history"] / means["rewrite"] if means["rewrite"] else float("nan")
        lines.append(f"| {split} | {len(ids)} | {means['history']:.3f} | {means['alone']:.3f} | "
                     f"{means['rewrite']:.3f} | {ratio:.2f} (goal >= {GOAL}) |")
    return lines


async def main_async(args: argparse.Namespace) -> int:
    conversations = load()
    splits = ["dev", "test"] if args.split == "both" else [args.split]
    conversations = [c for c in conversations if c.split in splits]
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="ragbus-eval-conv-"))
    try:
        settings = settings_for(data_dir, args.mode)
        await ingest_corpus(settings, data_dir)
        relevant = relevant_chunks(conversations)
        print(f"asking {len(conversations)} follow-ups three ways ({args.mode})", file=sys.stderr)
        ranked, standalone = await ask_all(settings, conversations)
    finally:
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    print("\n".join(report(conversations, relevant, ranked, splits)))
    if args.show:
        for c in conversations:
            print(f"{c.id} [{c.split}] {c.history[-1]!r} -> {standalone[c.id]!r}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "test", "both"], default="both")
    parser.add_argument("--mode", choices=["vector", "keyword", "hybrid"], default="hybrid")
    parser.add_argument("--data-dir", help="keep the ingested corpus here (reused when it holds it)")
    parser.add_argument("--show", action="store_true", help="print each follow-up's standalone question")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
