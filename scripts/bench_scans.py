"""Documents people scan (issue 51): OCR's character error rate, table cells, answers from scans, throughput.

    python -m scripts.bench_scans [--keep DIR] [--skip cer,tables,qa,speed,lane] [--show]
                                  [--variants scan300,scan200,noisy300,photo,tiff] [--workers 1,2] [--bus kafka]

The set is ``scripts/eval/scans`` (``scans_set.py``), its files made by ``scripts/eval/scans_made.py``
(``--keep DIR`` keeps them, ``convert()``'s readings and the ingested stores for the next run). Every file
is read by what ragbus runs: ``convert()`` (``ragbus.ingestion.convert``), in-process or on the bus. Every
figure is given per half (dev: settings may be chosen on it; test: reported).

- CER, per variant: the Levenshtein distance (rapidfuzz) between the document's known text and the text
  ``convert()`` reads from the variant's file(s), over the known text's length, summed over the half's
  documents. Both texts normalised alike (``scans_set.normalise``): NFKC, typographic quotes and dashes as
  ASCII, a table's bars as spaces (a row "cell | cell" and "cell cell" read alike: structure is the next
  figure's), white space collapsed; case kept. The known text is the title, each heading, paragraph and
  table row, in print order; a ``Heading`` piece of the converter is put back as a line where it was met
  (unless the text that follows starts with it), since the page prints it, and so is the title where a
  first page with a text layer left its line out (an OCR page keeps it). A reading is kept in
  ``DIR/converted``, keyed by the file's bytes and by what the converters are (their source files, the
  ``[convert]`` defaults, the versions of Tesseract and of the PDF and image libraries) and by this bench's
  ``read_converted``: a change to any reads again.
- Table cells, from the born-digital PDFs (and the 300 dpi scans): a known row's cells recovered are the
  longest run of them, in order, equal (normalised) to the cells of one line of the converted text that
  holds a bar (the line split at "|"); a cell merged with its neighbour, split, or on a line of its own
  is lost. The share is recovered cells over all cells, header rows included. The goal is the
  born-digital's; a scanned table's cells are told apart from Tesseract's word boxes (``scan_tables.py``).
- QA: the born-digital PDFs and the 300 dpi scans, each in a data dir of its own, through the real
  ingestion processors over the memory bus (``scripts/eval/corpus.py``), then each question asked by
  ``scripts/eval_answers.ask_all`` (hybrid retrieval, extractive answers). A chunk holds an evidence
  passage when the passage (normalised, case folded) is in it, or rapidfuzz's ``partial_ratio`` of the two
  is at least 90 (OCR's slips). Answer recall and the answer step's recall (among the questions with such a
  chunk given to the answer) as ``scripts/eval/answers.answered`` decides; R@5: a chunk holding evidence
  among the first five given.
- Speed in-process: ``convert()`` of every 300 dpi scan, one after another, in a child process (no bus):
  pages a second, the child's peak resident set, and the peak of each page's Tesseract process.
- Speed through the lane (``lane``): an Apache Kafka broker (``scripts.bench.brokers``); for each N of
  ``--workers``, N processes of ``ragbus worker document-convert`` (its defaults: a request topic of 4
  partitions, ``conversions`` = 2 files at once a worker; ``--conversions`` sets it), and this process
  sending the 300 dpi scans with ``convert_on_bus``, ``--in-flight`` files at once (each file's parts
  keyed by a conversion id of its own, so files spread over the partitions, so over the workers), timed
  from the first part sent to the last page back, after an untimed warm-up of one-page files. Per N:
  pages a second, each worker's peak resident set and CPU seconds in the timed run (its reaped Tesseract
  processes' included: how the work was shared), and the peak of each page's Tesseract process.

Memory is read from /proc: a process's peak is its VmHWM. A page's Tesseract process (pytesseract starts
one a page) is found in /proc by its name and parent every 20 ms while it runs, and its VmHWM read: VmHWM
only grows, so only what a process adds in its last 20 ms can be missed. ``ru_maxrss`` would not do:
Python's ``subprocess`` starts a child by vfork, and exec keeps the peak of the memory it leaves, the
parent's, so ``RUSAGE_CHILDREN`` gives the converting process's own peak as its children's. Each figure
is printed with the load average (1, 5, 15 min) beside it: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scripts.eval import evalset
from scripts.eval.scans_made import VARIANTS, Made, make
from scripts.eval.scans_set import ScanDocument, load_documents, load_questions, normalise

GOALS = {"cer": 0.02, "cells": 0.95, "qa_gap": 0.05}
HALVES = evalset.SPLITS
SAMPLE_S = 0.02  # how often the Tesseract processes' peaks are read
LANE_TIMEOUT_S = 1800.0  # a part's answer, or a file's pages, through the lane


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass(slots=True)
class Read:
    """A document's text as ``convert()`` read it, how many pages it read (by OCR: ``ocr``), its headings."""

    text: str
    pages: int
    ocr: int
    headings: list[str] = field(default_factory=list)  # the sections' headings met, in order


