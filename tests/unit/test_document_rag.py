"""``DocumentRag`` orchestration, with stub clients that record their calls (no bus).

Concurrency is proven with ``Rendezvous``: a stub call waits there until all
the calls that should overlap have started, with a timeout, so a sequential
orchestrator fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ragbus.document_rag import RRF_K, DocumentRag, DocumentRagSettings, rrf_fuse
from ragbus.runtime.typed_clients import KgClient, PromptClient
from ragbus.document_rag.core import MAX_HISTORY, MAX_TURN_CHARS
from ragbus.schema import DEFAULT_COLLECTION, ChunkMatch, Fact, KgQueryResponse, PromptResult, Turn

QUESTION = "Who led the government of Germany in 2015?"
CORE_LOGGER = "ragbus.document_rag.core"


# -- stubs --------------------------------------------------------------------------------------


class Rendezvous:
    """Releases its callers only once ``n`` have arrived; fails them after ``timeout`` seconds."""

    def __init__(self, n: int, timeout: float = 2.0) -> None:
        self.n = n
        self.timeout = timeout
        self.arrived = 0
        self.all_here = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.n:
            self.all_here.set()
        try:
            await asyncio.wait_for(self.all_here.wait(), self.timeout)
        except TimeoutError:
            raise AssertionError(f"only {self.arrived} of {self.n} calls were in flight together") from None

    @property
    def met(self) -> bool:
        return self.all_here.is_set()


class Hang:
    """A call that never returns on its own; counts the calls that started and were cancelled."""

    def __init__(self, expected: int = 1) -> None:
        self.expected = expected
        self.started = 0
        self.cancelled = 0
        self.all_started = asyncio.Event()

    async def __call__(self) -> None:
        self.started += 1
        if self.started >= self.expected:
            self.all_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def _behave(rendezvous: Rendezvous | None, hang: Hang | None, error: Exception | None, delay: float) -> None:
    if delay:
        await asyncio.sleep(delay)
    if rendezvous is not None:
        await rendezvous.arrive()
    if hang is not None:
        await hang()
    if error is not None:
        raise error


_DOCUMENT_PROMPT = inspect.signature(PromptClient.document_prompt)
_KG_QUERY = inspect.signature(KgClient.query)


class PromptStub:
    """``prompt("extract-concepts")`` answers ``concepts``, one a line; ``document_prompt`` echoes the query."""

    def __init__(self, concepts=("alpha", "beta"), answer: Callable[[dict], str] | None = None) -> None:
        self.concepts = list(concepts)
        self.answer = answer
        self.prompt_calls: list[tuple[str, Any]] = []
        self.document_calls: list[dict[str, Any]] = []

    async def prompt(self, template_id: str, variables=None) -> PromptResult:
        self.prompt_calls.append((template_id, variables))
        assert template_id == "extract-concepts", template_id
        return PromptResult("lines", "\n".join(self.concepts))

    async def document_prompt(self, **kwargs) -> PromptResult:
        _DOCUMENT_PROMPT.bind(None, **kwargs)  # what the real client accepts, keyword-only
        self.document_calls.append(kwargs)
        text = self.answer(kwargs) if self.answer else f"Answer to: {kwargs['query']}"
        return PromptResult("text", text)

    @property
    def concept_calls(self) -> list[tuple[str, Any]]:
        return [c for c in self.prompt_calls if c[0] == "extract-concepts"]

    @property
    def last(self) -> dict[str, Any]:
        assert len(self.document_calls) >= 1, "document_prompt was never called"
        return self.document_calls[-1]


class EmbedStub:
    """Vector ``[i, 0.5]`` for the i-th text it was ever asked to embed, so stores can tell which text."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.texts: list[str] = []

    async def embed(self, texts) -> list[list[float]]:
        texts = list(texts)
        self.calls.append(texts)
        vectors = []
        for text in texts:
            self.texts.append(text)
            vectors.append([float(len(self.texts) - 1), 0.5])
        return vectors

    def text_of(self, vector) -> str:
        return self.texts[int(vector[0])]


class DocEmbeddingsStub:
    """``results(text)`` for the text the (single) query vector embeds."""

    def __init__(self, embed: EmbedStub, results: Callable[[str], list[ChunkMatch]] | None = None, *,
                 rendezvous: Rendezvous | None = None, hang: Hang | None = None, error: Exception | None = None,
                 delay: float = 0.0) -> None:
        self.embed = embed
        self.results = results or (lambda text: [ChunkMatch(f"v-{text}")])
        self.rendezvous, self.hang, self.error, self.delay = rendezvous, hang, error, delay
        self.calls: list[dict[str, Any]] = []

    async def query(self, vectors, limit: int = 10, collection: str = DEFAULT_COLLECTION) -> list[ChunkMatch]:
        self.calls.append({"vectors": [list(v) for v in vectors], "limit": limit, "collection": collection})
        await _behave(self.rendezvous, self.hang, self.error, self.delay)
        return list(self.results(self.embed.text_of(vectors[0])))[:limit]  # as a real store does

    @property
    def queried_texts(self) -> list[str]:
        return [self.embed.text_of(c["vectors"][0]) for c in self.calls]


class KeywordStub:
    def __init__(self, matches: list[ChunkMatch] | None = None, *, rendezvous: Rendezvous | None = None,
                 hang: Hang | None = None, error: Exception | None = None, delay: float = 0.0) -> None:
        self.matches = matches if matches is not None else [ChunkMatch("k1"), ChunkMatch("k2")]
        self.rendezvous, self.hang, self.error, self.delay = rendezvous, hang, error, delay
        self.calls: list[dict[str, Any]] = []

    async def query(self, *, query: str, limit: int = 10, collection: str = DEFAULT_COLLECTION) -> list[ChunkMatch]:
        self.calls.append({"query": query, "limit": limit, "collection": collection})
        await _behave(self.rendezvous, self.hang, self.error, self.delay)
        return list(self.matches)[:limit]  # as a real index does


