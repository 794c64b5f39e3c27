"""Chaos with the stores from the log: writers and replicas killed with kill -9 under ingest and query load.

Two ingestion hosts and two query hosts, each a process with a data dir of its own, nothing shared
but a broker of the test's own (``processors/testing/log_chaos.py`` runs the load and keeps the
score). While new versions of the documents are ingested and every replica is read, a random host
is killed every few seconds and started again. No read may hold part of a version or two versions
mixed, and at the end every replica holds and answers each document's last acknowledged version.

The run lasts until it has done what the verdict needs (``exercised``), not a fixed time: a host
restarted on a loaded machine takes longer to say ready, so 45 s once held fewer than three kills.
"""

from __future__ import annotations

import uuid

import pytest

from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.testing.log_chaos import ChaosReport, LogChaos

from ..helpers.brokers import own_broker, settings_for_tests

pytestmark = pytest.mark.brokers

DOCUMENTS = 6
DEADLINE_S = 600  # the load goes on until exercised, or this long: a bound on a broken run, not a verdict


def exercised(report: ChaosReport) -> bool:
    """The run did what it claims to: versions written while hosts of both kinds died, reads on every store."""
    return (len(report.kills) >= 3 and {host[0] for host in report.kills} == {"w", "q"}  # w: a writer, q: a replica
            and report.acknowledged >= 2 * DOCUMENTS and report.reads["keyword"] > 20 and report.reads["fetch"] > 20)


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_kill_9_of_writers_and_replicas_loses_no_acknowledged_version_and_serves_no_half_one(which, tmp_path):
    broker = own_broker(which, tmp_path)
    chaos = LogChaos(broker.url, tmp_path, uuid.uuid4().hex[:8], writers=2, replicas=2, documents=DOCUMENTS,
                     extra_env=broker.client_env)
    try:
        await chaos.start()
        async with await connect(broker.url, settings_for_tests(broker)) as bus, \
                RequestClient(bus, name="chaos", timeout_s=60, resend_after_s=10) as client:
            report = await chaos.run(client, seconds=45, kill_every=9, restart_after=2, progress=print,
                                     until=exercised, deadline=DEADLINE_S)
    finally:
        await chaos.stop()
        broker.stop()
    print(f"\n{which}: {report.line()}")
    assert report.half == [], report.half[:10]
    assert report.missing == [], report.missing
    assert exercised(report), f"not exercised within {DEADLINE_S} s: {report.line()}"
