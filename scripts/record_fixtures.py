#!/usr/bin/env python3
"""Record the test fixtures that replay tests run against.

    python scripts/record_fixtures.py

Runs the real processors of each fixture on an in-process bus, drives them
with the fixture's orchestration, and records the request topics and the
caller's reply topic to tests/fixtures/*.jsonl.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from processors.bus import connect  # noqa: E402
from processors.runtime.recording import record  # noqa: E402
from processors.runtime.request_client import RequestClient  # noqa: E402
from tests.runtime import two_step  # noqa: E402


async def record_two_step(out: Path) -> int:
    out.unlink(missing_ok=True)
    bus = await connect("memory://fixtures")
    stop = asyncio.Event()
    workers = [asyncio.ensure_future(p.run(bus, stop)) for p in two_step.processors()]
    client = await RequestClient(bus, name="fixture").start()
    for question in two_step.QUESTIONS:
        print(f"{question!r} -> {await two_step.two_step(client, question)!r}")
    # Two requests and two responses per question, all retained by the memory bus.
    n = await record(bus, [two_step.FIRST, two_step.SECOND, client.reply_topic], out, limit=4 * len(two_step.QUESTIONS))
    await client.close()
    stop.set()
    await asyncio.gather(*workers)
    await bus.close()
    return n


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    n = asyncio.run(record_two_step(root / two_step.FIXTURE))
    print(f"recorded {n} messages to {two_step.FIXTURE}")