def read_converted(paths: Sequence[Path], settings=None) -> Read:
    """The text ``convert()`` gives for the files (in order), each heading put back as a line where it is met,
    and the title too where a first page with a text layer left its line out (a scan's is read, and its file's
    title may be only its name)."""
    from ragbus.ingestion.convert import Heading, Page, convert

    out: list[str] = []
    headings: list[str] = []
    pages = ocr = 0
    pending: list[tuple[str, bool]] = []  # a heading or the title not yet put back; True: the title
    for path in paths:
        opened = convert(path, settings)
        for piece in opened.read():
            if isinstance(piece, Page):
                pages += 1
                ocr += piece.ocr
                if piece.number == 1 and not piece.ocr and opened.title:
                    pending.append((opened.title, True))
            elif isinstance(piece, Heading):
                pending.append((piece.path[-1], False))
                headings.append(piece.path[-1])
            elif piece:
                while pending:  # a converter that keeps the line in the text says it once
                    line, title = pending.pop(0)
                    if not starts_with(piece, line, wrapped=title):
                        out.append(f"\n{line}\n")
                out.append(piece)
        out += [f"\n{line}\n" for line, _ in pending]
        pending.clear()
        out.append("\n")
    return Read("".join(out), pages or page_count(paths), ocr, headings)


def starts_with(text: str, line: str, *, wrapped: bool) -> bool:
    """``text``'s first line is ``line``; ``wrapped``: its first words are, over as many lines (a long title)."""
    if wrapped:
        return text.split()[:len(line.split())] == line.split()
    return text.lstrip().partition("\n")[0].strip() == line


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


def converters_stamp() -> str:
    """What a reading of a file depends on besides the file: the converters' source files, the ``[convert]``
    defaults, the versions of Tesseract and of the libraries that read PDFs and images, ``read_converted``."""
    from importlib import metadata

    import pytesseract

    import ragbus.ingestion.convert as converters
    from ragbus.config.settings import ConvertSettings

    digest = hashlib.sha256((inspect.getsource(read_converted) + inspect.getsource(starts_with)).encode())
    for source in sorted(Path(converters.__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    digest.update(repr(ConvertSettings()).encode())
    digest.update(str(pytesseract.get_tesseract_version()).encode())
    for library in ("pypdf", "pdfplumber", "pypdfium2", "pillow", "pytesseract"):
        digest.update(f"{library} {metadata.version(library)}".encode())
    return digest.hexdigest()


def cached_read(files: Sequence[Path], stamp: str, folder: Path | None) -> Read:
    """``read_converted(files)``, kept in ``folder`` under the files' bytes and ``stamp`` (None: not kept)."""
    if folder is None:
        return read_converted(files)
    digest = hashlib.sha256(stamp.encode())
    for f in files:
        digest.update(hashlib.sha256(f.read_bytes()).digest())
    path = folder / f"{digest.hexdigest()[:24]}.json"
    if path.exists():
        return Read(**json.loads(path.read_text(encoding="utf-8")))
    got = read_converted(files)
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"text": got.text, "pages": got.pages, "ocr": got.ocr, "headings": got.headings}),
                    encoding="utf-8")
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

