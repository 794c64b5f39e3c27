"""A rolling restart of every process of a deployment, under load, fails no request and loses no write.

The chart's roles as real processes on the session's Apache Kafka and Pulsar (processors/testing/
roll.py): a gateway, an ingestion host and two query hosts, every store from the log. Questions and
writes go through the gateways a Service would send to; meanwhile each process is replaced in turn,
surged and retired like a Deployment's pod or stopped and restarted on its data dir like a
StatefulSet's. Every process must exit 0 on SIGTERM, every request must be answered, and every
acknowledged write must be listed and cited afterwards. ``scripts/bench_roll.py`` measures the same
roll at 20 questions a second, with its latencies.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from ragbus.testing.roll import Endpoints, Load, Site, load_corpus, missing_writes

pytestmark = pytest.mark.brokers

QUESTIONS = ["What does the with statement do?", "How are exceptions raised and caught?",
             "What does the assert statement check?"]
PATIENCE_S = 300.0


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_a_roll_of_every_process_under_load_fails_nothing_and_loses_no_write(which, tmp_path, request):
    broker = request.getfixturevalue(f"{which}_broker")
    site = Site(broker.url, tmp_path, uuid.uuid4().hex[:8], client_env=broker.client_env, shutdown_delay_s=3)
    try:
        await site.start(gateways=1, ingest=1, query=2)
        endpoints = Endpoints(site, every_s=1.0)
        stop, following = asyncio.Event(), asyncio.Event()
        async with httpx.AsyncClient() as http:
            follow = asyncio.ensure_future(endpoints.follow(http, following))
            await asyncio.wait_for(endpoints.some.wait(), PATIENCE_S)
            await load_corpus(http, endpoints, 4, timeout_s=PATIENCE_S)
            load = Load(endpoints, QUESTIONS, rate=4, write_rate=0.5, timeout_s=PATIENCE_S, phase="roll")
            running = asyncio.ensure_future(load.run(http, stop))
            await asyncio.wait_for(load.wrote(2), PATIENCE_S)  # the load is flowing
            steps = await site.roll()
            await asyncio.wait_for(load.wrote(2 + len(steps)), PATIENCE_S)
            stop.set()
            await running
            missing = await missing_writes(http, endpoints, load.written)
            following.set()
            await follow
    finally:
        await site.stop()
    print(f"\n{which}: {len(load.calls)} asks, {len(load.writes)} writes; " + "; ".join(steps))
    assert all(" exit 0 " in step for step in steps), steps
    failed = [c.what for c in load.calls + load.writes if not c.ok]
    assert failed == [], failed[:10]
    assert missing == [], missing[:10]
    assert len(load.written) >= 2 + len(steps)

