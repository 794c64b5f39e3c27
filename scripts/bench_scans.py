"""Documents people scan (issue 51): OCR's character error rate, table cells, answers from scans, throughput.

    python -m scripts.bench_scans [--keep DIR] [--ocr auto|convert|tesseract] [--skip cer,tables,qa,speed] [--show]
                                  [--variants scan300,scan200,noisy300,photo,tiff] [--workers 2 --bus kafka]

The set is ``scripts/eval/scans`` (``scans_set.py``), its files made by ``scripts/eval/scans_made.py``
(``--keep DIR`` keeps them and the ingested stores for the next run). Every figure is given per half
(dev: settings may be chosen on it; test: reported).

- CER, per variant: the Levenshtein distance (rapidfuzz) between the document's known text and the text
  read from the variant's file(s), over the known text's length, summed over the half's documents. Both
  texts normalised alike (``scans_set.normalise``): NFKC, typographic quotes and dashes as ASCII, a
  table's bars as spaces (a row "cell | cell" and "cell cell" read alike: structure is the next figure's),
  white space collapsed; case kept. The known text is the title, each heading, paragraph and table row,
  in print order; a ``Heading`` piece of the converter is put back as a line where it was met (unless the
  text that follows starts with it), since the page prints it.
- Table cells, from the born-digital PDFs (and the 300 dpi scans): a known row's cells recovered are the
  longest run of them, in order, equal (normalised) to the cells of one line of the converted text that
  holds a bar (the line split at "|"); a cell merged with its neighbour, split, or on a line of its own
  is lost. The share is recovered cells over all cells, header rows included.
- QA: the born-digital PDFs and the 300 dpi scans, each in a data dir of its own, through the real
  ingestion processors over the memory bus (``scripts/eval/corpus.py``), then each question asked by
  ``scripts/eval_answers.ask_all`` (hybrid retrieval, extractive answers). A chunk holds an evidence
  passage when the passage (normalised, case folded) is in it, or rapidfuzz's ``partial_ratio`` of the two
  is at least 90 (OCR's slips). Answer recall and the answer step's recall (among the questions with such a
  chunk given to the answer) as ``scripts/eval/answers.answered`` decides; R@5: a chunk holding evidence
  among the first five given.
- Speed: ``convert()`` of every 300 dpi scan one after another in a child process (one worker): pages a
  second and the child's peak resident set (VmHWM), beside the load average; then Tesseract's own peak on
  one page (its VmHWM sampled while it runs: Tesseract is a process of its own, outside the child's).
  ``--workers 2 --bus kafka`` measures through the document-convert lane when this tree has it.

``--ocr``: ``convert`` reads every file with ``convert()``; ``tesseract`` reads scans with pytesseract
directly (pages rendered by PDFium at the variant's dpi, images by Pillow, Tesseract's defaults), the
stand-in while ``convert()`` has no OCR; ``auto`` (default) uses ``convert()`` unless it reads no text
from the first document of a variant, then pytesseract, and every table names which one read it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from scripts.eval import evalset
from scripts.eval.scans_made import VARIANTS, Made, make
from scripts.eval.scans_set import ScanDocument, load_documents, load_questions, normalise

CONVERT, TESSERACT = "convert()", "pytesseract (direct)"
DPI = {"scan300": 300, "scan200": 200, "noisy300": 300, "tiff": 300, "photo": 250, "born": 300}
GOALS = {"cer": 0.02, "cells": 0.95, "qa_gap": 0.05}
HALVES = evalset.SPLITS


@dataclass(slots=True)
class Read:
    """A document's text as one reader read it, and how many pages it read (by OCR: ``ocr``)."""

    text: str
    pages: int
    ocr: int


def read_converted(paths: Sequence[Path], settings=None) -> Read:
    """The text ``convert()`` gives for the files (in order), each heading put back as a line where it is met."""
    from ragbus.ingestion.convert import Heading, Page, convert

    out: list[str] = []
    pages = ocr = 0
    pending: list[str] = []
    for path in paths:
        for piece in convert(path, settings).read():
            if isinstance(piece, Page):
                pages += 1
                ocr += piece.ocr
            elif isinstance(piece, Heading):
                pending.append(piece.path[-1])
            elif piece:
                while pending:  # a converter that keeps the heading's own line in the text says it once
                    heading = pending.pop(0)
                    if piece.lstrip().partition("\n")[0].strip() != heading:
                        out.append(f"\n{heading}\n")
                out.append(piece)
        out += [f"\n{h}\n" for h in pending]
        pending.clear()
        out.append("\n")
    return Read("".join(out), pages or page_count(paths), ocr)


