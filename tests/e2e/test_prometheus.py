"""A real Prometheus scrapes two real workers: request rate, error rate and latency quantiles by processor.

Debian's ``prometheus`` (installed by .ci/run) runs on loopback with a 1 s scrape interval and the
shipped alert rules; two ``ragbus worker`` processes serve every query processor on Kafka, each with
a metrics port. Questions are asked (a few with a deadline too short to meet, which is how real
errors look), then Prometheus's HTTP API is asked what it saw. Every query of the shipped dashboard
is run too. Run with ``-s`` to see the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.bus import connect
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.runtime.typed_clients import DocumentRagClient, RemoteError
from ragbus.testing.brokers import free_port
from ragbus.testing.chaos import QueryLoad, WorkerProcess, worker_env
from ragbus.testing.processes import stop_process

from ..helpers.brokers import settings_for_tests
from ..helpers.monitoring import MONITORING, as_promql, panel_exprs, tool
from ..helpers.rag_pipeline import DOCS

QUESTIONS = [
    "How does a context manager wrap a block of code?", "__slots__", "What does the else clause of a for loop do?",
    "Who was head of government of the United Kingdom?", "When is __exit__ called?",
]
WINDOW = "1m"


@contextlib.contextmanager
def prometheus(tmp_path: Path, targets: list[str]):
    """A Prometheus server on loopback scraping ``targets`` every second, with config/monitoring/rules.yml."""
    binary = tool("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "rules.yml")],
        "scrape_configs": [{"job_name": "ragbus", "static_configs": [{"targets": targets}]}],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout=30)
        log.close()


async def until(check, what: str, timeout: float = 60.0):
    """Ask ``check`` until it returns something true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        await asyncio.sleep(0.5)  # Prometheus scrapes every second: there is nothing to await but its next scrape


async def query(http: httpx.AsyncClient, promql: str) -> list[dict]:
    r = await http.get("/api/v1/query", params={"query": promql})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (promql, body)
    return body["data"]["result"]


def by(result: list[dict], label: str) -> dict[str, float]:
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in result}


@pytest.mark.brokers
@pytest.mark.timeout(600)
async def test_prometheus_scrapes_two_workers_and_answers_rates_errors_and_quantiles(
    kafka_broker, tmp_path, monkeypatch
):
    tool("prometheus")
    url = kafka_broker.url
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    collection = f"prom-{uuid.uuid4().hex[:8]}"
    await build_stores(str(tmp_path), collection, [msgspec.structs.replace(d, collection=collection) for d in DOCS])
    ports = [free_port(), free_port()]
    suffix = uuid.uuid4().hex[:8]
    workers = []
    try:
        for port in ports:
            env = worker_env(str(tmp_path), suffix, {"RAGBUS_METRICS__PORT": str(port)})
            workers.append(WorkerProcess(pipelines.QUERY, url, env))
        await asyncio.gather(*(w.start() for w in workers))
        with prometheus(tmp_path, [f"127.0.0.1:{p}" for p in ports]) as api:
            async with httpx.AsyncClient(base_url=api, timeout=10) as http:
                async def ready():
                    with contextlib.suppress(httpx.TransportError):
                        return (await http.get("/-/ready")).status_code == 200  # 503 while it starts

                await until(ready, "Prometheus ready", 60)

                async def both_up():
                    return by(await query(http, 'sum(up{job="ragbus"})'), "").get("") == 2

                await until(both_up, "Prometheus scraping both workers", 60)
                report, short = await ask_questions(url, collection)
                sent = report.sent + short

                async def all_scraped():
                    seen = by(await query(http, 'sum(ragbus_requests_total{processor="document-rag"})'), "")
                    return seen.get("", 0) >= sent

                await until(all_scraped, f"Prometheus seeing all {sent} questions", 60)
                results = await ask_prometheus(http)
                dashboard = {title: await query(http, as_promql(expr)) for title, expr in panel_exprs()}
                rules = (await http.get("/api/v1/rules")).json()["data"]["groups"]
    finally:
        for w in workers:
            await w.stop()
    print(f"\nquestions: {report.line()}; {short} more with a deadline of 2 to 10 ms")
    for name, result in results.items():
        print(f"{name}:")
        for s in sorted(result, key=lambda s: sorted(s["metric"].items())):
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()))
            print(f"  {{{labels}}} {float(s['value'][1]):.4g}")

    assert report.answered + report.degraded >= report.sent * 0.9, report.line()
    rates = by(results["request rate"], "processor")
    assert set(pipelines.QUERY) <= set(rates), rates
    assert all(rates[p] > 0 for p in ("document-rag", "embed", "keyword-query", "kg-query", "prompt")), rates
    # Each query processor has a replica in both workers, and Prometheus sees both.
    replicas = by(results["replicas"], "processor")
    assert all(replicas[p] == 2 for p in pipelines.QUERY), replicas
    # The questions cut off by their deadline show as errors (Timeout) or as expired requests of document-rag.
    failed = by(results["error rate"], "processor").get("document-rag", 0) + \
        by(results["expired rate"], "processor").get("document-rag", 0)
    assert failed > 0, results
    assert 0 <= by(results["error ratio"], "processor").get("document-rag", 0) < 0.5
    p50, p99 = by(results["p50"], "processor"), by(results["p99"], "processor")
    for p in ("document-rag", "embed", "prompt"):
        assert 0 < p50[p] <= p99[p] < 30, (p, p50.get(p), p99.get(p))
    assert p50["document-rag"] > p50["prompt"]  # the orchestrator waits for the others
    # Every panel of the dashboard is a query Prometheus answers; nearly all have data from this run.
    empty = [title for title, result in dashboard.items() if not result]
    assert len(empty) <= 3, empty
    # The shipped alert rules load and evaluate without error.
    health = {r["name"]: r["health"] for g in rules for r in g["rules"]}
    assert len(health) == 8 and set(health.values()) == {"ok"}, health


