"""A two-step orchestration over echo processors, recorded in tests/fixtures/two_step.jsonl.

It stands in for a real orchestrator in the replay tests: it calls one
processor, feeds the answer to a second, and returns the second answer.
``python -m tests.runtime.two_step`` records it anew: the real echo processors on an in-process
bus, driven by this orchestration, their request topics and the caller's reply topic recorded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.recording import record

from ..helpers.echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings

FIRST, SECOND = "fixture-echo-first", "fixture-echo-second"
QUESTIONS = ["what is nonlocal?", "Zürich in 2019", "__slots__ and C++ 7.3.2"]
FIXTURE = "tests/fixtures/two_step.jsonl"


def processors() -> list[EchoProcessor]:
    return [
        EchoProcessor("first", EchoSettings(topic=FIRST, group=FIRST, prefix="first:")),
        EchoProcessor("second", EchoSettings(topic=SECOND, group=SECOND, prefix="second:")),
    ]


async def two_step(client: RequestClient, question: str) -> str:
    first = await client.request(FIRST, EchoRequest(text=question), EchoResponse, timeout=10)
    second = await client.request(SECOND, EchoRequest(text=first.text), EchoResponse, timeout=10)
    return second.text


async def record_fixture(out: Path) -> int:
    await asyncio.to_thread(out.unlink, missing_ok=True)  # record() appends: a new fixture starts empty
    bus = await connect("memory://fixtures")
    stop = asyncio.Event()
    workers = [asyncio.ensure_future(p.run(bus, stop)) for p in processors()]
    client = await RequestClient(bus, name="fixture").start()
    for question in QUESTIONS:
        print(f"{question!r} -> {await two_step(client, question)!r}")
    # Two requests and two responses per question, all retained by the memory bus.
    n = await record(bus, [FIRST, SECOND, client.reply_topic], out, limit=4 * len(QUESTIONS))
    await client.close()
    stop.set()
    await asyncio.gather(*workers)
    await bus.close()
    return n


if __name__ == "__main__":
    n = asyncio.run(record_fixture(Path(__file__).resolve().parents[2] / FIXTURE))
    print(f"recorded {n} messages to {FIXTURE}")
