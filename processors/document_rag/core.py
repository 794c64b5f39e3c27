"""``DocumentRag``: one question in, a cited answer out, through injected async clients.

It knows nothing of the bus: the clients are anything with the methods
below (the typed bus clients of ``processors/runtime/typed_clients.py`` in production,
stubs in unit tests). It holds no per-query state, so one instance serves
any number of concurrent queries.

Per query, with the data dependencies as the only ordering:

- a follow-up first: with a ``history`` (the conversation before the
  question), ``prompt_client.condense(question, history lines)`` makes it a
  standalone question (the ``condense-question`` template: by rule on the
  extractive backend, a condensing prompt on a model), and every path below,
  and the answer, use that question; a failing condense degrades
  (``condense``) to the question as it was asked;

- the document path by mode:
  - ``vector``: concepts from ``prompt_client.prompt("extract-concepts")``,
    one batched ``embeddings_client.embed(concepts)``, one
    ``doc_embeddings_client.query`` per vector concurrently, the lists fused
    (equal weights) so each chunk appears once; the keyword client is never
    touched;
  - ``keyword``: the raw question to ``kw_index_client.query`` only, in BM25
    order; no concepts, no embedding;
  - ``hybrid``: both concurrently (each asked for ``hybrid_depth`` chunks
    when that is more than the limit), fused with ``vector_weight`` /
    ``keyword_weight`` by ``fusion`` (per request, else the instance's):
    ``rrf`` (``rrf_fuse``, ranks only) or ``minmax`` / ``dbsf``
    (``score_fuse``, normalised scores); see ``fusion.py``. If one side fails (the keyword
    side also when it takes longer than ``path_timeout_s``) the other answers
    alone and the response says which degraded;
  - a sharded collection (``shards.py``): the clients ask every shard and merge; the
    shards a client's answer says are ``missing`` degrade the answer (``shard-2``...),
    the other shards' hits are used;
- the graph path, concurrently with the document path, when a ``kg_client``
  is wired: of the facts about the entities the question names, those that answer
  it (``KgQueryRequest.answering``), ontology-checked and valid at ``at_time``; a failing
  graph path degrades, never fails the query;
- one version per document: while a re-ingested document switches store by
  store, faiss may answer with its new version and tantivy with its old, so of
  each document only the chunks of the version its best match is from are
  kept (``ChunkMatch.generation``; a chunk without one, from a store older
  than versions, goes with any);
- chunk texts: taken from the matches when the store sent them, else
  ``await fetch_chunk(chunk_id)`` concurrently; a chunk whose fetch fails is
  left out (degraded ``fetch-chunk``);
- the answer: ``prompt_client.document_prompt(query=..., documents=[texts in
  fused order], document_ids=[their chunk ids], facts=[fact texts], ...)``,
  with the snapshot header only when ``at_time`` is given.

``stream`` runs the same query and yields the sources as soon as they are
known, then the answer as the prompt streams it, then the whole ``RagAnswer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import msgspec

from ragbus.schema import DEFAULT_COLLECTION, BadRequest, ChunkMatch, Fact, RejectedFact
from ragbus.schema.times import DEFAULT_HEADER_TEMPLATE, iso, parse_instant, render_header

from .fusion import FUSIONS, fuse, rrf_fuse
from .settings import DocumentRagSettings

log = logging.getLogger(__name__)
_T = TypeVar("_T")  # what a path bounded by path_timeout_s answers
_M = TypeVar("_M", bound=Sequence[ChunkMatch])
MAX_HISTORY = 8  # turns of a conversation a follow-up is condensed from: the latest ones
MAX_TURN_CHARS = 2000  # of each turn (a long answer), so the condensing prompt stays small

MODES = ("vector", "keyword", "hybrid")
# The class a user builds by hand keeps the seed's contract: vector unless asked (the keyword path is
# strictly opt-in, so no keyword client is needed), hybrid fused by weighted RRF. The deployed
# processor passes its configured mode and fusion (settings.py: hybrid, minmax). The other defaults
# are the settings' own, so the class and a deployment agree on them.
CLASS_MODE = "vector"
CLASS_FUSION = "rrf"
_DEFAULT = DocumentRagSettings()


@dataclass(slots=True)
class RagAnswer:
    """What ``DocumentRag.query`` returns; the document-rag response is built from it."""

    answer: str
    chunks: list[ChunkMatch] = field(default_factory=list)  # in fused order, with text
    cited: list[str] = field(default_factory=list)  # chunk ids the answer cites
    facts: list[Fact] = field(default_factory=list)
    rejected: list[RejectedFact] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # which retrieval paths ran
    degraded: list[str] = field(default_factory=list)  # which failed and were left out ("keyword", "kg"...)
    problems: list[str] = field(default_factory=list)  # why, one line each
    timings_ms: dict[str, float] = field(default_factory=dict)
    at_time: str | None = None
    header: str | None = None
    standalone: str | None = None  # the question asked in a follow-up's place, when a history changed it

    def degrade(self, path: str, why: str) -> None:
        if path not in self.degraded:
            self.degraded.append(path)
        self.problems.append(f"{path}: {why}")


class _Timings:
    """Milliseconds per stage; stages of concurrent paths overlap, ``total`` is wall time."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = round((time.perf_counter() - started) * 1000, 3)


