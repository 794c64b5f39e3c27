"""Writer locks: one process writes a store of a data directory, and a second one is refused at start.

Why a lock of the data directory, taken when the writer starts: the stores
create a collection's files on its first write, so a lock taken then (as
tantivy's own per-index lock is) lets a second writer process start, say
``ready``, and fail on every request afterwards. A writer that holds
``<data_dir>/.<store>-writer.lock`` for its whole life instead fails at
once, before it reports ready, and the message says which store, which
directory, which process holds it, and how writers are meant to be laid out.

The lock is ``flock(2)`` on a file of its own: the kernel drops it when the
holder exits, however it exits, so a crashed writer leaves no stale lock to
clean up. flock locks belong to an open file, not a process, so two opens in
one process exclude each other too: a store that shares one writer between
processors of a process (keyword-store and keyword-delete) takes the lock
once for all of them. The file names start with a dot, which no collection
name may, so they never look like a collection.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from ragbus.stores.layout import lock_path
from ragbus.config import pipelines


class StoreLocked(OSError):
    """Another process (or another writer of this one) writes this store of this data directory."""


class WriterLock:
    """An exclusive flock on ``path``, held from ``take_writer_lock`` until ``release`` (or the process ends)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up; idempotent. The file stays: removing it would race a writer opening it."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor of the open file drops the flock


def take_writer_lock(data_dir: Path, store: str, *, processor: str) -> WriterLock:
    """The writer lock of ``store`` in ``data_dir``, or ``StoreLocked`` saying who holds it and what to do.

    Never waits: a writer that would wait for another to go away would sit
    there looking healthy, which is the failure this lock exists to prevent.
    """
    import fcntl  # POSIX only, as the stores' own locks are

    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir.resolve()  # the message names the directory whatever the working directory was
    path = lock_path(data_dir, store)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise StoreLocked(locked_message(data_dir, store, processor, path, holder)) from None
    except BaseException:
        os.close(fd)
        raise
    # Who holds it, for the message a second writer gets; the lock itself is the flock, not this text.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return WriterLock(path, fd)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def locked_message(data_dir: Path, store: str, processor: str, path: Path, holder: str) -> str:
    """Why the writer cannot start, and how writers and query replicas are meant to be laid out."""
    by = f" ({holder})" if holder else ""
    return (
        f"{processor} cannot start: another writer{by} holds the {store} store of data dir {data_dir} "
        f"(lock file {path}). Run one writer process per data dir, with all its writers "
        f"({', '.join(pipelines.WRITERS)}; e.g. one `ragbus worker --all`); run query replicas anywhere "
        f"that sees the data dir (`ragbus worker {' '.join(pipelines.QUERY)}`); send documents and graphs "
        f"to the running writer with `--bus URL`, or give this process a data dir of its own (RAGBUS_DATA_DIR). "
        f"See 'Writers and data directories' in docs/processors.md."
    )
