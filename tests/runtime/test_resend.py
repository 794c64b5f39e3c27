"""Resending: a request lost with a dead worker (or a broker) is answered by another attempt.

On every backend. The stand-in for a worker that died holding a request is
one that takes the first delivery of each request and never answers it.
"""

from __future__ import annotations

import asyncio

import pytest

from ragbus.runtime.request_client import RequestClient, RequestTimeout

from ..helpers.forgetful_echo import ForgetsFirstAttempts
from ..helpers.serving import client_on, serving
from ..helpers.waiting import until
from ..helpers.echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings


async def test_an_unanswered_request_is_sent_again_under_the_same_id(open_bus, topic):
    bus = await open_bus()
    processor = ForgetsFirstAttempts(topic)
    async with serving(bus, processor), client_on(bus, resend_after_s=0.3) as client:
        answers = await asyncio.gather(*(
            client.request(topic, EchoRequest(text=f"q{i}"), EchoResponse, timeout=30) for i in range(5)
        ))
    assert [a.text for a in answers] == [f"q{i}" for i in range(5)]
    assert client.stats.resent >= 5 and sorted(set(processor.attempts))[:2] == [1, 2]
    # One request id per call, whatever the attempt: the answer carries the first attempt's id.
    assert len({a.request_id for a in answers}) == 5


async def test_without_resending_the_lost_request_times_out(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, ForgetsFirstAttempts(topic)), client_on(bus) as client:
        with pytest.raises(RequestTimeout):
            await client.request(topic, EchoRequest(text="lost"), EchoResponse, timeout=1.0)
    assert client.stats.resent == 0


async def test_a_slow_answer_and_its_resend_give_one_answer_and_one_counted_duplicate(open_bus, topic):
    bus = await open_bus()
    processor = EchoProcessor("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
    async with serving(bus, processor), client_on(bus, resend_after_s=0.2) as client:
        answer = await client.request(topic, EchoRequest(text="slow", delay_s=0.5), EchoResponse, timeout=30)
        assert answer.text == "slow" and client.stats.resent >= 1
        # The other attempt's answer arrives later and is dropped as a duplicate, not delivered twice.
        await until(lambda: client.stats.duplicates >= client.stats.resent, 30,
                    lambda: f"not every resent attempt's answer was counted: {client.stats}")
    assert client.stats.duplicates == client.stats.resent and client.stats.late == 0


def test_resend_after_must_be_positive():
    with pytest.raises(ValueError, match="resend_after_s"):
        RequestClient(None, resend_after_s=0)  # type: ignore[arg-type]