@dataclass(frozen=True, slots=True)
class Asked:
    """How a question is to be answered: ``DocumentRag.query``'s options, once (``DocumentRagRequest``'s fields)."""

    mode: str | None = None
    at_time: Any = None
    doc_limit: int | None = None
    collection: str = DEFAULT_COLLECTION
    fusion: str | None = None
    as_of: Any = None
    history: Sequence[Any] = ()

    @classmethod
    def of(cls, request: Any) -> Asked:
        """The options a request (a ``DocumentRagRequest``) carries."""
        return cls(**{f.name: getattr(request, f.name) for f in fields(cls)})


@dataclass(slots=True)
class _Found:
    """A query up to its prompt: the sources found, the prompt's arguments, the clock."""

    result: RagAnswer
    prompt: dict[str, Any]
    timings: _Timings
    started: float

    def finish(self, answer: str) -> RagAnswer:
        self.result.answer = answer
        self.result.cited = [c.chunk_id for c in self.result.chunks if _cites(answer, c.chunk_id)]
        self.timings.ms["total"] = round((time.perf_counter() - self.started) * 1000, 3)
        self.result.timings_ms = self.timings.ms
        return self.result


class DocumentRag:
    """The orchestrator core; see the module docstring. Immutable once built."""

    def __init__(
        self,
        prompt_client: Any,
        embeddings_client: Any,
        doc_embeddings_client: Any,
        fetch_chunk: Callable[..., Awaitable[str]],
        kw_index_client: Any = None,
        kg_client: Any = None,
        retrieval_mode: str = CLASS_MODE,
        vector_weight: float = _DEFAULT.vector_weight,
        keyword_weight: float = _DEFAULT.keyword_weight,
        doc_limit: int = _DEFAULT.doc_limit,
        *,
        fusion: str = CLASS_FUSION,
        hybrid_depth: int = _DEFAULT.hybrid_depth,
        max_concepts: int = _DEFAULT.max_concepts,
        fact_limit: int = _DEFAULT.fact_limit,
        path_timeout_s: float | None = _DEFAULT.path_timeout_s,
        max_query_chars: int = _DEFAULT.max_query_chars,
        header_template: str = DEFAULT_HEADER_TEMPLATE,
    ) -> None:
        _check_mode(retrieval_mode, kw_index_client)
        for name, weight in (("vector_weight", vector_weight), ("keyword_weight", keyword_weight)):
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
                raise ValueError(f"{name} must be a number >= 0, got {weight!r}")
        _check_limit("doc_limit", doc_limit)
        _check_fusion(fusion)
        if isinstance(hybrid_depth, bool) or not isinstance(hybrid_depth, int) or hybrid_depth < 0:
            raise ValueError(f"hybrid_depth must be an int >= 0, got {hybrid_depth!r}")
        self.prompt_client = prompt_client
        self.embeddings_client = embeddings_client
        self.doc_embeddings_client = doc_embeddings_client
        self.fetch_chunk = fetch_chunk
        self.kw_index_client = kw_index_client
        self.kg_client = kg_client
        self.retrieval_mode = retrieval_mode
        self.vector_weight = float(vector_weight)
        self.keyword_weight = float(keyword_weight)
        self.fusion = fusion
        self.hybrid_depth = hybrid_depth
        self.doc_limit = doc_limit
        self.max_concepts = max_concepts
        self.fact_limit = fact_limit
        self.path_timeout_s = path_timeout_s
        self.max_query_chars = max_query_chars
        self.header_template = header_template

    async def query(
        self,
        question: str,
        *,
        mode: str | None = None,
        at_time: Any = None,
        doc_limit: int | None = None,
        collection: str = DEFAULT_COLLECTION,
        fusion: str | None = None,
        as_of: Any = None,
        answer: bool = True,
        history: Sequence[Any] = (),
    ) -> RagAnswer:
        """A cited answer to ``question``; ``BadRequest`` (a ValueError) or ``TypeError`` on bad input.

        ``as_of``: the graph as it was recorded then. ``answer=False``: the sources only (the
        chunks, ranked, with their scores, and the facts), no prompt call and an empty answer.
        """
        asked = Asked(mode, at_time, doc_limit, collection, fusion, as_of, history)
        return await self.answer(question, asked, answer=answer)

    async def answer(self, question: str, asked: Asked, *, answer: bool = True) -> RagAnswer:
        """``query`` with its options in one ``Asked``."""
        found = await self._sources(question, asked)
        if not answer:
            return found.finish("")
        with found.timings.stage("prompt"):
            written = await self.prompt_client.document_prompt(**found.prompt)
        return found.finish(written.text)

    async def stream(
        self,
        question: str,
        *,
        mode: str | None = None,
        at_time: Any = None,
        doc_limit: int | None = None,
        collection: str = DEFAULT_COLLECTION,
        fusion: str | None = None,
        as_of: Any = None,
        history: Sequence[Any] = (),
        answer_pieces: bool = True,
    ) -> AsyncIterator[tuple[str, Any]]:
        """The same answer as it is written: ``("sources", RagAnswer without answer)`` once, then
        ``("answer", text)`` per piece of the prompt's stream, then ``("final", RagAnswer)``.
        ``answer_pieces=False``: no ``answer`` pieces, the prompt asked for the whole text at once.

        Needs a prompt client with ``document_prompt_stream``.
        """
        asked = Asked(mode, at_time, doc_limit, collection, fusion, as_of, history)
        async for event in self.answer_stream(question, asked, answer_pieces=answer_pieces):
            yield event

    async def answer_stream(self, question: str, asked: Asked, *,
                            answer_pieces: bool = True) -> AsyncIterator[tuple[str, Any]]:
        """``stream`` with its options in one ``Asked``."""
        found = await self._sources(question, asked)
        yield "sources", found.result
        if not answer_pieces:
            with found.timings.stage("prompt"):
                written = await self.prompt_client.document_prompt(**found.prompt)
            yield "final", found.finish(written.text)
            return
        text = None
        with found.timings.stage("prompt"):
            async for piece in self.prompt_client.document_prompt_stream(**found.prompt):
                if piece.result is not None:
                    text = piece.result.text
                elif piece.text:
                    yield "answer", piece.text
        if text is None:
            raise RuntimeError("the prompt stream ended without its result")
        yield "final", found.finish(text)

    async def _sources(self, question: str, asked: Asked) -> _Found:
        """Everything before the prompt: checks, the document and graph paths, chunk texts."""
        collection, history = asked.collection, asked.history
        if not isinstance(question, str):
            raise TypeError(f"question must be a str, got {type(question).__name__}")
        if not question.strip():
            raise BadRequest("the question is empty")
        if len(question) > self.max_query_chars:
            raise BadRequest(f"the question is {len(question)} characters, over the limit of {self.max_query_chars}")
        mode = self.retrieval_mode if asked.mode is None else asked.mode
        _check_mode(mode, self.kw_index_client)
        fusion = self.fusion if asked.fusion is None else _check_fusion(asked.fusion)
        limit = self.doc_limit if asked.doc_limit is None else _check_limit("doc_limit", asked.doc_limit)
        when = parse_instant(asked.at_time, what="at_time") if asked.at_time is not None else None
        known = parse_instant(asked.as_of, what="as_of") if asked.as_of is not None else None
        t = _Timings()
        started = time.perf_counter()
        result = RagAnswer(answer="", at_time=iso(when) if when else None)
        if history:
            question = await self._standalone(question, history, result, t)

        graph = (asyncio.ensure_future(self._graph(question, when, collection, result, t, known))
                 if self.kg_client else None)
        try:
            matches = _one_version_each(await self._documents(question, mode, limit, collection, result, t, fusion))
            with t.stage("fetch"):
                result.chunks = await self._texts(matches, collection, result)
        except BaseException:
            if graph is not None:  # a failed or cancelled query leaves nothing running
                graph.cancel()
                await asyncio.gather(graph, return_exceptions=True)
            raise
        if graph is not None:
            await graph

        fact_texts = [f.text or f"{f.head} {f.relation} {f.tail}" for f in result.facts]
        if when is not None and "kg" in result.paths:
            result.header = render_header(self.header_template, when)
        prompt: dict[str, Any] = {
            "query": question,
            "documents": [c.text or "" for c in result.chunks],
            "document_ids": [c.chunk_id for c in result.chunks],
            "facts": fact_texts,
        }
        if when is not None:
            prompt["at_time"] = result.at_time
            if result.header is not None:
                prompt["snapshot_header"] = result.header
        return _Found(result, prompt, t, started)

    async def _standalone(self, question: str, history: Sequence[Any], result: RagAnswer, t: _Timings) -> str:
        """The question made standalone from the conversation's last ``MAX_HISTORY`` turns (each a ``Turn``:
        role and content, a long one cut); the question as asked when the condense fails."""
        lines = [f"{turn.role}: {' '.join(str(turn.content).split())[:MAX_TURN_CHARS]}"
                 for turn in history[-MAX_HISTORY:]]
        try:
            with t.stage("condense"):
                rewritten = (await self.prompt_client.condense(question, lines))[: self.max_query_chars]
        except Exception as exc:
            result.degrade("condense", _why(exc))
            return question
        if rewritten.strip() and rewritten != question:
            result.standalone = rewritten
            return rewritten
        return question

    # -- the document paths --------------------------------------------------------------------

    async def _documents(self, question, mode, limit, collection, result: RagAnswer, t: _Timings,
                         fusion: str) -> list[ChunkMatch]:
        if mode == "vector":
            result.paths.append("vector")
            return await self._vector(question, limit, collection, result, t)
        if mode == "keyword":
            result.paths.append("keyword")
            return await self._keyword(question, limit, collection, result, t)
        result.paths += ["vector", "keyword"]
        # The keyword side is optional and bounded by path_timeout_s; the vector side is the
        # answer's backbone and gets the whole call timeout (its sub-requests are resent meanwhile).
        depth = max(limit, self.hybrid_depth)
        vector, keyword = await asyncio.gather(
            self._vector(question, depth, collection, result, t),
            self._bounded(lambda: self._keyword(question, depth, collection, result, t)),
            return_exceptions=True,
        )
        answered: list[list[ChunkMatch]] = []  # the paths that answered, vector first
        for name, r in (("vector", vector), ("keyword", keyword)):
            if not isinstance(r, BaseException):
                answered.append(r)
                continue
            if not isinstance(r, Exception):
                raise r  # cancellation is not a degraded path
            log.warning("hybrid query: the %s path failed, answering without it: %s", name, _why(r))
            result.degrade(name, _why(r))
        if not answered:
            raise RuntimeError(f"both retrieval paths failed: {'; '.join(result.problems)}")
        if len(answered) == 1:
            return _dedup(answered[0], limit)
        with t.stage("fuse"):
            return fuse(answered, [self.vector_weight, self.keyword_weight], limit, fusion)

    async def _bounded(self, work: Callable[[], Awaitable[_T]]) -> _T:
        # ``work`` makes its coroutine here: one made by the caller and never started (the gather
        # around this was cancelled first) would be reported as never awaited.
        if self.path_timeout_s is None:
            return await work()
        async with asyncio.timeout(self.path_timeout_s):
            return await work()

    async def _vector(self, question, limit, collection, result: RagAnswer, t: _Timings) -> list[ChunkMatch]:
        if self.max_concepts == 0:  # the question alone: no extract-concepts hop
            concepts = [question]
        else:
            with t.stage("concepts"):
                concepts = await self._concepts(question, result)
        with t.stage("embed"):
            vectors = await self.embeddings_client.embed(concepts)
        with t.stage("vector_query"):
            lists = await asyncio.gather(*(self._vector_query(v, limit, collection, result) for v in vectors))
        return rrf_fuse(lists, [1.0] * len(lists), limit)

    async def _vector_query(self, vector, limit, collection, result: RagAnswer) -> list[ChunkMatch]:
        return _partial(await self.doc_embeddings_client.query([vector], limit=limit, **_naming(collection)), result)

    async def _concepts(self, question: str, result: RagAnswer) -> list[str]:
        """The question first, then what extract-concepts adds; the question alone if it fails."""
        try:
            reply = await self.prompt_client.prompt("extract-concepts", variables={"query": question})
        except Exception as exc:
            log.warning("concept extraction failed, embedding the question alone: %s", _why(exc))
            result.degrade("concepts", _why(exc))
            return [question]
        concepts = [question]
        for line in reply.text.splitlines():
            line = line.strip()
            if line and line not in concepts and len(concepts) <= self.max_concepts:  # the question is not counted
                concepts.append(line)
        return concepts

    async def _keyword(self, question, limit, collection, result: RagAnswer, t: _Timings) -> list[ChunkMatch]:
        with t.stage("keyword_query"):
            found = await self.kw_index_client.query(query=question, limit=limit, **_naming(collection))
        return _dedup(_partial(found, result), limit)

    # -- chunk texts and the graph -------------------------------------------------------------

    async def _texts(self, matches: Sequence[ChunkMatch], collection: str, result: RagAnswer) -> list[ChunkMatch]:
        async def text_of(match: ChunkMatch) -> str:
            if match.text is not None:
                return match.text
            return await self.fetch_chunk(match.chunk_id, **_naming(collection))

        texts = await asyncio.gather(*(text_of(m) for m in matches), return_exceptions=True)
        kept = []
        for match, text in zip(matches, texts, strict=True):
            if isinstance(text, BaseException):
                if not isinstance(text, Exception):
                    raise text
                result.degrade("fetch-chunk", f"{match.chunk_id}: {_why(text)}")
                continue
            kept.append(match if match.text == text else _with_text(match, text))
        return kept

    async def _graph(self, question, when, collection, result: RagAnswer, t: _Timings, known=None) -> None:
        with t.stage("kg"):
            try:
                kwargs: dict[str, Any] = {"at_time": iso(when) if when else None, "limit": self.fact_limit,
                                          "answering": True}
                if known is not None:
                    kwargs["as_of"] = iso(known)
                kwargs.update(_naming(collection))
                found = await self._bounded(lambda: self.kg_client.query(question, **kwargs))
            except Exception as exc:
                log.warning("the graph path failed, answering without facts: %s", _why(exc))
                result.degrade("kg", _why(exc))
                return
        result.paths.append("kg")
        result.facts = list(found.facts)
        result.rejected = list(getattr(found, "rejected", []))


