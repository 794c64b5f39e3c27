"""OpenTelemetry spans for every hop, when the ``otel`` extra is installed and ``OTEL_*`` asks for them.

On when the OpenTelemetry SDK is importable and the environment names where spans go:
``OTEL_TRACES_EXPORTER`` (other than ``none``), ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_SERVICE_NAME``; ``OTEL_SDK_DISABLED=true``
turns it off. Then the spans are one middleware (``OpenTelemetry``, see ``middleware.py``), installed
as this module loads. Otherwise ``ENABLED`` is False, nothing of OpenTelemetry is imported, no
middleware is installed, and the processor and the client find none and go on as before.

The rest is the SDK's own configuration: exporters by ``OTEL_TRACES_EXPORTER`` (default
``otlp``; OTLP over HTTP unless ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc``, which needs
the gRPC exporter installed), endpoint and headers by ``OTEL_EXPORTER_OTLP_*``, the sampler
by ``OTEL_TRACES_SAMPLER``, the resource by ``OTEL_SERVICE_NAME`` (default ``ragbus``) and
``OTEL_RESOURCE_ATTRIBUTES``, batching by ``OTEL_BSP_*``. A tracer provider that something
else installed first (``opentelemetry-instrument``) is used as it is.

Spans, by OpenTelemetry's messaging conventions:

- ``process <topic>`` (CONSUMER), one per delivery a processor handles, child of the
  ``traceparent`` the request carries, with the topic, request id, the caller's attempt and
  the outcome (``ok``, ``error``, ``bad_request``, ``expired``, ``failed`` (retried or
  dead-lettered by the bus), ``rejected`` (dead-lettered at once), ``cancelled``);
- ``send <topic>`` (PRODUCER), one per call of the request client, from publishing until the
  answer (or the time-out): its ``traceparent`` is the one on the wire, so every attempt's
  ``process`` span, resends included, hangs under it; each resend is an event on it.

A processor's sub-requests are made while its ``process`` span is current, so they continue
the question's trace: one question, one trace, every hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

from ..bus import Delivery, Undecodable
from ..bus.consume import Oversized
from .envelope import ATTEMPT, REQUEST_ID
from .middleware import Call, Middleware, Pieces, RoundTrip, install, uninstall

_ASKS_FOR_SPANS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME")


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for spans (the SDK being installed is checked apart)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER")
    if exporters is not None and exporters.strip():
        return exporters.strip().lower() != "none"
    return any(environ.get(name) for name in _ASKS_FOR_SPANS)


# The one flag the hot paths check. find_spec imports nothing of the SDK itself.
ENABLED: bool = wanted(os.environ) and importlib.util.find_spec("opentelemetry.sdk") is not None

_tracer = None
_provider = None
OUTCOME = "ragbus.outcome"


def use(provider) -> None:
    """Export through ``provider`` (a ``TracerProvider``) from now on; tests pass one with an in-memory exporter.

    Processors decide when they start whether to trace, so call this before.
    """
    global ENABLED, _tracer, _provider
    _provider, _tracer = provider, provider.get_tracer("ragbus")
    ENABLED = True
    install(OPENTELEMETRY)


def disable() -> None:
    """No more spans (processors already started keep theirs)."""
    global ENABLED, _tracer, _provider
    ENABLED, _tracer, _provider = False, None, None
    uninstall(OPENTELEMETRY)


def _exporter(name: str):
    """The span exporter ``OTEL_TRACES_EXPORTER`` names, found by the SDK's entry points."""
    from importlib.metadata import entry_points

    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        # OTLP over HTTP is the specification's default and what the otel extra installs.
        name = "otlp_proto_grpc" if (protocol or "").strip() == "grpc" else "otlp_proto_http"
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        raise RuntimeError(
            f"OTEL_TRACES_EXPORTER asks for {name!r}, which is not installed "
            "(pip install 'ragbus[otel]' brings OTLP over HTTP)"
        )
    return found[0].load()()


def _from_environment():
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # configured already, say by opentelemetry-instrument
        return current
    defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "ragbus"}
    provider = TracerProvider(resource=Resource.create(defaults))  # the sampler: OTEL_TRACES_SAMPLER
    names = os.environ.get("OTEL_TRACES_EXPORTER") or "otlp"
    for name in names.split(","):
        if name.strip():
            provider.add_span_processor(BatchSpanProcessor(_exporter(name.strip())))
    trace.set_tracer_provider(provider)  # the SDK flushes it at exit
    return provider


def tracer():
    global _tracer, _provider
    if _tracer is None:
        _provider = _from_environment()
        _tracer = _provider.get_tracer("ragbus")
    return _tracer


async def flush(timeout_s: float = 5.0) -> None:
    """Export the spans still batched: the commands end with ``os._exit``, which skips the SDK's own flush at exit.

    Called as a processor stops and as a client closes; off the event loop, since the export blocks.
    """
    if _provider is not None:
        await asyncio.to_thread(_provider.force_flush, int(timeout_s * 1000))


def _system(bus_url: str) -> str:
    """``messaging.system``: ``kafka`` and ``pulsar`` are the convention's own names; ``memory`` is ours."""
    return bus_url.partition(":")[0] or "memory"


