"""Documents of every kind users have, made by the tests themselves: no file is downloaded or shipped.

Word and PowerPoint files are written with python-docx and python-pptx; a PDF is a Word file
printed by LibreOffice (``soffice --headless --convert-to pdf``, from Debian's packages, which
``.ci/run`` installs), so it is a real PDF with fonts, an outline and a title, as users have.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

NOISY_PAGE = """<!DOCTYPE html><html><head><title>Acme Kettle Warranty</title>
<script>var tracking = "utm_campaign"; function track() {}</script><style>body { color: #333 }</style></head>
<body><header><nav><a href="/">Home</a> | <a href="/products">Products</a> | <a href="/support">Support</a></nav>\
</header>
<main><article><h1>Acme Kettle Warranty</h1>
<h2>How long is the warranty?</h2>
<p>Every Acme kettle carries a warranty of seven years from the date of purchase, covering the heating
element and the thermostat.</p>
<h2>How do I claim?</h2>
<p>Send the kettle with its receipt to the Acme repair centre in Leeds; repaired kettles are returned within
ten working days.</p>
</article></main>
<aside>Related: <a href="/toasters">Toasters on sale this week</a></aside>
<footer><p>Privacy | Terms</p><p>&copy; 2024 Acme Corp.</p></footer></body></html>
"""


def write_docx(path: Path, title: str, sections: list[tuple[str, list[str]]], *, table=None, ruled=False) -> Path:
    """A Word file: its title, a heading and paragraphs a section, then ``table`` (rows of cells; ``ruled``:
    with lines around every cell, as most printed tables have)."""
    import docx

    document = docx.Document()
    document.core_properties.title = title
    document.add_heading(title, 0)
    for heading, paragraphs in sections:
        document.add_heading(heading, 1)
        for text in paragraphs:
            document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        if ruled:
            grid.style = "Table Grid"
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    document.save(str(path))
    return path


def write_pptx(path: Path, slides: list[tuple[str, list[str], str]]) -> Path:
    """Slides of (title, bullet lines, speaker notes)."""
    import pptx

    deck = pptx.Presentation()
    for title, lines, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = lines[0]
        for line in lines[1:]:
            body.add_paragraph().text = line
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))
    return path


def soffice() -> str:
    found = shutil.which("soffice") or shutil.which("libreoffice")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("LibreOffice (soffice) is missing: .ci/run installs libreoffice-writer-nogui")
        pytest.skip("LibreOffice (soffice) is not installed: apt-get install libreoffice-writer-nogui")
    return found


def write_pdf(path: Path, title: str, sections: list[tuple[str, list[str]]], *, table=None,
              outline: bool = True) -> Path:
    """A PDF as LibreOffice prints a Word file: title, headings in the outline (unless ``outline`` is false),
    text with real fonts, and ``table`` ruled after the sections."""
    source = write_docx(path.with_suffix(".docx"), title, sections, table=table, ruled=True)
    profile = path.parent / ".lo-profile"  # a profile of its own: parallel runs do not share a lock
    export = "pdf" if outline else 'pdf:writer_pdf_Export:{"ExportBookmarks":{"type":"boolean","value":"false"}}'
    subprocess.run(
        [soffice(), f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", export,
         "--outdir", str(path.parent), str(source)],
        check=True, capture_output=True, timeout=120,
    )
    source.unlink()
    shutil.rmtree(profile, ignore_errors=True)
    made = path.with_suffix(".pdf")
    if made != path:
        made.rename(path)
    return path
