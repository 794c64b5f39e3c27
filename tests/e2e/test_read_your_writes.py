"""A write that was answered is seen by the next read: on the embedded default at once, on a shared data dir
with ``must_see``.

The embedded default (``ragbus serve`` on memory://, every processor in one process): an upload, a
text in cp1252, a JSON document and a delete, each followed at once by an ask that must find it (or
no longer find it), with no sleep between. Before, the query stores reloaded within their
``refresh_interval_s``, so the ask straight after an upload found nothing.

A shared data dir (a writer process and a reader process on Apache Kafka): the reader's stores are
set to reload only hourly, so only ``must_see`` can show it a new write: an ingest answers with the
token of its write to the files, and an ask carrying it reloads first.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from ragbus.config import pipelines
from ragbus.bus import connect
from ragbus.ingestion import DocumentSource, ingest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.testing.chaos import WorkerProcess, worker_env
from ragbus.testing.gateway import GatewayProcess
from ragbus.schema import Document
from ragbus.schema.changelog import FILE_WRITES

from ..helpers.brokers import settings_for_tests


def kettle(i: int) -> str:
    return f"The Quokka{i} kettle boils a litre of water in {40 + i} seconds and whistles twice when done."


def cited(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [c.split("#")[0] for c in response.json()["cited"]]


def test_on_the_embedded_default_every_read_after_an_answered_write_sees_it(tmp_path):
    with GatewayProcess(env={"RAGBUS_DATA_DIR": str(tmp_path / "data")}, log_path=tmp_path / "serve.log") as g, \
            httpx.Client(base_url=g.url, timeout=120) as http:
        for i in range(4):
            if i % 2:  # an upload of a text file in cp1252, as the page sends it
                files = {"file": (f"quokka{i}.txt", kettle(i).replace("twice", "twice \u2013 loudly").encode("cp1252"),
                                  "text/plain")}
                stored = http.post("/v1/documents", files=files, data={"collection": "kitchen"})
            else:
                stored = http.post("/v1/documents", json={"text": kettle(i), "document_id": f"quokka{i}.txt",
                                                          "title": f"Quokka{i}", "collection": "kitchen"})
            assert stored.status_code == 201, stored.text
            document_id = stored.json()["document_id"]
            for mode in ("keyword", "vector"):  # at once, both stores
                ask = {"question": f"How fast does the Quokka{i} kettle boil?", "collection": "kitchen", "mode": mode}
                assert document_id in cited(http.post("/v1/ask", json=ask)), (i, mode)
        assert http.delete("/v1/documents/quokka2.txt", params={"collection": "kitchen"}).status_code == 200
        for mode in ("keyword", "vector"):
            ask = {"question": "How fast does the Quokka2 kettle boil?", "collection": "kitchen", "mode": mode}
            assert "quokka2.txt" not in cited(http.post("/v1/ask", json=ask)), mode


@pytest.mark.brokers
async def test_on_a_shared_data_dir_must_see_shows_a_reader_process_the_write(kafka_broker, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    groups = {f"RAGBUS_PROCESSORS__{n.upper().replace('-', '_')}__GROUP": f"{n}-{suffix}" for n in pipelines.INGEST}
    hourly = {f"RAGBUS_PROCESSORS__{n.upper().replace('-', '_')}__REFRESH_INTERVAL_S": "3600"
              for n in ("doc-embeddings-query", "fetch-chunk", "keyword-query")}
    shared = str(tmp_path / "shared")
    writer = WorkerProcess(list(pipelines.INGEST), kafka_broker.url,
                           worker_env(shared, suffix, {**groups, **kafka_broker.client_env}))
    reader = WorkerProcess([n for n in pipelines.QUERY if n != "embed"], kafka_broker.url,
                           worker_env(shared, suffix, {**hourly, **kafka_broker.client_env}))
    try:
        await writer.start(timeout=300)
        await reader.start(timeout=300)
        async with await connect(kafka_broker.url, settings_for_tests(kafka_broker)) as bus, \
                RequestClient(bus, name="shared", timeout_s=120) as client:
            rag = DocumentRagClient(client, timeout=120)

            async def write(i: int) -> list[str]:
                doc = Document(document_id=f"quokka{i}", title=f"Quokka{i}", text=kettle(i), collection="kitchen")
                summary = await ingest(client, [DocumentSource.of(doc)], timeout=120)
                assert summary.documents == 1 and not summary.failed, summary
                assert summary.seen and all(s.startswith(FILE_WRITES + "@") for s in summary.seen), summary.seen
                return summary.seen

            async def finds(i: int, must_see: list[str]) -> bool:
                answer = await rag.ask(f"How fast does the Quokka{i} kettle boil?", collection="kitchen",
                                       mode="keyword", must_see=must_see)
                return any(c.startswith(f"quokka{i}#") for c in answer.cited)

            assert await finds(0, await write(0))
            seen = await write(1)
            assert not await finds(1, [])  # hourly reloads: without the token the reader still holds its old view
            assert await finds(1, seen)
    finally:
        await reader.stop(timeout=30)
        await writer.stop(timeout=30)
