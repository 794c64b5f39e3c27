"""The corpus of an evaluation ingested: once per data dir, through the real ingestion processors."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import Settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.ingestion import DocumentSource, builtin_corpus, ingest
from ragbus.schema import Document
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.worker import processors_running


async def ingest_corpus(settings: Settings, data_dir: Path, out=sys.stderr,
                        documents: list[Document | DocumentSource] | None = None) -> None:
    """The default corpus (or ``documents``) through document-load, unless ``data_dir`` already holds it."""
    from ragbus.stores.keywords.index import exists
    from ragbus.stores.layout import keywords_dir

    if exists(keywords_dir(data_dir, "default")):
        print(f"reusing the corpus ingested in {data_dir}", file=out)
        return
    url = f"memory://eval-ingest-{uuid.uuid4().hex[:8]}"
    documents = documents if documents is not None else list(builtin_corpus("default"))
    print(f"ingesting {len(documents)} documents into {data_dir}", file=out)
    started = time.perf_counter()
    try:
        async with (
            processors_running(settings, pipelines.INGEST, url, ready_timeout=300),
            await connect(url, settings.bus) as bus,
            RequestClient(bus, name="eval-ingest") as client,
        ):
            summary = await ingest(client, documents, timeout=600)
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    if summary.failed:
        raise RuntimeError(f"ingesting the corpus failed: {summary.failed[0]}")
    print(f"ingested {summary.chunks} chunks in {time.perf_counter() - started:.0f} s", file=out)
