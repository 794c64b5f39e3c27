"""A broker's outage in a few lines (``processors/bus/outage.py``), and which client lines feed it.

No broker here: a probe of the test's own says when the broker is back, and the client lines are
records made the way aiokafka and pulsar-client make theirs. ``tests/reliability/test_broker_outage.py``
does the same against real brokers that are stopped and started.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from ragbus.config.bus import BusSettings
from ragbus.bus import outage
from ragbus.bus.client_log import ClientLines, Kind
from ragbus.bus.kafka import client_log as kafka_lines
from ragbus.bus.pulsar import core_log as pulsar_lines

from ..helpers import waiting

SETTINGS = BusSettings(outage_report_interval_s=0.2, outage_probe_max_s=0.1)
HOSTS = ["127.0.0.1:1"]


class Broker:
    """What the probe finds: away until ``back`` is set."""

    def __init__(self) -> None:
        self.back = asyncio.Event()
        self.asked = 0

    async def probe(self) -> None:
        self.asked += 1
        if not self.back.is_set():
            raise ConnectionRefusedError("refused")


async def until(condition) -> None:
    await waiting.until(condition, 30.0, lambda: "the outage's lines, as captured")


def said(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == outage.log.name and text in r.getMessage()]


async def test_an_outage_is_said_once_then_every_interval_then_once_back(caplog):
    caplog.set_level(logging.INFO, logger=outage.log.name)
    broker = Broker()
    record = outage.attach("kafka", HOSTS, broker.probe, SETTINGS)
    try:
        assert record.describe() is None
        for attempt in range(500):  # a client retrying, as aiokafka does
            record.failed(f"Unable connect to node with id 1: refused ({attempt})")
        assert [r.levelname for r in said(caplog, "is unreachable")] == ["ERROR"]
        assert "kafka broker at kafka://127.0.0.1:1 is unreachable: Unable connect" in caplog.text
        assert "has been unreachable for" in (record.describe() or "")
        await until(lambda: len(said(caplog, "still unreachable after")) >= 2)
        assert broker.asked >= 2  # probed again and again meanwhile, with a growing wait
        broker.back.set()
        await until(lambda: said(caplog, "is reachable again after"))
        assert record.describe() is None and not record.down
        assert len(said(caplog, "is unreachable")) == 1 and len(said(caplog, "is reachable again")) == 1
    finally:
        outage.detach(record, broker.probe)


async def test_a_broker_back_within_the_interval_is_not_said_gone_again_at_once(caplog):
    caplog.set_level(logging.INFO, logger=outage.log.name)
    broker = Broker()
    broker.back.set()
    record = outage.attach("kafka", HOSTS, broker.probe, BusSettings(outage_report_interval_s=60))
    try:
        record.failed("refused")
        await until(lambda: not record.down)
        record.failed("refused again")  # a node of the cluster that comes and goes: the first outage said it
        await until(lambda: not record.down)
        assert len(said(caplog, "is unreachable")) == 1 and len(said(caplog, "is reachable again")) == 1
    finally:
        outage.detach(record, broker.probe)


def test_a_client_line_of_a_broker_no_bus_uses_passes_untouched():
    lines = ClientLines("kafka", kafka_lines.classify)
    record = logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "Unable connect to node with id %s: %s",
                               (1, "refused"), None)
    assert lines.filter(record)


def _aiokafka(template: str, *args, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.consumer.group_coordinator", level, __file__, 1, template, args, None)


@pytest.mark.parametrize(("record", "kind"), [
    (_aiokafka("Unable connect to node with id %s: %s", 1, OSError("refused")), Kind.FAILURE),
    (_aiokafka("Unable to update metadata from %s", [1]), Kind.FAILURE),
    (_aiokafka("Failed fetch messages from %s: %s", 1, kafka_lines.errors.NodeNotReadyError("not ready")),
     Kind.FAILURE),
    (_aiokafka("Failed fetch messages from %s: %s", 1, kafka_lines.errors.CorrelationIdError("mismatch")),
     Kind.FOLLOW_ON),
    (_aiokafka("Marking the coordinator dead (node %s)for group %s.", 1, "g", level=logging.WARNING), Kind.FOLLOW_ON),
    (_aiokafka("Heartbeat failed for group %s because it is rebalancing", "g", level=logging.WARNING), Kind.ROUTINE),
    (_aiokafka("Heartbeat failed: local member_id was not recognized; resetting and re-joining group",
               level=logging.WARNING), None),
])
def test_which_aiokafka_lines_are_the_outage(record, kind):
    assert kafka_lines.classify(record) is kind


@pytest.mark.parametrize(("text", "kind"), [
    ("[127.0.0.1:5 -> 127.0.0.1:6650] Failed to establish connection to 0.0.0.0:0: Connection refused", Kind.FAILURE),
    ("Lookup failed for persistent://public/default/embed, result BrokerMetadataError No available broker found.",
     Kind.FAILURE),
    ("[persistent://public/default/ragbus.changelog.graph, reader-1, 9]  Could not get connection while "
     "getLastMessageId -- Will try again in 736 ms", Kind.FAILURE),
    ("Error getting topic partitions metadata: TimeOut", Kind.FOLLOW_ON),
    ("Failed to create producer: TopicTerminated", None),
])
def test_which_pulsar_client_lines_are_the_outage(text, kind):
    record = logging.LogRecord("pulsar.client", logging.ERROR, __file__, 1, "%s (%s)", (text, "X:1"), None)
    assert pulsar_lines.classify(record) is kind


async def test_lines_of_an_outage_are_held_and_a_rebalance_is_routine():
    broker = Broker()
    record = outage.attach("kafka", HOSTS, broker.probe, SETTINGS)
    lines = ClientLines("kafka", kafka_lines.classify)
    try:
        follow_on = _aiokafka("Marking the coordinator dead (node %s)for group %s.", 1, "a", level=logging.WARNING)
        assert lines.filter(follow_on)  # reachable: a coordinator that moved is worth a line...
        again = _aiokafka("Marking the coordinator dead (node %s)for group %s.", 1, "b", level=logging.WARNING)
        assert not lines.filter(again)  # ...once per interval, whichever group it names
        assert not lines.filter(_aiokafka("Unable connect to node with id %s: %s", 1, OSError("refused")))
        assert record.down
        await asyncio.sleep(SETTINGS.outage_report_interval_s)
        assert not lines.filter(again)  # held while the broker is away, whatever the interval
        rebalancing = _aiokafka("Heartbeat failed for group %s because it is rebalancing", "g", level=logging.WARNING)
        logging.getLogger(rebalancing.name).setLevel(logging.INFO)
        try:
            assert lines.filter(rebalancing) and rebalancing.levelno == logging.INFO
        finally:
            logging.getLogger(rebalancing.name).setLevel(logging.NOTSET)
        assert not lines.filter(_aiokafka("Heartbeat failed for group %s because it is rebalancing", "g",
                                          level=logging.WARNING))  # INFO is not on: dropped
    finally:
        outage.detach(record, broker.probe)
