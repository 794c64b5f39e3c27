"""OneThread: blocking work in order on one thread of its own, while the event loop keeps running."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ragbus.runtime.threads import Closed, OneThread


def where(i: int) -> tuple[int, int, str]:
    thread = threading.current_thread()
    return i, thread.ident, thread.name


async def test_work_runs_in_order_on_one_thread_that_is_not_the_loops():
    worker = OneThread("store")
    try:
        results = await asyncio.gather(*(worker.run(where, i) for i in range(20)))
    finally:
        await worker.close()
    assert [i for i, _, _ in results] == list(range(20))
    assert len({ident for _, ident, _ in results}) == 1
    assert results[0][1] != threading.get_ident()
    assert results[0][2] == "store_0"


async def test_the_loop_keeps_running_while_work_blocks():
    worker = OneThread("store")
    loop = asyncio.get_running_loop()
    started, release = asyncio.Event(), threading.Event()

    def blocking() -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait()
        return "done"

    job = asyncio.ensure_future(worker.run(blocking))
    await started.wait()  # only a running loop can get here while blocking() waits
    assert not job.done()
    release.set()
    assert await job == "done"
    await worker.close()


async def test_keyword_arguments_reach_fn_and_its_exception_reaches_the_caller():
    def fail(message: str, *, kind: type[Exception]) -> None:
        raise kind(message)

    worker = OneThread("store")
    with pytest.raises(KeyError, match="boom"):
        await worker.run(fail, "boom", kind=KeyError)
    assert (await worker.run(where, 1))[0] == 1  # the thread outlives a failed call
    await worker.close()


async def test_run_after_close_raises_closed():
    worker = OneThread("store", closed_message="the store is closed")
    await worker.close()
    await worker.close()  # twice is harmless
    assert worker.closed
    with pytest.raises(Closed, match=r"^the store is closed$"):
        await worker.run(where, 0)
    with pytest.raises(RuntimeError, match=r"^the other thread is closed$"):  # Closed is a RuntimeError
        other = OneThread("other")
        await other.close()
        await other.run(where, 0)


@pytest.mark.parametrize("cancel_pending", [False, True])
async def test_close_runs_queued_work_unless_told_to_cancel_it(cancel_pending):
    worker = OneThread("store")
    loop = asyncio.get_running_loop()
    started, release = asyncio.Event(), threading.Event()
    ran = []

    def first() -> None:
        loop.call_soon_threadsafe(started.set)
        release.wait()
        ran.append("first")

    running = asyncio.ensure_future(worker.run(first))
    queued = asyncio.ensure_future(worker.run(ran.append, "queued"))
    closing = asyncio.ensure_future(worker.close(cancel_pending=cancel_pending))
    await started.wait()  # all three have taken their first step: queued is submitted, close has begun
    with pytest.raises(Closed):
        await worker.run(ran.append, "late")
    if cancel_pending:
        with pytest.raises(asyncio.CancelledError):
            await queued  # cancelled while first() still holds the thread
    release.set()
    await closing
    await running
    assert ran == (["first"] if cancel_pending else ["first", "queued"])