def traced_handler(name: str, group: str, bus_url: str, handler: Callable[[Delivery], Awaitable[None]]):
    """``handler`` inside a ``process <topic>`` span, child of the traceparent the delivery carries."""
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # The envelope's traceparent header is W3C trace context by definition, whatever OTEL_PROPAGATORS says.
    extract = TraceContextTextMapPropagator().extract
    system = _system(bus_url)
    spans = tracer()

    async def traced(d: Delivery) -> None:
        headers = d.headers
        attributes = {
            "messaging.system": system,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": d.topic,
            "messaging.consumer.group.name": group,
            "messaging.message.body.size": len(d.body),
            "messaging.message.conversation_id": headers.get(REQUEST_ID, ""),
            "ragbus.processor": name,
            "ragbus.request_id": headers.get(REQUEST_ID, ""),
            "ragbus.attempt": _attempt(headers),
            "ragbus.delivery_attempt": d.attempt,
        }
        with spans.start_as_current_span(
            f"process {d.topic}", context=extract(headers), kind=SpanKind.CONSUMER, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                await handler(d)
            except BaseException as exc:
                if isinstance(exc, (Undecodable, Oversized)):
                    outcome = "rejected"
                elif isinstance(exc, Exception):
                    outcome = "failed"
                else:
                    outcome = "cancelled"
                span.set_attribute(OUTCOME, outcome)
                if outcome != "cancelled":
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            if span.is_recording() and OUTCOME not in span.attributes:  # unsampled spans keep no attributes
                span.set_attribute(OUTCOME, "ok")

    return traced


def _attempt(headers: Mapping[str, str]) -> int:
    raw = headers.get(ATTEMPT, "1")
    return int(raw) if raw.isdigit() and len(raw) < 10 else 0


def outcome(value: str, error_type: str | None = None) -> None:
    """Say how the request being handled ended, on its ``process`` span (``ok`` when never said)."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    span = trace.get_current_span()
    span.set_attribute(OUTCOME, value)
    if error_type is not None:
        span.set_attribute("error.type", error_type)
        if value == "error":
            span.set_status(Status(StatusCode.ERROR, error_type))


def start_call(bus_url: str, topic: str, body_size: int, request_id: str, traceparent: str | None):
    """A ``send <topic>`` span for one call, child of the span being handled (else of ``traceparent``)."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = None
    if not trace.get_current_span().get_span_context().is_valid and traceparent:
        parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    return tracer().start_span(
        f"send {topic}", context=parent, kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": _system(bus_url),
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.message.body.size": body_size,
            "messaging.message.conversation_id": request_id,
            "ragbus.request_id": request_id,
        },
    )


def wire_traceparent(span) -> str:
    """The ``traceparent`` header that makes the receiver's span a child of ``span``."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def end_call(span, exc: BaseException | None) -> None:
    """End a call's span, its outcome told by ``exc``, the exception that ended the call (None: answered)."""
    from opentelemetry.trace import Status, StatusCode

    if exc is None:
        span.set_attribute(OUTCOME, "ok")
    else:
        timed_out = isinstance(exc, TimeoutError)
        span.set_attribute(OUTCOME, "timeout" if timed_out else "cancelled" if _cancelled(exc) else "error")
        span.set_attribute("error.type", type(exc).__name__)
        if isinstance(exc, Exception):
            span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
    span.end()


def _cancelled(exc: BaseException) -> bool:
    return not isinstance(exc, Exception)  # CancelledError, GeneratorExit: the caller stopped waiting


class OpenTelemetry(Middleware):
    """The spans above, as the runtime's hooks: ``process`` around a processor's handler, ``send`` around
    a client's call or stream, a resend an event on its ``send``."""

    def wrap_handler(self, handler, *, processor: str, group: str, bus_url: str):
        return traced_handler(processor, group, bus_url, handler)

    def outcome(self, value: str, error_type: str | None = None) -> None:
        outcome(value, error_type)

    async def flush(self) -> None:
        await flush()

    async def call(self, call: Call, call_next: RoundTrip) -> bytes:
        span = start_call(call.bus_url, call.topic, len(call.body), call.request_id, call.traceparent)
        call.state[self], call.traceparent = span, wire_traceparent(span)
        try:
            answer = await call_next(call)
        except BaseException as exc:
            end_call(span, exc)
            raise
        end_call(span, None)
        return answer

    async def stream(self, call: Call, pieces: Pieces) -> AsyncGenerator[bytes, None]:
        span = start_call(call.bus_url, call.topic, len(call.body), call.request_id, call.traceparent)
        call.state[self], call.traceparent = span, wire_traceparent(span)
        try:
            async with contextlib.aclosing(pieces(call)) as it:
                async for piece in it:
                    yield piece
        except BaseException as exc:
            end_call(span, exc)
            raise
        end_call(span, None)

    def resent(self, call: Call, attempt: int) -> None:
        span = call.state.get(self)
        if span is not None:
            span.add_event("resend", {"ragbus.attempt": attempt})


OPENTELEMETRY = OpenTelemetry()
if ENABLED:
    install(OPENTELEMETRY)
