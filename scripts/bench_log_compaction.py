"""The documents log before and after compaction, after every document was ingested ten times, on Kafka and Pulsar.

    python -m scripts.bench_log_compaction --documents 500 --editions 10
    python -m scripts.bench_log_compaction --backends kafka --documents 200

``--documents`` documents of ``--per-doc`` chunks (each with a 384-d vector, as in
``scripts/bench_log_replica.py``) are each written ``--editions`` times, a new version each time,
through the writers' own path, and the ingestion host's replica (``tombstones = true``) appends the
tombstones for what each switch superseded. Then, before and after the broker compacts the log:
its records, its bytes (Kafka: the partitions' files on the broker's disk; Pulsar: the topic's
storage, which compaction does not shrink, since the compacted view is a ledger beside it), and
a new replica's time to ready from empty and the records it read. After compaction the replica
must hold every document's last version, whole.

Kafka compacts a log's closed segments only: for the benchmark the topic is created with small
segments and an eager cleaner (``BENCH_KAFKA_TOPIC``), held off (``HELD``) until the log is written;
once the tombstones are in, each partition's active segment is closed by one more append (a
tombstone of a key of its own: Kafka rolls a segment only on an append); a deployment keeps
Kafka's defaults and compacts on the broker's schedule (the active segment rolls at ``segment.ms``,
7 days, or ``segment.bytes``, 1 GiB).
Pulsar is told to compact (its admin API) and the run waits until it has.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from ragbus.config.settings import bus_settings
from ragbus.bus import connect
from ragbus.stores.vectors.store import VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.schema.topics import CHANGELOG_PREFIX
from scripts.bench.brokers import broker_env, broker_for
from scripts.bench.documents_log import Writers
from scripts.bench_log_replica import replica_ready

# Test-only topic settings, so a short run sees compaction: closed segments of 1 MiB, cleaned as
# soon as any of it is dirty, tombstones dropped at once.
BENCH_KAFKA_TOPIC = {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "segment.ms": "2000",
                     "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                     "delete.retention.ms": "0", "max.message.bytes": str(16 << 20)}
# While the log is written: nothing is old enough to compact. Otherwise the cleaner, eager as it is
# set, cleaned the editions as they came, before the tombstones were in, and then never again (the
# tombstones alone are too little of the log to make it dirty enough).
HELD = {"min.compaction.lag.ms": str(7 * 24 * 3600 * 1000)}

PARTITIONS = 4


def _kafka_bytes(broker, topic: str) -> int:
    data = broker.workdir / "kafka-data"
    return sum(f.stat().st_size for d in data.glob(f"{topic}-*") for f in d.iterdir() if f.suffix == ".log")


def _pulsar_admin(broker, path: str, method: str = "GET"):
    request = urllib.request.Request(f"http://{broker.host}:{broker.http_port}/admin/v2/persistent/public/default/"
                                     f"{path}", method=method)
    with urllib.request.urlopen(request, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


def _pulsar_bytes(broker, topic: str) -> int:
    return int(_pulsar_admin(broker, f"{topic}/stats")["storageSize"])


async def _compact(backend: str, broker, topic: str, floor_s: float) -> float:
    """Until the broker has compacted the log (Kafka: its files stop shrinking); the seconds it took."""
    started = time.perf_counter()
    if backend == "kafka":
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
        await admin.start()
        try:  # not incremental: every setting of the topic's own is given again
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=BENCH_KAFKA_TOPIC)])
        finally:
            await admin.close()
    if backend == "pulsar":
        _pulsar_admin(broker, f"{topic}/compaction", "PUT")
        while True:
            status = _pulsar_admin(broker, f"{topic}/compaction")["status"]
            if status != "RUNNING":
                break
            await asyncio.sleep(0.5)
        if status != "SUCCESS":
            raise RuntimeError(f"Pulsar's compaction of {topic} ended {status}")
        return time.perf_counter() - started
    smallest, since = _kafka_bytes(broker, topic), time.perf_counter()
    while time.perf_counter() - since < floor_s:  # no smaller for floor_s: the cleaner is done
        await asyncio.sleep(1.0)
        size = _kafka_bytes(broker, topic)
        if size < smallest:
            smallest, since = size, time.perf_counter()
    return since - started


async def _roll_segments(bus, log: str, partitions: int) -> int:
    """Close every partition's active segment: Kafka never compacts it, and it rolls one only on an
    append ``segment.ms`` after the segment began, so the tombstones appended last would wait there.
    Appends a tombstone of a key no record has (a replica skips it) to each partition; how many."""
    await asyncio.sleep(int(BENCH_KAFKA_TOPIC["segment.ms"]) / 1000 + 1.0)
    rolled: set[str] = set()
    n = 0
    while len(rolled) < partitions:
        position = await bus.append(log, None, key=f"bench-roll-{n}")
        rolled.add(position.split(":", 1)[0])
        n += 1
    return n


async def _fresh_replica(bus, log: str, where: Path) -> tuple[float, int, int]:
    replica, ready_s = await replica_ready(bus, log, where)
    read = replica.follower.read if replica.follower else 0
    await replica.close()
    return ready_s, read, VectorStore(vectors_dir(where, "bench"), "bench", readonly=True).count()


async def run(backend: str, documents: int, editions: int, per_doc: int, workdir: Path) -> dict[str, float]:
    broker = broker_for(backend, workdir / f"{backend}-broker").start()
    log = f"{CHANGELOG_PREFIX}bench-{uuid.uuid4().hex[:6]}"
    try:
        if backend == "kafka":
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
            await admin.start()
            # No compaction until the log is whole: "before" is the log as written.
            await admin.create_topics([NewTopic(log, PARTITIONS, 1, topic_configs=BENCH_KAFKA_TOPIC | HELD)])
            await admin.close()
        async with await connect(broker.url, bus_settings(environ=broker_env(broker))) as bus:
            writers = Writers(bus, log)
            await writers.start()
            rng, slots = random.Random(7), asyncio.Semaphore(8)

            async def one(i: int, edition: int) -> None:
                async with slots:
                    await writers.document("bench", i, per_doc, rng, edition)

            for edition in range(editions):
                await asyncio.gather(*(one(i, edition) for i in range(documents)))
            await writers.close()
            # The ingestion host's replica: it appends the tombstones of every superseded version.
            tombstoning, _ = await replica_ready(bus, log, workdir / f"{backend}-ingest", tombstones=True)
            await tombstoning.close()
            size = _kafka_bytes if backend == "kafka" else _pulsar_bytes
            if backend == "kafka":
                await _roll_segments(bus, log, PARTITIONS)
            bytes_before = size(broker, log)
            before_s, read_before, held_before = await _fresh_replica(bus, log, workdir / f"{backend}-before")
            compaction_s = await _compact(backend, broker, log, floor_s=20.0)
            bytes_after = size(broker, log)
            after_s, read_after, held_after = await _fresh_replica(bus, log, workdir / f"{backend}-after")
            if not held_before == held_after == documents * per_doc:
                raise RuntimeError(f"a new replica held {held_before} chunks before compaction ({read_before} records "
                                   f"read) and {held_after} after ({read_after} read), of {documents * per_doc}")
    finally:
        broker.stop()
    return {"documents x editions": documents * editions, "chunks live": documents * per_doc,
            "log MB before": bytes_before / 2**20, "log MB after": bytes_after / 2**20,
            "records read from empty, before": read_before, "records read from empty, after": read_after,
            "ready from empty s, before": before_s, "ready from empty s, after": after_s,
            "compaction s (waited)": compaction_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--editions", type=int, default=10, help="times each document is written, a version each")
    parser.add_argument("--per-doc", type=int, default=20)
    parser.add_argument("--backends", default="kafka,pulsar")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-log-compaction-") as tmp:
        results = {b: asyncio.run(run(b, args.documents, args.editions, args.per_doc, Path(tmp)))
                   for b in args.backends.split(",")}
    names = list(next(iter(results.values())))
    print(f"{'':34}" + "".join(f"{b:>12}" for b in results))
    for name in names:
        print(f"{name:34}" + "".join(f"{results[b][name]:>12.1f}" for b in results))


if __name__ == "__main__":
    main()
