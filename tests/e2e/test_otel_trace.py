"""OpenTelemetry: one question is one trace of real spans, every hop's ``process`` under the ``send`` that asked.

The spans are the SDK's own, caught by its in-memory exporter; the pipeline is the real one
(tests/e2e/test_ask.py), on the memory bus and on Kafka. Run with ``-s`` to see the trace.
"""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from processors.runtime import tracing  # noqa: E402
from schema import topics  # noqa: E402

from ..runtime.echo import EchoRequest, EchoResponse  # noqa: E402
from ..runtime.test_processor import client_on, serving  # noqa: E402
from ..runtime.test_resend import ForgetsFirstAttempts  # noqa: E402
from .test_ask import pipeline  # noqa: E402

HOPS = {topics.EMBED, topics.DOC_EMBEDDINGS_QUERY, topics.KEYWORD_QUERY, topics.KG_QUERY, topics.PROMPT}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.disable()
    provider.shutdown()


def show(finished) -> str:
    """The trace as a tree: each span's name, kind, duration and outcome, children indented."""
    by_parent: dict[int | None, list] = {}
    ids = {s.context.span_id for s in finished}
    for s in finished:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(s)
    lines = []

    def walk(parent, depth):
        for s in sorted(by_parent.get(parent, []), key=lambda s: s.start_time):
            ms = (s.end_time - s.start_time) / 1e6
            extra = f" attempt={s.attributes.get('ragbus.attempt')}" if s.kind is SpanKind.CONSUMER else ""
            lines.append(f"{'  ' * depth}{s.name:<{40 - 2 * depth}} {s.kind.name:<8} {ms:8.1f} ms "
                         f"{s.attributes.get('ragbus.outcome')}{extra}")
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


@pytest.mark.parametrize("backend", ["memory", pytest.param("kafka", marks=pytest.mark.brokers)])
async def test_one_question_is_one_trace_with_a_span_for_every_hop(backend, request, tmp_path, monkeypatch, spans):
    url = f"memory://{tmp_path.name}" if backend == "memory" else request.getfixturevalue("kafka_broker").url
    async with pipeline(url, tmp_path, monkeypatch, collection=f"otel-{tmp_path.name[-8:].lower()}") as ask:
        spans.clear()  # ingestion's traces are not this question's
        response = await ask("What does the else clause of a for loop do?", mode="hybrid")
    # The pipeline has stopped, so every handler, and its span, has finished.
    assert response.error is None and response.cited
    finished = spans.get_finished_spans()
    print(f"\n{backend}: {len(finished)} spans\n{show(finished)}")
    assert len({s.context.trace_id for s in finished}) == 1, show(finished)
    (root,) = [s for s in finished if s.parent is None]
    assert root.name == f"send {topics.DOCUMENT_RAG}" and root.kind is SpanKind.PRODUCER
    by_id = {s.context.span_id: s for s in finished}
    processed = [s for s in finished if s.kind is SpanKind.CONSUMER]
    assert HOPS | {topics.DOCUMENT_RAG} <= {s.attributes["messaging.destination.name"] for s in processed}
    system = url.partition(":")[0]
    for span in processed:
        sender = by_id[span.parent.span_id]  # every process span hangs under the send that asked for it
        assert sender.kind is SpanKind.PRODUCER and span.name == f"process {span.attributes['messaging.destination.name']}"
        assert sender.attributes["messaging.destination.name"] == span.attributes["messaging.destination.name"]
        assert span.attributes["messaging.message.conversation_id"] == sender.attributes["ragbus.request_id"]
        assert span.attributes["messaging.system"] == system == sender.attributes["messaging.system"]
        assert span.attributes["messaging.operation.type"] == "process"
        assert sender.attributes["messaging.operation.type"] == "send"
        assert (span.attributes["ragbus.attempt"], span.attributes["ragbus.outcome"]) == (1, "ok")
        assert sender.attributes["ragbus.outcome"] == "ok"
    (orchestrator,) = [s for s in processed if s.attributes["messaging.destination.name"] == topics.DOCUMENT_RAG]
    for sender in finished:
        if sender.kind is SpanKind.PRODUCER and sender is not root:
            assert sender.parent.span_id == orchestrator.context.span_id, sender.name  # asked while handling


@pytest.mark.parametrize("backend", ["memory", pytest.param("kafka", marks=pytest.mark.brokers)])
async def test_a_resend_is_a_second_attempt_under_the_same_send(backend, open_bus, topic, spans):
    bus = await open_bus()
    async with serving(bus, ForgetsFirstAttempts(topic)), client_on(bus, resend_after_s=0.3) as client:
        answer = await client.request(topic, EchoRequest(text="again"), EchoResponse, timeout=30)
        failed = await client.request(topic, EchoRequest(text="x", fail="broken"), EchoResponse, timeout=30)
    assert answer.text == "again" and failed.error is not None
    finished = spans.get_finished_spans()
    print(f"\n{backend}:\n{show(finished)}")
    first, second = sorted((s for s in finished if s.kind is SpanKind.PRODUCER), key=lambda s: s.start_time)
    assert [e.attributes["ragbus.attempt"] for e in first.events if e.name == "resend"][:1] == [2]
    attempts = sorted(
        (s for s in finished if s.kind is SpanKind.CONSUMER and s.parent.span_id == first.context.span_id),
        key=lambda s: s.attributes["ragbus.attempt"],
    )
    assert [s.attributes["ragbus.attempt"] for s in attempts][:2] == [1, 2]
    assert {s.context.trace_id for s in attempts} == {first.context.trace_id}
    # A failure of the handler is an error response, and its span says so.
    failures = [s for s in finished if s.kind is SpanKind.CONSUMER and s.parent.span_id == second.context.span_id]
    assert [s.attributes["ragbus.outcome"] for s in failures][-1] == "error"
    assert failures[-1].status.status_code is StatusCode.ERROR and failures[-1].attributes["error.type"] == "RuntimeError"
