"""A query host's data dir removed while it runs: the worker says why and exits, and started again it rebuilds.

A query host with stores from the log (a worker process, Apache Kafka) holds a document; its data
dir is then removed under it. Before, nothing noticed: the host went on saying it was caught up while
asks failed on tantivy's lock file and switches were skipped. Now the replica notices within a check,
the worker logs the data dir it lost, stops being ready and exits non-zero; started again (as a
supervisor would) on the empty dir, it rebuilds from the log and answers from it.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid

import pytest

from ragbus.bus import connect
from ragbus.ingestion import DocumentSource, ingest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import FetchChunkClient
from ragbus.testing.chaos import WorkerProcess
from ragbus.testing.log_hosts import host_env, host_topic, role_args
from ragbus.schema import Document

from ..helpers.brokers import settings_for_tests

pytestmark = pytest.mark.brokers


@pytest.mark.timeout(600)
async def test_a_replica_whose_data_dir_is_removed_exits_and_rebuilds_from_the_log(kafka_broker, tmp_path):
    suffix = uuid.uuid4().hex[:8]

    def process(host: str, query: bool) -> WorkerProcess:
        env = host_env(tmp_path, host, suffix, query=query, group=None if query else f"writers-{suffix}",
                       extra=dict(kafka_broker.client_env))
        return WorkerProcess(role_args(query), kafka_broker.url, env)

    writer, query = process("w1", False), process("q1", True)
    try:
        await asyncio.gather(writer.start(timeout=300), query.start(timeout=300))
        async with await connect(kafka_broker.url, settings_for_tests(kafka_broker)) as bus, \
                RequestClient(bus, name="removed", timeout_s=120) as client:
            doc = Document(document_id="anchor", title="Anchor", collection="c",
                           text="The anchor chain of the Maren is ninety metres of galvanised steel.")
            summary = await ingest(client, [DocumentSource.of(doc)], timeout=120)
            assert summary.documents == 1, summary
            fetch = FetchChunkClient(client, topic=host_topic("fetch-chunk", "q1"), timeout=120)
            assert [c.chunk_id for c in await fetch.fetch(["anchor#0"], collection="c", must_see=summary.seen)] == \
                ["anchor#0"]

            shutil.rmtree(tmp_path / "q1")
            assert query.proc is not None
            code = await asyncio.wait_for(query.proc.wait(), 120)  # a check a second; generous under load
            assert code != 0
            said = "\n".join(query.log)
            assert "was removed or replaced while it ran" in said and str(tmp_path / "q1") in said, said[-2000:]

            query = process("q1", True)  # as its supervisor would: on the empty dir, from the log
            await query.start(timeout=300)
            assert [c.chunk_id for c in await fetch.fetch(["anchor#0"], collection="c", must_see=summary.seen)] == \
                ["anchor#0"]
    finally:
        await query.stop(timeout=30)
        await writer.stop(timeout=30)
