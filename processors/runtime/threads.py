"""``OneThread``: the one thread a processor's blocking work runs on, off the event loop.

Why one thread, not a pool: what runs there (a faiss store, a tantivy index,
a graph, an ONNX session) is not safe for concurrent use, and a store's
writes must be applied in the order they were asked for. On one thread the
object needs no lock of its own, calls queue in submission order, and a
long call of one processor does not occupy the default executor that the
other processors of the process share.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Closed(RuntimeError):
    """Work was handed to a ``OneThread`` after it was closed."""


class OneThread:
    """A single worker thread named ``name`` (its thread is ``<name>_0``); calls run in order.

    ``closed_message`` is the message of the ``Closed`` error that ``run``
    raises once ``close`` has begun.
    """

    def __init__(self, name: str, *, closed_message: str | None = None) -> None:
        self.name = name
        self.closed_message = closed_message or f"the {name} thread is closed"
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    @property
    def closed(self) -> bool:
        return self._executor is None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the thread, after every call handed over before it."""
        if self._executor is None:
            raise Closed(self.closed_message)
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def close(self, *, cancel_pending: bool = False) -> None:
        """Refuse new work, then wait for the thread to finish (without blocking the loop).

        Work already queued is run first, unless ``cancel_pending``: then what has
        not started is cancelled (its callers get ``CancelledError``) and only the
        running call is waited for. Closing twice is harmless.
        """
        if self._executor is None:
            return
        executor, self._executor = self._executor, None
        await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=cancel_pending)