class KgStub:
    def __init__(self, facts: list[Fact] | None = None, *, rendezvous: Rendezvous | None = None,
                 hang: Hang | None = None, error: Exception | None = None, delay: float = 0.0) -> None:
        self.facts = facts if facts is not None else [MERKEL]
        self.rendezvous, self.hang, self.error, self.delay = rendezvous, hang, error, delay
        self.calls: list[tuple[tuple, dict[str, Any]]] = []

    async def query(self, *args, **kwargs) -> KgQueryResponse:
        _KG_QUERY.bind(None, *args, **kwargs)  # what the real client accepts
        self.calls.append((args, kwargs))
        await _behave(self.rendezvous, self.hang, self.error, self.delay)
        return KgQueryResponse(entities=["Germany"], facts=list(self.facts))


class FetchStub:
    """``fetch_chunk``: ``"text of <id>"``, or raises for the ids in ``failing``."""

    def __init__(self, *, failing: set[str] = frozenset(), rendezvous: Rendezvous | None = None,
                 delay: Callable[[str], float] | None = None) -> None:
        self.failing = failing
        self.rendezvous = rendezvous
        self.delay = delay
        self.calls: list[str] = []

    async def __call__(self, chunk_id: str, collection: str = DEFAULT_COLLECTION) -> str:
        self.calls.append(chunk_id)
        await _behave(self.rendezvous, None, None, self.delay(chunk_id) if self.delay else 0.0)
        if chunk_id in self.failing:
            raise LookupError(f"chunk {chunk_id} is gone")
        return text_of(chunk_id)