def page_count(paths: Sequence[Path]) -> int:
    from PIL import Image

    n = 0
    for path in paths:
        if path.suffix.lower() == ".pdf":
            import pypdfium2 as pdfium

            document = pdfium.PdfDocument(str(path))
            n += len(document)
            document.close()
        else:
            with Image.open(path) as image:
                n += getattr(image, "n_frames", 1)
    return n


def page_images(path: Path, dpi: int) -> Iterable:
    """The pages of a PDF (rendered by PDFium at ``dpi``) or an image file (every frame of a TIFF)."""
    from PIL import Image, ImageSequence

    if path.suffix.lower() == ".pdf":
        from scripts.eval.scans_made import render

        yield from render(path, dpi)
        return
    with Image.open(path) as image:
        for frame in ImageSequence.Iterator(image):
            yield frame.copy()


def read_tesseract(paths: Sequence[Path], dpi: int, language: str = "eng") -> Read:
    """The text pytesseract reads from the files' pages, a page after another: the stand-in for ``convert()``."""
    import pytesseract

    texts = []
    for path in paths:
        texts += [pytesseract.image_to_string(image, lang=language) for image in page_images(path, dpi)]
    return Read("\n".join(texts), len(texts), len(texts))


def cached(files: Sequence[Path], read: Callable[[], Read]) -> Read:
    """pytesseract's reading of files kept beside them (a rerun with ``--keep`` skips minutes of OCR), keyed
    by their sizes and times; never ``convert()``'s, which changes with the tree."""
    key = hashlib.sha256(repr([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]).encode())
    path = files[0].parent / ".read" / f"{key.hexdigest()[:16]}.json"
    if path.exists():
        return Read(**json.loads(path.read_text(encoding="utf-8")))
    got = read()
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"text": got.text, "pages": got.pages, "ocr": got.ocr}), encoding="utf-8")
    return got


def error_chars(known: str, read: str) -> tuple[int, int]:
    """(edit distance, length of the known text), both normalised: a CER is their sums' ratio."""
    from rapidfuzz.distance import Levenshtein

    ref = normalise(known)
    return Levenshtein.distance(ref, normalise(read)), len(ref)


def row_cells(line: str) -> list[str]:
    return [normalise(cell) for cell in line.split("|")]


def table_cells(doc: ScanDocument, text: str) -> tuple[int, int]:
    """(cells recovered, cells known): each known row against the converted lines holding a bar."""
    from rapidfuzz.distance import LCSseq

    rows = [row_cells(line) for line in text.splitlines() if "|" in line]
    recovered = known = 0
    for table in doc.tables:
        for row in table:
            cells = [normalise(c) for c in row]
            known += len(cells)
            recovered += max((int(LCSseq.similarity(cells, r)) for r in rows), default=0)
    return recovered, known


# ---- reading the variants -------------------------------------------------------------------------------

def read_variant(made: dict[str, Made], variant: str, mode: str, out=sys.stderr) -> tuple[str, dict[str, Read]]:
    """Which reader read the variant, and each document's text (the documents that have the variant)."""
    from ragbus.ingestion import UnreadableDocument

    keys = [k for k, m in made.items() if variant in m.files]
    reader = TESSERACT if mode == "tesseract" and variant != "born" else CONVERT
    got: dict[str, Read] = {}
    started = time.perf_counter()
    for key in keys:
        files = made[key].files[variant]
        if reader == CONVERT:
            try:
                got[key] = read_converted(files)
                why = "read no text from"
            except UnreadableDocument as exc:  # an image, before the converters read images
                if mode != "auto":
                    raise
                got[key], why = Read("", 0, 0), f"refused ({exc}):"
            if mode == "auto" and variant != "born" and key == keys[0] and not normalise(got[key].text):
                print(f"  {variant}: convert() {why} {key}: reading with pytesseract directly", file=out)
                reader = TESSERACT
        if reader == TESSERACT:
            got[key] = cached(files, partial(read_tesseract, files, DPI[variant]))
    print(f"  {variant}: {len(keys)} documents read by {reader} in {time.perf_counter() - started:.0f} s",
          file=out)
    return reader, got


