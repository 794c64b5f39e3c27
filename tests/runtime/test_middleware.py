"""The runtime calls the hooks of every installed middleware (runtime/middleware.py), on the memory bus.

A middleware records each hook called: a processor's handler wrapped and run, its outcomes, its
``handle``, flushes; a client's call, stream, resend and routed reply; two installed nest, the first
outermost. None installed, a call makes nothing for them.
"""

from __future__ import annotations

import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.runtime import middleware
from ragbus.runtime.envelope import DEADLINE, now_ms, request_headers
from ragbus.schema import encode

from ..helpers.echo import EchoPiece, EchoRequest, EchoResponse, EchoSettings, StreamingEcho
from ..helpers.forgetful_echo import ForgetsFirstAttempts
from ..helpers.serving import client_on, echo, serving
from ..helpers.waiting import until

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Recorder(middleware.Middleware):
    """Every hook it gets, in order, in ``events``; its ``call`` puts ``traceparent`` on the wire when given."""

    def __init__(self, name: str, events: list[tuple], traceparent: str | None = None) -> None:
        self.name, self.events, self.traceparent = name, events, traceparent

    def note(self, *event) -> None:
        self.events.append((self.name, *event))

    def wrap_handler(self, handler, *, processor, group, bus_url):
        self.note("wrap_handler", processor, group, bus_url)

        async def recorded(d):
            self.note("delivery", d.topic)
            try:
                await handler(d)
            finally:
                self.note("delivered", d.topic)

        return recorded

    def outcome(self, value, error_type=None):
        self.note("outcome", value, error_type)

    def handle_started(self, context):
        self.note("handle_started", context.request_id, context.envelope.traceparent)

    def handle_ended(self, context):
        self.note("handle_ended", context.request_id)

    async def flush(self):
        self.note("flush")

    async def call(self, call, call_next):
        self.note("call", call.topic, call.request_id)
        if self.traceparent is not None:
            call.traceparent = self.traceparent
        try:
            return await call_next(call)
        finally:
            self.note("answered", call.request_id)

    async def stream(self, call, pieces):
        self.note("stream", call.topic, call.request_id)
        async for piece in pieces(call):
            self.note("piece")
            yield piece
        self.note("streamed", call.request_id)

    def resent(self, call, attempt):
        self.note("resent", call.request_id, attempt)

    def reply_routed(self, delivery):
        self.note("reply", delivery.headers.get("request-id"))


@pytest.fixture
async def bus():
    name = f"mw{uuid.uuid4().hex[:12]}"
    bus = await connect(f"memory://{name}")
    yield bus
    await bus.close()
    drop_memory_broker(name)


@pytest.fixture
def events():
    """Two recorders installed for the test, ``outer`` first; what both saw."""
    seen: list[tuple] = []
    outer, inner = Recorder("outer", seen), Recorder("inner", seen, traceparent=TRACEPARENT)
    middleware.install(outer)
    middleware.install(inner)
    try:
        yield seen
    finally:
        middleware.uninstall(outer)
        middleware.uninstall(inner)
    assert outer not in middleware.installed and inner not in middleware.installed


def of(events: list[tuple], name: str, hook: str | None = None) -> list[tuple]:
    return [e[1:] for e in events if e[0] == name and (hook is None or e[1] == hook)]


