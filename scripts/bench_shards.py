"""Sharded query hosts against one unsharded host holding the same collection, in one run on Apache Kafka.

    python -m scripts.bench_shards                # 1,000,000 chunks, 4 shards on 4 hosts, HNSW (hnsw_threshold 1)
    python -m scripts.bench_shards --index flat   # the same with exact faiss search
    python -m scripts.bench_shards --chunks 2000 --queries 40 --load 64 --warm 5   # a smoke test: two minutes

On one broker's documents log: the eval corpus (scripts/eval) ingested by an ingestion host (document-load,
embed) into collection "default", then ``--chunks`` synthetic chunks (random unit vectors of the embedder's
dimension, texts of the eval questions' words) appended by the log's writers into "synthetic". Then, one
deployment after the other, query hosts as worker processes on empty data dirs: ONE unsharded host, then
``--shards`` hosts of ``[stores] shards = N`` (graph off in both). Measured: time to ready (N started together),
the first search of every store, each host's VmRSS after it, R@5 of the eval questions (hybrid; vector and
keyword say which side a difference comes from), hybrid latency at concurrency 1 through document-rag on
"synthetic" with its stages and sub-requests, throughput at ``--concurrency`` and the CPU of every process per
question; the load average beside each.

The last line: ``shards: N hosts, memory per host A x one host, ready from empty B x, p50 C x, R@5 D vs E``:
A, the largest sharded host's RSS after its first search over the unsharded host's (the mean in brackets);
B, the slowest sharded host's time to ready over the unsharded host's; C, the sharded hybrid p50 over the
unsharded; D vs E, hybrid R@5 on the test half, sharded vs unsharded. With fewer cores than hosts the hosts
share them: the CPU seconds each took to ready are printed beside the wall times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ragbus.bus import connect
from ragbus.config.settings import bus_settings
from ragbus.ingestion import builtin_corpus, ingest
from ragbus.runtime.pipeline_status import read_reports
from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.runtime.typed_clients import DocEmbeddingsClient, DocumentRagClient, EmbedClient, KeywordClient, RemoteError
from ragbus.schema.shards import SHARD_MARK, shard_topic
from ragbus.schema.topics import CHANGELOG_PREFIX
from ragbus.testing.brokers import free_port
from ragbus.testing.chaos import WorkerProcess
from ragbus.testing.log_hosts import host_env, host_topic, role_args, var
from scripts.bench.brokers import broker_env, broker_for
from scripts.bench.cpu import cpu_of
from scripts.bench.documents_log import Writers
from scripts.bench.memory import status_mb
from scripts.bench.stats import percentile
from scripts.eval import evalset
from scripts.eval.scoring import per_question

EVAL, SYNTHETIC = "default", "synthetic"  # the collections: the eval corpus, the synthetic chunks
SERVED = ("doc-embeddings-query", "fetch-chunk", "keyword-query")  # what shard-host serves per shard
SHARED = ("document-rag", "embed", "prompt")  # on the sharded hosts, one group across hosts (a role's replicas)
MODES = ("hybrid", "vector", "keyword")  # of the recall pass
K = 10  # chunks asked per question, as scripts.eval_retrieval asks (R@5 is of the first five)
START_TIMEOUT_S = 4 * 3600.0
SEARCH_TIMEOUT_S = 1800.0  # the first search builds the index: at 1,000,000 chunks, minutes
SUB_REQUESTS = ("doc-embeddings-query", "keyword-query", "fetch-chunk", "embed", "prompt")


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load()}] {text}", file=sys.stderr, flush=True)


# -- the hosts ---------------------------------------------------------------------------------------------


@dataclass
class Host:
    name: str
    worker: WorkerProcess
    metrics_port: int
    ready_s: float = 0.0
    ready_cpu_s: float = 0.0
    rss_ready_mb: float = 0.0
    rss_mb: float = 0.0  # after the first searches
    hwm_mb: float = 0.0  # the peak, then

    @property
    def pid(self) -> int:
        assert self.worker.pid is not None
        return self.worker.pid


@dataclass
class Deployment:
    """One deployment's hosts, where its document-rag is asked, and what the first search asks of its stores."""

    name: str
    hosts: list[Host]
    rag_topic: str
    embed_topic: str
    stores: list[tuple[str, str]]  # (doc-embeddings-query topic, keyword-query topic): one pair a shard
    figures: dict[str, float] = field(default_factory=dict)
    stages: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ranked: dict[str, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(dict))  # mode: question: ids
    subrequests: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # label: calls/q, rtt, handler
    problems: list[str] = field(default_factory=list)
    idle: dict[str, float] = field(default_factory=dict)  # each process's CPU asked nothing, % of a core
    cpu_split: dict[str, float] = field(default_factory=dict)  # each process's CPU ms a question, concurrency 1


