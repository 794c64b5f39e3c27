"""On live Apache Kafka and Apache Pulsar, the workers the chart starts join exactly the groups its
ScaledObjects name.

The chart is rendered for a broker of the test's own; an ingestion host and then a query host are started
as the chart starts them (``ragbus worker --role ingest|query`` with the role's settings file from the
ConfigMap, so with every store on the log), each with a data dir of its own. The broker's own view of its
consumer groups (Kafka: the groups it lists, their members and the topics they read; Pulsar: each topic's
subscriptions with consumers, from its admin API, where KEDA reads backlogs) is then compared with the
rendered ScaledObjects' triggers: the ingestion host's groups are the ones that had members once it was
ready, the query host's the ones that gained a member when it joined. The probes the chart points at
(/health and /ready on the metrics port) are asked too.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from ragbus.bus.kafka.groups import RETRY_INFIX, member_topics
from ragbus.testing import brokers, selection
from ragbus.testing.chaos import WorkerProcess

from ..helpers import chart

# Each group with a member: how many, and (topic, group) of each request topic its members read.
Joined = dict[str, tuple[int, set[tuple[str, str]]]]


async def kafka_groups(admin: AIOKafkaAdminClient) -> Joined:
    """Every consumer group the broker lists with a member (a group's retry topic, <topic>.retry.<group>,
    is its own and not scaled on)."""
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


async def pulsar_subscriptions(admin: httpx.AsyncClient) -> Joined:
    """Every durable subscription with a consumer, of every topic of public/default, from the admin API.
    A caller's own topics (its reply inbox: subscription ``<topic>.listener``, processors/bus/base.py
    _listen) and the log readers (non-durable) are not consumer groups."""
    found: Joined = {}
    for full in (await admin.get("/admin/v2/persistent/public/default")).raise_for_status().json():
        topic = full.rsplit("/", 1)[1]
        answer = await admin.get(f"/admin/v2/persistent/public/default/{topic}/stats")
        if answer.status_code == 404:  # gone since it was listed (an idle reply inbox the broker deleted)
            continue
        stats = answer.raise_for_status().json()
        for name, sub in stats.get("subscriptions", {}).items():
            if sub.get("consumers") and sub.get("isDurable", True) and not name.endswith(".listener"):
                members, lanes = found.get(name, (0, set()))
                found[name] = (members + len(sub["consumers"]), lanes | {(topic, name)})
    return found


async def probes_answer(port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for path in ("/health", "/ready"):
            answer = await http.get(path)
            assert answer.status_code == 200, (path, answer.status_code, answer.text)


async def hosts_join(objects: list[dict], url: str, workdir: Path, bus: str,
                     joined: Callable[[], Awaitable[Joined]]) -> tuple[Joined, Joined]:
    """What the broker says is joined once an ingestion host is ready, and once a query host is too."""
    hosts, ports = {}, {}
    for role in chart.WORKER_ROLES:
        config = workdir / f"{role}.toml"
        config.write_text(chart.role_settings_text(objects, role))
        ports[role] = brokers.free_port()
        env = {**os.environ, **selection.broker_env([bus]), "RAGBUS_CONFIG": str(config),
               "RAGBUS_DATA_DIR": str(workdir / role),  # the pod's own data dir
               # the chart's [metrics] port is one per pod; two hosts on one machine need two
               "RAGBUS_METRICS__PORT": str(ports[role]), "RAGBUS_METRICS__HOST": "127.0.0.1"}
        hosts[role] = WorkerProcess(["--role", role], url, env)
    try:
        await hosts["ingest"].start(timeout=600)
        await probes_answer(ports["ingest"])
        with_ingest = await joined()
        await hosts["query"].start(timeout=600)
        await probes_answer(ports["query"])
        return with_ingest, await joined()
    finally:
        for host in hosts.values():
            await host.stop()


def compare(objects: list[dict], with_ingest: Joined, with_both: Joined) -> None:
    ingest_lanes = set().union(*(lanes for _, lanes in with_ingest.values()))
    query_lanes = set().union(*(lanes for group, (members, lanes) in with_both.items()
                                if members > with_ingest.get(group, (0, set()))[0]))
    assert ("document-load", "document-load") in ingest_lanes and ("document-rag", "document-rag") in query_lanes
    assert set(with_both) == set(with_ingest) | {group for _, group in query_lanes}, "a group with no lane"
    assert set(chart.trigger_lanes(objects, "query")) == query_lanes
    assert set(chart.trigger_lanes(objects, "ingest")) == ingest_lanes - query_lanes


@pytest.mark.timeout(900)
async def test_the_workers_join_the_kafka_groups_the_scaled_objects_name(own_kafka_broker, tmp_path):
    if selection.choice("kafka") != "apache":
        pytest.skip("Tansu lists only groups that committed offsets: run on Apache Kafka")
    tools = chart.tools()
    bootstrap = own_kafka_broker.url.split("://", 1)[1]
    objects = chart.render(tools, chart.with_keys({"bus": {"kafka": {"bootstrapServers": bootstrap}}}))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await hosts_join(objects, own_kafka_broker.url, tmp_path, "kafka", lambda: kafka_groups(admin))
    finally:
        await admin.close()
    compare(objects, *found)
    for role in chart.WORKER_ROLES:
        for trigger in chart.trigger_lanes(objects, role).values():
            assert trigger["metadata"]["bootstrapServers"] == bootstrap


@pytest.mark.timeout(900)
async def test_the_workers_join_the_pulsar_subscriptions_the_scaled_objects_name(own_pulsar_broker, tmp_path):
    if selection.choice("pulsar") != "apache":
        pytest.skip("Pulsar Lite has no admin API: run on Apache Pulsar")
    tools = chart.tools()
    admin_url = own_pulsar_broker.admin_url
    objects = chart.render(tools, chart.with_keys({"bus": {"kind": "pulsar", "pulsar": {
        "serviceUrl": own_pulsar_broker.url, "adminUrl": admin_url}}}))
    async with httpx.AsyncClient(base_url=admin_url, timeout=30) as admin:
        found = await hosts_join(objects, own_pulsar_broker.url, tmp_path, "pulsar",
                                 lambda: pulsar_subscriptions(admin))
    compare(objects, *found)
    for role in chart.WORKER_ROLES:
        for trigger in chart.trigger_lanes(objects, role).values():
            assert trigger["metadata"]["adminURL"] == admin_url
            assert trigger["metadata"]["topic"].startswith("persistent://public/default/")
