"""``ragbus serve`` told to stop the way Kubernetes tells a pod: SIGTERM, while a load balancer still sends.

With ``[gateway] shutdown_delay_s`` set, SIGTERM turns ``/ready`` to 503 at once and the gateway keeps
answering for the delay, so the Service's endpoints drop it before its listener closes; SIGINT ends
the delay. Either way the process closes its pipeline and exits 0, not killed by its own signal.
"""

from __future__ import annotations

import signal

import httpx
import pytest

from ragbus.testing.gateway import GatewayProcess

from ..helpers.serve_stores import stores

QUESTION = "How does a context manager wrap a block of code?"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return stores(tmp_path_factory)


def test_sigterm_turns_ready_off_while_questions_are_still_answered_and_sigint_ends_the_delay(data_dir, tmp_path):
    # A delay no machine outlasts: the test ends it with SIGINT once it has seen what it holds.
    env = {"RAGBUS_DATA_DIR": str(data_dir), "RAGBUS_GATEWAY__SHUTDOWN_DELAY_S": "600"}
    gateway = GatewayProcess(env=env, log_path=tmp_path / "serve.log").start()
    proc = gateway.process
    assert proc is not None
    try:
        proc.send_signal(signal.SIGTERM)
        with httpx.Client(base_url=gateway.url, timeout=120) as http:
            ready = http.get("/ready")
            assert ready.status_code == 503 and ready.json()["status"] == "stopping", ready.text
            assert http.get("/health").status_code == 200
            answer = http.post("/v1/ask", json={"question": QUESTION})
            assert answer.status_code == 200 and answer.json()["cited"], answer.text
        assert proc.poll() is None  # still serving: the delay holds
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, gateway.log_tail()
    finally:
        gateway.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{gateway.url}/health", timeout=5)


def test_sigterm_without_a_delay_closes_the_pipeline_and_exits_0(data_dir, tmp_path):
    gateway = GatewayProcess(env={"RAGBUS_DATA_DIR": str(data_dir)}, log_path=tmp_path / "serve.log").start()
    proc = gateway.process
    assert proc is not None
    try:
        assert httpx.post(f"{gateway.url}/v1/ask", json={"question": QUESTION}, timeout=120).status_code == 200
        proc.send_signal(signal.SIGTERM)
        # -15 was uvicorn raising SIGTERM again once its server was down: the pipeline never closed.
        assert proc.wait(timeout=120) == 0, gateway.log_tail()
    finally:
        gateway.stop()
