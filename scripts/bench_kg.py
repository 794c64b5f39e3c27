"""kg-query latency at 10k and 1M facts: the store called directly, and over the memory bus.

    python -m scripts.bench_kg                 # 10k and 1M facts
    python -m scripts.bench_kg --facts 10000   # one size

For each size, a synthetic bi-temporal graph (two-word person and place
names, ten relations, most facts with a validity interval, one in twenty
revised later) is written through the kg-store path (apply, log, fsync per
batch), replayed as a query replica would at start, then asked the same
questions, each with an ``at_time``, two ways side by side:

- direct: ``GraphStore.query`` in this process;
- bus: ``KgClient`` -> memory bus -> ``KgQueryProcessor`` -> its store.

Printed: load and replay times, resident memory, and p50/p99 per query with
the bus/direct ratio. Absolute times drift on a shared machine; compare the
ratios and the growth from 10k to 1M.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from ragbus.bus import connect
from ragbus.kg import KgQueryProcessor, KgSettings
from ragbus.kg.store import GraphStore, load_log
from ragbus.stores.graph_log import GraphLog, stamped
from ragbus.stores.layout import graph_path
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import KgClient
from ragbus.schema import Entity, Fact, LoadTriples
from ragbus.schema.times import parse_instant
from scripts.bench.stats import percentile

FIRST = ["Ada", "Bela", "Cyra", "Dov", "Esme", "Finn", "Gita", "Hugo", "Ines", "Jari", "Kofi", "Lena", "Milo",
         "Nora", "Oren", "Pia", "Quin", "Rosa", "Sami", "Tova", "Umar", "Vera", "Wren", "Xena", "Yuki", "Zane"]
RELATIONS = ["works_for", "lives_in", "born_in", "member_of", "married_to", "knows", "leads", "studied_at",
             "founded", "advises"]


def names(count: int, rng: random.Random) -> list[str]:
    # Two-word names whose second word is one of `count // 8` surnames: linking sees many
    # names sharing a first token, as people's names do.
    surnames = [f"{rng.choice(FIRST)}{rng.randrange(10**6):06d}son" for _ in range(max(1, count // 8))]
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        name = f"{rng.choice(FIRST)} {rng.choice(surnames)}"
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def synthetic_batches(n_facts: int, batch: int, seed: int = 7):
    rng = random.Random(seed)
    people = names(max(10, n_facts // 10), rng)
    entities = [Entity(id=p, type="Person") for p in people]
    for i in range(0, len(entities), batch):
        yield LoadTriples(entities=entities[i : i + batch]), people
    facts = []
    for i in range(n_facts):
        start = rng.randrange(1950, 2020)
        end = start + rng.randrange(1, 30) if rng.random() < 0.7 else None
        fid = f"f{i}" if rng.random() < 0.05 else None
        facts.append(Fact(rng.choice(people), rng.choice(RELATIONS), rng.choice(people),
                          f"{start}-01-01" if rng.random() < 0.9 else None, f"{end}-01-01" if end else None,
                          source=f"doc{i % 1000}", id=fid, recorded_at=f"{start}-06-01"))
        if fid is not None:  # a revision recorded later: the end became known
            facts.append(Fact(facts[-1].head, facts[-1].relation, facts[-1].tail, facts[-1].valid_from,
                              f"{start + 5}-01-01", source=facts[-1].source, id=fid, recorded_at=f"{start + 5}-06-01"))
        if len(facts) >= batch:
            yield LoadTriples(facts=facts), people
            facts = []
    if facts:
        yield LoadTriples(facts=facts), people


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_size(n_facts: int, queries: int, data_dir: Path) -> dict:
    path = graph_path(data_dir, "default")
    writer, log = GraphStore(), GraphLog(path)
    log.open_for_append(writer)
    started = time.perf_counter()
    people: list[str] = []
    now = datetime.now(UTC)
    last_shown = 0.0
    for batch, people in synthetic_batches(n_facts, 5000):  # noqa: B007  (people: asked about below)
        batch = stamped(batch, now)
        writer.apply(batch)
        log.append(batch)
        if time.perf_counter() - last_shown > 1:
            last_shown = time.perf_counter()
            print(f"\r  loading: {len(writer):,} fact versions", end="", file=sys.stderr, flush=True)
    load_s = time.perf_counter() - started
    print(f"\r  loaded {len(writer):,} fact versions, {len(writer.nodes):,} entities in {load_s:.1f}s",
          file=sys.stderr)
    del writer  # the replica below holds its own copy, as a separate process would

    started = time.perf_counter()
    store, _ = load_log(path)
    replay_s = time.perf_counter() - started

    rng = random.Random(11)
    asks = [(f"What do we know about {rng.choice(people)} and {rng.choice(people)}?",
             f"{rng.randrange(1950, 2030)}-03-01") for _ in range(queries)]

    direct = []
    found = 0
    for question, at_time in asks:
        t0 = time.perf_counter()
        result = store.query(question, at_time=parse_instant(at_time), limit=8)
        direct.append(time.perf_counter() - t0)
        found += len(result.facts)
    del store

    over_bus = []
    processor = KgQueryProcessor("kg-query", KgSettings(topic="kg-query", group="kg-query", data_dir=str(data_dir)))
    bus = await connect(f"memory://bench-kg-{n_facts}")
    stop, ready = asyncio.Event(), asyncio.Event()
    started = time.perf_counter()
    task = asyncio.ensure_future(processor.run(bus, stop, ready))
    await ready.wait()
    replica_start_s = time.perf_counter() - started
    async with RequestClient(bus, name="bench") as client:
        kg = KgClient(client, timeout=60)
        for question, at_time in asks:
            t0 = time.perf_counter()
            await kg.query(question, at_time=at_time, limit=8)
            over_bus.append(time.perf_counter() - t0)
    stop.set()
    await task
    await bus.close()
    return {
        "facts": n_facts, "load_s": load_s, "replay_s": replay_s, "replica_start_s": replica_start_s,
        "rss_mb": rss_mb(), "facts_per_query": found / queries,
        "direct_p50": percentile(direct, 50), "direct_p99": percentile(direct, 99),
        "bus_p50": percentile(over_bus, 50), "bus_p99": percentile(over_bus, 99),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, action="append", help="graph sizes (default: 10000 and 1000000)")
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    for n in args.facts or [10_000, 1_000_000]:
        print(f"{n:,} facts:", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-kg-") as tmp:
            rows.append(await run_size(n, args.queries, Path(tmp)))
    print()
    print("| facts | load s | replay s | replica ready s | max RSS MB | facts/answer "
          "| direct p50 ms | direct p99 ms | bus p50 ms | bus p99 ms | bus/direct p50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['facts']:,} | {r['load_s']:.1f} | {r['replay_s']:.1f} | {r['replica_start_s']:.1f} "
              f"| {r['rss_mb']:.0f} | {r['facts_per_query']:.1f} "
              f"| {r['direct_p50'] * 1e3:.3f} | {r['direct_p99'] * 1e3:.3f} "
              f"| {r['bus_p50'] * 1e3:.3f} | {r['bus_p99'] * 1e3:.3f} | {r['bus_p50'] / r['direct_p50']:.1f}x |")


if __name__ == "__main__":
    asyncio.run(main())