class Forbidden:
    """A client no call may reach: any method call is recorded and raises."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        async def call(*args, **kwargs):
            self.calls.append((attr, args, kwargs))
            raise AssertionError(f"{self.name}.{attr} must not be called")

        return call

    async def __call__(self, *args, **kwargs):
        self.calls.append(("__call__", args, kwargs))
        raise AssertionError(f"{self.name} must not be called")


MERKEL = Fact("Angela Merkel", "head_of_government_of", "Germany", valid_from="2005-11-22",
              valid_until="2021-12-08", text="Angela Merkel head_of_government_of Germany")
SCHOLZ = Fact("Olaf Scholz", "member_of", "SPD", text="Olaf Scholz member_of SPD")


def text_of(chunk_id: str) -> str:
    return f"text of {chunk_id}"


def chunks(*chunk_ids: str) -> list[ChunkMatch]:
    return [ChunkMatch(c) for c in chunk_ids]


@dataclass
class Rig:
    rag: DocumentRag
    prompt: Any
    embed: Any
    docs: Any
    fetch: Any
    kw: Any
    kg: Any

    def calls(self) -> int:
        """Every call any client received."""
        n = len(self.prompt.prompt_calls) + len(self.prompt.document_calls)
        for stub in (self.embed, self.docs, self.fetch, self.kw, self.kg):
            if stub is not None:
                n += len(stub.calls)
        return n


def rig(*, prompt=None, embed=None, docs=None, fetch=None, kw=None, kg=None, **options) -> Rig:
    prompt = prompt or PromptStub()
    embed = embed or EmbedStub()
    docs = docs or DocEmbeddingsStub(embed if isinstance(embed, EmbedStub) else EmbedStub())
    fetch = fetch or FetchStub()
    options.setdefault("max_concepts", 3)  # concepts on, unless a test says otherwise
    options.setdefault("retrieval_mode", "vector")  # the settings' default is hybrid; most tests here are of one path
    rag = DocumentRag(prompt, embed, docs, fetch, kw_index_client=kw, kg_client=kg, **options)
    return Rig(rag, prompt, embed, docs, fetch, kw, kg)


# -- the package ----------------------------------------------------------------------------------


def test_package_exports_documentrag_rrf_fuse_and_k_60():
    import ragbus.document_rag as package

    assert package.DocumentRag is DocumentRag
    assert package.rrf_fuse is rrf_fuse
    assert RRF_K == 60


# -- vector mode ----------------------------------------------------------------------------------


async def test_vector_mode_extracts_concepts_with_the_extract_concepts_prompt():
    r = rig()

    await r.rag.query(QUESTION)

    assert len(r.prompt.concept_calls) == 1
    template, variables = r.prompt.concept_calls[0]
    assert template == "extract-concepts"
    assert QUESTION in variables.values()


async def test_vector_mode_embeds_all_concepts_in_one_batch_question_first():
    r = rig(prompt=PromptStub(concepts=["alpha", "beta"]))

    await r.rag.query(QUESTION)

    assert r.embed.calls == [[QUESTION, "alpha", "beta"]]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_max_concepts_zero_asks_no_extract_concepts_and_embeds_the_question(mode):
    # One hop less on the vector path: the default, as the prompt processor extracts none by default.
    r = rig(prompt=PromptStub(concepts=["alpha"]), kw=KeywordStub(), max_concepts=0)

    await r.rag.query(QUESTION, mode=mode)

    assert r.prompt.concept_calls == []
    assert r.embed.calls == [[QUESTION]]


@pytest.mark.parametrize("max_concepts", [0, 1, 3])
async def test_max_concepts_counts_the_concepts_after_the_question(max_concepts):
    # The same meaning as the prompt processor's max_concepts: 0 embeds the question alone.
    r = rig(prompt=PromptStub(concepts=["alpha", "beta", "gamma", "delta"]), max_concepts=max_concepts)

    await r.rag.query(QUESTION)

    assert r.embed.calls == [[QUESTION, *["alpha", "beta", "gamma", "delta"][:max_concepts]]]


async def test_vector_mode_queries_the_store_once_per_vector_concurrently():
    embed = EmbedStub()
    meet = Rendezvous(3)
    r = rig(prompt=PromptStub(concepts=["alpha", "beta"]), embed=embed, docs=DocEmbeddingsStub(embed, rendezvous=meet))

    result = await r.rag.query(QUESTION)

    assert meet.met
    assert sorted(r.docs.queried_texts) == sorted([QUESTION, "alpha", "beta"])
    assert all(len(c["vectors"]) == 1 for c in r.docs.calls)
    assert set(r.prompt.last["document_ids"]) == {f"v-{QUESTION}", "v-alpha", "v-beta"}
    assert result.degraded == []


async def test_vector_mode_deduplicates_chunks_found_by_several_vectors():
    embed = EmbedStub()
    found = {QUESTION: chunks("c1", "c2"), "alpha": chunks("c2", "c3"), "beta": chunks("c3", "c1")}
    r = rig(prompt=PromptStub(concepts=["alpha", "beta"]), embed=embed,
            docs=DocEmbeddingsStub(embed, lambda text: found[text]))

    result = await r.rag.query(QUESTION)

    ids = r.prompt.last["document_ids"]
    assert sorted(ids) == ["c1", "c2", "c3"]
    assert [c.chunk_id for c in result.chunks] == ids
    assert sorted(r.fetch.calls) == ["c1", "c2", "c3"]


async def test_vector_mode_never_touches_the_keyword_client():
    kw = Forbidden("kw_index_client")
    r = rig(kw=kw, retrieval_mode="vector")

    result = await r.rag.query(QUESTION)

    assert kw.calls == []
    assert result.paths == ["vector"]
    assert "keyword" not in result.degraded


async def test_vector_mode_never_asks_the_keyword_client():
    kw = Forbidden("kw_index_client")
    r = rig(kw=kw, retrieval_mode="vector")

    result = await r.rag.query(QUESTION)

    assert kw.calls == []
    assert len(r.embed.calls) == 1
    assert result.paths == ["vector"]


async def test_built_by_hand_hybrid_fuses_by_rrf_and_the_settings_fusion_is_minmax():
    """The seed's class: hybrid asked for without a fusion is weighted RRF; the processor passes its
    configured one (minmax), which orders these lists otherwise."""
    # RRF ties a and x (each first once) and keeps a; min-max scores see x far ahead on the keyword side.
    vector = scored(("a", 0.50), ("x", 0.49), ("z", 0.10))
    keyword = scored(("x", 12.0), ("a", 1.0), ("w", 0.5))

    async def first_two(**options) -> list[str]:
        embed = EmbedStub()
        docs = DocEmbeddingsStub(embed, lambda text: list(vector))
        rag = DocumentRag(PromptStub(concepts=[]), embed, docs, FetchStub(), kw_index_client=KeywordStub(keyword),
                          doc_limit=3, retrieval_mode="hybrid", **options)
        result = await rag.query(QUESTION)
        assert result.paths == ["vector", "keyword"]
        return [c.chunk_id for c in result.chunks][:2]

    assert await first_two() == ["a", "x"]
    assert await first_two(fusion=DocumentRagSettings().fusion) == ["x", "a"]
    assert DocumentRagSettings().fusion == "minmax"


async def test_doc_limit_bounds_the_store_requests_and_the_chunks():
    embed = EmbedStub()
    r = rig(prompt=PromptStub(concepts=[]), embed=embed,
            docs=DocEmbeddingsStub(embed, lambda text: chunks("c1", "c2", "c3", "c4")), doc_limit=5)

    result = await r.rag.query(QUESTION, doc_limit=2)

    assert [c["limit"] for c in r.docs.calls] == [2]
    assert r.prompt.last["document_ids"] == ["c1", "c2"]
    assert len(result.chunks) == 2


# -- keyword mode ---------------------------------------------------------------------------------


async def test_keyword_mode_sends_the_raw_question_as_the_query_keyword():
    raw = "  who ran Germany's government — in 2015?? "
    kw = KeywordStub()
    r = rig(kw=kw, retrieval_mode="keyword")

    await r.rag.query(raw)

    assert len(kw.calls) == 1
    assert kw.calls[0]["query"] == raw


async def test_keyword_mode_skips_concepts_embedding_and_vector_queries():
    embed, docs = Forbidden("embeddings_client"), Forbidden("doc_embeddings_client")
    r = rig(embed=embed, docs=docs, kw=KeywordStub(), retrieval_mode="keyword")

    result = await r.rag.query(QUESTION)

    assert r.prompt.concept_calls == []
    assert embed.calls == []
    assert docs.calls == []
    assert result.paths == ["keyword"]
    assert result.degraded == []


async def test_a_single_ranking_is_deduplicated_too():
    # One concept (one vector), keyword mode, and a hybrid fallback each use one store's list as
    # it came: a chunk it repeats, or an empty id, must still reach the prompt once or not at all.
    repeated = [ChunkMatch("a"), ChunkMatch(""), ChunkMatch("b"), ChunkMatch("a")]
    embed = EmbedStub()
    one_concept = rig(prompt=PromptStub(concepts=()), embed=embed, docs=DocEmbeddingsStub(embed, lambda text: repeated))
    assert [c.chunk_id for c in (await one_concept.rag.query(QUESTION)).chunks] == ["a", "b"]
    keyword = rig(kw=KeywordStub(repeated), retrieval_mode="keyword")
    assert [c.chunk_id for c in (await keyword.rag.query(QUESTION)).chunks] == ["a", "b"]
    embed = EmbedStub()
    fallback = rig(kw=KeywordStub(repeated), retrieval_mode="hybrid", embed=embed,
                   docs=DocEmbeddingsStub(embed, error=OSError("vector store down")))
    result = await fallback.rag.query(QUESTION)
    assert result.degraded == ["vector"] and [c.chunk_id for c in result.chunks] == ["a", "b"]


async def test_keyword_mode_keeps_the_bm25_order_in_the_prompt():
    r = rig(kw=KeywordStub(chunks("k3", "k1", "k2")), retrieval_mode="keyword")

    result = await r.rag.query(QUESTION)

    assert r.prompt.last["documents"] == [text_of("k3"), text_of("k1"), text_of("k2")]
    assert r.prompt.last["document_ids"] == ["k3", "k1", "k2"]
    assert [c.chunk_id for c in result.chunks] == ["k3", "k1", "k2"]


# -- hybrid mode ----------------------------------------------------------------------------------


def hybrid_rig(vector: list[ChunkMatch], kw: KeywordStub, *, docs_kwargs: dict | None = None, **options) -> Rig:
    """No extra concepts, so the vector path is one store query that returns ``vector``."""
    embed = EmbedStub()
    docs = DocEmbeddingsStub(embed, lambda text: list(vector), **(docs_kwargs or {}))
    options.setdefault("fusion", "rrf")  # the tests of weights work out ranks; min-max has its own below
    return rig(prompt=PromptStub(concepts=[]), embed=embed, docs=docs, kw=kw, retrieval_mode="hybrid", **options)


async def test_hybrid_runs_the_vector_and_keyword_paths_concurrently():
    meet = Rendezvous(2)
    r = hybrid_rig(chunks("v1"), KeywordStub(chunks("k1"), rendezvous=meet), docs_kwargs={"rendezvous": meet})

    result = await r.rag.query(QUESTION)

    assert meet.met
    assert result.degraded == []
    assert set(result.paths) >= {"vector", "keyword"}
    assert sorted(r.prompt.last["document_ids"]) == ["k1", "v1"]


@pytest.mark.parametrize(
    ("vector_weight", "keyword_weight", "expected"),
    [
        # a = w_v/61 + w_k/63, b = w_v/62 + w_k/62, c = w_v/63 + w_k/61, d = w_k/64
        (1.0, 0.5, ["a", "b", "c", "d"]),  # a .024330, b .024194, c .024071, d .007813
        (0.5, 1.0, ["c", "b", "a", "d"]),  # c .024330, b .024194, a .024071, d .015625
    ],
)
async def test_hybrid_fuses_both_rankings_with_the_weights(vector_weight, keyword_weight, expected):
    vector = chunks("a", "b", "c")
    keyword = chunks("c", "b", "a", "d")
    scores = {
        "a": vector_weight / 61 + keyword_weight / 63,
        "b": vector_weight / 62 + keyword_weight / 62,
        "c": vector_weight / 63 + keyword_weight / 61,
        "d": keyword_weight / 64,
    }
    assert sorted(scores, key=lambda c: -scores[c]) == expected
    r = hybrid_rig(vector, KeywordStub(keyword), vector_weight=vector_weight, keyword_weight=keyword_weight,
                   doc_limit=10)

    result = await r.rag.query(QUESTION)

    assert r.prompt.last["document_ids"] == expected
    assert r.prompt.last["documents"] == [text_of(c) for c in expected]
    assert [c.chunk_id for c in result.chunks] == expected
    assert expected == [m.chunk_id for m in rrf_fuse([vector, keyword], [vector_weight, keyword_weight], 10)]


async def test_hybrid_fusion_is_truncated_to_doc_limit():
    r = hybrid_rig(chunks("a", "b", "c"), KeywordStub(chunks("c", "b", "a", "d")), doc_limit=2)

    await r.rag.query(QUESTION)

    # both stores are asked for 2: vector [a, b], keyword [c, b]; b = 2/62 = 0.032258 > a = c = 1/61
    assert [c["limit"] for c in r.docs.calls] == [c["limit"] for c in r.kw.calls] == [2]
    assert r.prompt.last["document_ids"] == ["b", "a"]


def scored(*pairs: tuple[str, float]) -> list[ChunkMatch]:
    return [ChunkMatch(c, score=s) for c, s in pairs]


async def test_hybrid_fusion_is_chosen_per_request_else_by_the_instance():
    # RRF ties a and x (each first once) and keeps a; min-max scores see x far ahead on the keyword side.
    vector = scored(("a", 0.50), ("x", 0.49), ("z", 0.10))
    keyword = scored(("x", 12.0), ("a", 1.0), ("w", 0.5))
    rrf = hybrid_rig(vector, KeywordStub(keyword), doc_limit=3, fusion="rrf")
    assert [c.chunk_id for c in (await rrf.rag.query(QUESTION)).chunks][:2] == ["a", "x"]
    assert [c.chunk_id for c in (await rrf.rag.query(QUESTION, fusion="minmax")).chunks][:2] == ["x", "a"]
    minmax = hybrid_rig(vector, KeywordStub(keyword), doc_limit=3, fusion="minmax")
    assert [c.chunk_id for c in (await minmax.rag.query(QUESTION)).chunks][:2] == ["x", "a"]
    assert [c.chunk_id for c in (await minmax.rag.query(QUESTION, fusion="rrf")).chunks][:2] == ["a", "x"]
    with pytest.raises(ValueError, match="unknown fusion"):
        await minmax.rag.query(QUESTION, fusion="borda")
    with pytest.raises(ValueError, match="unknown fusion"):
        hybrid_rig(vector, KeywordStub(keyword), fusion="borda")


async def test_hybrid_depth_asks_each_side_for_more_than_the_limit():
    r = hybrid_rig(chunks("a", "b", "c"), KeywordStub(chunks("c", "b", "a", "d")), doc_limit=2, hybrid_depth=30)
    result = await r.rag.query(QUESTION)
    assert [c["limit"] for c in r.docs.calls] == [c["limit"] for c in r.kw.calls] == [30]
    assert len(result.chunks) == 2


async def test_hybrid_keyword_failure_is_logged_and_degrades_to_vector(caplog):
    caplog.set_level(logging.WARNING, logger=CORE_LOGGER)
    r = hybrid_rig(chunks("v1", "v2"), KeywordStub(error=ConnectionError("bm25 index is down")))

    result = await r.rag.query(QUESTION)

    assert "keyword" in result.degraded
    assert "vector" not in result.degraded
    assert r.prompt.last["document_ids"] == ["v1", "v2"]
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING and rec.name == CORE_LOGGER]
    assert any("keyword" in rec.getMessage() for rec in warnings), [rec.getMessage() for rec in warnings]


async def test_hybrid_vector_failure_degrades_to_keyword():
    r = hybrid_rig([], KeywordStub(chunks("k1", "k2")), docs_kwargs={"error": ConnectionError("vector store down")})

    result = await r.rag.query(QUESTION)

    assert "vector" in result.degraded
    assert "keyword" not in result.degraded
    assert r.prompt.last["document_ids"] == ["k1", "k2"]


async def test_hybrid_keyword_path_past_path_timeout_degrades_and_answers_in_time():
    hang = Hang()
    r = hybrid_rig(chunks("v1"), KeywordStub(hang=hang), path_timeout_s=0.2)

    started = time.perf_counter()
    result = await asyncio.wait_for(r.rag.query(QUESTION), 10)
    elapsed = time.perf_counter() - started

    assert elapsed < 5
    assert "keyword" in result.degraded
    assert r.prompt.last["document_ids"] == ["v1"]
    assert hang.cancelled == 1  # the abandoned keyword call is not left running


async def test_hybrid_both_paths_failing_raises():
    r = hybrid_rig([], KeywordStub(error=ConnectionError("bm25 down")),
                   docs_kwargs={"error": ConnectionError("vectors down")})

    with pytest.raises(Exception) as raised:
        await r.rag.query(QUESTION)

    assert not isinstance(raised.value, AssertionError)  # the stubs' own complaints would be AssertionErrors
    assert "bm25 down" in str(raised.value) and "vectors down" in str(raised.value)  # it says why
    assert r.prompt.document_calls == []


# -- mode validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_keyword_and_hybrid_modes_need_a_keyword_client(mode):
    with pytest.raises(ValueError):
        DocumentRag(PromptStub(), EmbedStub(), Forbidden("docs"), FetchStub(), retrieval_mode=mode)


async def test_built_by_hand_without_a_keyword_client_the_class_runs_vector():
    """The seed's contract: the keyword path is strictly opt-in for the class a user builds."""
    embed = EmbedStub()
    rag = DocumentRag(PromptStub(), embed, DocEmbeddingsStub(embed), FetchStub())
    assert (rag.retrieval_mode, rag.fusion) == ("vector", "rrf")
    result = await rag.query("what does the with statement do")
    assert result.paths == ["vector"] and result.chunks


