"""``ragbus status`` while the only embed worker is stopped: no member, and what waits grows.

On Kafka and Pulsar the command runs as a user runs it, against a broker of
the test's own (the session's brokers hold groups and backlogs of other
tests). On memory the bus lives in one process, so the test asks the same
code in-process.

Two broker quirks shape the Kafka and Pulsar runs, neither a production one:
- Tansu keeps listing a lone member that left its group in the group's first
  generation (aiokafka sends LeaveGroup only from generation 1 on), so the
  test has a second member join and leave while the worker runs, as a second
  replica would; from then on the worker's leaving is seen at once.
- Pulsar Lite publishes its subscription gauges (``[metrics]``, read through
  ``[bus.pulsar] metrics_url``) every few seconds, so the test polls.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pytest

from ragbus.config.bus import PulsarOptions
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.runtime.pipeline_status import statuses
from ragbus.runtime.envelope import request_headers
from ragbus.runtime.worker import processors_running
from ragbus.testing import brokers, selection
from ragbus.schema import REPLY_PREFIX, EmbedRequest, encode
from ragbus.schema import topics as t

from ..helpers.brokers import own_broker, settings_for_tests

REPO = Path(__file__).resolve().parents[2]
PATIENCE = 60.0  # Pulsar Lite refreshes its gauges every few seconds; a poll gives up after this


def ragbus_status(url: str, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "ragbus.cli", "status", "--bus", url, "--processors", t.EMBED, "--json"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO), **env), cwd=REPO, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {(r["topic"], r["group"]): r for r in json.loads(done.stdout)["topics"]}
    assert set(rows) == {(t.EMBED, t.EMBED), (t.EMBED_BULK, "embed-bulk")}  # the processor's two lanes
    return rows[t.EMBED, t.EMBED]


async def until(ask, accept, what: str) -> dict:
    """Ask for the embed row until ``accept(row)``; fail naming ``what`` and the last row."""
    loop = asyncio.get_running_loop()
    end = loop.time() + PATIENCE
    while True:
        row = await ask()
        if accept(row):
            return row
        assert loop.time() < end, f"{what}: not within {PATIENCE}s, last {row}"
        await asyncio.sleep(0.5)


async def requests(bus, count: int) -> None:
    for _ in range(count):
        headers = request_headers(request_id=uuid.uuid4().hex, reply_to=f"{REPLY_PREFIX}status-test", timeout_s=None)
        await bus.publish(t.EMBED, encode(EmbedRequest(texts=["waiting"])), headers)


async def stop_the_only_worker_and_watch(url: str, bus_settings, ask, *, second_member: bool) -> list[dict]:
    settings = load_settings(environ={})
    settings.bus = bus_settings
    seen = []
    async with await connect(url, bus_settings) as bus:
        async with processors_running(settings, [t.EMBED], url, ready_timeout=120):
            if second_member:  # a replica that comes and goes: the group leaves its first generation
                replica = await bus.subscribe(t.EMBED, t.EMBED)
                await replica.close()
            seen.append(await until(ask, lambda r: r["members"] == 1 and r["waiting"] == 0, "one member, idle"))
        seen.append(await until(ask, lambda r: r["members"] == 0, "no member once the worker stopped"))
        await requests(bus, 3)
        seen.append(await until(ask, lambda r: r["waiting"] == 3, "three waiting"))
        await requests(bus, 2)
        seen.append(await until(ask, lambda r: r["waiting"] == 5, "five waiting"))
    assert all(r["members"] == 0 for r in seen[1:])
    return seen


async def test_memory_status_shows_no_member_and_the_backlog_growing():
    name = f"status-{uuid.uuid4().hex[:8]}"
    url = f"memory://{name}"
    try:
        async with await connect(url, settings_for_tests()) as reader:
            async def ask():
                [row] = (await statuses(reader, [(t.EMBED, t.EMBED, t.EMBED)])).topics
                return msgspec.to_builtins(row)

            seen = await stop_the_only_worker_and_watch(url, settings_for_tests(), ask, second_member=False)
    finally:
        drop_memory_broker(name)
    assert seen[2]["oldest_s"] is not None and seen[3]["oldest_s"] >= seen[2]["oldest_s"]
    assert [r["dead_letters"] for r in seen] == [0, 0, 0, 0]


async def test_kafka_status_shows_no_member_and_the_lag_growing(own_kafka_broker):
    async def ask():
        return await asyncio.to_thread(ragbus_status, own_kafka_broker.url, {})

    seen = await stop_the_only_worker_and_watch(own_kafka_broker.url, settings_for_tests(), ask, second_member=True)
    backlog = seen[3]
    assert sum(backlog["lag"].values()) == 5 and all(n >= 0 for n in backlog["lag"].values())
    assert set(backlog["lag"]) >= {f"{t.EMBED}:{p}" for p in range(4)}  # every partition of the request topic
    assert seen[2]["oldest_s"] is not None and backlog["oldest_s"] >= seen[2]["oldest_s"]


@pytest.fixture
def own_pulsar(tmp_path):
    """A Pulsar publishing its gauges: Apache Pulsar's web service, or a Pulsar Lite told to (it reads
    pulsar-lite.toml from its working directory)."""
    if selection.choice("pulsar") == "light":
        metrics = f"127.0.0.1:{brokers.free_port()}"
        (tmp_path / "pulsar-lite.toml").write_text(f'[metrics]\nenabled = true\naddr = "{metrics}"\n')
        broker = own_broker("pulsar", tmp_path)
        yield broker, f"http://{metrics}/metrics"
    else:  # its gauges refreshed every 2 s, not Pulsar's 60, so the test sees the backlog grow
        broker = own_broker("pulsar", tmp_path, stats_interval_s=2)
        yield broker, broker.metrics_url
    broker.stop()


async def test_pulsar_status_shows_no_member_and_the_backlog_growing(own_pulsar):
    broker, metrics_url = own_pulsar
    base = settings_for_tests()
    bus_settings = msgspec.structs.replace(
        base, pulsar=msgspec.structs.replace(base.pulsar, metrics_url=metrics_url)
    )
    assert isinstance(bus_settings.pulsar, PulsarOptions)

    async def ask():
        return await asyncio.to_thread(ragbus_status, broker.url, {"RAGBUS_BUS__PULSAR__METRICS_URL": metrics_url})

    seen = await stop_the_only_worker_and_watch(broker.url, bus_settings, ask, second_member=False)
    assert seen[3]["lag"] is None and seen[3]["oldest_s"] is None  # a subscription's gauges say neither


async def test_pulsar_status_without_metrics_says_it_cannot_tell(pulsar_broker):
    row = await asyncio.to_thread(ragbus_status, pulsar_broker.url, {})
    assert (row["members"], row["waiting"], row["lag"], row["oldest_s"]) == (None, None, None, None)


def test_pulsar_gauges_are_read_as_pulsar_lite_and_pulsar_label_them():
    from ragbus.bus.pulsar.stats import parse

    text = "\n".join([
        "# TYPE pulsar_subscription_back_log gauge",
        'pulsar_subscription_back_log{namespace="public/default",subscription="embed",topic="embed"} 7',
        'pulsar_subscription_back_log{namespace="public/default",subscription="kg",'
        'topic="persistent://public/default/kg-query"} 2',
        'pulsar_subscription_back_log{namespace="other/ns",subscription="embed",topic="persistent://other/ns/embed"} 9',
        "# TYPE pulsar_subscription_consumers_count gauge",
        'pulsar_subscription_consumers_count{namespace="public/default",subscription="embed",topic="embed"} 0',
        "# TYPE pulsar_in_messages_total gauge",
        'pulsar_in_messages_total{namespace="public/default",topic="embed.dlq"} 3',
    ])
    stats = parse(text + "\n", "public/default")
    embed = stats.of("embed", "embed")
    assert embed is not None and (embed.backlog, embed.consumers) == (7, 0)
    assert stats.of("kg-query", "kg").backlog == 2 and stats.of("kg-query", "kg").consumers is None
    assert stats.topics == {"embed", "kg-query", "embed.dlq"}  # not the other namespace's


def test_on_the_embedded_bus_status_says_the_bus_is_its_own():
    """An empty table on memory:// is the command's own bus, not the deployment's: it says so, naming --bus."""
    done = subprocess.run([sys.executable, "-m", "ragbus.cli", "status", "--processors", t.EMBED],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO), RAGBUS_BUS__URL="memory://"))
    assert done.returncode == 0 and done.stdout.startswith("TOPIC"), done.stderr
    assert done.stderr.startswith("ragbus status: warning: memory:// is a bus private to this process"), done.stderr
    assert "--bus" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", [["status"], ["dlq"], ["dlq", "list"], ["dlq", "redrive"]])
def test_the_commands_explain_themselves(command):
    done = subprocess.run([sys.executable, "-m", "ragbus.cli", *command, "--help"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: ragbus {' '.join(command)}"), done.stderr
