"""A worker starts a processor that makes what the others read (a replica) first, and the others, which
join their groups and so are sent work, only once it is ready; a worker stopped before then starts none
of them. Without it, a query host from an empty data dir answered "nothing found" until its replica had
caught up (scripts/bench_roll.py, a query host restarted on an empty data dir)."""

from __future__ import annotations

import asyncio

from ragbus.config.settings import load_settings
from ragbus.runtime.worker import run_workers

from ..helpers.echo import StartOrder


def _settings(tmp_path, topic: str):
    path = tmp_path / "order.toml"
    path.write_text("[metrics]\nport = 0\n" + "".join(
        f'[processors.{name}]\nclass = "tests.helpers.echo:{cls}"\ntopic = "{topic}-{name}"\ngroup = "{name}"\n'
        for name, cls in (("reader", "Follower"), ("replica", "GatedFirst"))))
    return load_settings(path, environ={})


async def _spin() -> None:
    """Every task the loop has, a chance to run many times over (no clock involved)."""
    for _ in range(200):
        await asyncio.sleep(0)


async def test_the_others_start_once_the_first_is_ready(tmp_path, topic):
    StartOrder.reset()
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.ensure_future(run_workers(_settings(tmp_path, topic), ["reader", "replica"],
                                               bus_url=f"memory://{topic}", stop=stop, handle_signals=False,
                                               on_ready=ready.set))
    try:
        await asyncio.wait_for(StartOrder.entered.wait(), 30)
        await _spin()
        assert StartOrder.started == []  # the reader waits while the replica catches up
        StartOrder.gate.set()
        await asyncio.wait_for(ready.wait(), 30)
        assert StartOrder.started == ["replica", "reader"]
    finally:
        stop.set()
        stats = await asyncio.wait_for(worker, 30)
    assert set(stats) == {"reader", "replica"}


async def test_a_worker_stopped_before_the_first_is_ready_starts_no_other(tmp_path, topic):
    StartOrder.reset()
    stop = asyncio.Event()
    worker = asyncio.ensure_future(run_workers(_settings(tmp_path, topic), ["reader", "replica"],
                                               bus_url=f"memory://{topic}", stop=stop, handle_signals=False))
    await asyncio.wait_for(StartOrder.entered.wait(), 30)
    stop.set()
    await _spin()
    StartOrder.gate.set()  # the replica's start ends; the worker, told to stop, goes no further
    await asyncio.wait_for(worker, 30)
    assert "reader" not in StartOrder.started
