"""A broker that goes away is said in a few lines, not thousands; the gateway blames it, not a worker.

A real ``ragbus worker --all`` runs on a broker of the test's own; the broker is stopped, kept down a
while, and started again on its ports and data. Before, aiokafka logged about 1,300 ERROR lines a
second (pulsar-client about 8). Now: one line that the broker is unreachable, one every
``outage_report_interval_s`` while it stays away, one when it is back. The waits are for lines to
appear, with wide deadlines; what is counted is bounded by the time that passed, so a loaded
machine cannot turn the verdict.

On Kafka, a worker joining groups another worker serves makes every member of those groups learn of
the rebalance from its heartbeat: normal work, which aiokafka logged as a warning per group.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from ragbus.config import pipelines
from ragbus.testing.chaos import worker_env
from ragbus.testing.gateway import GatewayProcess
from ragbus.testing.processes import stop_process

from ..helpers.brokers import own_broker

REPORT_S = 3.0  # [bus] outage_report_interval_s in these tests (60 by default)
DOWN_S = 12.0  # how long the broker stays down once the worker has said it is unreachable
PATIENCE_S = 240.0  # for anything to happen at all, on a loaded machine
OUTAGE_ENV = {"RAGBUS_BUS__OUTAGE_REPORT_INTERVAL_S": str(REPORT_S), "RAGBUS_BUS__OUTAGE_PROBE_MAX_S": "1"}
HANDFUL = 10  # lines besides the outage's own a broker going and coming back may cost


class LoggedWorker:
    """``ragbus worker NAMES --bus URL`` with its whole stderr in a file: every line counts here."""

    def __init__(self, names: list[str], url: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "ragbus.cli", "worker", *names, "--bus", url],
                                         env=env, stdout=subprocess.DEVNULL, stderr=out, start_new_session=True)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def wait_for(self, found, what: str, timeout: float = PATIENCE_S) -> list[str]:
        """The log's lines once ``found(lines)`` holds; fails after ``timeout`` or if the worker exits."""
        deadline = time.monotonic() + timeout
        while not found(lines := self.lines()):
            assert self.proc.poll() is None, f"worker exited ({self.proc.returncode}):\n" + "\n".join(lines[-30:])
            assert time.monotonic() < deadline, f"no {what} within {timeout:g}s:\n" + "\n".join(lines[-30:])
            time.sleep(0.2)  # a log file offers no event to wait on
        return lines

    def stop(self) -> None:
        stop_process(self.proc, timeout=60)


def _env(tmp_path: Path, broker, **extra: str) -> dict[str, str]:
    return worker_env(str(tmp_path / "data"), uuid.uuid4().hex[:8], {**broker.client_env, **OUTAGE_ENV, **extra})


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
def test_a_broker_that_goes_away_is_said_once_then_now_and_then_then_once_back(which, tmp_path):
    broker = own_broker(which, tmp_path)
    name = f"{which} broker at {broker.url}"
    unreachable, still, back = f"{name} is unreachable", f"{name} still unreachable after", f"{name} is reachable again"
    worker = LoggedWorker(["--all"], broker.url, _env(tmp_path, broker), tmp_path / "worker.log")
    try:
        before = len(worker.wait_for(lambda lines: "ready" in lines, "ready"))
        stopped = time.monotonic()
        broker.stop()
        # Said, or flooding already (as before): either way the count below tells.
        worker.wait_for(lambda lines: any(unreachable in line for line in lines) or len(lines) > before + 100,
                        "'unreachable' line")
        time.sleep(DOWN_S)  # wall time, whatever the worker did meanwhile
        down = worker.lines()[before:]
        down_for = time.monotonic() - stopped
        print(f"\n{which}: {len(down)} lines in {down_for:.0f}s down; the first: {down[:3]}")
        assert sum(unreachable in line for line in down) == 1, down[:20]
        assert next(line for line in down if unreachable in line).startswith("ERROR "), down[:20]
        # Once every REPORT_S while it lasts: at least one in the DOWN_S waited, at most one per REPORT_S down.
        assert 1 <= sum(still in line for line in down) <= down_for / REPORT_S + 1, down
        others = [line for line in down if unreachable not in line and still not in line]
        assert len(others) <= HANDFUL, f"{len(others)} other lines while the broker was down: {others[:20]}"
        restarted = time.monotonic()
        broker.start()
        worker.wait_for(lambda lines: any(back in line for line in lines[before + len(down):]), "'back' line")
        time.sleep(REPORT_S)  # what the clients say once they are back in, too
        after = worker.lines()[before + len(down):]
        print(f"{which}: {len(after)} lines from the restart to {REPORT_S:g}s after the 'back' line: {after}")
    finally:
        worker.stop()
        broker.stop()
    assert sum(back in line for line in after) == 1, after[:20]
    assert sum(still in line for line in after) <= (time.monotonic() - restarted) / REPORT_S + 1, after
    others = [line for line in after if still not in line and back not in line]
    assert len(others) <= HANDFUL, f"{len(others)} other lines once it was back: {others[:20]}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
