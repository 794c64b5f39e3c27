"""Metrics: counters and histograms, served in Prometheus text format by a worker."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import urllib.error
import urllib.request

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime import metrics
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.worker import run_workers
from ragbus.testing.brokers import free_port
from ragbus.schema import EmbedRequest

from ..helpers.echo import EchoRequest, EchoResponse
from .workers import REPO, write_config


async def test_worker_serves_prometheus_metrics_that_count_its_requests(topic, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ragbus.runtime.worker")
    port = free_port()
    config = write_config(tmp_path / "m.toml", topic, metrics_port=port)
    settings = load_settings(config, environ={})
    url = f"memory://{topic}"
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.ensure_future(
        run_workers(settings, ["echo"], bus_url=url, stop=stop, handle_signals=False, on_ready=ready.set)
    )
    await asyncio.wait_for(ready.wait(), 10)
    # Where metrics are served is news, not a warning: logged at INFO (shown with -v).
    banner = [r for r in caplog.records if "metrics on" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in banner] == [(logging.INFO, f"metrics on http://127.0.0.1:{port}/metrics")]
    bus = await connect(url)
    async with RequestClient(bus) as client:
        for i in range(3):
            await client.request(topic, EchoRequest(text=str(i)), EchoResponse, timeout=10)
        await client.request(topic, EchoRequest(text="x", fail="bad"), EchoResponse, timeout=10)
        await client.request(topic, EmbedRequest(texts=["not an echo request"]), EchoResponse, timeout=10)
    body = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    )
    stop.set()
    stats = (await worker)["echo"]
    await bus.close()
    assert stats.acked == 5
    lines = dict(line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#"))
    assert float(lines['ragbus_requests_total{processor="echo"}']) >= 4
    assert float(lines['ragbus_errors_total{processor="echo",type="RuntimeError"}']) >= 1
    # The caller's mistake is counted apart from the processor's failures.
    assert float(lines['ragbus_bad_requests_total{processor="echo",type="ValidationError"}']) >= 1
    assert 'ragbus_errors_total{processor="echo",type="ValidationError"}' not in lines
    assert float(lines['ragbus_request_seconds_count{processor="echo"}']) >= 4
    assert f'ragbus_client_requests_total{{topic="{topic}"}}' in lines
    assert "ragbus_client_late_responses_total" in lines
    assert "ragbus_expired_total" in body and "ragbus_timeouts_total" in body and "ragbus_dead_lettered_total" in body


async def test_a_metrics_port_in_use_fails_naming_the_address_and_the_setting(topic, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "m.toml", topic, metrics_port=port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUS_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ragbus.cli", "worker", "echo", "--bus", f"memory://{topic}",
            "--config", str(config), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=dict(env, PYTHONPATH=str(REPO), RAGBUS_DATA_DIR=str(tmp_path)), cwd=REPO,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().splitlines()
    assert proc.returncode == 2, lines
    assert "ready" not in lines
    error = lines[-1]
    assert error.startswith("ragbus: error: ") and f"127.0.0.1:{port}" in error, error
    assert "Address already in use" in error and "[metrics] port" in error and "RAGBUS_METRICS__PORT" in error


async def _until(condition, what: str, timeout: float = 30.0) -> None:
    """Wait for ``condition()``, a state no one signals; fail naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, f"{what}: not within {timeout:g}s"
        await asyncio.sleep(0.02)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_the_metrics_port_answers_health_and_ready_probes(topic, tmp_path):
    port = free_port()
    settings = load_settings(write_config(tmp_path / "m.toml", topic, metrics_port=port), environ={})
    url = f"memory://{topic}"
    base = f"http://127.0.0.1:{port}"
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.ensure_future(
        run_workers(settings, ["echo"], bus_url=url, stop=stop, handle_signals=False, on_ready=ready.set)
    )
    await asyncio.wait_for(ready.wait(), 10)
    assert await asyncio.to_thread(_get, f"{base}/health") == (200, "ok\n")
    assert await asyncio.to_thread(_get, f"{base}/ready") == (200, "ok\n")
    assert "ragbus_requests_total" in (await asyncio.to_thread(_get, f"{base}/metrics"))[1]
    bus = await connect(url)
    async with RequestClient(bus) as client:
        # The handler sleeps long enough for the probes below to be asked while it runs, on any machine.
        slow = asyncio.ensure_future(client.request(topic, EchoRequest(text="s", delay_s=5), EchoResponse,
                                                    timeout=60))
        await _until(lambda: metrics.REGISTRY.get_sample_value(
            "ragbus_requests_in_progress", {"processor": "echo"}) == 1, "the request taken by its handler")
        stop.set()  # draining: the request in flight finishes, and probes are told to look elsewhere
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while (probed := await asyncio.to_thread(_get, f"{base}/ready")) != (503, "not ready\n"):
            assert loop.time() < end and not slow.done(), f"/ready still {probed} while draining"
            await asyncio.sleep(0.02)
        assert (await asyncio.to_thread(_get, f"{base}/health"))[0] == 200
        assert not slow.done()  # all of that while the request was still in flight
        assert (await slow).text == "s"
    await worker
    await bus.close()


async def test_ready_is_503_until_the_worker_says_so():
    port = free_port()
    readiness = metrics.Readiness()
    server = metrics.serve_metrics(port, readiness=readiness)
    try:
        assert await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/ready") == (503, "not ready\n")
        readiness.ready = True
        assert await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/ready") == (200, "ok\n")
    finally:
        server.shutdown()
        server.server_close()