async def test_a_processor_and_a_client_call_the_hooks_of_every_installed_middleware(bus, events):
    topic = f"t-{uuid.uuid4().hex[:10]}"
    async with serving(bus, echo(topic)), client_on(bus) as client:
        answer = await client.request(topic, EchoRequest(text="hi"), EchoResponse, timeout=30)
        failed = await client.request(topic, EchoRequest(text="x", fail="broken"), EchoResponse, timeout=30)
        refused = await client.request_bytes(topic, b"not msgpack", timeout=30)
        stale = request_headers(request_id="too-late", reply_to=client.reply_topic, timeout_s=30)
        stale[DEADLINE] = str(now_ms() - 1000)
        await bus.publish(topic, encode(EchoRequest(text="stale")), stale)
        await until(lambda: ("outcome", "expired", None) in of(events, "inner"), 10, lambda: events)
    assert answer.text == "hi" and failed.error is not None and refused

    for name in ("outer", "inner"):
        assert of(events, name, "wrap_handler") == [("wrap_handler", "echo", f"echo-{topic}", bus.url)]
        # Each call: its hook around the round trip, the request id the processor saw, the reply routed to it.
        calls = [e[2] for e in of(events, name, "call")]
        assert len(calls) == 3 and calls[0] == answer.request_id
        assert [e[1] for e in of(events, name, "handle_started")] == calls[:2]  # a bad body never reaches handle
        assert [e[1] for e in of(events, name, "handle_ended")] == calls[:2]
        assert [e[1] for e in of(events, name, "reply")] == calls
        assert [e[1] for e in of(events, name, "answered")] == calls
        assert of(events, name, "outcome") == [
            ("outcome", "error", "RuntimeError"), ("outcome", "bad_request", "ValidationError"),
            ("outcome", "expired", None)]
        assert len(of(events, name, "delivery")) == len(of(events, name, "delivered")) == 4
        # Flushed as the client closed and as the processor stopped.
        assert len(of(events, name, "flush")) == 2
    # What the inner call hook put on the wire is what the processor read from the request.
    assert {e[2] for e in of(events, "inner", "handle_started")} == {TRACEPARENT}
    # The first installed is outermost: it sees a call begin first and end last, a delivery too.
    first = answer.request_id
    order = [(e[0], e[1]) for e in events if e[1] in ("call", "answered") and first in e]
    assert order == [("outer", "call"), ("inner", "call"), ("inner", "answered"), ("outer", "answered")]
    wrapped = [(e[0], e[1]) for e in events if e[1] in ("delivery", "delivered")]
    assert wrapped[:2] == [("outer", "delivery"), ("inner", "delivery")]
    ends = [i for i, e in enumerate(events) if e[:2] == ("inner", "delivered")]
    assert [events[i + 1][:2] for i in ends] == [("outer", "delivered")] * 4


async def test_a_resent_call_and_a_resent_stream_go_through_the_hooks(bus, events):
    topic = f"t-{uuid.uuid4().hex[:10]}"
    async with serving(bus, ForgetsFirstAttempts(topic)), client_on(bus, resend_after_s=0.3) as client:
        answer = await client.request(topic, EchoRequest(text="again"), EchoResponse, timeout=30)
    assert answer.text == "again"
    for name in ("outer", "inner"):
        assert of(events, name, "resent")[:1] == [("resent", answer.request_id, 2)]
    events.clear()

    streaming = f"s-{uuid.uuid4().hex[:10]}"
    settings = EchoSettings(topic=streaming, group=f"echo-{streaming}", drain_timeout_s=0.5)
    async with serving(bus, StreamingEcho("echo", settings, hang_after=1)), \
            client_on(bus, resend_after_s=0.3) as client:
        pieces = [p async for p in client.stream(streaming, EchoRequest(text="one two"), EchoPiece, timeout=30)]
    assert [p.text for p in pieces] == ["one", "two", "one two"]
    for name in ("outer", "inner"):
        ((_, _, request_id),) = of(events, name, "stream")
        assert of(events, name, "resent")[:1] == [("resent", request_id, 2)]
        assert len(of(events, name, "piece")) == 3 and of(events, name, "streamed") == [("streamed", request_id)]
        assert of(events, name, "call") == [] and of(events, name, "handle_started") == []  # a stream is not handle


async def test_with_none_installed_a_call_makes_nothing_for_middlewares(bus, monkeypatch):
    assert middleware.installed == []

    def refuse(*args, **kwargs):
        raise AssertionError("a call went through the middleware path with none installed")

    monkeypatch.setattr(middleware, "Call", refuse)
    monkeypatch.setattr(middleware, "around_call", refuse)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    async with serving(bus, echo(topic)), client_on(bus) as client:
        answer = await client.request(topic, EchoRequest(text="plain"), EchoResponse, timeout=30)
    assert answer.text == "plain"
