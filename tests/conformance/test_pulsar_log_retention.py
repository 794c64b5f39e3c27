"""A log topic on Apache Pulsar is kept whole: what a replica made from the log later relies on.

Pulsar keeps a message only while a subscription holds it or its retention says so, and a log
topic has Readers only. With Pulsar's defaults an idle log topic is deleted (the inactive-topic
check) and its closed ledgers are trimmed: a replica started a day later would find nothing.
These tests run on a broker whose idle topics go after 2 s, not a minute, with its defaults
otherwise; a plain topic beside the log shows that the broker did delete what it was not told to keep.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import msgspec
import pytest

from ragbus.bus import BusError, connect
from ragbus.runtime.pipeline_status import read_reports
from ragbus.testing import brokers, selection
from ragbus.schema import encode
from ragbus.schema.changelog import ReplicaReport
from ragbus.schema.topics import CHANGELOG_PREFIX, REPLICAS_LOG

from ..helpers.brokers import own_broker, settings_for_tests
from ..helpers.receiving import read_to_end

pytestmark = pytest.mark.skipif(selection.choice("pulsar") == "light",
                                reason="Pulsar Lite has no admin API and keeps every message ([bus.pulsar] keep_logs)")

IDLE_S = 2  # the broker deletes a topic nothing uses after this long, and looks every IDLE_S


@pytest.fixture
def forgetful_pulsar(tmp_path):
    broker = own_broker("pulsar", tmp_path, conf={"brokerDeleteInactiveTopicsFrequencySeconds": IDLE_S,
                                                  "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": IDLE_S})
    yield broker
    broker.stop()


def _topics(broker) -> list[str]:
    answer = httpx.get(f"{broker.admin_url}/admin/v2/persistent/public/default", timeout=10)
    answer.raise_for_status()
    return [name.rsplit("/", 1)[1] for name in answer.json()]


async def test_a_log_topic_outlives_the_broker_deleting_idle_topics(forgetful_pulsar):
    broker = forgetful_pulsar
    log, plain = f"{CHANGELOG_PREFIX}kept-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    async with await connect(broker.url, settings_for_tests(broker)) as bus:
        for i in range(3):
            await bus.append(log, f"r{i}".encode(), key=f"k{i}")
        await bus.publish(plain, b"no one subscribes")
    # Idle now (no producer, no reader): the broker deletes the plain topic, and must keep the log.
    for _ in range(300):
        if plain not in _topics(broker):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"the broker did not delete the idle topic {plain} within 30 s: the test shows nothing")
    await asyncio.sleep(2 * IDLE_S)  # another round of the broker's check
    assert log in _topics(broker)
    async with await connect(broker.url, settings_for_tests(broker)) as bus:
        reader = await bus.read_log(log)
        try:
            assert [r.body for r in await read_to_end(reader)] == [b"r0", b"r1", b"r2"]
        finally:
            await reader.close()
    async with httpx.AsyncClient(timeout=10) as admin:
        retention = (await admin.get(f"{broker.admin_url}/admin/v2/persistent/public/default/{log}/retention",
                                     params={"applied": "true"})).json()
    assert retention == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}


async def test_a_log_pulsar_would_not_keep_is_refused_with_the_command_that_fixes_it(pulsar_broker):
    """No admin API where admin_url says: the append fails, naming the retention to set, and nothing is
    appended to a log that Pulsar would drop."""
    nowhere = f"http://127.0.0.1:{brokers.free_port()}"
    base = settings_for_tests()
    settings = msgspec.structs.replace(base, pulsar=msgspec.structs.replace(base.pulsar, admin_url=nowhere))
    log = f"{CHANGELOG_PREFIX}refused-{uuid.uuid4().hex[:8]}"
    async with await connect(pulsar_broker.url, settings) as bus:
        with pytest.raises(BusError, match="set-retention") as refused:
            await bus.append(log, b"r", key="k")
        assert nowhere in str(refused.value)
        with pytest.raises(BusError, match="set-retention"):
            await bus.read_log(log)
        # The replicas' reports are not state (each is sent again every few seconds): a replica
        # reports and status reads it without the admin API.
        replica = f"refused-{uuid.uuid4().hex[:8]}"
        report = ReplicaReport(replica=replica, log_topic=log, applied=0, behind=None, caught_up=False,
                               checkpoint="", reported_at=time.time())
        await bus.append(REPLICAS_LOG, encode(report), key=replica)
        assert replica in [r.replica for r in await read_reports(bus)]
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        reader = await bus.read_log(log)
        try:
            assert await read_to_end(reader) == []
        finally:
            await reader.close()
