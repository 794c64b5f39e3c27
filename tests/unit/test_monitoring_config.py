"""config/monitoring: alert rules promtool accepts and fires as meant, a dashboard over metrics that exist,
and metric names by Prometheus's conventions.

promtool comes with Debian's ``prometheus`` package (.ci/run installs it): in CI its absence fails.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram

from ragbus.runtime import metrics

from ..helpers.monitoring import MONITORING, as_promql, panel_exprs, tool

# Label names a metric may have: each takes few values. A request id, a document id, a question: never.
LABELS = {"processor", "topic", "type", "reason"}


def promtool(*args: str, cwd: Path = MONITORING) -> str:
    run = subprocess.run([tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def exposed_names() -> set[str]:
    """Every series name the workers' registry exposes, with the suffixes Prometheus sees."""
    names = set()
    for family in metrics.REGISTRY.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(family.type, [""])
        names.update(family.name + s for s in suffixes)
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bragbus_[a-z0-9_]+", expr)) | ({"up"} if re.search(r"\bup\s*\{", expr) else set())


def test_the_alert_rules_pass_promtool_check():
    assert "SUCCESS: 8 rules found" in promtool("check", "rules", "rules.yml")


def test_each_alert_fires_on_the_series_meant_to_fire_it():
    promtool("test", "rules", "rules.test.yml")


def test_the_example_prometheus_config_is_valid_and_loads_the_rules():
    assert "SUCCESS: 1 rule files found" in promtool("check", "config", "prometheus.yml")


def test_the_rules_name_only_metrics_the_workers_expose():
    text = (MONITORING / "rules.yml").read_text()
    used = metric_names(text)
    assert {"ragbus_errors_total", "ragbus_dead_lettered_total", "ragbus_request_seconds_bucket", "up"} <= used
    assert used <= exposed_names() | {"up"}, used - exposed_names()


def test_every_dashboard_panel_queries_metrics_that_exist():
    exprs = panel_exprs()
    assert len({title for title, _ in exprs}) >= 10
    known = exposed_names() | {"up"}
    for title, expr in exprs:
        used = metric_names(expr)
        assert used, f"{title}: {expr} names no metric"
        assert used <= known, f"{title}: {sorted(used - known)} not exposed by processors/runtime/metrics.py"
    everything = set().union(*(metric_names(e) for _, e in exprs))
    # What the dashboard must show: throughput, errors, p50/p99, dead letters, resends, in flight.
    assert {"ragbus_requests_total", "ragbus_errors_total", "ragbus_request_seconds_bucket",
            "ragbus_dead_lettered_total", "ragbus_client_resends_total", "ragbus_requests_in_progress"} <= everything
    assert any("histogram_quantile(0.5," in e for _, e in exprs)
    assert any("histogram_quantile(0.99," in e for _, e in exprs)


def test_every_dashboard_expression_is_valid_promql(tmp_path):
    """promtool parses each panel's query, written as a recording rule (JSON is YAML)."""
    rules = [{"record": f"dashboard:panel{i}", "expr": as_promql(e)} for i, (_, e) in enumerate(panel_exprs())]
    (tmp_path / "panels.yml").write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in promtool("check", "rules", "panels.yml", cwd=tmp_path)


def test_metric_names_and_labels_follow_prometheus_conventions():
    collectors = [c for c in vars(metrics).values() if isinstance(c, (Counter, Gauge, Histogram))]
    assert len(collectors) >= 12
    for c in collectors:
        name = c._name
        assert name.startswith("ragbus_") and re.fullmatch(r"[a-z0-9_]+", name), name
        if isinstance(c, Counter):  # exposed as NAME_total; a unit, if any, comes before it
            assert not name.endswith("_total") and not name.endswith("_count"), name
        if isinstance(c, Histogram):  # every histogram here is a time, in seconds
            assert name.endswith("_seconds"), name
        assert not re.search(r"_(ms|milliseconds|minutes|bytes_kb)$", name), f"{name}: use base units"
        assert set(c._labelnames) <= LABELS, f"{name}: labels {c._labelnames}"
