"""Streamed answers: several pieces under one request id, numbered, the last marked final. On every backend."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from ragbus.runtime.request_client import NotStreamed, RequestTimeout, StreamDiverged
from ragbus.schema import decode

from ..helpers.serving import client_on, serving
from ..helpers.waiting import until
from ..helpers.echo import EchoPiece, EchoProcessor, EchoRequest, EchoResponse, EchoSettings, StreamingEcho

TEXT = "one two three four five six"


def streaming_echo(topic: str, **kwargs) -> StreamingEcho:
    # A short drain: a stalled handler is still running when the test stops the processor.
    return StreamingEcho("echo", EchoSettings(topic=topic, group=f"echo-{topic}", drain_timeout_s=0.5), **kwargs)


async def collect(client, topic, request, **kwargs) -> list[EchoPiece]:
    return [p async for p in client.stream(topic, request, EchoPiece, **kwargs)]


async def test_pieces_arrive_in_order_each_once_and_end_with_the_final_one(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, streaming_echo(topic)), client_on(bus) as client:
        streams = await asyncio.gather(*(
            collect(client, topic, EchoRequest(text=f"{TEXT} {i}"), timeout=30) for i in range(4)
        ))
        # The same processor still answers a caller that asks for one response.
        whole = await client.request(topic, EchoRequest(text=TEXT), EchoResponse, timeout=30)
    for i, pieces in enumerate(streams):
        assert [p.text for p in pieces[:-1]] == f"{TEXT} {i}".split()
        assert pieces[-1].done and pieces[-1].text == f"{TEXT} {i}"
    assert whole.text == TEXT and whole.error is None
    assert client.stats.answered == 5 and client.stats.duplicates == 0 and client.in_flight == 0


async def test_a_stream_stalled_mid_way_is_resent_and_each_piece_is_yielded_once(open_bus, topic):
    bus = await open_bus()
    processor = streaming_echo(topic, hang_after=2)
    async with serving(bus, processor), client_on(bus, resend_after_s=0.5) as client:
        pieces = await collect(client, topic, EchoRequest(text=TEXT), timeout=30)
        # The first two pieces came twice (attempt 1, then attempt 2 from the start): dropped, counted.
        await until(lambda: client.stats.duplicates >= 2, 30, lambda: f"duplicates not counted: {client.stats}")
    assert [p.text for p in pieces] == [*TEXT.split(), TEXT]
    assert processor.attempts[:2] == [1, 2] and client.stats.resent >= 1
    assert client.stats.duplicates == 2


async def test_a_resent_stream_ended_sooner_by_its_new_replica_ends_the_call_with_that_piece(open_bus, topic):
    """The replica the resend reached fails at its first piece: numbered 0, which the call already yielded, it
    would be skipped as a duplicate and the call would wait out its whole time-out."""
    bus = await open_bus()
    processor = streaming_echo(topic, hang_after=2, lost_on_resend=True)
    yielded: list[EchoPiece] = []
    async with serving(bus, processor), client_on(bus, resend_after_s=0.5) as client:
        with pytest.raises(StreamDiverged) as diverged:
            async for piece in client.stream(topic, EchoRequest(text=TEXT), EchoPiece, timeout=60):
                yielded.append(piece)
    assert [p.text for p in yielded] == ["one", "two"]
    assert diverged.value.seq == 0 and diverged.value.yielded == 2
    ending = decode(diverged.value.body, EchoPiece)
    assert ending.error is not None and "nothing held" in ending.error.message
    assert processor.attempts[:2] == [1, 2]


async def test_a_failure_mid_stream_ends_it_with_an_error_piece(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, streaming_echo(topic)), client_on(bus) as client:
        pieces = await collect(client, topic, EchoRequest(text=TEXT, fail="disk on fire"), timeout=30)
    assert [p.text for p in pieces[:-1]] == ["one"]
    assert pieces[-1].error is not None and pieces[-1].error.message == "disk on fire"


class NotAnEchoRequest(msgspec.Struct):
    text: int


async def test_an_invalid_streamed_request_is_answered_with_one_error_piece(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, streaming_echo(topic)), client_on(bus) as client:
        pieces = [p async for p in client.stream(topic, NotAnEchoRequest(7), EchoPiece, timeout=30)]
    assert len(pieces) == 1 and pieces[0].error is not None and pieces[0].error.type == "ValidationError"


async def test_a_stream_that_stops_coming_times_out_as_a_whole(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, streaming_echo(topic, hang_after=2)), client_on(bus) as client:
        got = []
        with pytest.raises(RequestTimeout):
            async for piece in client.stream(topic, EchoRequest(text=TEXT), EchoPiece, timeout=1.5):
                got.append(piece.text)
    assert got == ["one", "two"]
    assert client.stats.timeouts == 1 and client.in_flight == 0


async def test_pieces_of_a_stream_the_caller_left_are_dropped_and_counted(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, streaming_echo(topic)), client_on(bus) as client:
        async for _piece in client.stream(topic, EchoRequest(text=TEXT, delay_s=0.05), EchoPiece, timeout=30):
            break
        await until(lambda: client.stats.late >= 6, 30, lambda: f"the left pieces were not counted: {client.stats}")
    assert client.stats.late == 6 and client.in_flight == 0  # five more words and the final piece


async def test_a_processor_that_cannot_stream_fails_the_streamed_call_at_once(open_bus, topic):
    bus = await open_bus()
    plain = EchoProcessor("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
    async with serving(bus, plain), client_on(bus) as client:
        with pytest.raises(NotStreamed):
            await collect(client, topic, EchoRequest(text=TEXT), timeout=30)
    assert client.stats.timeouts == 0 and client.in_flight == 0