def read_variant(made: dict[str, Made], variant: str, cache: Path | None, stamp: str,
                 out=sys.stderr) -> dict[str, Read]:
    """Each document's text as ``convert()`` reads it (the documents that have the variant)."""
    keys = [k for k, m in made.items() if variant in m.files]
    started = time.perf_counter()
    got = {key: cached_read(made[key].files[variant], stamp, cache) for key in keys}
    print(f"  {variant}: {len(keys)} documents read by convert() in {time.perf_counter() - started:.0f} s "
          f"(load {load()})", file=out)
    return got


def cer_rows(docs: dict[str, ScanDocument], reads: dict[str, dict[str, Read]]) -> tuple[list[str], dict[str, float]]:
    rows = ["| variant | half | documents | pages (by OCR) | characters | CER |", "|---|---|---|---|---|---|"]
    overall: dict[str, float] = {}
    for variant, got in reads.items():
        dist_all = len_all = 0
        for half in HALVES:
            keys = [k for k in got if docs[k].split == half]
            if not keys:
                continue
            pairs = [error_chars(docs[k].known_text(), got[k].text) for k in keys]
            dist, length = sum(d for d, _ in pairs), sum(n for _, n in pairs)
            dist_all += dist
            len_all += length
            rows.append(f"| {variant} | {half} | {len(keys)} | {sum(got[k].pages for k in keys)} "
                        f"({sum(got[k].ocr for k in keys)}) | {length} | {dist / length:.2%} |")
        overall[variant] = dist_all / (len_all or 1)
    return rows, overall


def heading_rows(docs: dict[str, ScanDocument], reads: dict[str, dict[str, Read]]) -> list[str]:
    """Per variant and half: the sections' known headings, how many ``convert()`` gave as headings, and the
    headings it gave that are neither a known one nor the document's title."""
    rows = ["| variant | half | known headings | found | others |", "|---|---|---|---|---|"]
    for variant, got in reads.items():
        for half in HALVES:
            keys = [k for k in got if docs[k].split == half]
            known = found = others = 0
            for key in keys:
                wanted = {normalise(s.heading) for s in docs[key].sections}
                met = {normalise(h) for h in got[key].headings}
                known += len(wanted)
                found += len(wanted & met)
                others += len(met - wanted - {normalise(docs[key].title)})
            if keys:
                rows.append(f"| {variant} | {half} | {known} | {found} ({found / (known or 1):.0%}) | {others} |")
    return rows


def cell_rows(docs: dict[str, ScanDocument], reads: dict[str, dict[str, Read]]) -> tuple[list[str], float]:
    rows = ["| variant | half | tables | cells | recovered |", "|---|---|---|---|---|"]
    born = 0.0
    for variant, got in reads.items():  # born first
        total_r = total_k = 0
        for half in HALVES:
            keys = [k for k in got if docs[k].split == half]
            pairs = [table_cells(docs[k], got[k].text) for k in keys]
            r, k = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
            total_r, total_k = total_r + r, total_k + k
            rows.append(f"| {variant} | {half} | {sum(len(docs[k].tables) for k in keys)} | {k} | "
                        f"{f'{r / k:.1%}' if k else '-'} |")
        if variant == "born":
            born = total_r / (total_k or 1)
    return rows, born


# ---- question answering ---------------------------------------------------------------------------------

