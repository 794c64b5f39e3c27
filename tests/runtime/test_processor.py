"""The processor base and the request client, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from ragbus.bus import dead_letter_topic
from ragbus.bus.consume import H_REASON
from ragbus.runtime import metrics
from ragbus.runtime.envelope import DEADLINE, REPLY_TO, REQUEST_ID, now_ms, request_headers
from ragbus.runtime.processor import error_response
from ragbus.runtime.request_client import RequestTimeout
from ragbus.schema import REPLY_PREFIX, Error, PromptResult, encode

from ..helpers.metrics import counter
from ..helpers.receiving import receive
from ..helpers.serving import client_on, echo, serving
from ..helpers.waiting import until
from ..helpers.echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings


async def test_request_gets_its_response_with_the_same_request_id(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, echo(topic, prefix=">")), client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="hello"), EchoResponse, timeout=30)
    assert response.text == ">hello" and response.error is None
    assert len(response.request_id) == 32
    assert client.stats.answered == 1


async def test_a_bulk_lane_is_served_beside_the_topic_and_never_holds_it_up(open_bus, topic):
    """Every slot of the bulk lane busy and more bulk requests waiting on the bus: a request to the
    processor's own topic is still answered at once, by the same handler, which knows the lane."""
    bus = await open_bus()
    lane = f"{topic}-bulk"
    async with serving(bus, echo(topic, bulk_topic=lane, bulk_concurrency=1)), client_on(bus) as client:
        held = [asyncio.ensure_future(client.request(lane, EchoRequest(text=f"b{i}", delay_s=3), EchoResponse,
                                                     timeout=60)) for i in range(2)]
        quick = await client.request(topic, EchoRequest(text="q"), EchoResponse, timeout=30)
        waiting = sum(not h.done() for h in held)
        bulk = await asyncio.gather(*held)
    assert quick.text == "q"  # not "bulk:q": the handler knows the lane
    assert waiting == 2, "the request to the topic waited for the bulk lane"
    assert sorted(r.text for r in bulk) == ["bulk:b0", "bulk:b1"]


async def test_a_processor_not_interactive_serves_its_bulk_lane_alone(open_bus, topic):
    """``interactive = false`` (the chart's ingestion hosts' embed): the bulk lane is served, and the topic's
    group is never joined, so this replica starting or stopping never rebalances the topic's group."""
    bus = await open_bus()
    lane = f"{topic}-bulk"
    async with serving(bus, echo(topic, bulk_topic=lane, interactive=False)), client_on(bus) as client:
        bulk = await client.request(lane, EchoRequest(text="b"), EchoResponse, timeout=30)
        on_lane, on_topic = await bus.has_consumers(lane), await bus.has_consumers(topic)
    assert bulk.text == "bulk:b"
    # Pulsar cannot tell who consumes a topic (None): the memory bus and Kafka can.
    assert on_lane is not False
    assert on_topic is (None if on_lane is None else False), "the topic was served"


async def test_handler_exception_becomes_an_error_response_and_is_not_retried(open_bus, topic):
    bus = await open_bus()
    processor = echo(topic)
    async with serving(bus, processor) as task, client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="x", fail="no such chunk"), EchoResponse, timeout=30)
        ok = await client.request(topic, EchoRequest(text="still serving"), EchoResponse, timeout=30)
    stats = task.result()
    assert response.error == Error("RuntimeError", "no such chunk")
    assert ok.text == "still serving"
    assert stats.acked == 2 and stats.nacked == 0 and stats.dead_lettered == 0


async def test_invalid_request_gets_a_validation_error_naming_the_field(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, echo(topic)), client_on(bus) as client:
        from ragbus.schema import EmbedRequest

        # An EmbedRequest has no "text": the echo processor must say so, not crash.
        response = await client.request(topic, EmbedRequest(texts=["a"]), EchoResponse, timeout=30)
    assert response.error is not None and response.error.type == "ValidationError"
    assert "text" in response.error.message


async def test_unknown_fields_are_ignored_for_forward_compatibility(open_bus, topic):
    import msgspec

    class EchoRequestV2(msgspec.Struct, kw_only=True):
        text: str
        language: str = "en"  # a field this processor does not know yet

    bus = await open_bus()
    async with serving(bus, echo(topic)), client_on(bus) as client:
        response = await client.request(topic, EchoRequestV2(text="hi", language="de"), EchoResponse, timeout=30)
    assert response.text == "hi" and response.error is None


async def test_undecodable_request_without_reply_to_is_dead_lettered_and_worker_keeps_serving(open_bus, topic):
    bus = await open_bus()
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    async with serving(bus, echo(topic)), client_on(bus) as client:
        await bus.publish(topic, b"\xc1 not msgpack", {REQUEST_ID: "fire-and-forget"})
        dead = await receive(dlq)
        ok = await client.request(topic, EchoRequest(text="next"), EchoResponse, timeout=30)
    # With nobody to answer, it is dead-lettered before it is even decoded.
    assert "needs a reply-to" in dead.headers[H_REASON]
    assert ok.text == "next"


async def test_forged_reply_to_outside_the_prefix_is_never_published_to(open_bus, topic):
    bus = await open_bus()
    victim = f"{topic}-victim"
    victim_sub = await bus.subscribe(victim, f"victim-{topic}")
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    async with serving(bus, echo(topic)):
        headers = request_headers(request_id="forged", reply_to=victim, timeout_s=30)
        await bus.publish(topic, encode(EchoRequest(text="x")), headers)
        dead = await receive(dlq)
    assert "outside" in dead.headers[H_REASON] and REPLY_PREFIX in dead.headers[H_REASON]
    await bus.publish(victim, b"sentinel")
    assert (await receive(victim_sub)).body == b"sentinel"  # nothing reached the victim before it