async def ask_questions(url: str, collection: str):
    async with await connect(url, settings_for_tests()) as bus, RequestClient(bus, name="prom") as client:
        load = QueryLoad(client, QUESTIONS, total=60, concurrency=6, timeout=60, collection=collection)
        report = await load.run()
        short = 0
        # Some expire unhandled, some are cut off mid-way: every one is shorter than a hybrid query takes
        # even uncontended (its embedding and searches alone take over 10 ms here, whatever the broker).
        for deadline in (0.002, 0.004, 0.006, 0.008, 0.010) * 2:
            short += 1
            rag = DocumentRagClient(client, timeout=deadline)
            with contextlib.suppress(RequestTimeout, RemoteError):
                await rag.ask(QUESTIONS[short % len(QUESTIONS)], mode="hybrid", collection=collection)
        # The cut-off questions' sub-requests may still be in flight: wait for them to settle.
        await asyncio.sleep(1.0)
    return report, short


async def ask_prometheus(http: httpx.AsyncClient) -> dict[str, list[dict]]:
    sel = '{job="ragbus"}'
    queries = {
        "request rate": f"sum by (processor) (rate(ragbus_requests_total{sel}[{WINDOW}]))",
        "error rate": f"sum by (processor) (rate(ragbus_errors_total{sel}[{WINDOW}]))",
        "expired rate": f"sum by (processor) (rate(ragbus_expired_total{sel}[{WINDOW}]))",
        "error ratio": f"sum by (processor) (rate(ragbus_errors_total{sel}[{WINDOW}])) "
                       f"/ sum by (processor) (rate(ragbus_requests_total{sel}[{WINDOW}]))",
        "p50": f"histogram_quantile(0.5, sum by (processor, le) (rate(ragbus_request_seconds_bucket{sel}[{WINDOW}])))",
        "p99": f"histogram_quantile(0.99, sum by (processor, le) (rate(ragbus_request_seconds_bucket{sel}[{WINDOW}])))",
        "replicas": f"count by (processor) (ragbus_requests_total{sel})",
    }
    return {name: await query(http, promql) for name, promql in queries.items()}