def cer_rows(docs: dict[str, ScanDocument], reads: dict[str, tuple[str, dict[str, Read]]]
             ) -> tuple[list[str], dict[str, float]]:
    rows = ["| variant | read by | half | documents | pages | characters | CER |", "|---|---|---|---|---|---|---|"]
    overall: dict[str, float] = {}
    for variant, (reader, got) in reads.items():
        dist_all = len_all = 0
        for half in HALVES:
            keys = [k for k in got if docs[k].split == half]
            if not keys:
                continue
            pairs = [error_chars(docs[k].known_text(), got[k].text) for k in keys]
            dist, length = sum(d for d, _ in pairs), sum(n for _, n in pairs)
            dist_all += dist
            len_all += length
            rows.append(f"| {variant} | {reader} | {half} | {len(keys)} | {sum(got[k].pages for k in keys)} | "
                        f"{length} | {dist / length:.2%} |")
        overall[variant] = dist_all / (len_all or 1)
    return rows, overall


def cell_rows(docs: dict[str, ScanDocument], reads: dict[str, tuple[str, dict[str, Read]]]
              ) -> tuple[list[str], float]:
    rows = ["| variant | read by | half | tables | cells | recovered |", "|---|---|---|---|---|---|"]
    born = 0.0
    for variant in ("born", "scan300"):
        if variant not in reads:
            continue
        reader, got = reads[variant]
        total_r = total_k = 0
        for half in HALVES:
            keys = [k for k in got if docs[k].split == half]
            pairs = [table_cells(docs[k], got[k].text) for k in keys]
            r, k = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
            total_r, total_k = total_r + r, total_k + k
            rows.append(f"| {variant} | {reader} | {half} | {sum(len(docs[k].tables) for k in keys)} | {k} | "
                        f"{r / (k or 1):.1%} |")
        if variant == "born":
            born = total_r / (total_k or 1)
    return rows, born


# ---- question answering ---------------------------------------------------------------------------------

def holds(evidence: str, chunk: str) -> bool:
    """The chunk holds the evidence passage: whole (normalised, case folded), or nearly (OCR's slips)."""
    from rapidfuzz import fuzz

    wanted, text = normalise(evidence).casefold(), normalise(chunk).casefold()
    return wanted in text or (len(text) >= len(wanted) and fuzz.partial_ratio(wanted, text) >= 90)


async def answers_of(made: dict[str, Made], variant: str, reader: str, reads: dict[str, Read] | None,
                     questions: list[evalset.Question], data_dir: Path) -> dict:
    """The variant's files ingested into ``data_dir`` (by ``convert()``, or as the texts pytesseract read),
    and every question's response."""
    from ragbus.ingestion import DocumentSource, document_id
    from ragbus.ingestion import load_documents as open_files
    from ragbus.schema import Document
    from scripts.eval.corpus import ingest_corpus
    from scripts.eval_answers import ask_all
    from scripts.eval_conversations import settings_for

    settings = settings_for(data_dir, "hybrid")
    documents: list[Document | DocumentSource]
    if reader == CONVERT:
        opened, skipped = open_files([str(p) for m in made.values() for p in m.files[variant]], "default",
                                     settings.convert)
        if skipped:
            raise SystemExit(f"{variant}: files not read: {skipped[:3]}")
        documents = list(opened)
    else:
        assert reads is not None
        documents = [Document(document_id=document_id(made[k].files[variant][0]), text=r.text, title=k,
                              source=str(made[k].files[variant][0])) for k, r in reads.items()]
    await ingest_corpus(settings, data_dir, documents=documents)
    print(f"  asking {len(questions)} questions of {variant}", file=sys.stderr)
    return await ask_all(settings, questions)


def qa_figures(questions: list[evalset.Question], got: dict) -> dict[str, dict[str, float]]:
    """Per half: n, answer recall, answer step's recall (and its n), R@5."""
    from ragbus.schema import DocumentRagResponse
    from scripts.eval import answers

    out: dict[str, dict[str, float]] = {}
    for half in HALVES:
        hit = step = step_n = at5 = failed = 0
        qs = [q for q in questions if q.split == half]
        for q in qs:
            r = got[q.id]
            if isinstance(r, str):
                failed += 1
                r = DocumentRagResponse()
            ok = any(answers.answered(e, r.answer) for e in q.evidence)
            holding = [any(holds(e, c.text or "") for e in q.evidence) for c in r.chunks]
            hit += ok
            if any(holding):
                step_n += 1
                step += ok
            at5 += any(holding[:5])
        n = len(qs) or 1
        out[half] = {"n": len(qs), "recall": hit / n, "step": step / (step_n or 1), "step_n": step_n,
                     "r5": at5 / n, "failed": failed}
    return out


def misses(questions: list[evalset.Question], got: dict, variant: str) -> list[str]:
    """``--show``: the questions whose answer holds none of their evidence, with the answer's first line."""
    from scripts.eval import answers

    out = []
    for q in questions:
        r = got[q.id]
        text = r if isinstance(r, str) else r.answer
        if isinstance(r, str) or not any(answers.answered(e, r.answer) for e in q.evidence):
            first = (answers.lines(text) or [text])[0]
            out.append(f"{variant} [{q.split}] {q.id} missed: {q.question!r} answered {first[:100]!r}")
    return out


