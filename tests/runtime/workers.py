"""Worker processes for tests: ``ragbus worker`` in a subprocess with a test config."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_config(path: Path, topic: str, *, concurrency: int = 32, metrics_port: int = 0, **extra) -> Path:
    lines = [
        f"[metrics]\nport = {metrics_port}\n",
        "[processors.echo]",
        'class = "tests.helpers.echo:EchoProcessor"',
        f'topic = "{topic}"',
        f'group = "echo-{topic}"',
        f"concurrency = {concurrency}",
        *(f"{k} = {v!r}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class Worker:
    """One ``ragbus worker echo`` process; ``ready()`` waits until it has joined its group."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []

    @classmethod
    async def start(cls, url: str, config: Path) -> Worker:
        env = dict(os.environ, RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD="8", PYTHONPATH=str(REPO))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ragbus.cli", "worker", "echo", "--bus", url, "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )
        return cls(proc)

    async def wait_for_line(self, text: str, timeout: float = 60) -> None:
        async def scan():
            while True:
                line = await self.proc.stderr.readline()
                if not line:
                    raise AssertionError(f"worker exited before saying {text!r}:\n" + "".join(self.stderr))
                self.stderr.append(line.decode())
                if text in line.decode():
                    return

        await asyncio.wait_for(scan(), timeout)

    async def ready(self) -> Worker:
        await self.wait_for_line("ready")
        return self

    async def finish(self, timeout: float = 60) -> int:
        rest = await asyncio.wait_for(self.proc.stderr.read(), timeout)
        self.stderr.append(rest.decode())
        return await self.proc.wait()

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    async def reap(self) -> None:
        """Kill if still running and wait, so no process or pipe outlives the test's event loop."""
        self.kill()
        await self.proc.wait()

    @property
    def output(self) -> str:
        return "".join(self.stderr)
