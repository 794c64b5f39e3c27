"""Every converter on files made here, and on bad input of every kind."""

from __future__ import annotations

import builtins
import os

import pytest

from ragbus.ingestion import load_documents

from ..helpers.documents_made import NOISY_PAGE, write_docx, write_pdf, write_pptx


def read(path):
    (doc,), skipped = load_documents([str(path)])
    assert skipped == []
    return doc, "".join(doc.read())


def headings(doc) -> list[tuple[str, ...]]:
    return [s.heading for s in doc.sections]


def test_markdown_headings_are_sections_not_sentences(tmp_path):
    path = tmp_path / "faq.md"
    path.write_text("# Acme FAQ\n\n## How long is the warranty?\n\nSeven years from purchase.\n\n"
                    "Returns\n-------\n\nWithin **thirty** days.\n\n```\n# not a heading: code\n```\n")
    doc, text = read(path)
    assert doc.title == "Acme FAQ"
    assert "How long is the warranty?" not in text and "#" not in text.replace("# not a heading", "")
    assert "Seven years from purchase." in text and "# not a heading: code" in text
    assert headings(doc) == [("Acme FAQ",), ("Acme FAQ", "How long is the warranty?"), ("Acme FAQ", "Returns")]
    # Each section starts where its text does.
    by_heading = {s.heading[-1]: s.offset for s in doc.sections}
    assert text[by_heading["How long is the warranty?"]:].lstrip().startswith("Seven years")
    assert text[by_heading["Returns"]:].lstrip().startswith("Within **thirty** days.")


def test_a_web_page_loses_its_navigation_scripts_and_footer(tmp_path):
    path = tmp_path / "warranty.html"
    path.write_text(NOISY_PAGE)
    doc, text = read(path)
    assert doc.title == "Acme Kettle Warranty"
    assert "seven years from the date of purchase" in text and "repair centre in Leeds" in text
    for noise in ("Privacy", "Terms", "© 2024 Acme Corp.", "Products", "Support", "tracking", "color", "Toasters"):
        assert noise not in text, noise
    assert "How long is the warranty?" not in text
    assert ("Acme Kettle Warranty", "How do I claim?") in headings(doc)


def test_a_word_file_gives_its_paragraphs_tables_title_and_sections(tmp_path):
    path = write_docx(tmp_path / "policy.docx", "Travel Policy", [
        ("Flights", ["Economy class is booked for flights under six hours.", "Business class above that."]),
        ("Hotels", ["Hotels are booked up to 180 euros a night."]),
    ], table=[["City", "Allowance"], ["Oslo", "95 euros"]])
    doc, text = read(path)
    assert doc.title == "Travel Policy"
    assert "Economy class is booked for flights under six hours." in text and "Oslo | 95 euros" in text
    assert "Flights" not in text and "Travel Policy" not in text
    assert headings(doc) == [("Travel Policy",), ("Travel Policy", "Flights"), ("Travel Policy", "Hotels")]
    assert text[doc.sections[2].offset:].startswith("Hotels are booked")


def test_a_presentation_gives_a_section_per_slide_with_its_notes(tmp_path):
    path = write_pptx(tmp_path / "launch.pptx", [
        ("Launch plan", ["The Heron drone ships in March.", "Pre-orders open in January."], "Mention the Oslo event."),
        ("Pricing", ["The Heron costs 499 euros."], ""),
    ])
    doc, text = read(path)
    assert doc.title == "Launch plan"
    assert "The Heron drone ships in March." in text and "Mention the Oslo event." in text
    assert "The Heron costs 499 euros." in text
    assert headings(doc) == [("Launch plan",), ("Pricing",)]
    assert text[doc.sections[1].offset:].startswith("The Heron costs")


def test_a_pdf_gives_its_pages_title_and_outline(tmp_path):
    path = write_pdf(tmp_path / "manual.pdf", "Heron Drone Manual", [
        ("Charging", ["Charge the Heron battery for ninety minutes before the first flight."]),
        ("Flying", ["The Heron flies for twenty-two minutes on one charge."]),
    ])
    doc, text = read(path)
    assert doc.title == "Heron Drone Manual"
    assert "Charge the Heron battery for ninety minutes before the first flight." in " ".join(text.split())
    assert [h[-1] for h in headings(doc)] == ["Charging", "Flying"]
    assert text[doc.sections[1].offset:].lstrip().startswith("The Heron flies")