@pytest.mark.parametrize("mode", ["bm25", "Vector", "", "vector "])
def test_an_unknown_mode_is_rejected_at_construction(mode):
    with pytest.raises(ValueError):
        DocumentRag(PromptStub(), EmbedStub(), Forbidden("docs"), FetchStub(), KeywordStub(), retrieval_mode=mode)


@pytest.mark.parametrize("mode", ["bm25", "Hybrid", "vector "])
async def test_an_unknown_query_mode_is_rejected_before_any_call(mode):
    r = rig(kw=KeywordStub(), kg=KgStub())

    with pytest.raises(ValueError):
        await r.rag.query(QUESTION, mode=mode)

    assert r.calls() == 0


async def test_an_empty_query_mode_is_rejected_not_taken_for_the_default():
    # "" is not one of the modes (the constructor refuses it too); only None means "the default"
    r = rig(kw=KeywordStub(), kg=KgStub())

    with pytest.raises(ValueError):
        await r.rag.query(QUESTION, mode="")

    assert r.calls() == 0


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
async def test_a_query_mode_needing_a_keyword_client_is_rejected_without_one(mode):
    r = rig(kg=KgStub())

    with pytest.raises(ValueError):
        await r.rag.query(QUESTION, mode=mode)

    assert r.calls() == 0


