"""``ragbus ask``/``ingest`` against a real broker where no worker runs: say so, and which topic.

On Kafka the broker can tell that no consumer group serves the topic, so the command ends
within seconds although ``--timeout`` allows an hour. These tests start a Kafka of their
own: on the session's broker earlier tests ran document-rag workers, whose groups would
make the topic look served. On Pulsar the command reads no subscriptions (no admin API is
used), so it waits out ``--timeout`` and then says which topic got no answer and asks
whether a worker is running on that bus.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Far beyond any run of this test: if the command returns at all, it did not wait this out.
PATIENCE = 300


def ragbus(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAGBUS_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=PATIENCE)


def test_ask_on_kafka_with_no_worker_ends_early_naming_the_topic(own_kafka_broker, tmp_path):
    run = ragbus("ask", "Who?", "--bus", own_kafka_broker.url, "--timeout", "3600", data_dir=tmp_path / "data")
    assert run.returncode == 2, run.stderr
    assert f"ragbus: error: no worker consumes 'document-rag' on {own_kafka_broker.url}" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1


def test_ingest_on_kafka_with_no_worker_ends_early_naming_the_topic(own_kafka_broker, tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("Nothing will chunk this.")
    run = ragbus("ingest", str(doc), "--bus", own_kafka_broker.url, "--timeout", "3600", data_dir=tmp_path / "data")
    assert run.returncode == 1, run.stderr
    assert f"failed: {doc}: no worker consumes 'document-load' on {own_kafka_broker.url}" in run.stderr, run.stderr


@pytest.mark.parametrize("command", [["ask", "Who?"], ["kg", "query", "Germany"]])
def test_on_pulsar_which_cannot_tell_the_time_out_names_the_topic_and_asks_about_a_worker(
    pulsar_broker, tmp_path, command
):
    run = ragbus(*command, "--bus", pulsar_broker.url, "--timeout", "2", data_dir=tmp_path / "data")
    topic = "document-rag" if command[0] == "ask" else "kg-query"
    assert run.returncode == 2, run.stderr
    assert f"ragbus: error: no response on '{topic}'" in run.stderr, run.stderr
    assert f"within 2s: is a worker serving '{topic}' running on {pulsar_broker.url}?" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1
