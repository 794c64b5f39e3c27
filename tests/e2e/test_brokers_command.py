"""``ragbus brokers``: the test brokers in the foreground, leaving nothing behind when stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import pytest

from processors.testing import brokers


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
async def test_brokers_command_removes_its_directory_and_stops_its_brokers(how, tmp_path):
    try:
        brokers.tansu_binary(), brokers.pulsar_lite_binary()
    except brokers.BrokerStartError as exc:
        if brokers.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    env = dict(os.environ, TMPDIR=str(tmp_path))  # where tempfile puts ragbus-brokers-*
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "processors.cli", "brokers", "kafka", "pulsar",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    ports = []
    try:
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, (await proc.stderr.read()).decode()
            if "(log: " in line:  # "tansu: kafka://127.0.0.1:PORT  (log: ...)"
                ports.append(int(line.split("://127.0.0.1:")[1].split()[0]))
            if line.startswith("Ctrl-C to stop"):
                break
        assert len(ports) == 2
        assert [p.name for p in tmp_path.iterdir()][0].startswith("ragbus-brokers-")  # in use while they run
        proc.send_signal(how)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert list(tmp_path.iterdir()) == []  # logs and Pulsar Lite's data went with the brokers
    assert proc.returncode == 0, err.decode()
    for port in ports:  # and the brokers went with the command
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