def holds(evidence: str, chunk: str) -> bool:
    """The chunk holds the evidence passage: whole (normalised, case folded), or nearly (OCR's slips)."""
    from rapidfuzz import fuzz

    wanted, text = normalise(evidence).casefold(), normalise(chunk).casefold()
    return wanted in text or (len(text) >= len(wanted) and fuzz.partial_ratio(wanted, text) >= 90)


async def answers_of(made: dict[str, Made], variant: str, questions: list[evalset.Question],
                     data_dir: Path) -> dict:
    """The variant's files ingested into ``data_dir`` (each read by ``convert()`` in document-load's
    ingestion, in-process), and every question's response."""
    from ragbus.ingestion import load_documents as open_files
    from scripts.eval.corpus import ingest_corpus
    from scripts.eval_answers import ask_all
    from scripts.eval_conversations import settings_for

    settings = settings_for(data_dir, "hybrid")
    opened, skipped = open_files([str(p) for m in made.values() for p in m.files[variant]], "default",
                                 settings.convert)
    if skipped:
        raise SystemExit(f"{variant}: files not read: {skipped[:3]}")
    await ingest_corpus(settings, data_dir, documents=list(opened))
    print(f"  asking {len(questions)} questions of {variant} (load {load()})", file=sys.stderr)
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


