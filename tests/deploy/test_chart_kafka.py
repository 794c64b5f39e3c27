"""On a live Apache Kafka, the workers the chart starts join exactly the groups its ScaledObjects name.

The chart is rendered for a broker of this test's own; an ingestion host and then a query host are started
as the chart starts them (``ragbus worker --role ingest|query`` with the role's settings file from the
ConfigMap, so with every store on the log), each with a data dir of its own. The broker's own list of
consumer groups, with each group's members and the topics they read, is then compared with the rendered
ScaledObjects' triggers: the ingestion host's groups are the ones that had members once it was ready, the
query host's the ones that gained a member when it joined. The probes the chart points at (/health and
/ready on the metrics port) are asked too.
"""

from __future__ import annotations

import os

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from processors.bus.kafka.groups import RETRY_INFIX, member_topics
from processors.testing import brokers, selection
from processors.testing.chaos import WorkerProcess

from ..helpers import chart


async def joined(admin: AIOKafkaAdminClient) -> dict[str, tuple[int, set[tuple[str, str]]]]:
    """Every consumer group the broker lists with a member: its members, and (topic, group) of each request
    topic they read (a group's retry topic, <topic>.retry.<group>, is its own and not scaled on)."""
    found = {}
    for group, protocol, *_ in await admin.list_consumer_groups():
        if protocol != "consumer":
            continue
        for response in await admin.describe_consumer_groups([group]):
            for described in response.to_object()["groups"]:
                members = described["members"]
                if described["error_code"] or not members:
                    continue
                topics = set().union(*(member_topics(m) or set() for m in members))
                retries = {t for t in topics if RETRY_INFIX in t}
                requests = topics - retries
                assert retries == {f"{t}{RETRY_INFIX}{group}" for t in requests}, (group, topics)
                found[group] = (len(members), {(t, group) for t in requests})
    return found


async def probes_answer(port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for path in ("/health", "/ready"):
            answer = await http.get(path)
            assert answer.status_code == 200, (path, answer.status_code, answer.text)


@pytest.mark.timeout(900)
async def test_the_workers_join_the_groups_the_scaled_objects_name(own_kafka_broker, tmp_path):
    if selection.choice("kafka") != "apache":
        pytest.skip("Tansu lists only groups that committed offsets: run on Apache Kafka")
    tools = chart.tools()
    bootstrap = own_kafka_broker.url.split("://", 1)[1]
    objects = chart.render(tools, chart.with_keys({"bus": {"kafka": {"bootstrapServers": bootstrap}}}))
    hosts, ports = {}, {}
    for role in chart.WORKER_ROLES:
        config = tmp_path / f"{role}.toml"
        config.write_text(chart.role_settings_text(objects, role))
        ports[role] = brokers.free_port()
        env = {**os.environ, **selection.broker_env(["kafka"]), "RAGBUS_CONFIG": str(config),
               "RAGBUS_DATA_DIR": str(tmp_path / role),  # the pod's own data dir
               # the chart's [metrics] port is one per pod; two hosts on one machine need two
               "RAGBUS_METRICS__PORT": str(ports[role]), "RAGBUS_METRICS__HOST": "127.0.0.1"}
        hosts[role] = WorkerProcess(["--role", role], own_kafka_broker.url, env)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await hosts["ingest"].start(timeout=600)
        await probes_answer(ports["ingest"])
        with_ingest = await joined(admin)
        await hosts["query"].start(timeout=600)
        await probes_answer(ports["query"])
        with_both = await joined(admin)
    finally:
        for host in hosts.values():
            await host.stop()
        await admin.close()
    ingest_lanes = set().union(*(lanes for _, lanes in with_ingest.values()))
    query_lanes = set().union(*(lanes for group, (members, lanes) in with_both.items()
                                if members > with_ingest.get(group, (0, set()))[0]))
    assert ingest_lanes and query_lanes
    assert set(with_both) == set(with_ingest) | {group for _, group in query_lanes}, "a group with no lane"
    assert set(chart.trigger_lanes(objects, "query")) == query_lanes
    assert set(chart.trigger_lanes(objects, "ingest")) == ingest_lanes - query_lanes
    for role in chart.WORKER_ROLES:
        for trigger in chart.trigger_lanes(objects, role).values():
            assert trigger["metadata"]["bootstrapServers"] == bootstrap
