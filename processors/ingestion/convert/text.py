"""Plain text (.txt, .rst): read in blocks, never held whole, in UTF-8 or the encoding it was written in.

A file is checked once up front by decoding it block by block without keeping the text, so a
bad byte deep inside is reported before any of it is sent. A file that is not UTF-8 is read in
the encoding charset-normalizer detects (latin-1, cp1252, UTF-16, ...), unless what came before
the bad byte was already UTF-8 beyond ASCII: that is a UTF-8 file with a broken byte, and is
reported as such rather than read as mojibake.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from .pieces import Opened

# Characters read at a time: what streaming a document holds beyond the part being sent.
BLOCK_CHARS = 1 << 16
_SCAN_BYTES = 1 << 20


class _NotThis(Exception):
    def __init__(self, reason: str, at: int | None, ascii_before: bool) -> None:
        self.reason, self.at, self.ascii_before = reason, at, ascii_before


def _scan(path: Path, encoding: str) -> bool:
    """Whether the file holds any text in ``encoding``; raises ``_NotThis`` at the first byte that is not."""
    decoder = codecs.getincrementaldecoder(encoding)()
    offset, has_text, ascii_before = 0, False, True
    with open(path, "rb") as f:
        while block := f.read(_SCAN_BYTES):
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError as exc:
                ascii_before = ascii_before and block[: exc.start].isascii()
                raise _NotThis(exc.reason, offset - pending + exc.start, ascii_before) from None
            ascii_before = ascii_before and block.isascii()
            has_text = has_text or (bool(text) and not text.isspace())
            offset += len(block)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise _NotThis(exc.reason, None, ascii_before) from None
    return has_text


def looks_binary(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(8192)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False  # UTF-16 text is full of NUL bytes
    return b"\x00" in head


def text_encoding(path: Path, *, need_text: bool = True) -> str:
    """The encoding to read ``path`` in; ``ValueError`` if it is binary, undecodable or (``need_text``) blank."""
    if looks_binary(path):
        raise ValueError(f"{path}: looks binary, not text")
    with open(path, "rb") as f:
        encoding = "utf-8-sig" if f.read(3) == codecs.BOM_UTF8 else "utf-8"
    try:
        has_text = _scan(path, encoding)
    except _NotThis as bad:
        where = f"at byte {bad.at}" if bad.at is not None else "at the end"
        if not bad.ascii_before:
            raise ValueError(f"{path}: not UTF-8 ({bad.reason} {where})") from None
        detected = _detect(path)
        if detected is None:
            raise ValueError(f"{path}: not UTF-8 ({bad.reason} {where}), and no other text encoding fits") from None
        encoding = detected
        try:
            has_text = _scan(path, encoding)
        except _NotThis:
            raise ValueError(f"{path}: not UTF-8, and not {encoding} throughout either") from None
    if need_text and not has_text:
        raise ValueError(f"{path}: no text")
    return encoding


def _detect(path: Path) -> str | None:
    from charset_normalizer import from_path

    results = from_path(path)
    best = results.best()
    if best is None:
        return None
    # A short text fits several code pages equally well (café is café in cp1250 and cp1252 alike, crème
    # only in cp1252): among those tied with the best, take cp1252, the commonest text that is not UTF-8.
    tied = {m.encoding for m in results if (m.chaos, m.coherence) == (best.chaos, best.coherence)}
    return "cp1252" if tied & {"cp1252", "latin_1"} else best.encoding


def text_blocks(path: Path, encoding: str) -> Iterator[str]:
    # newline="": the text as it is in the file, line endings included, as a whole-file decode gives it.
    with open(path, encoding=encoding, newline="") as f:
        while block := f.read(BLOCK_CHARS):
            yield block


def read_text(path: Path, *, need_text: bool = True) -> str:
    """A whole file's text, for the formats a parser must see whole (Markdown, HTML)."""
    encoding = text_encoding(path, need_text=need_text)
    with open(path, encoding=encoding, newline="") as f:
        return f.read()


def open_text(path: Path) -> Opened:
    encoding = text_encoding(path)
    return Opened("", lambda: text_blocks(path, encoding))
