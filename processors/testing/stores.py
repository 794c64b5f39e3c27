"""Stores filled for a test or a benchmark: real documents and the sample graph in a data directory of its own.

The same real ingestion processors as ``ragbus ingest`` and first use, on a private memory:// bus, so a
test's workers (in this process or in others) then read stores made as a user's are.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import ingest
from ragbus.kg.files import load_sample_graph
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.worker import processors_running, put_stores_in
from ragbus.schema import Document


async def load_documents_and_graph(client: RequestClient, collection: str, documents: Sequence[Document], *,
                                   timeout: float | None = None) -> None:
    """Ingest ``documents`` and load the sample graph; fail on the first problem. ``timeout`` bounds each
    document (None: the client settings' ``store_timeout_s``)."""
    summary = await ingest(client, list(documents), timeout=timeout)
    if summary.failed:
        raise RuntimeError(f"ingesting the documents failed: {summary.failed[0]}")
    await load_sample_graph(client, collection)


async def build_stores(directory: str | Path, collection: str, documents: Sequence[Document]) -> None:
    """Documents and the sample graph written into ``directory`` by the real ingestion processors on memory://."""
    settings = load_settings(environ={})
    put_stores_in(settings, directory)  # every store in directory, whatever the environment says
    url = f"memory://seed-{uuid.uuid4().hex[:8]}"
    async with (
        processors_running(settings, list(pipelines.EVERYTHING), url, ready_timeout=300),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="load") as client,
    ):
        await load_documents_and_graph(client, collection, documents, timeout=settings.client.store_timeout_s)
