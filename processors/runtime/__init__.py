"""What every processor and caller shares above the bus, and below any one processor.

- ``processor.py``: the base class that does all transport work for a processor;
- ``request_client.py``: ``RequestClient``, request/response over the bus, correlated by request id;
- ``replies.py``: the one reply inbox every ``RequestClient`` on a bus shares, its replies routed by request id;
- ``typed_clients.py``: one typed client per request topic, each over a ``RequestClient``;
- ``envelope.py``: the headers every request and response carries;
- ``worker.py``: processors built from settings and run as workers of one process;
- ``metrics.py``: Prometheus counters and histograms;
- ``recording.py``: topics recorded to JSON Lines and replayed;
- ``threads.py``: ``OneThread``, the single thread a processor's stores or model run on;
- ``store_lock.py``: the writer lock of a store's data directory, so a second writer process refuses to start;
- ``http.py``: ``OpenAIEndpoint``, the client and retrying POST of OpenAI-compatible endpoints
  (embed's and prompt's ``openai`` backends).
"""