def test_the_gateway_names_the_unreachable_broker_not_a_missing_worker(which, tmp_path):
    broker = own_broker(which, tmp_path)
    name = f"{which} broker at {broker.url}"
    env = _env(tmp_path, broker, RAGBUS_CLIENT__REQUEST_TIMEOUT_S="5")
    worker = LoggedWorker(["document-rag"], broker.url, env, tmp_path / "worker.log")
    gateway = GatewayProcess(broker.url, env=env, log_path=tmp_path / "serve.log", ready_timeout_s=PATIENCE_S)
    try:
        worker.wait_for(lambda lines: "ready" in lines, "ready")
        gateway.start()
        broker.stop()
        deadline = time.monotonic() + PATIENCE_S
        while True:  # until the gateway has found out; no event says so
            ready = httpx.get(f"{gateway.url}/ready", timeout=60)
            if ready.status_code == 503 and name in ready.json()["detail"]:
                break
            assert time.monotonic() < deadline, (ready.status_code, ready.text, gateway.log_tail())
            time.sleep(0.5)
        asked = httpx.post(f"{gateway.url}/v1/ask", json={"question": "What does the with statement do?"},
                           timeout=120)
        broker.start()
        gateway.wait_ready()  # and ready again once the broker is back
    finally:
        gateway.stop()
        worker.stop()
        broker.stop()
    detail = ready.json()["detail"]
    print(f"\n/ready: {ready.status_code} {detail}\n/v1/ask: {asked.status_code} {asked.text}")
    assert "unreachable" in detail and "worker" not in detail, detail
    assert asked.status_code == 504, asked.text
    message = asked.json()["error"]["message"]
    assert name in message and "unreachable" in message and "is a worker serving" not in message, message


@pytest.mark.timeout(600)
def test_a_worker_joining_groups_another_serves_logs_no_rebalance_warning(own_kafka_broker, tmp_path):
    env = worker_env(str(tmp_path / "data"), uuid.uuid4().hex[:8])
    first = LoggedWorker(list(pipelines.QUERY), own_kafka_broker.url, env, tmp_path / "first.log")
    second = None
    try:
        first.wait_for(lambda lines: "ready" in lines, "ready")
        second = LoggedWorker(list(pipelines.QUERY), own_kafka_broker.url, env, tmp_path / "second.log")
        # Ready once each of its consumers owns partitions: every group's rebalance is over, so each of the
        # first worker's members has heard of it (its heartbeat answered "rebalancing") and rejoined.
        second.wait_for(lambda lines: "ready" in lines, "ready")
        logs = {"first": first.lines(), "second": second.lines()}
    finally:
        for worker in (second, first):
            if worker is not None:
                worker.stop()
    for which, lines in logs.items():
        warned = [line for line in lines if line.startswith(("WARNING", "ERROR"))]
        assert not warned, f"the {which} worker: {warned}"