def _naming(collection: str) -> dict[str, str]:
    """The ``collection`` keyword of a client call: none for the default collection. DocumentRag takes any
    clients of the seed's shape (TrustGraph's ``query(vectors, limit)``, ``fetch_chunk(chunk_id)``), which
    know no collections; ragbus's typed clients default to that one, so leaving it out asks the same."""
    return {} if collection == DEFAULT_COLLECTION else {"collection": collection}


def _check_mode(mode: str, kw_index_client: Any) -> None:
    if mode not in MODES:
        raise BadRequest(f"unknown retrieval mode {mode!r}; use one of {', '.join(MODES)}")
    if mode in ("keyword", "hybrid") and kw_index_client is None:
        raise ValueError(f"retrieval mode {mode!r} needs a keyword index client (kw_index_client); "
                         "without one, say retrieval_mode='vector'")


def _check_fusion(fusion: Any) -> str:
    if fusion not in FUSIONS:
        raise BadRequest(f"unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}")
    return fusion


def _check_limit(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:  # the limit of the store searches it becomes, which refuse 0
        raise BadRequest(f"{name} must be at least 1, got {value}")
    return value


def _partial(matches: _M, result: RagAnswer) -> _M:
    """``matches``; the shards a sharded client left out of them (its ``missing``: ``(shard, why)``,
    ``shards.ShardedMatches``) degrade ``result``, each reason once."""
    for shard, why in getattr(matches, "missing", ()):
        if f"{shard}: {why}" not in result.problems:
            result.degrade(shard, why)
    return matches


def _dedup(matches: Sequence[ChunkMatch], limit: int) -> list[ChunkMatch]:
    """One ranking as it came, each chunk id once (at its best rank), empty ids left out."""
    return rrf_fuse([matches], [1.0], limit)


def _one_version_each(matches: Sequence[ChunkMatch]) -> list[ChunkMatch]:
    """``matches`` in order, less those of a version of their document other than its best match's.

    An answer thus never mixes two versions of a document, even while the stores switch to a new
    one at different moments. A match with no version (no document, or a store from before
    versions) is kept: it has nothing to be told apart by.
    """
    chosen: dict[str, str] = {}
    kept = []
    for match in matches:
        if (
            match.document_id is not None
            and match.generation
            and chosen.setdefault(match.document_id, match.generation) != match.generation
        ):
            continue  # another version of a document already chosen
        kept.append(match)
    return kept


def _with_text(match: ChunkMatch, text: str) -> ChunkMatch:
    return msgspec.structs.replace(match, text=text)


def _cites(answer: str, chunk_id: str) -> bool:
    return re.search(rf"\[{re.escape(chunk_id)}\]", answer) is not None


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]
