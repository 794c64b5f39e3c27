"""pulsar-client's C++ core logs through Python only when ``pulsar.client`` wants DEBUG.

Its bridge to a Python logger has no level: every DEBUG line of the core (about 200 per
hybrid query, measured) took the GIL from the network thread. The core keeps the logger of
the first client a process makes, so each case runs in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Counts, by level, what reaches the Python logger over 20 publish/receive/ack round trips.
SCRIPT = """
import asyncio, collections, json, logging, os, sys
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.pulsar import core_log as backend
from ragbus.testing import selection

backend.CLIENT_LOG.setLevel(getattr(logging, sys.argv[2]))
calls = collections.Counter()
original = backend.CLIENT_LOG.log

def counting(level, message, *args, **kwargs):
    calls[logging.getLevelName(level)] += 1
    return original(level, message, *args, **kwargs)

backend.CLIENT_LOG.log = counting  # what pulsar-client's bridge calls, line by line

async def main():
    async with await connect(sys.argv[1], load_settings(environ=selection.broker_env()).bus) as bus:
        sub = await bus.subscribe("client-log", "client-log")
        for _ in range(20):
            await bus.publish("client-log", b"x", {"request-id": "r"})
            delivery = await sub.receive()
            await delivery.ack()

asyncio.run(main())
print(json.dumps(calls), flush=True)
# As `ragbus` itself ends (processors/cli/main.py, run): with a Python logger in the core, the
# interpreter's own shutdown can abort ("terminate called without an active exception",
# pulsar-client-python #256) after all the work above is done.
os._exit(0)
"""


def bridged(url: str, level: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, url, level], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_the_core_filters_its_own_lines_below_debug(pulsar_broker, level):
    calls = bridged(pulsar_broker.url, level)
    assert "DEBUG" not in calls, calls
    if level == "INFO":  # what passes the core's level still reaches Python's logger, through the pipe
        assert calls.get("INFO", 0) > 0, calls


def test_debug_still_reaches_the_python_logger(pulsar_broker):
    # The same count, DEBUG on: the bridge is used, so the test above can tell.
    assert bridged(pulsar_broker.url, "DEBUG").get("DEBUG", 0) > 20
