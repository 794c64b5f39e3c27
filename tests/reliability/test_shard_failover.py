"""A shard owner killed with kill -9 under ingest and query load, each host on a network of its own.

An ingestion host and three sharded query hosts (two shards), each a network namespace with a
data dir of its own, nothing shared but the broker (``processors/testing/shard_chaos.py`` runs the
load and keeps the score). While new versions are ingested and every host's document-rag is asked,
the owner of a shard is killed now and then and started again. Meanwhile an answer may say a shard
was left out (partial), never be wrong; the shard answers again once the group hands it to another
host; at the end every host answers each document's last acknowledged version from every shard.
"""

from __future__ import annotations

import uuid

import pytest

from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.testing import brokers, netns
from ragbus.testing.shard_chaos import ShardChaos, ShardReport

from ..helpers.brokers import own_broker, settings_for_tests

pytestmark = pytest.mark.brokers

DOCUMENTS = 6
DEADLINE_S = 600  # the load goes on until exercised, or this long: a bound on a broken run, not a verdict
HOSTS = ["broker", "w1", "q1", "q2", "q3"]


def exercised(report: ShardReport) -> bool:
    """Owners killed (each shard answering again after), versions written meanwhile, answers judged."""
    return (len(report.back_s) >= 2 and report.acknowledged >= 2 * DOCUMENTS
            and report.answers - report.partial > 20)


@pytest.fixture
def network():
    why = netns.unavailable()
    if why:
        if brokers.in_ci():
            pytest.fail(f"separate-host tests must run in CI: {why}", pytrace=False)
        pytest.skip(why)
    with netns.Network(HOSTS) as net:
        yield net


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("standbys", [0, 1])
async def test_a_shard_owner_killed_is_replaced_and_no_answer_is_wrong(standbys, network, tmp_path):
    broker = own_broker("kafka", tmp_path, network["broker"].address, network["broker"].wrap)
    chaos = ShardChaos(broker.url, tmp_path, uuid.uuid4().hex[:8], shards=2, standbys=standbys, writers=1,
                       replicas=3, documents=DOCUMENTS, extra_env=broker.client_env)
    chaos.wraps = {host: network[host].wrap for host in HOSTS[1:]}
    try:
        await chaos.start()
        async with await connect(broker.url, settings_for_tests(broker)) as bus, \
                RequestClient(bus, name="chaos", timeout_s=60, resend_after_s=10) as client:
            report = await chaos.run(client, seconds=30, kill_every=8, restart_after=2, progress=print,
                                     until=exercised, deadline=DEADLINE_S)
    finally:
        await chaos.stop()
        broker.stop()
    print(f"\nkafka, {standbys} standby(s): {report.line()}")
    assert report.wrong == [], report.wrong[:10]
    assert report.half == [], report.half[:10]
    assert report.missing == [], report.missing
    assert exercised(report), f"not exercised within {DEADLINE_S} s: {report.line()}"
