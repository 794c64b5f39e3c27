"""Retrieval from a sharded collection: every shard asked at once, the answers merged into one.

``ShardedDocEmbeddings`` and ``ShardedKeywords`` take the calls of ``DocEmbeddingsClient.query`` and
``KeywordClient.query``, so ``DocumentRag`` asks them as it asks one store: each shard is asked
concurrently (bounded by ``timeout_s``), the hits merged by raw score, higher first, each chunk once,
the best ``limit``. A shard that fails or misses its bound is left out and named in the result's
``missing`` (a ``ShardedMatches``); the call fails only when every shard does. ``ShardedFetch`` asks
the one shard that holds a chunk's document (schema/shards.py: by its partition of the documents log).

Scores: doc-embeddings-query's are inner products of normalised vectors (cosine similarity), the same
on every shard. keyword-query's are BM25, which depends on the index's statistics (how many chunks, how
many hold each term, each field's average length): ``ShardedKeywords`` asks every shard for its statistics
of the query's terms first, then every shard to score with their sums, the whole collection's (as
Elasticsearch's dfs_query_then_fetch does), so each gives a chunk the score one index would
(``KeywordIndex.search``) and the merge is that index's ranking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from ragbus.runtime.typed_clients import DocEmbeddingsClient, FetchChunkClient, KeywordClient
from ragbus.schema import DEFAULT_COLLECTION, ChunkMatch, FieldTokens, KeywordStatistics, TermCount
from ragbus.schema.changelog import document_order
from ragbus.schema.shards import shard_of

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# The share of a path's bound (DocumentRag's path_timeout_s, the keyword side's in hybrid) each shard of
# it is given: the shards that answered are merged and returned before the path's own bound would cut
# the whole side, with the answers of every shard, for one shard's lateness.
PATH_SHARE = 0.9
# The share of a keyword shard's bound its first round (its statistics of the query's terms) may take.
STATISTICS_SHARE = 0.5


def shard_name(shard: int) -> str:
    """How an answer names a shard left out of it (``degraded``)."""
    return f"shard-{shard}"


class ShardsFailed(RuntimeError):
    """Every shard failed: the retrieval has nothing to answer with."""


class ShardedMatches(list[ChunkMatch]):
    """Hits merged from the shards; ``missing``: ``(shard, why)`` of each shard left out, e.g.
    ``("shard-2", "keyword-query: timed out")``."""

    def __init__(self, matches: Iterable[ChunkMatch] = (), missing: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(matches)
        self.missing = list(missing)


def merge_by_score(answers: Iterable[Sequence[ChunkMatch]], limit: int) -> list[ChunkMatch]:
    """The best ``limit`` of all ``answers``: score descending, then chunk id (a store's own order); each
    chunk id once, at its best score (a chunk two shards both hold while one takes over)."""
    best: dict[str, ChunkMatch] = {}
    for matches in answers:
        for match in matches:
            held = best.get(match.chunk_id)
            if held is None or match.score > held.score:
                best[match.chunk_id] = match
    return sorted(best.values(), key=lambda m: (-m.score, m.chunk_id))[:limit]


async def scatter(what: str, calls: Sequence[Callable[[], Awaitable[_T]]], timeout_s: float | None,
                  shards: Sequence[int] | None = None) -> tuple[list[_T], list[tuple[str, str]]]:
    """Each of ``calls`` (one a shard: ``shards``, by default 0, 1, ...) at once, each bounded by
    ``timeout_s``: the answers of those that answered, and ``(shard, why)`` of those that did not.
    ``ShardsFailed`` (``TimeoutError`` when all timed out) when none answered."""
    numbers = list(range(len(calls)) if shards is None else shards)

    async def bounded(call: Callable[[], Awaitable[_T]]) -> _T:
        if timeout_s is None:
            return await call()
        async with asyncio.timeout(timeout_s):
            return await call()

    outcomes = await asyncio.gather(*(bounded(call) for call in calls), return_exceptions=True)
    answers: list[_T] = []
    missing: list[tuple[str, str]] = []
    failures: list[BaseException] = []
    for shard, outcome in zip(numbers, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome  # a cancellation is not a shard left out
            failures.append(outcome)
            missing.append((shard_name(shard), f"{what}: {_why(outcome)}"))
            log.warning("%s of %s: left out of the answer: %s", what, shard_name(shard), _why(outcome))
        else:
            answers.append(outcome)
    if failures and not answers:
        summary = f"every shard of {what} failed: " + "; ".join(f"{s}: {why}" for s, why in missing)
        if all(isinstance(f, TimeoutError) for f in failures):
            raise TimeoutError(summary)
        raise ShardsFailed(summary) from failures[0]
    return answers, missing


class ShardedDocEmbeddings:
    """``DocEmbeddingsClient.query`` over every shard's doc-embeddings-query; see the module docstring."""

    def __init__(self, clients: Sequence[DocEmbeddingsClient], timeout_s: float | None) -> None:
        if not clients:
            raise ValueError("a sharded client needs one client a shard, got none")
        self.clients = list(clients)
        self.timeout_s = timeout_s

    async def query(self, vectors: Sequence[Sequence[float]], limit: int = 10,
                    collection: str = DEFAULT_COLLECTION, must_see: Sequence[str] = ()) -> ShardedMatches:
        calls = [_bind(c.query, vectors, limit=limit, collection=collection, must_see=must_see) for c in self.clients]
        answers, missing = await scatter("doc-embeddings-query", calls, self.timeout_s)
        return ShardedMatches(merge_by_score(answers, limit), missing)


class ShardedKeywords:
    """``KeywordClient.query`` over every shard's keyword-query; scores merged raw (module docstring)."""

    def __init__(self, clients: Sequence[KeywordClient], timeout_s: float | None) -> None:
        if not clients:
            raise ValueError("a sharded client needs one client a shard, got none")
        self.clients = list(clients)
        self.timeout_s = timeout_s

    async def query(self, *, query: str, limit: int = 10, collection: str = DEFAULT_COLLECTION,
                    must_see: Sequence[str] = ()) -> ShardedMatches:
        """Two rounds within ``timeout_s``: every shard's statistics of the query's terms (within half of it: a
        shard that does not answer leaves the other half to the search), then every shard that gave them
        searched with their sums."""
        started = time.monotonic()
        calls = [_bind(c.statistics, query=query, collection=collection, must_see=must_see) for c in self.clients]
        first = None if self.timeout_s is None else self.timeout_s * STATISTICS_SHARE
        counted, missing = await scatter("keyword-query", calls, first)
        left_out = dict(missing)
        answering = [i for i in range(len(self.clients)) if shard_name(i) not in left_out]
        total = summed(counted)
        left = None if self.timeout_s is None else max(0.0, self.timeout_s - (time.monotonic() - started))
        searches = [_bind(self.clients[i].query, query=query, limit=limit, collection=collection,
                          must_see=must_see, statistics=total) for i in answering]
        answers, late = await scatter("keyword-query", searches, left, answering)
        return ShardedMatches(merge_by_score(answers, limit), missing + late)


def summed(statistics: Iterable[KeywordStatistics]) -> KeywordStatistics:
    """The statistics of the shards together: their chunks, how many of them hold each term, and the tokens
    of each field. No field's tokens when a shard holding chunks counted none (one that does not count them):
    a sum without its tokens would be too small."""
    chunks, holding = 0, defaultdict[tuple[str, str], int](int)
    tokens, counted = defaultdict[str, int](int), True
    for part in statistics:
        chunks += part.chunks
        for t in part.terms:
            holding[(t.field, t.term)] += t.chunks
        for f in part.lengths:
            tokens[f.field] += f.tokens
        counted = counted and (bool(part.lengths) or part.chunks == 0)
    return KeywordStatistics(chunks=chunks, terms=[TermCount(f, t, n) for (f, t), n in holding.items()],
                             lengths=[FieldTokens(f, n) for f, n in tokens.items()] if counted else [])


class PartitionOf(Protocol):
    """What routing a chunk needs of the bus (``Bus.partition_of``)."""

    async def partition_of(self, topic: str, order_key: str) -> int: ...


class ShardedFetch:
    """``FetchChunkClient`` over the shards' fetch-chunk: each chunk asked of the shard holding its document."""

    def __init__(self, clients: Sequence[FetchChunkClient], bus: PartitionOf, log_topic: str) -> None:
        if not clients:
            raise ValueError("a sharded client needs one client a shard, got none")
        self.clients = list(clients)
        self.bus = bus
        self.log_topic = log_topic

    async def shard_of_chunk(self, chunk_id: str, collection: str = DEFAULT_COLLECTION) -> int:
        """The shard of the chunk's document: where the documents log's partition of its records sends it."""
        document_id, mark, _ = chunk_id.rpartition("#")
        if not mark or not document_id:
            raise ValueError(f"chunk id {chunk_id[:200]!r} names no document (<document id>#<position>)")
        partition = await self.bus.partition_of(self.log_topic, document_order(collection, document_id))
        return shard_of(partition, len(self.clients))

    async def __call__(self, chunk_id: str, collection: str = DEFAULT_COLLECTION) -> str:
        """The text of one chunk: the ``fetch_chunk`` callable the orchestrator takes."""
        client = self.clients[await self.shard_of_chunk(chunk_id, collection)]
        return await client(chunk_id, collection)

    async def fetch(self, chunk_ids: Sequence[str], collection: str = DEFAULT_COLLECTION,
                    must_see: Sequence[str] = ()) -> list[ChunkMatch]:
        """The chunks found, in request order, each shard asked for its own at once; any failure fails it."""
        asked: dict[int, list[str]] = {}
        for chunk_id in dict.fromkeys(chunk_ids):
            asked.setdefault(await self.shard_of_chunk(chunk_id, collection), []).append(chunk_id)
        answers = await asyncio.gather(*(self.clients[shard].fetch(ids, collection, must_see)
                                         for shard, ids in asked.items()), return_exceptions=True)
        fetched: list[ChunkMatch] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            fetched += answer
        found = {match.chunk_id: match for match in fetched}
        return [found[chunk_id] for chunk_id in chunk_ids if chunk_id in found]


def _bind(method: Callable[..., Awaitable[_T]], *args, **kwargs) -> Callable[[], Awaitable[_T]]:
    return lambda: method(*args, **kwargs)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]
