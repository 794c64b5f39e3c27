"""The light brokers stay usable: the delivery conformance suite, run in a pytest of its own on Tansu and Pulsar Lite.

The suites run on Apache Kafka and Apache Pulsar; a user without Java or Maven runs them on the light
brokers instead (``RAGBUS_TEST_KAFKA=light RAGBUS_TEST_PULSAR=light``). This runs the part of the
conformance suite that covers delivery (groups, order, acks, listeners) that way, so a change that
breaks the light option, or its settings (``brokers.LIGHT_BROKER_ENV``), fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragbus.testing import brokers

REPO = Path(__file__).resolve().parents[2]
SUITE = "tests/conformance/test_delivery.py"


@pytest.mark.timeout(600)
def test_the_delivery_suite_passes_on_tansu_and_pulsar_lite(tmp_path):
    try:
        brokers.tansu_binary(), brokers.pulsar_lite_binary()
    except brokers.BrokerStartError as exc:
        if brokers.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUS_")}
    env.update(RAGBUS_TEST_KAFKA="light", RAGBUS_TEST_PULSAR="light", CI="true", PYTHONPATH=str(REPO),
               RAGBUS_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "kafka or pulsar",
                           SUITE], capture_output=True, text=True, env=env, cwd=REPO, timeout=540)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 20 and "skipped" not in summary, summary
