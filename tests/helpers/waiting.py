"""Waiting for a state of the bus that no one signals, with a deadline and a stall check."""

from __future__ import annotations

import asyncio


async def until(condition, timeout: float, describe, *, progress=None, stall: float | None = None,
                on_stall=None) -> None:
    """Wait for ``condition()`` (a state of the bus, not an event anyone signals), at most ``timeout``.

    With ``progress``, give up early once its value has not changed for ``stall`` seconds; with
    ``on_stall`` as well, first await it once and wait another ``stall`` seconds.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    last, changed = None, loop.time()
    while not condition():
        now = loop.time()
        if progress is not None:
            value = progress()
            if value != last:
                last, changed = value, now
            elif now - changed > stall:
                if on_stall is None:
                    raise AssertionError(f"stalled for {stall:g}s: {describe()}")
                await on_stall()
                on_stall, changed = None, loop.time()
        if now > end:
            raise AssertionError(f"not settled within {timeout:g}s: {describe()}")
        await asyncio.sleep(0.02)
