"""What telling a scanned page's table cells apart costs beside the OCR that reads it, side by side a page.

    python -m scripts.bench_scan_tables [--keep DIR] [--variant scan300] [--rounds 3]

Each page of the variant's scans (``scripts/eval/scans_made.py``, kept in ``DIR/files``) is rendered as
``convert()`` renders it, read once by Tesseract as ``ocr.read_image`` reads it (hOCR, ``hocr.words``), and
then said by ``scan_tables.page_text`` with the page (turned, levelled, its ink looked at for rules) and
without it (Tesseract's words alone), ``--rounds`` times each. Prints the seconds of each and their ratio
to the OCR's, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from scripts.eval.scans_made import make


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pages(folder: Path):
    """Each page of the PDFs in ``folder`` as ``convert()`` renders a scan for OCR: grey, at 300 dpi."""
    import pypdfium2

    for pdf in sorted(folder.glob("*.pdf")):
        document = pypdfium2.PdfDocument(str(pdf))
        try:
            for page in document:
                yield pdf.stem, page.render(scale=300 / 72, grayscale=True).to_pil()
        finally:
            document.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="where the set's files are made (reused)")
    parser.add_argument("--variant", default="scan300", help="the scans read: scan300, scan200 or noisy300")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    import pytesseract

    from ragbus.ingestion.convert import hocr
    from ragbus.ingestion.convert.scan_tables import page_text

    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ragbus-bench-scan-tables-"))
    make(keep / "files")
    print(f"load average {load()} ({os.cpu_count()} cores, shared)")
    ocr: list[float] = []
    said: list[float] = []
    words_only: list[float] = []
    bars = 0
    for _name, image in pages(keep / "files" / args.variant):
        with tempfile.TemporaryDirectory(prefix="ragbus-bench-") as folder:
            started = time.perf_counter()
            path = Path(folder) / "page.pnm"  # as ocr.read_image hands Tesseract a page
            image.save(path)
            data = hocr.words(pytesseract.image_to_pdf_or_hocr(str(path), config="--psm 1 --dpi 300",
                                                               extension="hocr"))
            ocr.append(time.perf_counter() - started)
        for timings, page in ((said, image), (words_only, None)):
            runs = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                text = page_text(data, page)
                runs.append(time.perf_counter() - started)
            timings.append(statistics.median(runs))
            if page is not None:
                bars += sum(" | " in line for line in text.splitlines())
    total = sum(ocr)
    print(f"{len(ocr)} pages of {args.variant}, {bars} lines said as table rows (load at the end {load()})")
    print("| step | seconds | a page (median) | x the OCR |")
    print("|---|---|---|---|")
    for step, timings in (("Tesseract (hOCR, read)", ocr), ("page_text with the page", said),
                          ("page_text, words alone", words_only)):
        print(f"| {step} | {sum(timings):.2f} | {statistics.median(timings) * 1000:.0f} ms | "
              f"{sum(timings) / total:.3f} |")


if __name__ == "__main__":
    main()
