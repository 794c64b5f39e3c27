"""One writer process per data directory: a second writer refuses to start, says why, and never reports ready.

Without the lock, two ``ragbus worker --all`` on one data dir
both printed ``ready``, then ingests failed with ``keyword-delete:
ValueError: Failed to acquire Lockfile: LockBusy``, because tantivy locks an
index only when the first write opens it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import pytest

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.keyword import KeywordDeleteProcessor, KeywordSettings, KeywordStoreProcessor
from ragbus.kg import KgSettings, KgStoreProcessor
from ragbus.library import DocumentRecordProcessor, LibrarySettings
from ragbus.stores.writer_lock import StoreLocked, take_writer_lock
from ragbus.stores.layout import lock_path
from ragbus.runtime.worker import processors_running, run_workers

REPO = Path(__file__).resolve().parents[2]


def writer_settings(data_dir: Path):
    settings = load_settings(environ={})
    for name in pipelines.WRITERS:
        settings.processors[name]["data_dir"] = str(data_dir)
    return settings


async def test_a_second_writer_pipeline_in_one_process_is_refused_before_it_is_ready(tmp_path):
    settings = writer_settings(tmp_path)
    async with processors_running(settings, list(pipelines.WRITERS), f"memory://{uuid.uuid4().hex[:8]}"):
        readied, stop = [], asyncio.Event()

        def ready() -> None:
            readied.append(True)
            stop.set()  # a second writer that got this far would run on: end it, so the test fails, not hangs

        with pytest.raises(StoreLocked) as refused:
            await run_workers(settings, list(pipelines.WRITERS), bus_url=f"memory://{uuid.uuid4().hex[:8]}",
                              stop=stop, handle_signals=False, on_ready=ready)
        assert readied == []
        message = str(refused.value)
        # Which store, which data dir, which lock file, who holds it, and how to lay writers out.
        assert message.startswith("kg-store cannot start: another writer (pid ")
        assert f"the kg store of data dir {tmp_path.resolve()}" in message
        assert str(lock_path(tmp_path.resolve(), "kg")) in message
        assert "one writer process per data dir" in message.lower() and "query replicas" in message
    # The first pipeline has stopped and let go: a writer may start again.
    async with processors_running(settings, list(pipelines.WRITERS), f"memory://{uuid.uuid4().hex[:8]}"):
        pass


@pytest.mark.parametrize("writer", [KeywordStoreProcessor, KeywordDeleteProcessor, KgStoreProcessor,
                                    DocumentRecordProcessor])
async def test_each_writer_refuses_a_data_dir_whose_lock_another_holds(writer, tmp_path):
    store, settings_class = {
        KgStoreProcessor: ("kg", KgSettings), DocumentRecordProcessor: ("documents", LibrarySettings),
    }.get(writer, ("keyword", KeywordSettings))
    held = take_writer_lock(tmp_path, store, processor="another process")
    settings = settings_class(topic="t", group="g", data_dir=str(tmp_path))
    processor = writer("w", settings)
    try:
        with pytest.raises(StoreLocked, match=f"^w cannot start: another writer \\(pid {os.getpid()} on "):
            await processor.start()
    finally:
        await processor.close()
        held.release()
    await processor.start()  # free again: it starts
    await processor.close()


async def test_keyword_store_and_delete_of_one_process_share_the_lock(tmp_path):
    store = KeywordStoreProcessor("keyword-store", KeywordSettings(topic="a", group="a", data_dir=str(tmp_path)))
    delete = KeywordDeleteProcessor("keyword-delete", KeywordSettings(topic="b", group="b", data_dir=str(tmp_path)))
    await store.start()
    await delete.start()
    await store.close()
    with pytest.raises(StoreLocked):  # delete still runs, so the data dir is still written
        take_writer_lock(tmp_path, "keyword", processor="probe")
    await delete.close()
    take_writer_lock(tmp_path, "keyword", processor="probe").release()


class Worker:
    """``python -m ragbus.cli worker --all --bus URL`` with the test's data dir; stderr kept whole."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, url: str, env: dict[str, str]) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ragbus.cli", "worker", "--all", "--bus", url,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )
        return cls(proc)

    async def outcome(self, timeout: float = 120) -> str:
        """'ready' once it says so, else 'exited' when it ends first."""
        async def scan() -> str:
            assert self.proc.stderr is not None
            async for raw in self.proc.stderr:
                line = raw.decode(errors="replace").rstrip()
                self.lines.append(line)
                if line == "ready":
                    return "ready"
            await self.proc.wait()
            return "exited"

        return await asyncio.wait_for(scan(), timeout)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
        await asyncio.wait_for(self.proc.communicate(), 60)


@pytest.mark.brokers
@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_a_second_worker_on_one_data_dir_exits_with_why_and_never_says_ready(which, request, tmp_path):
    # On Kafka a Tansu of its own: a new group on the session's broker first reads every earlier
    # test's requests from the start of each topic, and under load the ingest below ran out of time.
    url = request.getfixturevalue("own_kafka_broker" if which == "kafka" else "pulsar_broker").url
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGBUS_DATA_DIR": str(tmp_path / "data"),
           "RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD": "8"}
    for name in pipelines.EVERYTHING:  # groups of this test's own: the brokers outlive it
        env[f"RAGBUS_PROCESSORS__{name.upper().replace('-', '_')}__GROUP"] = f"{name}-{suffix}"
    first = await Worker.start(url, env)
    try:
        assert await first.outcome() == "ready", "\n".join(first.lines)
        second = await Worker.start(url, env)
        try:
            assert await second.outcome() == "exited", "the second writer said ready:\n" + "\n".join(second.lines)
            assert second.proc.returncode != 0
            error = [line for line in second.lines if line.startswith("ragbus: error: ")]
            assert len(error) == 1, "\n".join(second.lines)
            assert "cannot start: another writer (pid " in error[0]
            assert f"of data dir {(tmp_path / 'data').resolve()}" in error[0] and "writer.lock" in error[0]
            assert "Traceback" not in "\n".join(second.lines)
        finally:
            await second.stop()
        # The first worker serves on: a document ingests through it.
        doc = tmp_path / "shipping.txt"
        doc.write_text("Parcels ship within two working days; express parcels ship the same day.")
        ingest = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ragbus.cli", "ingest", str(doc), "--bus", url, "--collection", f"locks-{suffix}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )
        _, err = await asyncio.wait_for(ingest.communicate(), 120)
        assert ingest.returncode == 0, err.decode()
        assert "1 document(s), 1 chunk(s)" in err.decode()
    finally:
        await first.stop()
