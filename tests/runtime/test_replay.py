"""An orchestration run against a committed recording, and a live processor checked against it."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ragbus.runtime.request_client import RequestClient
from ragbus.testing.replay import RecordedResponder, compare_with_recording, recorded_exchanges

from ..helpers.serving import serving
from ..helpers.echo import EchoRequest, EchoResponse, EchoSettings
from .two_step import FIRST, FIXTURE, QUESTIONS, SECOND, processors, two_step

FIXTURE_PATH = Path(__file__).resolve().parents[2] / FIXTURE


def recorded_final_answers() -> dict[str, str]:
    """The orchestration's answers as recorded: question -> text of the second step's response."""
    first = {msgspec.msgpack.decode(ex.response)["text"]: msgspec.msgpack.decode(ex.request)["text"]
             for ex in recorded_exchanges(FIXTURE_PATH, [FIRST])}
    return {first[msgspec.msgpack.decode(ex.request)["text"]]: msgspec.msgpack.decode(ex.response)["text"]
            for ex in recorded_exchanges(FIXTURE_PATH, [SECOND])}


async def test_orchestration_runs_against_recorded_processors(open_bus):
    bus = await open_bus()
    expected = recorded_final_answers()
    assert sorted(expected) == sorted(QUESTIONS)
    responder = RecordedResponder(FIXTURE_PATH, [FIRST, SECOND])
    async with responder.serving(bus), RequestClient(bus, name="replay") as client:
        for question in QUESTIONS:
            assert await two_step(client, question) == expected[question]
    assert responder.answered == 2 * len(QUESTIONS) and responder.misses == []


async def test_a_request_missing_from_the_recording_is_answered_with_an_error(topic):
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    responder = RecordedResponder(FIXTURE_PATH, [FIRST], response_types={FIRST: EchoResponse})
    async with responder.serving(bus), RequestClient(bus) as client:
        response = await client.request(FIRST, EchoRequest(text="never asked"), EchoResponse, timeout=10)
    await bus.close()
    assert response.error is not None and response.error.type == "NotRecorded"
    assert len(responder.misses) == 1


async def test_live_processors_reproduce_the_recording(topic):
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    first, second = processors()
    async with serving(bus, first), serving(bus, second), RequestClient(bus) as client:
        for t in (FIRST, SECOND):
            assert await compare_with_recording(client, FIXTURE_PATH, t, ignore_fields={"request_id", "pid"}) == []
    await bus.close()


async def test_a_changed_processor_is_caught_by_the_recording(topic):
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    first, _ = processors()
    first.settings = EchoSettings(topic=FIRST, group=FIRST, prefix="changed:")
    async with serving(bus, first), RequestClient(bus) as client:
        mismatches = await compare_with_recording(client, FIXTURE_PATH, FIRST, ignore_fields={"request_id", "pid"})
    await bus.close()
    assert len(mismatches) == len(QUESTIONS)
    assert all(m.actual["text"].startswith("changed:") and m.expected["text"].startswith("first:") for m in mismatches)