def qa_rows(figures: dict[str, tuple[str, dict[str, dict[str, float]]]]) -> list[str]:
    rows = ["| files | read by | half | questions | answer recall | answer step's recall (n) | R@5 | failed |",
            "|---|---|---|---|---|---|---|---|"]
    for variant, (reader, by_half) in figures.items():
        rows += [f"| {variant} | {reader} | {h} | {f['n']:.0f} | {f['recall']:.3f} | {f['step']:.3f} "
                 f"({f['step_n']:.0f}) | {f['r5']:.3f} | {f['failed']:.0f} |" for h, f in by_half.items()]
    if {"born", "scan300"} <= figures.keys():
        for h in HALVES:
            gap = figures["born"][1][h]["step"] - figures["scan300"][1][h]["step"]
            rows.append(f"| born - scan300 | | {h} | | | {gap:+.3f} (goal: at most {GOALS['qa_gap']}) | | |")
    return rows


# ---- speed ----------------------------------------------------------------------------------------------

def measure_child(files: list[str], mode: str) -> None:
    """In the child: read ``files`` one after another, print one JSON line of what it cost."""
    from scripts.bench.memory import status_mb

    paths = [Path(f) for f in files]
    before = status_mb("VmRSS")
    started = time.perf_counter()
    pages = ocr = chars = 0
    for path in paths:
        read = read_converted([path]) if mode == CONVERT else read_tesseract([path], 300)
        pages, ocr, chars = pages + read.pages, ocr + read.ocr, chars + len(normalise(read.text))
    seconds = time.perf_counter() - started
    peak = status_mb("VmHWM")
    print(json.dumps({"pages": pages, "ocr": ocr, "chars": chars, "seconds": seconds, "rss_before_mb": before,
                      "peak_mb": peak, "tesseract_peak_mb": tesseract_peak(max(paths, key=page_count_one))}))


def page_count_one(path: Path) -> tuple[int, int]:
    return page_count([path]), path.stat().st_size


