"""The broker restarted under load, with its log on disk: workers and caller reconnect by themselves.

A private broker (the session's is shared by other tests) is stopped and
started again on the same ports and data directory a third of the way into
a run; no process is told. Kafka keeps its log and its groups' committed
offsets, Pulsar its ledgers and cursors (Pulsar Lite its store). Every call
must still end once before its deadline; what happened to the calls in
flight is printed.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from ragbus.config import pipelines
from ragbus.bus import connect
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient
from ragbus.testing.chaos import QueryLoad, WorkerProcess, worker_env

from ..helpers.brokers import own_broker, settings_for_tests
from ..helpers.rag_pipeline import QUESTIONS, documents

QUERIES = int(os.environ.get("RAGBUS_CHAOS_QUERIES", "2000")) // 2
CALL_TIMEOUT_S = 60.0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_broker_restart_under_load_loses_no_query(which, tmp_path, monkeypatch):
    broker = own_broker(which, tmp_path)
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    collection = f"restart-{uuid.uuid4().hex[:8]}"
    workers = []
    try:
        await build_stores(str(tmp_path), collection, documents(collection))
        env = worker_env(str(tmp_path), uuid.uuid4().hex[:8])
        workers = await asyncio.gather(*(WorkerProcess(pipelines.QUERY, broker.url, env).start() for _ in range(2)))
        async with await connect(broker.url, settings_for_tests()) as bus, \
                RequestClient(bus, name="restart", timeout_s=CALL_TIMEOUT_S, resend_after_s=10) as client:
            load = QueryLoad(client, QUESTIONS, total=QUERIES, concurrency=64, timeout=CALL_TIMEOUT_S,
                             collection=collection)
            running = asyncio.ensure_future(load.run())
            await load.reached(QUERIES // 3)
            in_flight = load.report.sent - load.report.finished
            await asyncio.to_thread(broker.restart)
            report = await asyncio.wait_for(running, 540)
        alive = [w.proc.returncode is None for w in workers]
    finally:
        for w in workers:
            await w.stop()
        broker.stop()
    print(f"\n{which} restart with {in_flight} calls in flight: {report.line()}")
    assert alive == [True, True]  # the workers rode it out; nobody restarted them
    assert report.sent == QUERIES and report.finished == QUERIES
    assert report.lost == 0, report.line()
    assert report.max_latency_s < CALL_TIMEOUT_S
    assert report.grounded >= 0.95 * (report.answered + report.degraded), report.line()
