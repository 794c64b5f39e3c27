"""The scans set's files, made here from its text: a Word file printed to PDF, then scanned and photographed.

    python -m scripts.eval.scans_made [--keep DIR] [--only KEY ...]

Each document is written with python-docx (tables in the "Table Grid" style, so they are ruled) and
printed to PDF by LibreOffice (``soffice --headless``, a profile of its own): the born-digital PDF.
Its pages are then rendered by PDFium (pypdfium2) and spoilt the way scanners and phones spoil them,
each page with its own fixed seed (so a file is made the same every time):

- ``scan300``: grayscale at 300 dpi, turned by a random angle within +-1.5 degrees, mild Gaussian noise
  (sigma 6 of 255), saved as an image-only PDF (Pillow's writer, JPEG pages, resolution 300);
- ``scan200``: the same at 200 dpi;
- ``noisy300``: as ``scan300``, with 0.5% of pixels salt or pepper and a Gaussian blur of radius 1;
- ``photo``: a JPEG (quality 60) of each page at 250 dpi in colour, a warm tint, light falling off
  across the page to 65%, turned within +-2 degrees, blurred (radius 1.2);
- ``tiff``: one document's ``scan300`` pages as one multi-page TIFF (LZW).

Files are cached in the folder given (``--keep``; else a temporary one): a document whose text or
this maker's ``VERSION`` changed is made again, the others are reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.eval.scans_set import ScanDocument, load_documents

VERSION = 1  # raise when the files made change, so a kept folder makes them again
VARIANTS = ("born", "scan300", "scan200", "noisy300", "photo", "tiff")
TIFF_DOCUMENT = "bus_timetable"  # the one document also made as a multi-page TIFF
MAX_ANGLE = 1.5


@dataclass(frozen=True, slots=True)
class Made:
    """Where a document's files are: variant -> its files, in page order (one file for a PDF or a TIFF)."""

    key: str
    files: dict[str, list[Path]]
    pages: int


def soffice() -> str:
    found = shutil.which("soffice") or shutil.which("libreoffice")
    if found is None:
        raise SystemExit("LibreOffice (soffice) is not installed: apt-get install libreoffice-writer-nogui")
    return found


def write_docx(doc: ScanDocument, path: Path) -> Path:
    import docx

    document = docx.Document()
    document.core_properties.title = doc.title
    document.add_heading(doc.title, 0)
    for section in doc.sections:
        document.add_heading(section.heading, 1)
        for text in section.paragraphs:
            document.add_paragraph(text)
        if section.table:
            grid = document.add_table(rows=len(section.table), cols=len(section.table[0]))
            grid.style = "Table Grid"
            for r, row in enumerate(section.table):
                for c, value in enumerate(row):
                    grid.cell(r, c).text = value
    document.save(str(path))
    return path


def print_pdfs(sources: list[Path], outdir: Path) -> None:
    """Word files printed to PDF by one LibreOffice run (a start costs seconds), with a profile of its own."""
    profile = outdir / ".lo-profile"
    try:
        subprocess.run([soffice(), f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", "pdf",
                        "--outdir", str(outdir), *map(str, sources)], check=True, capture_output=True, timeout=600)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def seed(*parts: object) -> int:
    """A fixed seed for one page of one variant (``hash()`` of a str changes between runs; this does not)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def render(pdf: Path, dpi: int, *, grayscale: bool = True) -> list:
    """The PDF's pages as Pillow images at ``dpi``."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(pdf))
    try:
        return [page.render(scale=dpi / 72, grayscale=grayscale).to_pil() for page in document]
    finally:
        document.close()


def _turned(image, rng: random.Random, most: float):
    from PIL import Image

    fill = 255 if image.mode == "L" else (255, 255, 255)
    return image.rotate(rng.uniform(-most, most), resample=Image.Resampling.BICUBIC, fillcolor=fill)


def scanned(image, key: str, variant: str, page: int):
    """A grayscale page as a flatbed scanner gives it; ``noisy300``: a dirty glass and a soft focus too."""
    import numpy as np
    from PIL import Image, ImageFilter

    rng = random.Random(seed(key, variant, page))
    noise = np.random.default_rng(seed(key, variant, page, "noise"))
    pixels = np.asarray(_turned(image.convert("L"), rng, MAX_ANGLE), dtype=np.float32)
    pixels = pixels + noise.normal(0, 6, pixels.shape).astype(np.float32)
    if variant == "noisy300":
        spots = noise.random(pixels.shape)
        pixels[spots < 0.0025] = 0
        pixels[spots > 0.9975] = 255
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "L")
    if variant == "noisy300":
        out = out.filter(ImageFilter.GaussianBlur(1))
    return out


