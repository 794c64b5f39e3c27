"""The monitoring configuration's files and the Prometheus tools that check them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragbus.testing.brokers import in_ci

MONITORING = Path(__file__).resolve().parents[2] / "config" / "monitoring"


DASHBOARD = MONITORING / "grafana-dashboard.json"


def tool(name: str) -> str:
    """The path of a Prometheus command; fails in CI when it is missing, else skips."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian's prometheus package; .ci/run installs it)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def panel_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def as_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables filled in as Grafana would."""
    return expr.replace("$__rate_interval", "1m").replace("$job", "ragbus")
