"""OpenTelemetry: one question is one trace of real spans, every hop's ``process`` under the ``send`` that asked.

The spans are the SDK's own, caught by its in-memory exporter; the pipeline is the real one
(tests/helpers/rag_pipeline.py), on the memory bus and on Kafka. Run with ``-s`` to see the trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from ragbus.runtime import tracing
from ragbus.schema import topics

from ..helpers.forgetful_echo import ForgetsFirstAttempts
from ..helpers.rag_pipeline import pipeline
from ..helpers.serving import client_on, serving
from ..helpers.echo import EchoRequest, EchoResponse
from ..runtime.workers import REPO, Worker, write_config

HOPS = {topics.EMBED, topics.DOC_EMBEDDINGS_QUERY, topics.KEYWORD_QUERY, topics.KG_QUERY, topics.PROMPT}


@pytest.fixture
def spans():
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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
    from opentelemetry.trace import SpanKind

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
    from opentelemetry.trace import SpanKind

    assert response.error is None and response.cited
    finished = spans.get_finished_spans()
    print(f"\n{backend}: {len(finished)} spans\n{show(finished)}")
    (root,) = [s for s in finished if s.parent is None and s.name == f"send {topics.DOCUMENT_RAG}"]
    assert root.kind is SpanKind.PRODUCER
    # Other traces are not this question's: ingestion's last spans can end after spans.clear(), and
    # on a broker shared by the session a new group's processor may meet earlier tests' requests.
    # None of them may carry a request of the question (that would be a hop that lost its parent);
    # a hop missing from the question's trace fails the checks on the trace below.
    mine = [s for s in finished if s.context.trace_id == root.context.trace_id]
    asked = {s.attributes["ragbus.request_id"] for s in mine if s.kind is SpanKind.PRODUCER}
    strays = [s for s in finished if s.context.trace_id != root.context.trace_id]
    assert not [s for s in strays if {s.attributes.get("ragbus.request_id"),
                                      s.attributes.get("messaging.message.conversation_id")} & asked], show(finished)
    finished = mine
    assert [s for s in finished if s.parent is None] == [root], show(finished)
    by_id = {s.context.span_id: s for s in finished}
    processed = [s for s in finished if s.kind is SpanKind.CONSUMER]
    assert HOPS | {topics.DOCUMENT_RAG} <= {s.attributes["messaging.destination.name"] for s in processed}
    system = url.partition(":")[0]
    for span in processed:
        sender = by_id[span.parent.span_id]  # every process span hangs under the send that asked for it
        assert sender.kind is SpanKind.PRODUCER
        assert span.name == f"process {span.attributes['messaging.destination.name']}"
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
    from opentelemetry.trace import SpanKind, StatusCode

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
    assert failures[-1].status.status_code is StatusCode.ERROR
    assert failures[-1].attributes["error.type"] == "RuntimeError"


def test_without_otel_settings_nothing_of_opentelemetry_is_loaded():
    """Off is free: the processor and the client check one flag, and the SDK is never imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    probe = (
        "import sys; import ragbus.runtime.processor, ragbus.runtime.request_client, ragbus.runtime.worker;"
        "from ragbus.runtime import tracing;"
        "print(tracing.ENABLED, sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], env=dict(env, PYTHONPATH=str(REPO)), cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "[]"], run.stdout + run.stderr


@pytest.mark.parametrize(("environ", "on"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "rag"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "rag"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
])
def test_which_environments_ask_for_spans(environ, on):
    assert tracing.wanted(environ) is on


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps each export's spans as (service name, span name, attributes)."""

    received: ClassVar[list[tuple[str, str, dict]]] = []  # one handler per request: the server's list

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        export = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource_spans in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.received.append((service, span.name, {a.key: a.value for a in span.attributes}))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:
        pass


@pytest.mark.brokers
async def test_a_worker_exports_its_spans_by_otlp_to_the_endpoint_the_environment_names(kafka_broker, topic, tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.received = []
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "ragbus-echo"}
    worker = None
    try:
        os.environ.update(otel)  # read by the worker process only: this one decided at import
        try:
            worker = await Worker.start(kafka_broker.url, write_config(tmp_path / "w.toml", topic))
        finally:
            for name in otel:
                os.environ.pop(name)
        await worker.ready()
        bus = await _bus(kafka_broker.url)
        async with client_on(bus) as client:
            answers = [await client.request(topic, EchoRequest(text=str(i)), EchoResponse, timeout=30)
                       for i in range(3)]
        await bus.close()
        assert [a.text for a in answers] == ["0", "1", "2"]
        worker.proc.send_signal(signal.SIGTERM)
        assert await worker.finish() == 0, worker.output  # the SDK exports what is left as the process exits
    finally:
        if worker is not None:
            await worker.reap()
        collector.shutdown()
        collector.server_close()
    process = [(service, attrs) for service, name, attrs in _Collector.received if name == f"process {topic}"]
    assert len(process) == 3, (_Collector.received, worker.output)
    for service, attrs in process:
        assert service == "ragbus-echo"
        assert attrs["messaging.system"].string_value == "kafka"
        assert attrs["messaging.consumer.group.name"].string_value == f"echo-{topic}"
        assert attrs["ragbus.outcome"].string_value == "ok"


async def _bus(url):
    from ragbus.bus import connect

    from ..helpers.brokers import settings_for_tests

    return await connect(url, settings_for_tests())


async def test_a_stream_stalled_and_resent_is_one_send_span_over_both_attempts(open_bus, topic, spans):
    from opentelemetry.trace import SpanKind

    from ..helpers.echo import EchoPiece, EchoSettings, StreamingEcho

    bus = await open_bus()
    echo = StreamingEcho("echo", EchoSettings(topic=topic, group=f"echo-{topic}", drain_timeout_s=0.5), hang_after=1)
    async with serving(bus, echo), client_on(bus, resend_after_s=0.3) as client:
        pieces = [p async for p in client.stream(topic, EchoRequest(text="one two three"), EchoPiece, timeout=30)]
    assert pieces[-1].done and [p.text for p in pieces[:-1]] == ["one", "two", "three"]
    finished = spans.get_finished_spans()
    (send,) = [s for s in finished if s.kind is SpanKind.PRODUCER]
    assert send.attributes["ragbus.outcome"] == "ok" and [e.name for e in send.events][:1] == ["resend"]
    # Attempt 1 hangs until the processor stops (its span ends cancelled); attempt 2 runs to the end.
    outcomes = {s.attributes["ragbus.attempt"]: s.attributes["ragbus.outcome"]
                for s in finished if s.kind is SpanKind.CONSUMER and s.parent.span_id == send.context.span_id}
    assert outcomes == {1: "cancelled", 2: "ok"}, outcomes


async def test_unsampled_requests_are_served_and_export_nothing(open_bus, topic):
    """OTEL_TRACES_SAMPLER may drop most traces: a span that records nothing must not get in the way."""
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        bus = await open_bus()
        async with serving(bus, ForgetsFirstAttempts(topic)) as served, client_on(bus, resend_after_s=0.3) as client:
            answer = await client.request(topic, EchoRequest(text="quiet"), EchoResponse, timeout=30)
            failed = await client.request(topic, EchoRequest(text="x", fail="broken"), EchoResponse, timeout=30)
    finally:
        tracing.disable()
        provider.shutdown()
    assert answer.text == "quiet" and failed.error is not None
    stats = served.result()  # every delivery handled and acked: none failed inside the tracing
    assert (stats.nacked, stats.dead_lettered) == (0, 0) and stats.acked == stats.received, stats
    assert exporter.get_finished_spans() == ()
