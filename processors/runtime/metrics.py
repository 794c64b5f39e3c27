"""Counters and latency histograms, exposed in Prometheus text format.

One registry per process, labelled by processor (or by topic for callers),
so replicas of a processor running as tasks of one worker add up, and
``ragbus worker --all`` exposes every processor on one port.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, start_http_server

REGISTRY = CollectorRegistry()

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

requests = Counter("ragbus_requests", "Requests a processor took from its topic", ["processor"], registry=REGISTRY)
errors = Counter(
    "ragbus_errors", "Requests the processor failed on, answered with an error response", ["processor", "type"],
    registry=REGISTRY,
)
bad_requests = Counter(
    "ragbus_bad_requests",
    "Requests refused as the caller's mistake (invalid, out of range): answered, but not counted in ragbus_errors",
    ["processor", "type"],
    registry=REGISTRY,
)
timeouts = Counter("ragbus_timeouts", "Handlers stopped at their time limit", ["processor"], registry=REGISTRY)
expired = Counter(
    "ragbus_expired", "Requests dropped unhandled because their deadline had passed", ["processor"], registry=REGISTRY
)
dead_lettered = Counter(
    "ragbus_dead_lettered", "Messages sent to the dead-letter topic", ["processor", "reason"], registry=REGISTRY
)
latency = Histogram(
    "ragbus_request_seconds", "Time from receipt to response sent", ["processor"], buckets=_BUCKETS, registry=REGISTRY
)

client_requests = Counter("ragbus_client_requests", "Requests sent by callers", ["topic"], registry=REGISTRY)
client_timeouts = Counter(
    "ragbus_client_timeouts", "Calls that got no response in time", ["topic"], registry=REGISTRY
)
client_late = Counter(
    "ragbus_client_late_responses", "Responses that arrived after their call timed out", registry=REGISTRY
)
client_duplicates = Counter(
    "ragbus_client_duplicate_responses", "Second and later responses to one request", registry=REGISTRY
)
client_latency = Histogram(
    "ragbus_client_request_seconds", "Round trip seen by callers", ["topic"], buckets=_BUCKETS, registry=REGISTRY
)


def exposition() -> bytes:
    """The current metrics in Prometheus text format."""
    return generate_latest(REGISTRY)


def serve_metrics(port: int, host: str = "127.0.0.1"):
    """Serve ``/metrics`` on ``host:port`` from a background thread; returns the server."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    return server