def photographed(image, key: str, page: int):
    """A colour page as a phone photographs it: a warm tint, uneven light, turned, soft."""
    import numpy as np
    from PIL import Image, ImageFilter

    rng = random.Random(seed(key, "photo", page))
    turned = _turned(image.convert("RGB"), rng, 2.0)
    pixels = np.asarray(turned, dtype=np.float32)
    h, w = pixels.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    corner = rng.choice([(0, 0), (0, w), (h, 0), (h, w)])
    distance = np.hypot(ys - corner[0], xs - corner[1]) / np.hypot(h, w)
    light = 1.0 - 0.35 * distance  # brightest at one corner, 65% at the far one
    pixels = pixels * light[..., None] * np.array([1.0, 0.97, 0.9], dtype=np.float32)
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    return out.filter(ImageFilter.GaussianBlur(1.2))


def image_pdf(images: list, path: Path, dpi: int) -> None:
    images[0].save(path, "PDF", resolution=dpi, save_all=True, append_images=images[1:])


def make_variants(key: str, born: Path, root: Path) -> dict[str, list[Path]]:
    files: dict[str, list[Path]] = {"born": [born]}
    for variant, dpi in (("scan300", 300), ("scan200", 200), ("noisy300", 300)):
        pages = [scanned(img, key, variant, n) for n, img in enumerate(render(born, dpi), 1)]
        if variant == "scan300" and key == TIFF_DOCUMENT:  # before the PDF: its save leaves its options on the pages
            tiff = root / "tiff" / f"{key}.tif"
            pages[0].save(tiff, save_all=True, append_images=pages[1:], compression="tiff_lzw", dpi=(300, 300))
            files["tiff"] = [tiff]
        path = root / variant / f"{key}.pdf"
        image_pdf(pages, path, dpi)
        files[variant] = [path]
    files["photo"] = []
    for n, img in enumerate(render(born, 250, grayscale=False), 1):
        path = root / "photo" / f"{key}-p{n}.jpg"
        photographed(img, key, n).save(path, "JPEG", quality=60, dpi=(250, 250))
        files["photo"].append(path)
    return files


def stamp(doc: ScanDocument) -> str:
    return hashlib.sha256(f"{VERSION}\0{doc!r}".encode()).hexdigest()[:16]


def make(root: Path | None = None, only: list[str] | None = None, out=sys.stderr) -> dict[str, Made]:
    """Every document's files (those of ``only``'s keys), made in ``root`` or reused from it."""
    import pypdfium2 as pdfium

    root = root or Path(tempfile.mkdtemp(prefix="ragbus-scans-"))
    for variant in VARIANTS:
        (root / variant).mkdir(parents=True, exist_ok=True)
    docs = {k: d for k, d in load_documents().items() if not only or k in only}
    manifest_path = root / "made.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    stale = [k for k, d in docs.items() if manifest.get(k, {}).get("stamp") != stamp(d)]
    if stale:
        print(f"making {len(stale)} document(s) in {root}", file=out)
        work = root / "docx"
        work.mkdir(exist_ok=True)
        print_pdfs([write_docx(docs[k], work / f"{k}.docx") for k in stale], root / "born")
        shutil.rmtree(work, ignore_errors=True)
        for key in stale:
            born = root / "born" / f"{key}.pdf"
            files = make_variants(key, born, root)
            document = pdfium.PdfDocument(str(born))
            manifest[key] = {"stamp": stamp(docs[key]), "pages": len(document),
                             "files": {v: [str(p.relative_to(root)) for p in ps] for v, ps in files.items()}}
            document.close()
            manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return {k: Made(k, {v: [root / p for p in ps] for v, ps in manifest[k]["files"].items()}, manifest[k]["pages"])
            for k in docs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", metavar="DIR", help="make the files here, or reuse those made here before")
    parser.add_argument("--only", nargs="*", metavar="KEY", help="only these documents")
    args = parser.parse_args()
    made = make(Path(args.keep) if args.keep else None, args.only)
    for m in made.values():
        print(f"{m.key}: {m.pages} page(s); " + ", ".join(f"{v} {len(fs)}" for v, fs in m.files.items()))


if __name__ == "__main__":
    main()
