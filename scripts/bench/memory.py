"""Memory of a process, read from its /proc status (Linux only, as every benchmark here is)."""

from __future__ import annotations


def status_mb(field: str, pid: int | str = "self") -> float:
    """A field of a process's /proc status in MB: VmRSS, its resident set now; VmHWM, its peak resident set."""
    with open(f"/proc/{pid}/status") as fh:
        line = next((line for line in fh if line.startswith(field + ":")), None)
    if line is None:
        raise ValueError(f"/proc/{pid}/status has no {field}")
    return int(line.split()[1]) / 1024