async def test_the_query_mode_overrides_the_default_mode():
    embed, docs = Forbidden("embeddings_client"), Forbidden("doc_embeddings_client")
    kw = KeywordStub(chunks("k1"))
    r = rig(embed=embed, docs=docs, kw=kw, retrieval_mode="vector")

    result = await r.rag.query(QUESTION, mode="keyword")

    assert [c["query"] for c in kw.calls] == [QUESTION]
    assert embed.calls == docs.calls == []
    assert result.paths == ["keyword"]


# -- chunk texts ----------------------------------------------------------------------------------


async def test_chunk_texts_are_fetched_concurrently():
    meet = Rendezvous(3)
    r = rig(kw=KeywordStub(chunks("k1", "k2", "k3")), fetch=FetchStub(rendezvous=meet), retrieval_mode="keyword")

    result = await r.rag.query(QUESTION)

    assert meet.met
    assert sorted(r.fetch.calls) == ["k1", "k2", "k3"]
    assert r.prompt.last["documents"] == [text_of("k1"), text_of("k2"), text_of("k3")]
    assert result.degraded == []


async def test_fetched_texts_keep_the_fused_order_whatever_order_fetches_finish_in():
    # the first chunk's fetch is the slowest
    fetch = FetchStub(delay=lambda cid: {"k1": 0.03, "k2": 0.02, "k3": 0.0}[cid])
    r = rig(kw=KeywordStub(chunks("k1", "k2", "k3")), fetch=fetch, retrieval_mode="keyword")

    await r.rag.query(QUESTION)

    assert r.prompt.last["documents"] == [text_of("k1"), text_of("k2"), text_of("k3")]
    assert r.prompt.last["document_ids"] == ["k1", "k2", "k3"]


