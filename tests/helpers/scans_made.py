"""Scans made here from PDFs LibreOffice printed: pages rendered by PDFium, turned, saved as images or as a
PDF of images only; and the bad images a converter must refuse (a decompression bomb, a truncated TIFF)."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path


def pages_of(pdf: Path, dpi: int = 300, angle: float = 0.0) -> list:
    """Each page of ``pdf`` as a grayscale Pillow image at ``dpi``, turned ``angle`` degrees (white corners)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(str(pdf))
    try:
        images = [page.render(scale=dpi / 72, grayscale=True).to_pil() for page in document]
    finally:
        document.close()
    return [i.rotate(angle, expand=True, fillcolor=255) if angle else i for i in images]


def scanned_pdf(pdf: Path, out: Path, dpi: int = 300, angle: float = 0.0) -> Path:
    """``pdf`` as a scanner gives it back: a PDF of page images, with no text layer."""
    first, *rest = pages_of(pdf, dpi, angle)
    first.save(out, save_all=True, append_images=rest, resolution=dpi)
    return out


def bomb_png(out: Path, side: int = 50_000) -> Path:
    """A ``side`` x ``side`` one-bit PNG, all white: a few hundred KB on disk, gigabytes decoded."""
    row = b"\x00" + b"\xff" * ((side + 7) // 8)  # filter byte, then the row's bits
    squeeze = zlib.compressobj(9)
    body = b"".join(squeeze.compress(row) for _ in range(side)) + squeeze.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    out.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b""))
    return out


def truncated_tiff(pages: list, out: Path, keep: float = 0.6) -> Path:
    """A multi-page TIFF of ``pages`` cut short after ``keep`` of its bytes, as a failed copy leaves one."""
    first, *rest = pages
    first.save(out, save_all=True, append_images=rest, compression="raw")
    data = out.read_bytes()
    out.write_bytes(data[: int(len(data) * keep)])
    return out


def need_tesseract() -> None:
    """Tesseract with English and orientation data is here, or the test fails in CI and skips elsewhere."""
    import pytest

    data = Path("/usr/share/tesseract-ocr/5/tessdata")
    if shutil.which("tesseract") and (data / "eng.traineddata").exists() and (data / "osd.traineddata").exists():
        return
    if os.environ.get("CI"):
        pytest.fail("Tesseract is missing: .ci/run installs tesseract-ocr and tesseract-ocr-eng")
    pytest.skip("Tesseract is not installed: apt-get install tesseract-ocr tesseract-ocr-eng")


def scan_png(pdf: Path, out: Path, dpi: int = 300) -> Path:
    """The first page of ``pdf`` scanned to a PNG that says its resolution."""
    pages_of(pdf, dpi)[0].save(out, dpi=(dpi, dpi))
    return out


def scan_tiff(pdfs: list[Path], out: Path, dpi: int = 300) -> Path:
    """The first page of each of ``pdfs`` scanned, in order, into one multi-page TIFF (LZW: a few hundred KB)."""
    first, *rest = [pages_of(pdf, dpi)[0] for pdf in pdfs]
    first.save(out, save_all=True, append_images=rest, dpi=(dpi, dpi), compression="tiff_lzw")
    return out
