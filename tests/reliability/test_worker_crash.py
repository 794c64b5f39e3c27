"""A replica of every query processor killed with SIGKILL under load, then restarted: no query lost.

Two worker processes each run every query processor (so two replicas of
each) on a real broker; one caller sends document-rag questions at
concurrency 64. A quarter of the way in, one worker is killed; halfway, a
new one starts. Every call must end exactly once, with a response, before
its deadline: lost = 0. What it costs (duplicates dropped, resends,
degraded answers, latency) is printed. ``RAGBUS_CHAOS_QUERIES`` sets the
number of questions (default 2000); ``scripts/chaos.py`` runs longer.
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

from ..helpers.brokers import settings_for_tests
from ..helpers.rag_pipeline import QUESTIONS, documents

QUERIES = int(os.environ.get("RAGBUS_CHAOS_QUERIES", "2000"))
CONCURRENCY = 64
CALL_TIMEOUT_S = 60.0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_a_killed_replica_under_load_loses_no_query(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    collection = f"chaos-{uuid.uuid4().hex[:8]}"
    await build_stores(str(tmp_path), collection, documents(collection))
    env = worker_env(str(tmp_path), uuid.uuid4().hex[:8], {
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
    })
    workers = await asyncio.gather(*(WorkerProcess(pipelines.QUERY, url, env).start() for _ in range(2)))
    restarted = None
    try:
        async with await connect(url, settings_for_tests()) as bus, \
                RequestClient(bus, name="chaos", timeout_s=CALL_TIMEOUT_S, resend_after_s=10) as client:
            load = QueryLoad(client, QUESTIONS, total=QUERIES, concurrency=CONCURRENCY, timeout=CALL_TIMEOUT_S,
                             collection=collection)
            running = asyncio.ensure_future(load.run())
            await load.reached(QUERIES // 4)
            workers[0].kill()
            await load.reached(QUERIES // 2)
            restarted = await WorkerProcess(pipelines.QUERY, url, env).start()
            report = await asyncio.wait_for(running, 540)
    finally:
        for w in [*workers, restarted]:
            if w is not None:
                await w.stop()
    print(f"\n{which}: {report.line()}")
    assert report.sent == QUERIES and report.finished == QUERIES  # every call ended, once
    assert report.lost == 0, report.line()
    assert report.max_latency_s < CALL_TIMEOUT_S
    assert report.answered + report.degraded > QUERIES * 0.9, report.line()
    # Real answers from real stores: citing a chunk or carrying a fact (a degraded one may have neither).
    assert report.grounded >= 0.95 * (report.answered + report.degraded), report.line()