async def test_a_text_the_store_sent_is_not_fetched_again():
    kw = KeywordStub([ChunkMatch("k1", text="stored text of k1"), ChunkMatch("k2")])
    r = rig(kw=kw, retrieval_mode="keyword")

    result = await r.rag.query(QUESTION)

    assert r.fetch.calls == ["k2"]
    assert r.prompt.last["documents"] == ["stored text of k1", text_of("k2")]
    assert [c.text for c in result.chunks] == ["stored text of k1", text_of("k2")]


async def test_a_failed_fetch_drops_its_chunk_and_degrades_fetch_chunk():
    r = rig(kw=KeywordStub(chunks("k1", "k2", "k3")), fetch=FetchStub(failing={"k2"}), retrieval_mode="keyword")

    result = await r.rag.query(QUESTION)

    assert "fetch-chunk" in result.degraded
    assert r.prompt.last["documents"] == [text_of("k1"), text_of("k3")]
    assert r.prompt.last["document_ids"] == ["k1", "k3"]
    assert [c.chunk_id for c in result.chunks] == ["k1", "k3"]


async def test_documents_hold_exactly_the_chunk_texts_and_document_ids_their_ids():
    r = rig(kw=KeywordStub(chunks("k1", "k2")), kg=KgStub([MERKEL, SCHOLZ]), retrieval_mode="keyword")

    await r.rag.query(QUESTION, at_time="2015-06-01")

    call = r.prompt.last
    assert call["query"] == QUESTION
    assert call["documents"] == [text_of("k1"), text_of("k2")]
    assert all(type(d) is str for d in call["documents"])
    assert call["document_ids"] == ["k1", "k2"]
    assert MERKEL.text not in call["documents"] and SCHOLZ.text not in call["documents"]


# -- the graph path -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at_time", "iso_utc"),
    [("2023-06-01", "2023-06-01T00:00:00Z"), ("2023-06-01T02:30:00+02:00", "2023-06-01T00:30:00Z")],
)
async def test_kg_is_queried_with_the_question_the_utc_at_time_and_a_limit(at_time, iso_utc):
    kg = KgStub()
    r = rig(kg=kg, fact_limit=3)

    await r.rag.query(QUESTION, at_time=at_time)

    assert len(kg.calls) == 1
    args, kwargs = kg.calls[0]
    bound = _KG_QUERY.bind(None, *args, **kwargs).arguments
    assert bound["question"] == QUESTION
    assert kwargs["at_time"] == iso_utc
    assert kwargs["limit"] == 3


async def test_facts_go_to_the_prompt_as_their_own_keyword():
    r = rig(kg=KgStub([MERKEL, SCHOLZ]))

    result = await r.rag.query(QUESTION, at_time="2015-06-01")

    assert r.prompt.last["facts"] == [MERKEL.text, SCHOLZ.text]
    assert not set(r.prompt.last["facts"]) & set(r.prompt.last["documents"])
    assert result.facts == [MERKEL, SCHOLZ]
    assert "kg" in result.paths


async def test_the_snapshot_header_is_passed_with_at_time():
    r = rig(kg=KgStub())

    await r.rag.query(QUESTION, at_time="2023-06-01")

    header = r.prompt.last["snapshot_header"]
    assert "Graph context valid as of" in header
    assert "2023-06-01" in header
    assert r.prompt.last["at_time"].startswith("2023-06-01")


async def test_without_at_time_neither_at_time_nor_the_snapshot_header_is_passed():
    r = rig(kg=KgStub())

    result = await r.rag.query(QUESTION)

    assert "at_time" not in r.prompt.last
    assert "snapshot_header" not in r.prompt.last
    assert r.prompt.last["facts"] == [MERKEL.text]  # the graph still ran
    assert result.header is None


async def test_a_failing_kg_client_degrades_without_failing_the_query():
    r = rig(kg=KgStub(error=ConnectionError("graph store down")))

    result = await r.rag.query(QUESTION, at_time="2023-06-01")

    assert "kg" in result.degraded
    assert result.facts == []
    assert r.prompt.last["facts"] == []
    assert r.prompt.last["document_ids"]  # the documents still answer
    # No facts came from the graph, so no header announces a snapshot of it.
    assert "snapshot_header" not in r.prompt.last and result.header is None
    assert result.answer == f"Answer to: {QUESTION}"


async def test_a_kg_path_past_path_timeout_degrades_without_failing_the_query():
    hang = Hang()
    r = rig(kg=KgStub(hang=hang), path_timeout_s=0.2)

    started = time.perf_counter()
    result = await asyncio.wait_for(r.rag.query(QUESTION, at_time="2023-06-01"), 10)

    assert time.perf_counter() - started < 5
    assert "kg" in result.degraded
    assert r.prompt.last["facts"] == []
    assert hang.cancelled == 1


