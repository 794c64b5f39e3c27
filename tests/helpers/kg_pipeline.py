"""The knowledge-graph processors running on a bus for a test."""

from __future__ import annotations

import contextlib
import uuid

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.worker import processors_running


@contextlib.asynccontextmanager
async def kg_processors(url, data_dir, monkeypatch, bus_settings=None):
    """kg-store and kg-query on ``url``, with their own consumer groups (a broker outlives a test)."""
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(data_dir))
    settings = load_settings(environ={})
    suffix = uuid.uuid4().hex[:8]
    for name in pipelines.GRAPH:
        settings.processors[name]["group"] = f"{name}-{suffix}"
    if bus_settings is not None:
        settings.bus = bus_settings
    async with (
        processors_running(settings, pipelines.GRAPH, url, ready_timeout=120),
        await connect(url, bus_settings) as bus,
        RequestClient(bus, name="test") as client,
    ):
        yield client
