"""The ingestion tests' documents, large texts and the ingest and retrieval processors on a bus."""

from __future__ import annotations

import contextlib

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import builtin_corpus
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import Document

PIPELINE = (*pipelines.INGEST, *pipelines.RETRIEVAL)


DOCS = [
    Document(document_id="slots", title="__slots__",
             text="The __slots__ declaration reserves space for declared variables and prevents the "
                  "automatic creation of __dict__ for each instance. Clause 7.3.2 covers it."),
    Document(document_id="loops", title="for statement",
             text="The for statement iterates over the elements of a sequence such as a string, "
                  "tuple or list. The else clause runs when the loop finishes without break."),
    Document(document_id="exceptions", title="try statement",
             text="The try statement specifies exception handlers and cleanup code. Error E1101 is "
                  "raised here as an example. The finally clause always runs."),
]


@contextlib.asynccontextmanager
async def pipeline(url, data_dir, monkeypatch, *, bus_settings=None, extra_env=None, list_settings=None,
                   names=PIPELINE):
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(data_dir))
    env = {
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_SIZE": "200",
        "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_OVERLAP": "20",
        **(extra_env or {}),
    }
    settings = load_settings(environ=env)
    for name, value in (list_settings or {}).items():
        section, key = name.split(".")
        settings.processors[section][key] = value
    if bus_settings is not None:
        settings.bus = bus_settings
    async with (
        processors_running(settings, names, url, ready_timeout=120),
        await connect(url, bus_settings) as bus,
        RequestClient(bus, name="test") as client,
    ):
        yield client


LAST_PAGE = ("Appendix Z. The Skarvøy lighthouse was automated in 1987. Its last keeper, Ingrid Solvang, "
             "kept the lamp burning through the storm of 1979 and logged every passing ship by hand.")


# Real prose, many chunks; a short embedding window keeps MiniLM fast enough for thousands of them.
LARGE_ENV = {
    "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_SIZE": "1000",
    "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_OVERLAP": "150",
    "RAGBUS_PROCESSORS__DOCUMENT_LOAD__EMBED_BATCH": "8",  # 8 vectors fit a 48 KB answer, 32 would not
    "RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS": "32",
}


def large_text(chars: int) -> str:
    """About ``chars`` characters of the Python language reference, then a last page about something else."""
    corpus = "\n\n".join(d.text for d in builtin_corpus("default"))
    return (corpus * (chars // len(corpus) + 1))[:chars] + "\n\n" + LAST_PAGE
