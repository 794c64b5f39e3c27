"""Each replica of a log says on the bus how far it has applied it, and ``ragbus status`` shows it.

On every backend: a documents-replica catching up reports, while it catches up, records it has
not applied (where the backend can count them), then that it has caught up with nothing
behind; the pipeline's status lists it; once it stops, its report is gone. On Kafka and Pulsar
``ragbus status`` shows the same, as a user runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.stores.reports import ReportLoop, replica_id
from ragbus.runtime.pipeline_status import read_reports, statuses
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.log_documents import write_documents

REPO = Path(__file__).resolve().parents[2]


async def _report_of(bus, replica: str) -> dict | None:
    found = [r for r in await read_reports(bus) if r.replica == replica]
    return None if not found else {f: getattr(found[0], f) for f in found[0].__struct_fields__}


async def test_a_replica_reports_its_lag_while_it_catches_up_then_none_and_goes_when_it_stops(
        backend, bus_url, open_bus, tmp_path):
    bus = await open_bus()
    log = f"{CHANGELOG_PREFIX}documents-{uuid.uuid4().hex[:8]}"
    await write_documents(bus, log, 6)
    replica = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
        data_dir=str(tmp_path), log_topic=log, report_interval_s=0.2, batch_s=0))
    replica.bus = bus
    during = []
    documents = replica.replica
    apply = documents._apply

    async def apply_and_report(record) -> None:  # a report made while it catches up, at its third record
        await apply(record)
        assert documents.reports is not None
        if documents.follower is not None and documents.follower.read == 2:
            during.append(await documents.reports.report())

    documents._apply = apply_and_report  # type: ignore[method-assign]
    await replica.start()
    name = replica_id("documents-replica", tmp_path)
    try:
        records = replica.follower.read if replica.follower else 0
        assert records == 6 * 3 + 2 * 3 + 2  # runs, switches, records; two new versions; a removal and its record
        (mid,) = during
        assert not mid.caught_up and mid.log_topic == log
        # Kafka and memory count what is left (the record being applied too); Pulsar cannot.
        assert mid.behind == (None if backend == "pulsar" else records - 2)
        latest = None
        for _ in range(100):
            latest = await _report_of(bus, name)
            if latest and latest["caught_up"] and latest["applied"] == records:
                break
            await asyncio.sleep(0.1)
        assert latest and latest["caught_up"] and latest["applied"] == records and latest["behind"] == 0, latest
        status = await statuses(bus, [])
        assert name in {r.replica for r in status.replicas}
        if backend != "memory":  # the command, as a user runs it (a memory bus is this process's only)
            shown = _ragbus_status(bus_url)
            assert any(r["replica"] == name and r["behind"] == 0 and r["caught_up"] for r in shown["replicas"])
    finally:
        await replica.close()
    assert await _report_of(bus, name) is None  # stopped: its report went with it


async def test_a_report_loop_keeps_reporting_after_a_failed_append(bus_url, open_bus, tmp_path):
    class Flaky:
        def __init__(self, bus) -> None:
            self.bus, self.failures = bus, 1

        async def append(self, *args, **kwargs):
            if self.failures:
                self.failures -= 1
                raise OSError("broker away")
            return await self.bus.append(*args, **kwargs)

        def __getattr__(self, name: str):  # the rest is the bus's own (whether it knows the broker away)
            return getattr(self.bus, name)

    bus = await open_bus()

    class Follower:
        topic, applied = f"{CHANGELOG_PREFIX}x", 3

        async def behind(self):
            return 0

        async def caught_up(self):
            return True

        def checkpoint(self):
            return "cp"

    loop = ReportLoop(Flaky(bus), Follower(), "r@h:/d", interval_s=0.05)  # type: ignore[arg-type]
    loop.start()
    try:
        for _ in range(100):
            if await _report_of(bus, "r@h:/d"):
                break
            await asyncio.sleep(0.05)
        assert (await _report_of(bus, "r@h:/d") or {}).get("applied") == 3
    finally:
        await loop.close()


def _ragbus_status(url: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "ragbus.cli", "status", "--bus", url, "--processors", "documents-replica",
         "--json"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
