"""RPC over the bus: what every processor and caller shares above the bus, and below the stores.

- ``processor.py``: the base class that does all transport work for a processor;
- ``request_client.py``: ``RequestClient``, request/response over the bus, correlated by request id;
- ``replies.py``: the one reply inbox every ``RequestClient`` on a bus shares, its replies routed by request id;
- ``typed_clients.py``: one typed client per request topic, each over a ``RequestClient``;
- ``envelope.py``: the headers every request and response carries;
- ``sizing.py``: work split into messages that fit the bus;
- ``collection_check.py``: whether a collection holds anything (every face's "this collection is empty");
- ``middleware.py``: hooks around a processor's handling and a client's calls, and the installed ones;
- ``tracing.py``: OpenTelemetry spans for every hop, a middleware installed when ``OTEL_*`` asks for them;
- ``worker.py``: processors built from settings and run as workers of one process;
- ``pipeline_status.py``: what each processor of the wiring has waiting and who serves it (``ragbus status``);
- ``shard_status.py``: each shard's owners and standbys, from its replicas' reports (``ragbus status``);
- ``metrics.py``: Prometheus counters and histograms;
- ``recording.py``: topics recorded to JSON Lines and replayed;
- ``threads.py``: ``OneThread``, the single thread a processor's stores or model run on;
- ``http.py``: ``OpenAIEndpoint``, the client and retrying POST of OpenAI-compatible endpoints
  (embed's and prompt's ``openai`` backends).

Importing the package loads ``tracing.py``, which installs its middleware when the environment asks for
spans: every processor and client of the process is then traced, whatever module it was imported by.
"""

from . import tracing  # noqa: F401  (for what importing it does)
