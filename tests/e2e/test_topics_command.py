"""``ragbus topics create|describe`` against a real Kafka (Tansu) of the test's own (``own_kafka_broker``),
checked with a bare admin client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from ragbus.config.settings import load_settings

pytestmark = pytest.mark.brokers

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
[bus.kafka.request_topics]
partitions = 3
[bus.kafka.dead_letter_topics]
partitions = 2
retention_ms = 172800000
"""


def ragbus(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAGBUS_DATA_DIR=str(cwd / "data"))
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)


async def broker_view(url: str, create: list[NewTopic] = ()) -> dict[str, tuple[int, str | None]]:
    """topic -> (partitions, retention.ms) as a bare aiokafka admin client sees them; creates ``create`` first."""
    admin = AIOKafkaAdminClient(bootstrap_servers=url.removeprefix("kafka://"))
    await admin.start()
    try:
        if create:
            await admin.create_topics(list(create))
        topics = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics() if not t["is_internal"]}
        configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
        retention = {
            r["resource_name"]: next((e["config_value"] for e in r["config_entries"]
                                      if e["config_names"] == "retention.ms"), None)
            for response in configs for r in response.to_object()["resources"]
        }
        return {t: (n, retention.get(t)) for t, n in topics.items()}
    finally:
        await admin.close()


def test_create_makes_every_wiring_topic_with_its_class_layout_and_describe_agrees(own_kafka_broker, tmp_path):
    config = tmp_path / "topics.toml"
    config.write_text(CONFIG)
    url = own_kafka_broker.url
    # An operator's own topic with another layout: left as it is, and flagged.
    asyncio.run(broker_view(url, [NewTopic("embed", 1, 1)]))

    sections = load_settings(environ={}).processors
    lanes = sum(1 + bool(s.get("bulk_topic")) for s in sections.values())  # a processor's topic, and its bulk lane's
    wiring = 3 * lanes  # each lane's topic, its retry and its .dlq
    before = ragbus("topics", "describe", "--bus", url, "--config", str(config), cwd=tmp_path)
    assert before.returncode == 1, before.stderr
    assert f"missing {wiring - 1} topic(s)" in before.stdout and "document-rag.retry.document-rag" in before.stdout
    assert "embed-bulk.retry.embed-bulk" in before.stdout

    created = ragbus("topics", "create", "--bus", url, "--config", str(config), "--json", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    report = {row["topic"]: row for row in json.loads(created.stdout)["topics"]}
    assert len(report) == wiring and json.loads(created.stdout)["missing"] == []
    assert report["embed"]["status"] == "exists, settings say 3 partitions"
    assert report["prompt"]["status"] == "created"

    seen = asyncio.run(broker_view(url))
    for topic in report:
        partitions, retention = seen[topic]
        if topic.endswith(".dlq"):
            assert (partitions, retention) == (2, "172800000"), topic
        elif ".retry." in topic:
            assert partitions == 1, topic
        elif topic != "embed":
            assert partitions == 3, topic
    assert seen["embed"][0] == 1  # not changed under its owner
    assert seen["triples-load"][0] == 3 and "triples-load.retry.kg-store" in seen  # kg-store's own topic and group

    again = ragbus("topics", "create", "--bus", url, "--config", str(config), "--processors", "prompt", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0].split() == ["TOPIC", "KIND", "PARTITIONS", "REPLICATION", "RETENTION", "STATUS"]
    assert [line.split()[0] for line in lines[1:]] == ["prompt", "prompt.dlq", "prompt.retry.prompt"]
    assert all(line.split()[-1] == "exists" for line in lines[1:])
    assert lines[2].split()[1:5] == ["dead-letter", "2", "1", "2d"]


def test_topics_on_buses_without_topic_administration_say_why(pulsar_broker, tmp_path):
    for url, why in (("memory://", "need no provisioning"), (pulsar_broker.url, "pulsar-admin")):
        run = ragbus("topics", "create", "--bus", url, cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert run.stderr.startswith("ragbus: error: ") and why in run.stderr, run.stderr
        assert len(run.stderr.splitlines()) == 1


def test_unknown_processor_is_refused_by_name(tmp_path, own_kafka_broker):
    run = ragbus("topics", "describe", "--bus", own_kafka_broker.url, "--processors", "embed,nope", cwd=tmp_path)
    assert run.returncode == 2 and "no processor named nope in the wiring" in run.stderr, run.stderr
