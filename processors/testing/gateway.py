"""``ragbus serve`` in a process of its own, on a free loopback port, ready once ``/ready`` says 200.

For tests and ``scripts/bench_gateway.py``: the real command, the real server, nothing in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from .brokers import free_port
from .processes import stop_process


class GatewayProcess:
    def __init__(self, bus_url: str = "memory://", *, env: dict[str, str] | None = None, log_path: Path | None = None,
                 ready_timeout_s: float = 300.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bus_url = bus_url
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen | None = None

    def start(self) -> GatewayProcess:
        """Launch, then wait until ``/ready`` says 200."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> GatewayProcess:
        if self.log_path:
            with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
                return self._spawn(log, subprocess.STDOUT)
        return self._spawn(subprocess.DEVNULL, subprocess.DEVNULL)

    def _spawn(self, stdout: IO[bytes] | int, stderr: int) -> GatewayProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ragbus.cli", "serve", "--port", str(self.port), "--bus", self.bus_url],
            env=self.env, stdout=stdout, stderr=stderr, start_new_session=True,
        )
        return self

    def wait_ready(self) -> GatewayProcess:
        assert self.process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ragbus serve exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=15).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # polling a process that offers no readiness event but its HTTP answer
        self.stop()
        raise RuntimeError(f"ragbus serve not ready within {self.ready_timeout_s:g}s: {self.log_tail()}")

    def stop(self) -> None:
        proc, self.process = self.process, None
        stop_process(proc, timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
