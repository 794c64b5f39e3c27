"""Counters and latency histograms, exposed in Prometheus text format.

Named by Prometheus's conventions: counters end in ``_total`` (prometheus_client adds it:
``ragbus_requests`` is exposed as ``ragbus_requests_total``), times are in seconds
(``_seconds``), and labels are few-valued (processor, topic, error type); never a request id.
config/monitoring/ holds alert rules and a Grafana dashboard over these names.

One registry per process, labelled by processor (or by topic for callers),
so replicas of a processor running as tasks of one worker add up, and
``ragbus worker --all`` exposes every processor on one port.

The same port answers an orchestrator's probes: ``/health`` (200 while the
process serves HTTP at all) and ``/ready`` (200 once every processor of the
worker has joined its topic, 503 before that and once it is stopping).
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

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
in_progress = Gauge(
    "ragbus_requests_in_progress", "Requests a processor is handling now", ["processor"], registry=REGISTRY
)

client_requests = Counter("ragbus_client_requests", "Requests sent by callers", ["topic"], registry=REGISTRY)
client_timeouts = Counter(
    "ragbus_client_timeouts", "Calls that got no response in time", ["topic"], registry=REGISTRY
)
client_resends = Counter(
    "ragbus_client_resends", "Requests sent again, unanswered after resend_after_s", ["topic"], registry=REGISTRY
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


class Readiness:
    """What ``/ready`` answers: set by the worker once its processors joined, cleared when it stops."""

    def __init__(self) -> None:
        self.ready = False


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:
        pass  # a scrape every few seconds is not news


def serve_metrics(port: int, host: str = "127.0.0.1", readiness: Readiness | None = None):
    """Serve ``/metrics``, ``/health`` and ``/ready`` on ``host:port`` from a background thread; returns the server.

    prometheus_client's own ``start_http_server`` serves only metrics; this is its WSGI app
    on the same threading server, with the two probe paths in front (no readiness: always ready).
    """
    scrape = make_wsgi_app(REGISTRY)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path not in ("/health", "/ready"):
            return scrape(environ, start_response)
        ok = path == "/health" or readiness is None or readiness.ready
        status, body = ("200 OK", b"ok\n") if ok else ("503 Service Unavailable", b"not ready\n")
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