async def test_request_past_its_deadline_is_dropped_and_counted(open_bus, topic):
    bus = await open_bus()
    before = counter(metrics.expired, "echo")
    async with serving(bus, echo(topic)), client_on(bus) as client:
        headers = request_headers(request_id="too-late", reply_to=client.reply_topic, timeout_s=30)
        headers[DEADLINE] = str(now_ms() - 1000)
        await bus.publish(topic, encode(EchoRequest(text="stale")), headers)
        fresh = await client.request(topic, EchoRequest(text="fresh"), EchoResponse, timeout=30)
    assert fresh.text == "fresh"
    assert counter(metrics.expired, "echo") == before + 1
    assert client.stats.late == 0  # no response was sent for the stale one


async def test_handler_over_its_time_limit_gets_a_timeout_error(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, echo(topic, handler_timeout_s=0.2)), client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="x", delay_s=5), EchoResponse, timeout=30)
    assert response.error is not None and response.error.type == "Timeout"


class InnerTimeout(EchoProcessor):
    """Raises TimeoutError with the request's text, as a handler whose sub-request timed out does."""

    async def handle(self, request, context):
        raise TimeoutError(request.text)


async def test_a_timeout_inside_the_handler_is_reported_as_itself_not_as_the_handler_limit(open_bus, topic):
    bus = await open_bus()
    before = counter(metrics.timeouts, "echo")
    processor = InnerTimeout("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))
    async with serving(bus, processor), client_on(bus) as client:
        inner = "no response on 'embed' to request r1 within 1s"
        response = await client.request(topic, EchoRequest(text=inner), EchoResponse, timeout=30)
    assert response.error is not None and (response.error.type, response.error.message) == ("Timeout", inner)
    assert counter(metrics.timeouts, "echo") == before  # the handler itself was within its limit


async def test_call_timeout_raises_and_the_late_response_is_dropped_and_counted(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, echo(topic)), client_on(bus) as client:
        with pytest.raises(RequestTimeout, match=topic):
            await client.request(topic, EchoRequest(text="slow", delay_s=0.5), EchoResponse, timeout=0.3)
        # The deadline in the envelope was 0.3 s; the handler was already running and answers late.
        await until(lambda: client.stats.late > 0, 30, lambda: f"the late response was not counted: {client.stats}")
        assert client.stats.late == 1
        ok = await client.request(topic, EchoRequest(text="after"), EchoResponse, timeout=30)
    assert ok.text == "after" and client.in_flight == 0


async def test_duplicate_response_is_dropped_and_counted(open_bus, topic):
    bus = await open_bus()
    async with client_on(bus) as client:
        call = asyncio.ensure_future(client.request(topic, EchoRequest(text="x"), EchoResponse, timeout=30))
        d = await receive(await bus.subscribe(topic, f"manual-{topic}"))
        reply = encode(EchoResponse(text="once"))
        await bus.publish(d.headers[REPLY_TO], reply, {REQUEST_ID: d.headers[REQUEST_ID]})
        await bus.publish(d.headers[REPLY_TO], reply, {REQUEST_ID: d.headers[REQUEST_ID]})
        assert (await call).text == "once"
        await until(lambda: client.stats.duplicates > 0, 30, lambda: f"the duplicate was not counted: {client.stats}")
    assert client.stats.duplicates == 1 and client.stats.late == 0


async def test_processor_concurrency_setting_is_honoured(topic):
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    processor = echo(topic, concurrency=3)
    running = peak = 0
    original = processor.handle

    async def counting(request, context):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await original(request, context)
        finally:
            running -= 1

    processor.handle = counting
    async with serving(bus, processor), client_on(bus) as client:
        calls = [client.request(topic, EchoRequest(text=str(i), delay_s=0.05), EchoResponse, timeout=30)
                 for i in range(12)]
        responses = await asyncio.gather(*calls)
    await bus.close()
    assert peak == 3
    assert sorted(r.text for r in responses) == sorted(str(i) for i in range(12))


async def test_thousands_of_requests_in_flight_each_get_their_own_response(topic):
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    async with serving(bus, echo(topic, concurrency=64)), client_on(bus) as client:
        texts = [f"q{i}" for i in range(3000)]
        responses = await asyncio.gather(
            *(client.request(topic, EchoRequest(text=t), EchoResponse, timeout=60) for t in texts)
        )
    await bus.close()
    assert [r.text for r in responses] == texts
    assert client.stats.answered == 3000 and client.stats.late == client.stats.duplicates == 0


def test_error_response_fills_required_fields():
    result = error_response(PromptResult, Error("Timeout", "slow"))
    assert (result.response_type, result.text, result.error) == ("error", "", Error("Timeout", "slow"))
    assert error_response(EchoResponse, Error("X", "y")).error == Error("X", "y")


async def test_a_failed_reply_publish_nacks_and_the_request_is_answered_on_redelivery(topic):
    """A transport failure is not a business error: the request comes back and is answered."""
    from ragbus.bus import connect

    bus = await connect(f"memory://{topic}")
    processor_bus = await connect(f"memory://{topic}")
    real_publish = processor_bus.publish
    failures = []

    async def flaky_publish(t, body, headers=None, key=None):
        if t.startswith(REPLY_PREFIX) and not failures:
            failures.append(t)
            raise ConnectionError("broker went away")
        await real_publish(t, body, headers, key)

    processor_bus.publish = flaky_publish
    async with serving(processor_bus, echo(topic)) as task, client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="retry me"), EchoResponse, timeout=30)
    assert response.text == "retry me" and failures
    assert task.result().nacked == 1 and task.result().acked == 1
    await bus.close()
    await processor_bus.close()