def tesseract_peak(path: Path) -> float:
    """Tesseract's own peak resident set reading the file's first page at 300 dpi: its VmHWM, read every 10 ms
    while it runs (``ru_maxrss`` will not do: a child started by vfork keeps its parent's peak past exec)."""
    import pytesseract

    from scripts.bench.memory import status_mb

    with tempfile.TemporaryDirectory(prefix="ragbus-tesseract-") as scratch:
        page = Path(scratch) / "page.png"
        next(iter(page_images(path, 300))).save(page)
        proc = subprocess.Popen([pytesseract.pytesseract.tesseract_cmd, str(page), "-", "-l", "eng"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak = 0.0
        while proc.poll() is None:
            try:
                peak = max(peak, status_mb("VmHWM", proc.pid))
            except (OSError, ValueError):  # gone between the poll and the read
                break
            time.sleep(0.01)
        proc.wait()
    return peak


def speed(made: dict[str, Made], mode: str) -> tuple[str, dict[str, float]]:
    """One worker's pages a second and memory peaks on the 300 dpi scans, read in a child process."""
    files = [str(p) for m in made.values() for p in m.files["scan300"]]
    readers = [TESSERACT] if mode == "tesseract" else [CONVERT, TESSERACT] if mode == "auto" else [CONVERT]
    for reader in readers:
        load = os.getloadavg()
        done = subprocess.run([sys.executable, "-m", "scripts.bench_scans", "--measure-child", reader, *files],
                              check=True, capture_output=True, text=True, timeout=3600)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["load"] = load[0]
        if reader == TESSERACT or result["chars"]:
            return reader, result
        print("  speed: convert() read no text from the scans: timing pytesseract directly", file=sys.stderr)
    raise AssertionError("unreachable")


def lane(workers: int, bus: str) -> str:
    """HOOK (issue 51, branch ``lane``): pages a second through the document-convert lane, ``workers``
    workers on ``bus``; until it is in this tree, say so rather than make a number up.

    To fill in once it is merged (``pipelines.INGEST`` then holds "document-convert"): a Kafka broker from
    ``scripts.bench.brokers.broker_for("kafka", scratch)``; ``workers`` processes of
    ``ragbus worker document-convert`` on it (``broker_env``), the rest of INGEST in one more; this process
    ingesting the 300 dpi scans with ``[convert] on_bus = true``, timing first part sent to last page back
    (pages from ``DocumentSource.on_page``), and each worker's peak RSS from /proc (``bench.memory``)."""
    from ragbus.config import pipelines

    if "document-convert" not in pipelines.EVERYTHING:
        return "lane: not built in this tree"
    return f"lane: built, but this bench does not drive it yet ({workers} workers on {bus}): see bench_scans.lane"


# ---- main -----------------------------------------------------------------------------------------------

def main_measure(args: argparse.Namespace) -> int:
    docs = load_documents()
    questions = load_questions()
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ragbus-bench-scans-"))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores, shared)")
    try:
        made = make(keep / "files")
        # without the CER table, only the files the tables' and the questions' figures read
        variants = ["born", *args.variants.split(",")] if "cer" not in args.skip else ["born", "scan300"]
        reads = {v: read_variant(made, v, args.ocr) for v in variants}
        summary: dict[str, str] = {}
        if "cer" not in args.skip:
            rows, overall = cer_rows(docs, reads)
            print("\nCharacter error rate against the known text (goal: 2% or less on scan300)")
            print("\n".join(rows))
            summary["cer"] = (f"CER 300dpi {overall.get('scan300', float('nan')):.2%} (200dpi "
                              f"{overall.get('scan200', float('nan')):.2%}, noisy "
                              f"{overall.get('noisy300', float('nan')):.2%}, photo "
                              f"{overall.get('photo', float('nan')):.2%})")
        if "tables" not in args.skip:
            rows, born = cell_rows(docs, reads)
            print(f"\nTable cells recovered (goal: {GOALS['cells']:.0%} or more from the born-digital PDFs)")
            print("\n".join(rows))
            summary["cells"] = f"table cells {born:.1%}"
        if "qa" not in args.skip:
            figures = {}
            shown: list[str] = []
            for variant in ("born", "scan300"):
                reader, texts = reads[variant]
                # stores of their own for each reading: --keep reuses them only while the converters read the same
                digest = hashlib.sha256("\0".join(texts[k].text for k in sorted(texts)).encode()).hexdigest()[:12]
                got = asyncio.run(answers_of(made, variant, reader, texts, questions,
                                             keep / f"stores-{variant}-{digest}"))
                figures[variant] = (reader, qa_figures(questions, got))
                shown += misses(questions, got, variant) if args.show else []
            print("\nQuestions asked of the born-digital PDFs and of their 300 dpi scans")
            print("\n".join(qa_rows(figures) + shown))
            summary["qa"] = (f"answer-step recall (test) scans {figures['scan300'][1]['test']['step']:.3f} vs "
                             f"born-digital {figures['born'][1]['test']['step']:.3f}")
        if "speed" not in args.skip:
            reader, s = speed(made, args.ocr)
            print(f"\nSpeed: the 300 dpi scans read one after another by {reader} in one process "
                  f"(load average {s['load']:.2f} at the start)")
            print("| worker(s) | pages | seconds | pages/s | process RSS before | process peak "
                  "| Tesseract peak, one page |")
            print("|---|---|---|---|---|---|---|")
            print(f"| 1 | {s['pages']} | {s['seconds']:.1f} | {s['pages'] / s['seconds']:.2f} | "
                  f"{s['rss_before_mb']:.0f} MB | {s['peak_mb']:.0f} MB | {s['tesseract_peak_mb']:.0f} MB |")
            summary["speed"] = f"{s['pages'] / s['seconds']:.2f} pages/s/worker"
        if args.workers > 1 or args.bus != "memory":
            print(lane(args.workers, args.bus))
        print("\nscans: " + ", ".join(summary.values()))
    finally:
        if not args.keep:
            shutil.rmtree(keep, ignore_errors=True)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", metavar="DIR", help="keep the made files and the stores here (reused)")
    parser.add_argument("--ocr", choices=["auto", "convert", "tesseract"], default="auto")
    parser.add_argument("--variants", default="scan300,scan200,noisy300,photo,tiff",
                        help=f"of {', '.join(v for v in VARIANTS if v != 'born')}")
    parser.add_argument("--skip", default="", help="of cer,tables,qa,speed")
    parser.add_argument("--show", action="store_true", help="print the questions whose answer missed")
    parser.add_argument("--workers", type=int, default=1, help="2: through the document-convert lane (HOOK)")
    parser.add_argument("--bus", choices=["memory", "kafka"], default="memory")
    parser.add_argument("--measure-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_child:
        measure_child(args.measure_child[1:], args.measure_child[0])
        sys.exit(0)
    sys.exit(main_measure(args))


if __name__ == "__main__":
    main()