def test_text_in_another_encoding_is_read_in_it(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("Crème brûlée, café au lait, naïve façade.".encode("latin-1"))
    (tmp_path / "utf16.txt").write_text("Smørrebrød is open-faced.", encoding="utf-16")
    _, text = read(tmp_path / "latin1.txt")
    assert text == "Crème brûlée, café au lait, naïve façade."
    _, text = read(tmp_path / "utf16.txt")
    assert text == "Smørrebrød is open-faced."


BAD = [
    # (file name, content, what the one line says)
    ("empty.txt", b"", "empty file"),
    ("empty.md", b"", "empty file"),
    ("empty.pdf", b"", "empty file"),
    ("blank.txt", b"  \n\t\n", "no text"),
    ("headings-only.md", b"# Title\n\n## Part\n", "no text beyond its headings"),
    ("garbage.txt", os.urandom(4096) + b"\x00", "looks binary, not text"),
    ("garbage.md", b"\x00\x01\x02" + os.urandom(2048), "looks binary, not text"),
    ("garbage.html", b"\x00\x01\x02" + os.urandom(2048), "looks binary, not text"),
    ("garbage.pdf", b"%PDF-1.7\n" + b"\x13\x37" * 500, "not a readable PDF file"),
    ("garbage.docx", os.urandom(2048), "not a readable Word (.docx) file"),
    ("garbage.pptx", b"PK\x03\x04" + os.urandom(2048), "not a readable PowerPoint (.pptx) file"),
    ("script-only.html", b"<html><head><script>var a = 1;</script><style>p {}</style></head><body></body></html>",
     "no text once navigation, scripts and boilerplate are removed"),
    ("broken-utf8.txt", "déjà vu ".encode() * 1000 + b"\xff tail", "not UTF-8 (invalid start byte at byte 10000)"),
    ("photo.jpg", b"\xff\xd8\xff\xe0" + os.urandom(512), "not a readable JPG image file"),
    ("photo.webp", b"RIFF" + os.urandom(512), "unsupported file type '.webp'"),
]


def test_every_kind_of_bad_file_is_one_line_naming_it_and_the_rest_is_read(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name, content, _ in BAD:
        (folder / name).write_bytes(content)
    (folder / "good.txt").write_text("The one good file.")
    (folder / ".hidden.txt").write_text("dot files and folders are not the user's documents")
    docs, skipped = load_documents([str(folder), str(tmp_path / "nowhere.pdf")])
    assert [d.title for d in docs] == ["good"]
    assert len(skipped) == len(BAD) + 1, "\n".join(skipped)
    for name, _, says in BAD:
        (line,) = [s for s in skipped if s.startswith(f"{folder / name}: ")]
        assert says in line and "\n" not in line, (name, line)
    assert f"{tmp_path / 'nowhere.pdf'}: no such file or directory" in skipped


def test_a_file_whose_extra_is_missing_names_the_pip_line(tmp_path, monkeypatch):
    path = write_docx(tmp_path / "a.docx", "A", [("B", ["Some text."])])
    (tmp_path / "b.html").write_text(NOISY_PAGE)
    real_import = builtins.__import__

    def no_extra(name, *args, **kwargs):
        if name.split(".")[0] in ("docx", "trafilatura"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_extra)
    monkeypatch.setattr("importlib.import_module", lambda name: no_extra(name))
    docs, skipped = load_documents([str(path), str(tmp_path / "b.html")])
    assert docs == []
    assert skipped == [
        f"{path}: reading Word files (.docx) needs the documents extra: pip install 'ragbus[documents]'",
        f"{tmp_path / 'b.html'}: reading web pages (.html) needs the documents extra: pip install 'ragbus[documents]'",
    ]


@pytest.mark.parametrize("suffix", [".txt", ".md", ".html", ".pdf", ".docx", ".pptx"])
def test_a_path_that_does_not_exist_is_named(tmp_path, suffix):
    docs, skipped = load_documents([str(tmp_path / f"gone{suffix}")])
    assert docs == [] and skipped == [f"{tmp_path / f'gone{suffix}'}: no such file or directory"]


def test_an_upload_reads_as_the_same_file_on_disk_does(tmp_path):
    from ragbus.ingestion import open_bytes

    path = write_docx(tmp_path / "kettle.docx", "Acme Kettle Warranty", [
        ("How long is the warranty?", ["Seven years from purchase."]), ("How do I claim?", ["Post it to Leeds."])])
    doc, text = read(path)
    upload = open_bytes(path.read_bytes(), filename="kettle.docx", collection="default", document_id="k")
    assert "".join(upload.read()) == text and upload.sections == doc.sections and upload.title == doc.title
    assert upload.content_hash == doc.content_hash  # the same bytes: the library sees the same content


@pytest.mark.parametrize("filename, media_type, content, error", [
    ("notes", "application/octet-stream", b"plain words", "UnsupportedFormat"),
    ("scan.pdf", "", b"%PDF-1.4 broken", "UnreadableDocument"),
    ("cafe.txt", "", b"caf\xe9 cr\xe8me \x00\x00\x00", "UnreadableDocument"),
])
def test_an_upload_that_cannot_be_read_raises_a_typed_error_naming_it(filename, media_type, content, error):
    from ragbus import ingestion

    with pytest.raises(getattr(ingestion, error)) as raised:
        ingestion.open_bytes(content, filename=filename, media_type=media_type, collection="default", document_id="x")
    assert type(raised.value).__name__ == error and str(raised.value).startswith(f"{filename}: ")
    assert "ragbus-upload-" not in str(raised.value)


def test_an_upload_in_cp1252_or_named_by_its_media_type_is_read():
    from ragbus.ingestion import open_bytes

    cafe = open_bytes("Le café coûte 3 €.".encode("cp1252"), filename="cafe.txt", collection="default",
                      document_id="c")
    assert "".join(cafe.read()) == "Le café coûte 3 €."
    faq = open_bytes(b"# FAQ\n\n## Descaling\n\nUse citric acid.\n", filename="faq", media_type="text/markdown",
                     collection="default", document_id="f")
    assert faq.title == "FAQ" and "".join(faq.read()).strip() == "Use citric acid."
    assert [s.heading for s in faq.sections] == [("FAQ",), ("FAQ", "Descaling")]