def qa_rows(figures: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    rows = ["| files | half | questions | answer recall | answer step's recall (n) | R@5 | failed |",
            "|---|---|---|---|---|---|---|"]
    for variant, by_half in figures.items():
        rows += [f"| {variant} | {h} | {f['n']:.0f} | {f['recall']:.3f} | {f['step']:.3f} "
                 f"({f['step_n']:.0f}) | {f['r5']:.3f} | {f['failed']:.0f} |" for h, f in by_half.items()]
    if {"born", "scan300"} <= figures.keys():
        for h in HALVES:
            gap = figures["born"][h]["step"] - figures["scan300"][h]["step"]
            rows.append(f"| born - scan300 | {h} | | | {gap:+.3f} (goal: at most {GOALS['qa_gap']}) | | |")
    return rows


# ---- speed ----------------------------------------------------------------------------------------------

class TesseractPeaks:
    """The peak resident set (VmHWM, MB) of every page's Tesseract process whose parent is one of ``parents``,
    read from /proc every ``SAMPLE_S`` on a thread of its own while they run (pid -> MB)."""

    def __init__(self, parents: Sequence[int]) -> None:
        self.parents = {str(p).encode() for p in parents}
        self.peaks: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tesseract-peaks", daemon=True)

    def __enter__(self) -> TesseractPeaks:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _pages(self) -> list[int]:
        """The Tesseract processes of ``parents`` running now that read a page (not ``--list-langs``)."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    head, _, rest = fh.read().rpartition(b")")  # "pid (name) state ppid ..."
                if head.partition(b"(")[2] != b"tesseract" or rest.split()[1] not in self.parents:
                    continue
                pid = int(entry.name)
                if pid in self.peaks or b"--psm" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except (OSError, IndexError):  # gone while read
                continue
        return found

    def _run(self) -> None:
        from scripts.bench.memory import status_mb

        while not self._stop.is_set():
            for pid in self._pages():
                with contextlib.suppress(OSError, ValueError):  # gone, or a zombie: nothing more to read
                    self.peaks[pid] = max(self.peaks.get(pid, 0.0), status_mb("VmHWM", pid))
            self._stop.wait(SAMPLE_S)


def per_page(peaks: Sequence[float]) -> str:
    """A page's Tesseract peak: median and largest, and over how many pages."""
    if not peaks:
        return "not seen"
    return f"{statistics.median(peaks):.0f} MB median, {max(peaks):.0f} MB max ({len(peaks)} pages)"


def scans(made: dict[str, Made]) -> list[Path]:
    return [p for m in made.values() for p in m.files["scan300"]]


def measure_child(files: list[str]) -> None:
    """In the child: ``convert()`` of ``files`` one after another; one JSON line of what it cost."""
    from ragbus.config.settings import ConvertSettings
    from ragbus.ingestion.convert import ocr
    from scripts.bench.memory import status_mb

    ocr.check(ConvertSettings())  # Tesseract's languages asked once, as a worker does before its first page
    before = status_mb("VmRSS")
    pages = ocr_pages = chars = 0
    with TesseractPeaks([os.getpid()]) as tesseract:
        started = time.perf_counter()
        for path in files:
            read = read_converted([Path(path)])
            pages, ocr_pages, chars = pages + read.pages, ocr_pages + read.ocr, chars + len(normalise(read.text))
        seconds = time.perf_counter() - started
    print(json.dumps({"pages": pages, "ocr": ocr_pages, "chars": chars, "seconds": seconds,
                      "rss_before_mb": before, "peak_mb": status_mb("VmHWM"),
                      "tesseract_mb": list(tesseract.peaks.values())}))


def speed(made: dict[str, Made]) -> dict:
    """Pages a second and memory peaks of ``convert()`` in one process, no bus, on the 300 dpi scans."""
    at_start = load()
    done = subprocess.run([sys.executable, "-m", "scripts.bench_scans", "--measure-child",
                           *map(str, scans(made))], check=True, capture_output=True, text=True, timeout=3600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = (at_start, load())
    return result


async def through_lane(client, files: Sequence[Path], in_flight: int) -> tuple[int, int]:
    """``files`` converted by document-convert, ``in_flight`` at once: (pages, pages read by OCR)."""
    from ragbus.config.settings import ConvertSettings
    from ragbus.ingestion import convert_on_bus, open_document
    from ragbus.ingestion.convert import Page

    settings = ConvertSettings(on_bus=True)
    slots = asyncio.Semaphore(in_flight)
    pages: list[Page] = []

    async def one(path: Path) -> None:
        async with slots:
            source = open_document(path, "default", settings)
            source.on_page.append(pages.append)
            done = await convert_on_bus(client, source, timeout=LANE_TIMEOUT_S)
            if not "".join(done.read()).strip():
                raise RuntimeError(f"{path}: no text back from document-convert")

    await asyncio.gather(*(one(p) for p in files))
    return len(pages), sum(p.ocr for p in pages)


async def lane(files: list[Path], counts: Sequence[int], bus: str, in_flight: int, conversions: int | None,
               workdir: Path, out=sys.stderr) -> list[dict]:
    """Pages a second through the document-convert lane on ``bus``, with each of ``counts`` workers in turn."""
    from ragbus.bus import connect
    from ragbus.config.settings import bus_settings
    from ragbus.runtime.request_client import RequestClient
    from ragbus.testing.chaos import WorkerProcess, worker_env
    from ragbus.testing.log_hosts import var
    from scripts.bench.brokers import broker_env, broker_for
    from scripts.bench.cpu import cpu_of
    from scripts.bench.memory import status_mb

    broker = broker_for(bus, workdir / "broker")
    print(f"  lane: starting {bus} (load {load()})", file=out)
    broker.start()
    try:
        env = worker_env(str(workdir / "data"), uuid.uuid4().hex[:8], broker_env(broker))
        if conversions:
            env[var("document-convert", "conversions")] = str(conversions)
        warm = sorted(files, key=lambda p: (page_count([p]), p.stat().st_size))[:in_flight]
        results = []
        async with await connect(broker.url, bus_settings(environ=env)) as connected, \
                RequestClient(connected, name="bench-scans") as client:
            for n in counts:
                workers = [WorkerProcess(["document-convert"], broker.url, env) for _ in range(n)]
                try:
                    await asyncio.gather(*(w.start(timeout=300) for w in workers))
                    pids = [w.pid for w in workers if w.pid is not None]
                    await through_lane(client, warm, in_flight)
                    cpu_before, at_start = [cpu_of(p) for p in pids], load()
                    print(f"  lane: {n} worker(s) ready and warm, converting (load {at_start})", file=out)
                    with TesseractPeaks(pids) as tesseract:
                        started = time.perf_counter()
                        pages, ocr = await through_lane(client, files, in_flight)
                        seconds = time.perf_counter() - started
                    results.append({"workers": n, "pages": pages, "ocr": ocr, "seconds": seconds,
                                    "rss_mb": [status_mb("VmHWM", p) for p in pids],
                                    "cpu_s": [cpu_of(p) - c for p, c in zip(pids, cpu_before, strict=True)],
                                    "tesseract_mb": list(tesseract.peaks.values()), "load": (at_start, load())})
                finally:
                    await asyncio.gather(*(w.stop() for w in workers))
        return results
    finally:
        broker.stop()


def speed_rows(local: dict | None, lanes: list[dict], in_flight: int, conversions: int | None) -> list[str]:
    rows = ["| where | workers | pages (by OCR) | seconds | pages/s | x 1 worker | load at start; end | "
            "worker peak RSS | worker CPU s | Tesseract peak a page |", "|---|---|---|---|---|---|---|---|---|---|"]
    if local is not None:
        rows.append(f"| in-process, one file after another | 1 | {local['pages']} ({local['ocr']}) | "
                    f"{local['seconds']:.1f} | {local['pages'] / local['seconds']:.2f} | | {local['load'][0]}; "
                    f"{local['load'][1]} | {local['peak_mb']:.0f} MB ({local['rss_before_mb']:.0f} MB before) | | "
                    f"{per_page(local['tesseract_mb'])} |")
    one = next((r["pages"] / r["seconds"] for r in lanes if r["workers"] == 1), None)
    each = f"{conversions} conversion(s)" if conversions else "conversions 2 (default)"
    for r in lanes:
        rate = r["pages"] / r["seconds"]
        rows.append(f"| lane, {in_flight} files in flight, {each} a worker | {r['workers']} | {r['pages']} "
                    f"({r['ocr']}) | {r['seconds']:.1f} | {rate:.2f} | {f'{rate / one:.2f}' if one else ''} | "
                    f"{r['load'][0]}; {r['load'][1]} | {', '.join(f'{m:.0f}' for m in r['rss_mb'])} MB | "
                    f"{', '.join(f'{c:.0f}' for c in r['cpu_s'])} | {per_page(r['tesseract_mb'])} |")
    return rows


# ---- main -----------------------------------------------------------------------------------------------

def main_measure(args: argparse.Namespace) -> int:
    docs = load_documents()
    questions = load_questions()
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ragbus-bench-scans-"))
    print(f"load average {load()} ({os.cpu_count()} cores, shared)")
    try:
        made = make(keep / "files")
        summary: dict[str, str] = {}
        if not {"cer", "tables", "qa"} <= set(args.skip):
            stamp = converters_stamp()
            # without the CER table, only the files the tables' and the questions' figures read
            variants = ["born", *args.variants.split(",")] if "cer" not in args.skip else ["born", "scan300"]
            reads = {v: read_variant(made, v, keep / "converted", stamp) for v in variants}
        if "cer" not in args.skip:
            rows, overall = cer_rows(docs, reads)
            print(f"\nCharacter error rate against the known text, read by convert() (goal: 2% or less on scan300; "
                  f"load {load()})")
            print("\n".join(rows))
            summary["cer"] = (f"CER 300dpi {overall.get('scan300', float('nan')):.2%} (200dpi "
                              f"{overall.get('scan200', float('nan')):.2%}, noisy "
                              f"{overall.get('noisy300', float('nan')):.2%}, photo "
                              f"{overall.get('photo', float('nan')):.2%})")
        if "tables" not in args.skip:
            rows, born = cell_rows(docs, reads)
            print(f"\nTable cells recovered (goal: {GOALS['cells']:.0%} or more from the born-digital PDFs; a scanned "
                  f"table's cells told apart from Tesseract's word boxes)")
            print("\n".join(rows))
            summary["cells"] = f"born-digital table cells {born:.1%}"
            print("\nSection headings (from the outline on born-digital PDFs, from type sizes on scans)")
            print("\n".join(heading_rows(docs, reads)))
        if "qa" not in args.skip:
            figures = {}
            shown: list[str] = []
            for variant in ("born", "scan300"):
                texts = reads[variant]
                # stores of their own for each reading: --keep reuses them only while the converters read the same
                digest = hashlib.sha256("\0".join(texts[k].text for k in sorted(texts)).encode()).hexdigest()[:12]
                got = asyncio.run(answers_of(made, variant, questions, keep / f"stores-{variant}-{digest}"))
                figures[variant] = qa_figures(questions, got)
                shown += misses(questions, got, variant) if args.show else []
            print(f"\nQuestions asked of the born-digital PDFs and of their 300 dpi scans (load {load()})")
            print("\n".join(qa_rows(figures) + shown))
            summary["qa"] = (f"answer-step recall (test) scans {figures['scan300']['test']['step']:.3f} vs "
                             f"born-digital {figures['born']['test']['step']:.3f}")
        local = None
        if "speed" not in args.skip:
            print(f"  speed: convert() in a child process (load {load()})", file=sys.stderr)
            local = speed(made)
            summary["speed"] = f"in-process {local['pages'] / local['seconds']:.2f} pages/s"
        lanes: list[dict] = []
        if "lane" not in args.skip and args.workers:
            with tempfile.TemporaryDirectory(prefix="ragbus-bench-lane-") as scratch:
                lanes = asyncio.run(lane(scans(made), args.workers, args.bus, args.in_flight, args.conversions,
                                         Path(scratch)))
            summary["lane"] = f"{args.bus}: " + ", ".join(f"{r['workers']} worker(s) {r['pages'] / r['seconds']:.2f}"
                                                          for r in lanes) + " pages/s"
        if local is not None or lanes:
            print(f"\nSpeed: the 300 dpi scans converted by convert(), in one process and through the "
                  f"document-convert lane on {args.bus} ({os.cpu_count()} cores)")
            print("\n".join(speed_rows(local, lanes, args.in_flight, args.conversions)))
        print(f"\nscans: {', '.join(summary.values())} (load at the end {load()})")
    finally:
        if not args.keep:
            shutil.rmtree(keep, ignore_errors=True)
    return 0


def counts(text: str) -> list[int]:
    got = [int(n) for n in text.split(",") if n.strip()]
    if any(n < 1 for n in got):
        raise argparse.ArgumentTypeError(f"workers must be 1 or more: {text!r}")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", metavar="DIR", help="keep the made files, readings and stores here (reused)")
    parser.add_argument("--variants", default="scan300,scan200,noisy300,photo,tiff",
                        help=f"of {', '.join(v for v in VARIANTS if v != 'born')}")
    parser.add_argument("--skip", default="", help="of cer,tables,qa,speed,lane")
    parser.add_argument("--show", action="store_true", help="print the questions whose answer missed")
    parser.add_argument("--workers", type=counts, default=[1, 2],
                        help="document-convert workers of the lane, one run each (default 1,2)")
    parser.add_argument("--bus", choices=["kafka"], default="kafka", help="the lane's broker (Apache Kafka)")
    parser.add_argument("--in-flight", type=int, default=4, help="files sent through the lane at once")
    parser.add_argument("--conversions", type=int, help="each worker's files at once (default: the processor's, 2)")
    parser.add_argument("--measure-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_child:
        measure_child(args.measure_child)
        sys.exit(0)
    args.skip = [s for s in args.skip.split(",") if s]
    sys.exit(main_measure(args))


if __name__ == "__main__":
    main()
