"""``ragbus check`` reports FAILED, and exits non-zero, when the bus loses one of its messages.

The command runs in a process of its own on the real memory bus, whose publish is wrapped to
accept one message and drop it, as a broker that loses a write would: the command must give
up at its deadline and say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# argv: the body to lose ("" loses nothing), then the command's arguments.
PROBE = """
import sys
from ragbus.cli import check
from ragbus.cli.main import main

body, real_connect = sys.argv[1].encode(), check.connect

async def losing_connect(url, settings):
    bus = await real_connect(url, settings)
    publish = bus.publish

    async def publish_losing_one(topic, message, headers=None, key=None):
        if message == body and topic.startswith("ragbus-check-"):
            print(f"lost {message.decode()} on its way to {topic}")
            return
        await publish(topic, message, headers, key)

    bus.publish = publish_losing_one
    return bus

check.connect = losing_connect
sys.exit(main(sys.argv[2:]))
"""


def run_check(lose: str, *args: str, within: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, lose, "check", "--bus", "memory://check", *args],
                          capture_output=True, text=True, timeout=within, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("body", ["good-2", "poison"], ids=["a-handled-message", "a-dead-letter"])
def test_a_lost_message_fails_the_check_at_its_deadline(body):
    # --timeout 1; the 30 s bound covers the interpreter's start and imports on a busy machine.
    run = run_check(body, "--timeout", "1", within=30)
    assert f"lost {body} on its way to ragbus-check-" in run.stdout
    assert f"timed out after 1s still waiting for {body}" in run.stdout
    assert run.stdout.rstrip().endswith("FAILED")
    assert run.returncode == 1, run.stderr


def test_with_nothing_lost_the_check_passes():
    run = run_check("", "--timeout", "20", within=60)
    assert "lost" not in run.stdout
    assert run.stdout.rstrip().endswith("OK") and run.returncode == 0, run.stdout + run.stderr