async def test_the_graph_call_runs_concurrently_with_the_document_path():
    meet = Rendezvous(2)
    embed = EmbedStub()
    r = rig(prompt=PromptStub(concepts=[]), embed=embed, docs=DocEmbeddingsStub(embed, rendezvous=meet),
            kg=KgStub(rendezvous=meet))

    result = await r.rag.query(QUESTION, at_time="2023-06-01")

    assert meet.met
    assert result.degraded == []
    assert r.prompt.last["facts"] == [MERKEL.text]


# -- the result -----------------------------------------------------------------------------------


async def test_the_result_carries_answer_chunks_cited_facts_paths_and_timings():
    answer = "Merkel led it [c1], see also [c3] and [not-a-chunk]; c2 is not cited."
    embed = EmbedStub()
    r = rig(prompt=PromptStub(concepts=[], answer=lambda kwargs: answer), embed=embed,
            docs=DocEmbeddingsStub(embed, lambda text: chunks("c1", "c2", "c3")), kg=KgStub([MERKEL]))

    result = await r.rag.query(QUESTION, at_time="2015-06-01")

    assert result.answer == answer
    assert [c.chunk_id for c in result.chunks] == ["c1", "c2", "c3"]
    assert [c.text for c in result.chunks] == [text_of("c1"), text_of("c2"), text_of("c3")]
    assert result.cited == ["c1", "c3"]
    assert result.facts == [MERKEL]
    assert set(result.paths) == {"vector", "kg"}
    assert result.degraded == []
    assert "total" in result.timings_ms
    stages = set(result.timings_ms) - {"total"}
    assert len(stages) >= 3, result.timings_ms
    assert all(0 <= ms <= result.timings_ms["total"] for ms in result.timings_ms.values()), result.timings_ms


async def test_an_answer_citing_nothing_has_no_citations():
    r = rig(prompt=PromptStub(answer=lambda kwargs: "I do not know."))

    result = await r.rag.query(QUESTION)

    assert result.chunks
    assert result.cited == []


# -- bad input ------------------------------------------------------------------------------------


def full_rig() -> Rig:
    return rig(kw=KeywordStub(), kg=KgStub(), retrieval_mode="hybrid")


@pytest.mark.parametrize("question", ["", "   ", "\n\t  \r\n"])
async def test_an_empty_or_blank_question_is_rejected_before_any_call(question):
    r = full_rig()

    with pytest.raises(ValueError):
        await r.rag.query(question)

    assert r.calls() == 0


async def test_a_100kb_question_is_rejected_quickly_before_any_call():
    r = full_rig()

    started = time.perf_counter()
    with pytest.raises(ValueError):
        await r.rag.query("why " * 25_000)

    assert time.perf_counter() - started < 5
    assert r.calls() == 0


@pytest.mark.parametrize("question", [None, 42, b"bytes question"])
async def test_a_question_that_is_not_a_str_is_rejected(question):
    r = full_rig()

    with pytest.raises((TypeError, ValueError)):
        await r.rag.query(question)

    assert r.calls() == 0


@pytest.mark.parametrize("at_time", ["garbage", True, "2023-13-45", 20230601.5])
async def test_a_bad_at_time_is_rejected_before_any_call(at_time):
    r = full_rig()

    with pytest.raises((ValueError, TypeError)):
        await r.rag.query(QUESTION, at_time=at_time)

    assert r.calls() == 0


async def test_a_negative_doc_limit_is_rejected_before_any_call():
    r = full_rig()

    with pytest.raises(ValueError):
        await r.rag.query(QUESTION, doc_limit=-1)

    assert r.calls() == 0


@pytest.mark.parametrize("doc_limit", [True, False])
async def test_a_bool_doc_limit_is_a_type_error(doc_limit):
    r = full_rig()

    with pytest.raises(TypeError):
        await r.rag.query(QUESTION, doc_limit=doc_limit)

    assert r.calls() == 0


def test_a_bad_doc_limit_is_rejected_at_construction():
    with pytest.raises(ValueError):
        DocumentRag(PromptStub(), EmbedStub(), Forbidden("docs"), FetchStub(), retrieval_mode="vector", doc_limit=-1)
    with pytest.raises(TypeError):
        DocumentRag(PromptStub(), EmbedStub(), Forbidden("docs"), FetchStub(), retrieval_mode="vector", doc_limit=True)


# -- no per-query state -----------------------------------------------------------------------------


async def test_concurrent_queries_on_one_instance_each_get_their_own_answer():
    questions = [f"Question number {i} about topic {i * 7}?" for i in range(20)]
    embed = EmbedStub()
    all_in_flight = Rendezvous(20)
    docs = DocEmbeddingsStub(embed, lambda text: [ChunkMatch(f"chunk-for-{questions.index(text)}")],
                             rendezvous=all_in_flight)
    # later questions' fetches finish first, to interleave the queries
    fetch = FetchStub(delay=lambda cid: (20 - int(cid.rsplit("-", 1)[1])) * 0.001)
    r = rig(prompt=PromptStub(concepts=[]), embed=embed, docs=docs, fetch=fetch, kg=KgStub())

    results = await asyncio.gather(*(r.rag.query(q) for q in questions))

    assert all_in_flight.met
    for i, (question, result) in enumerate(zip(questions, results, strict=True)):
        assert result.answer == f"Answer to: {question}"
        assert [c.chunk_id for c in result.chunks] == [f"chunk-for-{i}"]
        assert [c.text for c in result.chunks] == [text_of(f"chunk-for-{i}")]
        assert result.degraded == []
    by_query = {call["query"]: call for call in r.prompt.document_calls}
    assert len(by_query) == 20
    for i, question in enumerate(questions):
        assert by_query[question]["document_ids"] == [f"chunk-for-{i}"]
        assert by_query[question]["documents"] == [text_of(f"chunk-for-{i}")]


