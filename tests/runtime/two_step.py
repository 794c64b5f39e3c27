"""A two-step orchestration over echo processors, recorded in tests/fixtures/two_step.jsonl.

It stands in for a real orchestrator in the replay tests: it calls one
processor, feeds the answer to a second, and returns the second answer.
``python scripts/record_fixtures.py`` records it anew.
"""

from __future__ import annotations

from processors.runtime.request_client import RequestClient

from .echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings

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
