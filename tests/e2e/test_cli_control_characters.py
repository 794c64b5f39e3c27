"""Control characters in a document's id are refused where it enters; in a title, printed escaped.

A terminal obeys what it is sent: ESC starts a command (``\\x1b[31m`` turns what follows red), a
newline forges a row of ``ragbus documents``, U+202E shows what follows reversed. An id holding one
is refused by the ingestion layer, naming the character and its place; a title holding one (a
Markdown heading here) is stored as written, and ``ragbus documents`` and ``ragbus ask`` print it
with each control character escaped.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ragbus.ingestion.send import send_document
from ragbus.ingestion.sources import DocumentSource
from ragbus.testing.gateway import GatewayProcess
from ragbus.testing.stores import build_stores
from ragbus.schema import BadRequest, Document, Fact, KgQueryResponse

REPO = Path(__file__).resolve().parents[2]
RAW = ("\x1b", "\u202e", "\x07", "\x00")  # none of these may reach a terminal


def ragbus(*args: str, data: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, RAGBUS_DATA_DIR=str(data), PYTHONPATH=str(REPO)), cwd=REPO,
                          timeout=300, check=False)


@pytest.mark.parametrize(("char", "named"), [
    ("\x1b", "a control character, U+001B ESCAPE"),
    ("\n", "a control character, U+000A LINE FEED (a newline)"),
    ("\u202e", "a bidirectional control, U+202E RIGHT-TO-LEFT OVERRIDE"),
], ids=["escape", "newline", "rlo"])
def test_ingest_refuses_a_file_whose_id_holds_a_control_character_naming_it_and_its_place(tmp_path, char, named):
    path = tmp_path / f"esc{char}[31mdoc.txt"
    path.write_text("The night bus runs every forty minutes.")
    document_id = str(path.resolve())
    run = ragbus("ingest", str(path), "--collection", "ctl", data=tmp_path / "data")
    assert run.returncode == 1, run.stderr
    assert f"it holds {named}, at character {document_id.index(char) + 1};" in run.stderr, run.stderr
    assert "0 document(s), 0 chunk(s)" in run.stderr and "1 failed" in run.stderr
    assert not any(c in run.stderr for c in RAW), run.stderr  # the id is shown escaped, even in its refusal
    listed = ragbus("documents", "--collection", "ctl", data=tmp_path / "data")
    assert listed.stdout == "", listed.stdout  # nothing of it was stored


async def test_the_ingestion_layer_refuses_a_nul_before_sending_anything():
    doc = DocumentSource.of(Document(document_id="a\x00b", text="Some text.", collection="ctl"))
    with pytest.raises(BadRequest, match=r"U\+0000 NUL, at character 2;"):
        await send_document(None, doc, timeout=1.0)  # type: ignore[arg-type]  # never reached: refused first


def test_a_title_with_control_characters_is_printed_escaped_by_documents_and_ask(tmp_path):
    note = tmp_path / "bus.md"
    note.write_text("# night\x1b[31m bus\u202e\x07evil\n\nThe night bus runs every forty minutes.\n")
    data = tmp_path / "data"
    stored = ragbus("ingest", str(note), "--collection", "ctl", data=data)
    assert stored.returncode == 0, stored.stderr
    assert not any(c in stored.stderr for c in RAW), stored.stderr  # the progress line names it by its title
    escaped = "night\\x1b[31m bus\\u202e\\x07evil"

    listed = ragbus("documents", "--collection", "ctl", data=data)
    assert listed.returncode == 0, listed.stderr
    [row] = listed.stdout.splitlines()
    assert row.split("\t")[:3] == [str(note.resolve()), escaped, str(note)], row

    asked = ragbus("ask", "How often does the night bus run?", "--mode", "keyword", "--collection", "ctl", data=data)
    assert asked.returncode == 0, asked.stderr
    assert not any(c in asked.stdout for c in RAW), asked.stdout
    assert f"  [{note.resolve()}#0] {escaped}" in asked.stdout.splitlines(), asked.stdout


def test_an_upload_whose_id_holds_a_control_character_is_refused_400_naming_it(tmp_path):
    """``POST /v1/documents`` sends through the same ingestion layer: the same refusal, as a 400 on document_id."""
    data = tmp_path / "data"
    note = Document(document_id="note", text="A note so the default collection is not empty.")
    asyncio.run(build_stores(data, "default", [note]))
    with GatewayProcess(env={"RAGBUS_DATA_DIR": str(data)}, log_path=tmp_path / "serve.log") as gateway:
        r = httpx.post(f"{gateway.url}/v1/documents", timeout=120,
                       json={"document_id": "rlo\u202etxt.exe", "text": "The night bus runs every forty minutes."})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "$.document_id", error
    assert "U+202E RIGHT-TO-LEFT OVERRIDE, at character 4;" in error["message"], error


def test_kg_query_prints_entities_and_facts_escaped(capsys):
    """A graph's entities and facts come from whoever loaded it: ``ragbus kg query`` escapes them too."""
    from ragbus.cli.kg import _show  # the printing of `ragbus kg query`, fed a response as kg-query sends it

    fact = Fact("Osprey\x1b[2J", "departs_from", "Bergen", text="Osprey\x1b[2J departs from Bergen\u202e",
                source="ferries\x07")
    _show(KgQueryResponse(entities=["Osprey\x1b[2J"], facts=[fact]))
    shown = capsys.readouterr().out
    assert not any(c in shown for c in RAW), shown
    assert shown.splitlines()[:2] == ["entities: Osprey\\x1b[2J",
                                      "  Osprey\\x1b[2J departs from Bergen\\u202e  (ferries\\x07)"], shown


async def test_document_load_refuses_an_id_with_a_control_character_published_straight_onto_the_bus():
    """Not every writer goes through the ingestion layer: a Document sent to document-load is checked there too."""
    from ragbus.document_load import DocumentLoadProcessor, DocumentLoadSettings
    from ragbus.runtime.envelope import Envelope, new_traceparent
    from ragbus.runtime.processor import RequestContext
    from ragbus.schema import BadRequest, Document

    chunker = DocumentLoadProcessor("document-load", DocumentLoadSettings())
    context = RequestContext(envelope=Envelope(request_id="r", reply_to=None, attempt=1, deadline_ms=None,
                                               traceparent=new_traceparent()), topic="document-load",
                             delivery_attempt=1)
    with pytest.raises(BadRequest, match="U\\+001B ESCAPE, at character 4"):
        await chunker.handle(Document(document_id="esc\x1b[31mdoc", text="Some text."), context)
