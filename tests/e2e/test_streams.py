"""Streamed answers end to end: document-rag's pieces (sources, answer, final) on every bus, real processors."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pty
import sys
import uuid

import pytest

from ragbus.cli.ask import show, show_stream
from ragbus.runtime.typed_clients import RemoteError

from ..helpers.brokers import settings_for_tests
from ..helpers.rag_pipeline import pipeline

QUESTION = "How does a context manager wrap a block of code?"


async def check_stream(ask) -> None:
    whole = await ask(QUESTION, mode="hybrid")
    pieces = [p async for p in ask.stream(QUESTION, mode="hybrid")]
    kinds = [p.kind for p in pieces]
    # Sources first, then the answer in several pieces, then one final piece.
    assert kinds[0] == "sources" and kinds[-1] == "final" and set(kinds[1:-1]) == {"answer"}, kinds
    assert len(pieces) - 2 > 1
    sources, final = pieces[0], pieces[-1].response
    assert final is not None and final.error is None
    assert [c.chunk_id for c in sources.chunks] == [c.chunk_id for c in final.chunks]
    assert sources.paths == final.paths and sources.chunks[0].text
    assert "".join(p.text for p in pieces[1:-1]) == final.answer
    # The final piece carries what the whole response carries, and it is the same answer.
    assert final.answer == whole.answer and final.cited == whole.cited and final.cited
    assert final.cited[0].startswith("with#") and f"[{final.cited[0]}]" in final.answer
    assert final.timings_ms["total"] > 0 and "prompt" in final.timings_ms
    # Without the answer's pieces (what MCP's ask streams to report progress): the sources, then the same answer.
    bare = [p async for p in ask.stream(QUESTION, mode="hybrid", answer_pieces=False)]
    assert [p.kind for p in bare] == ["sources", "final"]
    assert [c.chunk_id for c in bare[0].chunks] == [c.chunk_id for c in sources.chunks]
    assert bare[1].response is not None and bare[1].response.answer == whole.answer
    assert bare[1].response.cited == whole.cited and "prompt" in bare[1].response.timings_ms


async def check_printed_as_it_arrives(ask) -> None:
    """``ragbus ask`` on a terminal: each answer piece is on screen before the next one is asked for."""
    out = io.StringIO()
    seen: list[str] = []

    async def watched():
        async for piece in ask.stream(QUESTION, mode="hybrid"):
            seen.append(out.getvalue())  # what was printed when this piece came
            yield piece

    response = await show_stream(watched(), out)
    whole = io.StringIO()
    show(await ask(QUESTION, mode="hybrid"), whole)
    assert out.getvalue() == whole.getvalue() and "Sources:" in out.getvalue()
    answers = seen[2:]  # printed before the 2nd answer piece onwards, and before the final piece
    assert len(answers) > 1 and all(a and response.answer.startswith(a) for a in answers)
    assert [len(a) for a in answers] == sorted(len(a) for a in answers) and len(set(answers)) == len(answers)


async def test_document_rag_streams_on_the_memory_bus(tmp_path, monkeypatch):
    async with pipeline(f"memory://{tmp_path.name}", tmp_path, monkeypatch) as ask:
        await check_stream(ask)
        await check_printed_as_it_arrives(ask)
        # A bad request is one error piece, raised by the typed client as the whole call would be.
        with pytest.raises(RemoteError, match="unknown retrieval mode"):
            [p async for p in ask.stream(QUESTION, mode="semantic")]


async def ask_on_a_terminal(url: str, collection: str, tmp_path) -> str:
    """``ragbus ask`` run with a pseudo-terminal as its stdout: what it printed there."""
    main, secondary = pty.openpty()
    env = {**os.environ, "RAGBUS_DATA_DIR": str(tmp_path / "unused")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ragbus.cli", "ask", QUESTION, "--bus", url, "--collection", collection,
        "--mode", "hybrid", env=env, stdout=secondary, stderr=asyncio.subprocess.PIPE)
    os.close(secondary)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    chunks = []
    with contextlib.suppress(OSError):  # EIO once the terminal's other end has closed and all is read
        while data := os.read(main, 65536):
            chunks.append(data)
    os.close(main)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_document_rag_streams_against_a_real_broker(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    collection = f"stream-{uuid.uuid4().hex[:8]}"
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=settings_for_tests(), collection=collection) as ask:
        await check_stream(ask)
        if which == "kafka":  # `ragbus ask` on a terminal takes the streamed path and prints what show() would
            printed = await ask_on_a_terminal(url, collection, tmp_path)
            whole = io.StringIO()
            show(await ask(QUESTION, mode="hybrid"), whole)
            assert printed == whole.getvalue() and "Sources:" in printed
