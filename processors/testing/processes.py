"""Stopping a process a test or benchmark started: asked first, then killed if it does not go in time."""

from __future__ import annotations

import signal
import subprocess


def stop_process(proc: subprocess.Popen | None, timeout: float, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` (SIGTERM), wait up to ``timeout`` seconds, then SIGKILL; a process gone already is left."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