def common_env(args) -> dict[str, str]:
    """What every host of both deployments is given: the index type, bounds long enough for a first search."""
    partitions = args.shards * -(-4 // args.shards)  # the log's partitions: a multiple of the shards, at least 4
    env = {"RAGBUS_BUS__KAFKA__CHANGELOG_TOPICS__PARTITIONS": str(partitions),
           var("doc-embeddings-query", "hnsw_threshold"): "1" if args.index == "hnsw" else str(2**31 - 1),
           var("document-rag", "use_graph"): "false",  # retrieval is what shards change; no graph in either
           var("document-rag", "max_doc_limit"): str(max(K, 50))}
    for name in SERVED:  # the first search of a store loads it and builds its index, past the default 30 s
        env[var(name, "handler_timeout_s")] = str(SEARCH_TIMEOUT_S)
    return env


def unsharded(workdir: Path, suffix: str, url: str, args) -> Deployment:
    port = free_port()
    env = host_env(workdir, "one", suffix, query=True,
                   extra={**common_env(args), "RAGBUS_METRICS__PORT": str(port)})
    host = Host("one", WorkerProcess(role_args(True), url, env), port)
    return Deployment("unsharded", [host], host_topic("document-rag", "one"), host_topic("embed", "one"),
                      [(host_topic("doc-embeddings-query", "one"), host_topic("keyword-query", "one"))])


def sharded(workdir: Path, suffix: str, url: str, log: str, args) -> Deployment:
    """N hosts of ``[stores] shards = N``: each shard's processors on ``<topic>.shard-<k>`` whoever owns it, and
    document-rag, embed and prompt on topics the hosts share, one group each, as a role's replicas do."""
    common = {f"{name}-topic": f"{name}-{suffix}-sharded" for name in (*SERVED, *SHARED)}
    hosts = []
    for i in range(args.shards):
        name, port = f"s{i}", free_port()
        extra = {**common_env(args), "RAGBUS_METRICS__PORT": str(port), "RAGBUS_STORES__SHARDS": str(args.shards),
                 var("shard-host", "log_topic"): log, var("shard-host", "host_id"): name,
                 var("shard-host", "start_timeout_s"): str(START_TIMEOUT_S), var("document-rag", "log_topic"): log}
        for served in (*SERVED, *SHARED):
            extra[var(served, "topic")] = extra[var(served, "group")] = common[f"{served}-topic"]
        for key, served in (("embed_topic", "embed"), ("prompt_topic", "prompt"),
                            ("doc_embeddings_topic", "doc-embeddings-query"), ("fetch_chunk_topic", "fetch-chunk"),
                            ("keyword_topic", "keyword-query")):
            extra[var("document-rag", key)] = common[f"{served}-topic"]
        env = host_env(workdir, name, suffix, query=True, extra=extra)
        hosts.append(Host(name, WorkerProcess(role_args(True), url, env), port))
    stores = [(shard_topic(common["doc-embeddings-query-topic"], k), shard_topic(common["keyword-query-topic"], k))
              for k in range(args.shards)]
    return Deployment(f"{args.shards} shards", hosts, common["document-rag-topic"], common["embed-topic"], stores)


async def start_hosts(deployment: Deployment, bus, log: str, workdir: Path, every_s: float) -> None:
    """Every host of ``deployment`` started at once on an empty data dir; each one's time and CPU to ready."""

    async def one(host: Host) -> None:
        started = time.perf_counter()
        await host.worker.start(timeout=START_TIMEOUT_S)
        host.ready_s, host.ready_cpu_s = time.perf_counter() - started, cpu_of(host.pid)
        host.rss_ready_mb = status_mb("VmRSS", host.pid)
        say(f"{deployment.name}: host {host.name} ready in {host.ready_s:.1f} s ({host.ready_cpu_s:.1f} CPU s, "
            f"RSS {host.rss_ready_mb:.0f} MB)")

    say(f"{deployment.name}: starting {len(deployment.hosts)} host(s) on empty data dirs")
    starting = asyncio.ensure_future(asyncio.gather(*(one(h) for h in deployment.hosts)))
    try:
        while True:
            done, _ = await asyncio.wait([starting], timeout=every_s)
            if done:
                starting.result()
                return
            await progress(deployment, bus, log, workdir)
    except BaseException:
        starting.cancel()
        raise


async def progress(deployment: Deployment, bus, log: str, workdir: Path) -> None:
    """How far each replica of ``log`` says it has applied it, and each host's CPU and memory so far."""
    with contextlib.suppress(Exception):  # progress only: a report that cannot be read is no failure
        reports = [r for r in await read_reports(bus, timeout_s=5) if r.log_topic == log]
        parts = []
        for host in deployment.hosts:
            where = f"{workdir / host.name}"  # a replica's id ends in its data dir: the host's, or a shard's in it
            mine = [r for r in reports if r.replica.endswith(f":{where}") or f":{where}/" in r.replica]
            applied = sum(r.applied for r in mine)
            behind = sum(r.behind or 0 for r in mine)
            state = "ready" if host.worker.ready else f"{applied:,} applied, {behind:,} behind"
            parts.append(f"{host.name}: {state}, {cpu_of(host.worker.pid):.0f} CPU s, "
                         f"RSS {status_mb('VmRSS', host.pid):.0f} MB")
        say(f"{deployment.name}: catching up: " + "; ".join(parts))


async def first_searches(deployment: Deployment, client: RequestClient, question: str) -> None:
    """Each store of each shard asked once, in both collections: the collections load and faiss builds its index."""
    (vector,) = await EmbedClient(client, topic=deployment.embed_topic, timeout=SEARCH_TIMEOUT_S).embed([question])

    async def shard(vectors_topic: str, keywords_topic: str) -> None:
        for collection in (SYNTHETIC, EVAL):
            await DocEmbeddingsClient(client, topic=vectors_topic, timeout=SEARCH_TIMEOUT_S).query(
                [vector], limit=K, collection=collection)
            await KeywordClient(client, topic=keywords_topic, timeout=SEARCH_TIMEOUT_S).query(
                query=question, limit=K, collection=collection)

    started = time.perf_counter()
    await asyncio.gather(*(shard(v, k) for v, k in deployment.stores))
    deployment.figures["first searches s (every shard at once)"] = time.perf_counter() - started


# -- the loads ---------------------------------------------------------------------------------------------


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    degraded: int = 0
    errors: int = 0
    seconds: float = 0.0


async def ask_many(rag: DocumentRagClient, questions: Sequence[str], total: int, concurrency: int,
                   collection: str, deployment: Deployment | None = None) -> Load:
    """``total`` hybrid questions at ``concurrency``; with ``deployment``, each answer's stage timings kept there."""
    out = Load()
    numbers = iter(range(total))

    async def worker() -> None:
        for n in numbers:
            started = time.perf_counter()
            try:
                r = await rag.ask(questions[n % len(questions)], mode="hybrid", doc_limit=K, collection=collection)
            except (RemoteError, RequestTimeout) as exc:
                out.errors += 1
                if deployment is not None and len(deployment.problems) < 5:
                    deployment.problems.append(f"{collection}: {exc}"[:300])
                continue
            out.latencies.append(time.perf_counter() - started)
            out.degraded += bool(r.degraded)
            if deployment is not None:
                for stage, ms in r.timings_ms.items():
                    deployment.stages[stage].append(ms)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.seconds = time.perf_counter() - started
    return out


async def recall(deployment: Deployment, rag: DocumentRagClient, questions: Sequence[evalset.Question],
                 relevant: dict[str, list[str]]) -> None:
    """R@5 of the eval questions, each half, in each mode (hybrid is the figure; vector and keyword say which side
    a difference comes from); the hybrid p50 on the small eval collection beside it."""
    latencies = []
    for q in questions:
        for mode in MODES:
            started = time.perf_counter()
            r = await rag.ask(q.question, mode=mode, doc_limit=K, collection=EVAL)
            if mode == "hybrid":
                latencies.append(time.perf_counter() - started)
            deployment.ranked[mode][q.id] = [c.chunk_id for c in r.chunks]
            if r.degraded:
                deployment.problems.append(f"{mode} {q.id}: degraded: {'; '.join(r.problems)}"[:300])
    for mode in MODES:
        scores = per_question(relevant, deployment.ranked[mode])["R@5"]
        for half in evalset.SPLITS:
            ids = [q.id for q in questions if q.split == half]
            deployment.figures[f"{mode} R@5, {half} half ({len(ids)} questions)"] = statistics.fmean(
                scores[i] for i in ids)
    deployment.figures["eval collection: hybrid p50 ms, concurrency 1"] = percentile(latencies, 50) * 1000


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """(metric sample, label name, label) -> value of a host's request histograms' sums and counts."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in ("ragbus_request_seconds", "ragbus_client_request_seconds"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                label = "processor" if "processor" in sample.labels else "topic"
                out[(sample.name, label, sample.labels.get(label, ""))] = sample.value
    return out


def sub_request(name: str) -> str | None:
    """``doc-embeddings-query-one``, ``keyword-query-<run>-sharded.shard-2``, ``embed`` -> the processor it names,
    with its shard (``keyword-query.shard-2``); None for what document-rag does not ask."""
    for kind in SUB_REQUESTS:
        if name.startswith(kind):
            shard = name.rpartition(SHARD_MARK)[2] if SHARD_MARK in name else ""
            return f"{kind}{SHARD_MARK}{shard}" if shard else kind
    return None


def subrequests(before: list[dict], after: list[dict], queries: int) -> dict[str, tuple[float, float, float]]:
    """Per sub-request of document-rag: calls per question, mean round trip ms (as document-rag saw it), mean
    handler ms (receipt to response sent, on the host that answered), over the hosts' metrics between scrapes."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for b, a in zip(before, after, strict=True):
        for (sample, label, value), v in a.items():
            name = sub_request(value)
            if name is None:
                continue
            side = "client" if label == "topic" else "server"
            sums[(name, side)][sample.endswith("_count")] += v - b.get((sample, label, value), 0.0)
    out = {}
    for name in sorted({n for n, _ in sums}):
        (rtt_s, calls), (handler_s, handled) = sums[(name, "client")], sums[(name, "server")]
        out[name] = (calls / queries, 1000 * rtt_s / calls if calls else float("nan"),
                     1000 * handler_s / handled if handled else float("nan"))
    return out


async def measure(deployment: Deployment, bus, client: RequestClient, log: str, workdir: Path, broker_pid: int,
                  questions: Sequence[evalset.Question], relevant: dict[str, list[str]], args) -> None:
    f = deployment.figures
    await start_hosts(deployment, bus, log, workdir, args.progress_s)
    slowest = max(deployment.hosts, key=lambda h: h.ready_s)
    f["ready from empty s (the slowest host)"] = slowest.ready_s
    f["CPU s to ready (the most of a host)"] = max(h.ready_cpu_s for h in deployment.hosts)
    f["RSS MB at ready (the largest host)"] = max(h.rss_ready_mb for h in deployment.hosts)
    texts = [q.question for q in questions]
    say(f"{deployment.name}: first search of every store (faiss builds its index)")
    await first_searches(deployment, client, texts[0])
    rag = DocumentRagClient(client, topic=deployment.rag_topic, timeout=120)
    await ask_many(rag, texts, args.warm, 1, SYNTHETIC)  # warm: connections, the orchestrator, each host's embed
    for host in deployment.hosts:
        host.rss_mb, host.hwm_mb = status_mb("VmRSS", host.pid), status_mb("VmHWM", host.pid)
    f["RSS MB after first search (the largest host)"] = max(h.rss_mb for h in deployment.hosts)
    f["RSS MB after first search (mean of hosts)"] = statistics.fmean(h.rss_mb for h in deployment.hosts)
    f["peak RSS MB (the largest host)"] = max(h.hwm_mb for h in deployment.hosts)
    say(f"{deployment.name}: RSS after the first search: " + ", ".join(
        f"{h.name} {h.rss_mb:.0f} MB (peak {h.hwm_mb:.0f})" for h in deployment.hosts))

    say(f"{deployment.name}: recall: {len(questions)} eval questions, {', '.join(MODES)}")
    f["load average (1 min): recall"] = os.getloadavg()[0]
    await recall(deployment, rag, questions, relevant)

    pids = [h.pid for h in deployment.hosts]
    processes = {**{h.name: h.pid for h in deployment.hosts}, "broker": broker_pid}

    def cpu() -> float:
        return sum(map(cpu_of, pids)) + cpu_of(broker_pid) + time.process_time()

    def cpu_each() -> dict[str, float]:
        return {**{name: cpu_of(pid) for name, pid in processes.items()}, "this bench": time.process_time()}

    # Idle: what each process burns asked nothing (a fixed window: a rate measured, not a condition waited for).
    idle0, idle_at = cpu_each(), time.perf_counter()
    await asyncio.sleep(args.idle_s)
    idle_s = time.perf_counter() - idle_at
    deployment.idle = {name: 100 * (used - idle0[name]) / idle_s for name, used in cpu_each().items()}

    say(f"{deployment.name}: latency: {args.queries} hybrid questions at concurrency 1 on {SYNTHETIC}")
    before = [await asyncio.to_thread(scrape, h.metrics_port) for h in deployment.hosts]
    f["load average (1 min): concurrency 1"] = os.getloadavg()[0]
    cpu0, each0 = cpu(), cpu_each()
    one = await ask_many(rag, texts, args.queries, 1, SYNTHETIC, deployment)
    f["CPU ms per question, concurrency 1 (every process)"] = 1000 * (cpu() - cpu0) / max(1, len(one.latencies))
    deployment.cpu_split = {name: 1000 * (used - each0[name]) / max(1, len(one.latencies))
                            for name, used in cpu_each().items()}
    after = [await asyncio.to_thread(scrape, h.metrics_port) for h in deployment.hosts]
    deployment.subrequests = subrequests(before, after, max(1, len(one.latencies) + one.errors))
    f["hybrid p50 ms, concurrency 1"] = percentile(one.latencies, 50) * 1000
    f["hybrid p99 ms, concurrency 1"] = percentile(one.latencies, 99) * 1000

    say(f"{deployment.name}: throughput: {args.load} hybrid questions at concurrency {args.concurrency}")
    f["load average (1 min): throughput"] = os.getloadavg()[0]
    cpu0 = cpu()
    many = await ask_many(rag, texts, args.load, args.concurrency, SYNTHETIC)
    f[f"questions/s, concurrency {args.concurrency}"] = len(many.latencies) / many.seconds
    f[f"CPU ms per question, concurrency {args.concurrency} (every process)"] = \
        1000 * (cpu() - cpu0) / max(1, len(many.latencies))
    f[f"hybrid p50 ms, concurrency {args.concurrency}"] = percentile(many.latencies, 50) * 1000 \
        if many.latencies else float("nan")
    f["degraded answers (both loads)"] = one.degraded + many.degraded
    f["failed questions (both loads)"] = one.errors + many.errors
    if one.errors + many.errors:
        deployment.problems.append(f"{one.errors + many.errors} questions failed")


# -- the collection ----------------------------------------------------------------------------------------


async def ingest_eval(url: str, workdir: Path, suffix: str, args, client: RequestClient) -> int:
    """The eval corpus through an ingestion host's document-load and embed; the embedder's dimension."""
    env = host_env(workdir, "ingest", suffix, query=False, extra=common_env(args))
    say("ingestion host: starting")
    worker = await WorkerProcess(role_args(False), url, env).start(timeout=600)
    try:
        documents = builtin_corpus(EVAL)
        say(f"ingesting the eval corpus: {len(documents)} documents")

        def told(done: int, total: int, _name: str) -> None:
            if done % 20 == 0 or done == total:
                say(f"  {done}/{total} documents")

        summary = await ingest(client, documents, timeout=900, on_progress=told)
        if summary.failed:
            raise SystemExit(f"ingesting the eval corpus failed: {summary.failed[:3]}")
        say(f"ingested {summary.documents} documents, {summary.chunks} chunks in {summary.seconds:.1f} s")
        (vector,) = await EmbedClient(client, timeout=120).embed(["the embedder's dimension"])
    finally:
        await worker.stop()  # its replica would follow the synthetic chunks too: not what is measured
    return len(vector)


async def append_synthetic(bus, log: str, args, dimension: int, words: Sequence[str]) -> dict[str, float]:
    """``--chunks`` synthetic chunks appended to the log by the writers, ``--per-doc`` a document, with progress."""
    writers = Writers(bus, log)
    await writers.start()
    documents = -(-args.chunks // args.per_doc)
    rng = random.Random(20240650)
    numbers = iter(range(documents))
    done = 0
    started = last = time.perf_counter()

    async def worker() -> None:
        nonlocal done, last
        for i in numbers:
            await writers.document(SYNTHETIC, i, args.per_doc, rng, words=words, words_per_chunk=args.words,
                                   dimension=dimension)
            done += 1
            if time.perf_counter() - last > args.progress_s or done == documents:
                last = time.perf_counter()
                rate = done * args.per_doc / (last - started)
                say(f"appended {done * args.per_doc:,}/{documents * args.per_doc:,} chunks, {rate:,.0f} chunks/s, "
                    f"about {(documents - done) * args.per_doc / rate:,.0f} s to go")

    try:
        await asyncio.gather(*(worker() for _ in range(args.append_concurrency)))
    finally:
        await writers.close()
    seconds = time.perf_counter() - started
    return {"chunks": documents * args.per_doc, "append s": seconds, "chunks/s": documents * args.per_doc / seconds}


# -- the run -----------------------------------------------------------------------------------------------


def table(deployments: list[Deployment]) -> None:
    one, shards = deployments
    rows = list(dict.fromkeys([*one.figures, *shards.figures]))
    print(f"\n{'':58}{one.name:>14}{shards.name:>14}{'ratio':>10}")
    for row in rows:
        a, b = one.figures.get(row, float("nan")), shards.figures.get(row, float("nan"))
        ratio = f"{b / a:>9.2f}x" if a and not row.startswith(("load", "degraded", "failed")) else ""
        print(f"{row:58}{a:>14,.3f}{b:>14,.3f}{ratio}")
    for d in deployments:
        print(f"\n{d.name}, each host: " + "; ".join(
            f"{h.name}: ready {h.ready_s:.1f} s, {h.ready_cpu_s:.1f} CPU s, RSS {h.rss_ready_mb:.0f} MB at ready, "
            f"{h.rss_mb:.0f} MB after first search, peak {h.hwm_mb:.0f} MB" for h in d.hosts))
    print("\nwhere a question's time goes, concurrency 1 (document-rag's timings_ms, p50 ms):")
    print(f"  {'stage':24}{one.name:>14}{shards.name:>14}")
    for stage in dict.fromkeys([*one.stages, *shards.stages]):
        cells = [f"{percentile(d.stages[stage], 50):>14.1f}" if d.stages.get(stage) else f"{'-':>14}"
                 for d in deployments]
        print(f"  {stage:24}{''.join(cells)}")
    print("\ndocument-rag's sub-requests, concurrency 1 (the hosts' metrics: calls a question, mean ms):")
    print(f"  {'deployment':14}{'sub-request':34}{'calls/q':>9}{'round trip':>12}{'handler':>10}")
    for d in deployments:
        for name, (calls, rtt, handler) in d.subrequests.items():
            if calls:
                print(f"  {d.name:14}{name:34}{calls:>9.2f}{rtt:>12.1f}{handler:>10.1f}")
    print("\nCPU by process: idle (% of a core, asked nothing) and ms per question at concurrency 1:")
    for d in deployments:
        print(f"  {d.name}: " + ", ".join(f"{name} {d.idle.get(name, 0):.1f}% / {ms:.1f} ms"
                                         for name, ms in d.cpu_split.items()))
    for d in deployments:
        for problem in d.problems[:5]:
            print(f"{d.name}: {problem}")


def differing(one: Deployment, shards: Deployment, mode: str) -> tuple[int, int]:
    """Questions whose first five chunks in ``mode`` differ between the deployments: as a set, and in order."""
    a, b = one.ranked[mode], shards.ranked[mode]
    return (sum(set(a[q][:5]) != set(b.get(q, [])[:5]) for q in a),
            sum(a[q][:5] != b.get(q, [])[:5] for q in a))


async def run(args, workdir: Path) -> list[Deployment]:
    suffix = uuid.uuid4().hex[:8]
    log = f"{CHANGELOG_PREFIX}documents-{suffix}"
    questions = evalset.load_questions()
    relevant = evalset.resolve(questions, evalset.corpus_chunks(), split=[])
    words = sorted({w for q in questions for w in re.findall(r"[a-z]{2,}", q.question.lower())})
    broker = broker_for("kafka", workdir / "broker")
    say("starting Apache Kafka")
    broker.start()
    try:
        assert broker.process is not None
        env = {**os.environ, **broker_env(broker), **common_env(args)}
        async with await connect(broker.url, bus_settings(environ=env)) as bus, \
                RequestClient(bus, name="bench-shards", timeout_s=SEARCH_TIMEOUT_S) as client:
            dimension = await ingest_eval(broker.url, workdir, suffix, args, client)
            say(f"appending {args.chunks:,} synthetic chunks of {dimension} dimensions to {log}")
            appended = await append_synthetic(bus, log, args, dimension, words)
            say(f"appended {appended['chunks']:,} chunks in {appended['append s']:.1f} s "
                f"({appended['chunks/s']:,.0f} chunks/s)")
            deployments = [unsharded(workdir, suffix, broker.url, args),
                           sharded(workdir, suffix, broker.url, log, args)]
            for deployment in deployments:
                try:
                    await measure(deployment, bus, client, log, workdir, broker.process.pid, questions, relevant,
                                  args)
                finally:
                    for host in deployment.hosts:
                        await host.worker.stop()
                        shutil.rmtree(workdir / host.name, ignore_errors=True)  # at 1,000,000 chunks, gigabytes
            return deployments
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_000_000, help="synthetic chunks in the collection")
    parser.add_argument("--shards", "--hosts", type=int, default=4, help="shards, one host each")
    parser.add_argument("--index", choices=("flat", "hnsw"), default="hnsw",
                        help="faiss search of every collection: exact, or HNSW (hnsw_threshold 1: the eval collection "
                             "too)")
    parser.add_argument("--per-doc", type=int, default=20, help="synthetic chunks a document")
    parser.add_argument("--words", type=int, default=30, help="words a synthetic chunk")
    parser.add_argument("--append-concurrency", type=int, default=16, help="documents appended at once")
    parser.add_argument("--warm", type=int, default=20, help="questions asked before memory is read")
    parser.add_argument("--queries", type=int, default=300, help="questions at concurrency 1")
    parser.add_argument("--load", type=int, default=1000, help="questions at the throughput concurrency")
    parser.add_argument("--concurrency", type=int, default=32, help="the throughput load's questions in flight")
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds each process's idle CPU is read over")
    parser.add_argument("--progress-s", type=float, default=15.0, help="seconds between progress lines")
    args = parser.parse_args()
    if args.shards < 1:
        parser.error("--shards must be at least 1")
    say(f"{os.cpu_count()} cores; {args.chunks:,} chunks, {args.shards} shards, {args.index} index")
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        one, shards = asyncio.run(run(args, Path(tmp)))
    table([one, shards])
    print()
    for mode in MODES:
        sets, order = differing(one, shards, mode)
        print(f"{mode}: eval questions whose first five chunks differ, sharded vs unsharded: {sets} as a set, "
              f"{order} in order (of {len(one.ranked[mode])})")
    print(f"load average at the end: {load()} on {os.cpu_count()} cores")
    a = [h.rss_mb / one.hosts[0].rss_mb for h in shards.hosts]
    b = max(h.ready_s for h in shards.hosts) / one.hosts[0].ready_s
    p50 = "hybrid p50 ms, concurrency 1"
    c = shards.figures[p50] / one.figures[p50]
    test = next(k for k in one.figures if k.startswith("hybrid R@5, test half"))
    print(f"shards: {args.shards} hosts, memory per host {max(a):.2f} (mean {statistics.fmean(a):.2f}) x one host, "
          f"ready from empty {b:.2f} x, p50 {c:.2f} x, R@5 {shards.figures[test]:.3f} vs {one.figures[test]:.3f}")


if __name__ == "__main__":
    main()
