"""A consumer process killed with SIGKILL while holding a message: the group still gets it.

Only the brokers have processes to kill; on the memory bus the same promise
is covered by the cancel test in test_consume.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from ragbus.bus import connect

from ..helpers.brokers import settings_for_tests
from ..helpers.receiving import receive

CHILD = """
import asyncio, sys
from ragbus.bus import connect

async def main(url, topic):
    bus = await connect(url)
    sub = await bus.subscribe(topic, f"workers-{topic}")
    print("SUBSCRIBED", flush=True)
    d = await sub.receive()
    print("GOT", d.body.decode(), flush=True)
    await asyncio.Event().wait()  # hold it, unacked, until killed

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def _line(proc, timeout=60.0) -> str:
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    except TimeoutError:
        proc.kill()
        said = (await proc.stderr.read()).decode()[-3000:]
        raise AssertionError(f"child said nothing in {timeout}s: {said}") from None
    if not line:
        raise AssertionError(f"child exited early: {(await proc.stderr.read()).decode()[-2000:]}")
    return line.decode().strip()


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_killed_consumer_process_message_goes_to_survivor(which, request, topic):
    url = request.getfixturevalue(f"{which}_broker").url
    env = dict(os.environ, RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD="8", RAGBUS_BUS__CONNECT_TIMEOUT_S="5")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, url, topic,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    bus = await connect(url, settings_for_tests())
    try:
        assert await _line(proc) == "SUBSCRIBED"
        await bus.publish(topic, b"held-by-the-child")
        assert await _line(proc) == "GOT held-by-the-child"
        survivor = await bus.subscribe(topic, f"workers-{topic}")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        d = await receive(survivor, timeout=60)
        assert d.body == b"held-by-the-child"
        await d.ack()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await bus.close()