# -- cancellation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_cancelling_a_query_leaves_no_task_of_its_own_running(mode):
    vector_hang = Hang(expected=3)  # the question and two concepts
    kg_hang = Hang()
    kw_hang = Hang()
    embed = EmbedStub()
    r = rig(prompt=PromptStub(concepts=["alpha", "beta"]), embed=embed, docs=DocEmbeddingsStub(embed, hang=vector_hang),
            kg=KgStub(hang=kg_hang), kw=KeywordStub(hang=kw_hang), retrieval_mode=mode)
    before = asyncio.all_tasks()

    task = asyncio.create_task(r.rag.query(QUESTION, at_time="2023-06-01"))
    hanging = [vector_hang.all_started.wait(), kg_hang.all_started.wait()]
    if mode == "hybrid":
        hanging.append(kw_hang.all_started.wait())
    await asyncio.wait_for(asyncio.gather(*hanging), 5)
    task.cancel()
    await asyncio.wait({task}, timeout=5)  # a query that ignores the cancellation fails here, not hangs

    assert task.cancelled()

    leftover = {t for t in asyncio.all_tasks() if t not in before and t is not task}
    assert leftover == set(), leftover
    assert vector_hang.cancelled == vector_hang.started == 3
    assert kg_hang.cancelled == kg_hang.started == 1
    assert kw_hang.cancelled == kw_hang.started
    assert r.prompt.document_calls == []


# -- sources only, and the graph as of a time ---------------------------------------------------


async def test_answer_false_returns_the_ranked_sources_and_never_calls_the_prompt():
    r = rig(kg=KgStub())

    found = await r.rag.query(QUESTION, answer=False)

    assert r.prompt.document_calls == []
    assert found.answer == "" and found.cited == []
    assert found.chunks and [c.score for c in found.chunks] == sorted((c.score for c in found.chunks), reverse=True)
    assert found.facts == [MERKEL] and "prompt" not in found.timings_ms


async def test_as_of_reaches_the_graph_normalised_and_a_bad_one_is_refused():
    r = rig(kg=KgStub())

    await r.rag.query(QUESTION, at_time="2012-01-01", as_of="2008-01-01")

    assert r.kg.calls[-1][1]["as_of"] == "2008-01-01T00:00:00Z"
    assert r.kg.calls[-1][1]["at_time"] == "2012-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="as_of"):
        await r.rag.query(QUESTION, as_of="not a time")


# -- a follow-up in a conversation ---------------------------------------------------------------


class CondensingPromptStub(PromptStub):
    """``condense`` answers ``rewrite`` (or raises ``error``), recording what it was sent."""

    def __init__(self, rewrite: str = "", error: Exception | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rewrite, self.error = rewrite, error
        self.condense_calls: list[tuple[str, list[str]]] = []

    async def condense(self, query: str, history) -> str:
        inspect.signature(PromptClient.condense).bind(None, query, history)
        self.condense_calls.append((query, list(history)))
        if self.error is not None:
            raise self.error
        return self.rewrite


HISTORY = [Turn(role="user", content="What is a lambda?"), Turn(role="assistant", content="An anonymous\nfunction.")]


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
async def test_a_follow_up_is_condensed_first_and_every_path_and_the_answer_use_the_standalone_question(mode):
    prompt = CondensingPromptStub(rewrite="Can a lambda contain statements?", concepts=())
    r = rig(prompt=prompt, kw=KeywordStub(), kg=KgStub(), max_concepts=0)

    found = await r.rag.query("Can it contain statements?", mode=mode, history=HISTORY)

    assert prompt.condense_calls == [("Can it contain statements?",
                                      ["user: What is a lambda?", "assistant: An anonymous function."])]
    assert found.standalone == "Can a lambda contain statements?"
    assert prompt.last["query"] == "Can a lambda contain statements?"
    if mode != "keyword":
        assert r.docs.queried_texts == ["Can a lambda contain statements?"]
    if mode != "vector":
        assert r.kw.calls[-1]["query"] == "Can a lambda contain statements?"
    assert r.kg.calls[-1][0][0] == "Can a lambda contain statements?"
    assert "condense" in found.timings_ms


async def test_without_history_nothing_is_condensed_and_a_failed_condense_degrades_to_the_question():
    prompt = CondensingPromptStub(error=ConnectionError("prompt is down"))
    r = rig(prompt=prompt)
    alone = await r.rag.query("Can it contain statements?")
    assert prompt.condense_calls == [] and alone.standalone is None

    failed = await r.rag.query("Can it contain statements?", history=HISTORY)
    assert failed.degraded == ["condense"] and "prompt is down" in failed.problems[0]
    assert failed.standalone is None and prompt.last["query"] == "Can it contain statements?"


async def test_only_the_latest_turns_are_sent_each_cut_to_a_bound():
    prompt = CondensingPromptStub(rewrite="same")
    r = rig(prompt=prompt)
    long_history = [Turn(role="user", content=f"question {i} " + "x" * 5000) for i in range(20)]
    await r.rag.query("And then?", history=long_history)
    _, sent = prompt.condense_calls[0]
    assert len(sent) == MAX_HISTORY and sent[0].startswith("user: question 12 ")
    assert all(len(line) <= len("user: ") + MAX_TURN_CHARS for line in sent)
