"""A bus of a test's own and the settings of hosts whose document stores come from the log."""

from __future__ import annotations

import os
import uuid

import pytest

from ragbus.bus.memory import drop_memory_broker
from ragbus.config.settings import load_settings
from ragbus.testing import brokers, selection

from .brokers import own_broker


@pytest.fixture
def bus_url(backend, tmp_path, monkeypatch):
    """A bus of this test's own. The ingestion host's consumer groups are new ones, and a new group
    reads its topics from their start (as a new worker must, to take what waits for it): on the
    session's broker that is every earlier test's requests, which its writers would append to this
    log (CI saw another test's collection in it, and the replica still applying them 30 s on)."""
    if backend == "memory":
        name = f"t{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}"
        drop_memory_broker(name)
        return
    (tmp_path / "broker").mkdir()
    broker = own_broker(backend, tmp_path / "broker")
    for name, value in broker.client_env.items():  # its admin API, for open_bus and host_settings
        monkeypatch.setenv(name, value)
    try:
        yield broker.url
    finally:
        broker.stop()


STORES = ("doc-embeddings-store", "doc-embeddings-delete", "keyword-store", "keyword-delete", "document-record")
INGESTION = ("embed", "document-load", "document-delete", *STORES, "documents-replica", "documents-query")
QUERY = ("documents-replica", "keyword-query", "fetch-chunk", "doc-embeddings-query", "documents-query")


def host_settings(data_dir, names, log: str, suffix: str, *, host: str, own_topics: bool):
    """Settings of one host: its own data dir and groups; the query host's processors on topics of its own."""
    settings = load_settings(environ={**selection.broker_env(), **{
        k: v for k, v in os.environ.items() if k == brokers.ADMIN_URL_ENV}})
    for name in names:
        section = settings.processors[name]
        section["group"] = f"{name}-{host}-{suffix}"
        if name in (*STORES, *QUERY):
            section["data_dir"] = str(data_dir)
        if name in (*STORES, *QUERY):
            section["log_topic"] = log
        if name in (*STORES, *QUERY):
            section["changelog"] = True
        if name in ("keyword-query", "fetch-chunk", "doc-embeddings-query"):
            section["refresh_interval_s"] = 0
        if own_topics:
            section["topic"] = f"{name}-{host}-{suffix}"
    settings.processors["document-delete"]["retract_topic"] = ""  # no graph here
    return settings


