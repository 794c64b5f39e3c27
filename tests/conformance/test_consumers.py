"""Whether anyone consumes a topic: the question a caller asks before waiting out its whole time-out.

``Bus.has_consumers`` answers True or False where the backend can tell (memory: its
groups; Kafka: the broker's consumer groups) and None where it cannot (Pulsar Lite has
no admin API). A ``RequestClient`` with ``served_check_s`` asks it while a call waits,
so a call to a topic no worker consumes ends in seconds with ``NotServed`` naming the
topic, while a slow call to a served topic is still waited for; where the bus cannot
tell, the time-out says which topic and asks whether a worker runs on that bus.
"""

from __future__ import annotations

import pytest

from ragbus.runtime.request_client import NotServed, RequestClient, RequestTimeout

from ..helpers.serving import serving
from ..helpers.echo import EchoPiece, EchoProcessor, EchoRequest, EchoResponse, EchoSettings, StreamingEcho

TELLS = {"memory": True, "kafka": True, "pulsar": False}


async def test_a_bus_says_whether_a_group_consumes_a_topic(open_bus, topic, backend):
    bus = await open_bus()
    before = await bus.has_consumers(topic)
    sub = await bus.subscribe(topic, f"g-{topic}")
    other = await bus.subscribe(f"{topic}-other", f"g-{topic}-other")  # a group of another topic is no answer
    during = await bus.has_consumers(topic)
    await sub.close()
    after = await bus.has_consumers(topic)
    await other.close()
    if backend == "kafka":
        # Not `after`: Tansu numbers a group's first generation 0, aiokafka sends LeaveGroup only
        # from generation 1 on, and Tansu does not expire the silent member: it stays listed.
        assert (before, during) == (False, True)
    elif TELLS[backend]:
        assert (before, during, after) == (False, True, False)
    else:
        assert (before, during, after) == (None, None, None)


async def test_a_call_to_a_topic_nobody_consumes_ends_early_and_names_it(open_bus, topic, backend):
    bus = await open_bus()
    async with RequestClient(bus, served_check_s=0.2) as client:
        if TELLS[backend]:
            # A time-out far beyond the test's patience: only the check can end this call.
            with pytest.raises(NotServed) as caught:
                await client.request(topic, EchoRequest(text="anyone?"), EchoResponse, timeout=3600)
            message = str(caught.value)
            assert f"no worker consumes {topic!r} on {bus.url}" in message
        else:
            with pytest.raises(RequestTimeout) as caught:
                await client.request(topic, EchoRequest(text="anyone?"), EchoResponse, timeout=1)
            assert not isinstance(caught.value, NotServed)
            message = str(caught.value)
            assert f"no response on {topic!r}" in message
            assert f"is a worker serving {topic!r} running on {bus.url}?" in message
    assert client.stats.sent == 1


@pytest.mark.parametrize("backend", [name for name, tells in TELLS.items() if tells])  # only a bus that can tell
async def test_a_streamed_call_to_a_topic_nobody_consumes_ends_early_and_names_it(open_bus, topic, backend):
    bus = await open_bus()
    async with RequestClient(bus, served_check_s=0.2) as client:
        with pytest.raises(NotServed) as caught:
            async for _ in client.stream(topic, EchoRequest(text="anyone?"), EchoResponse, timeout=3600):
                pass
    assert f"no worker consumes {topic!r} on {bus.url}" in str(caught.value)
    assert (client.stats.sent, client.stats.unserved) == (1, 1)


async def test_a_slow_stream_from_a_served_topic_is_waited_for_however_often_the_bus_is_asked(open_bus, topic):
    bus = await open_bus()
    processor = StreamingEcho("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
    async with serving(bus, processor), RequestClient(bus, served_check_s=0.05) as client:
        pieces = [p async for p in client.stream(topic, EchoRequest(text="slow stream", delay_s=0.5), EchoPiece,
                                                  timeout=60)]
    assert [p.text for p in pieces] == ["slow", "stream", "slow stream"] and client.stats.unserved == 0


@pytest.mark.parametrize("backend", [name for name, tells in TELLS.items() if tells])  # only a bus that can tell
async def test_once_the_bus_said_nobody_consumes_a_topic_the_next_calls_end_on_that_answer(open_bus, topic, backend):
    """A thousand documents sent to a topic with no worker fail together, not one check interval each."""
    bus = await open_bus()
    asked = []
    answer = bus.has_consumers

    async def counted(name):
        asked.append(name)
        return await answer(name)

    bus.has_consumers = counted
    # The first call waits one interval and asks; the calls after it end on that answer while it is
    # fresh, instead of each waiting an interval and asking again.
    async with RequestClient(bus, served_check_s=1.0) as client:
        for _ in range(5):
            with pytest.raises(NotServed):
                await client.request(topic, EchoRequest(text="anyone?"), EchoResponse, timeout=3600)
    assert 1 <= len(asked) < 5, asked


async def test_a_slow_call_to_a_served_topic_is_waited_for_however_often_the_bus_is_asked(open_bus, topic):
    bus = await open_bus()
    processor = EchoProcessor("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
    async with serving(bus, processor), RequestClient(bus, served_check_s=0.05) as client:
        response = await client.request(topic, EchoRequest(text="slow", delay_s=1.0), EchoResponse, timeout=60)
    assert response.text == "slow" and response.error is None


async def test_without_the_check_a_time_out_names_the_topic_and_asks_about_a_worker(open_bus, topic):
    bus = await open_bus()
    async with RequestClient(bus) as client:
        with pytest.raises(RequestTimeout) as caught:
            await client.request(topic, EchoRequest(text="anyone?"), EchoResponse, timeout=0.5)
    assert not isinstance(caught.value, NotServed)
    assert str(caught.value).startswith(f"no response on {topic!r} to request ")
    assert f"is a worker serving {topic!r} running on {bus.url}?" in str(caught.value)
