"""The keyword processors over the in-process bus: real tantivy indexes in tmp_path, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass

import pytest

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.keyword import (
    KeywordDeleteProcessor,
    KeywordIndex,
    KeywordQueryProcessor,
    KeywordSettings,
    KeywordStoreProcessor,
)
from ragbus.stores.keywords.index import identifier_tokens, stems, words
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import KeywordClient, RemoteError
from ragbus.runtime.worker import build_processor
from ragbus.schema import Chunk, DeleteDocument, EmbeddedChunks, IngestResult
from ragbus.schema import topics as t

from ..helpers.serving import serving

TIMEOUT = 30

CORPUS = {
    "spec-732": ("spec", "Clause 7.3.2 requires the vendor to log every retry."),
    "spec-723": ("spec", "Clause 7.2.3 covers section 2 of part 7, with 3 annexes."),
    "py-slots": ("python", "Defining __slots__ on a class saves memory per instance."),
    "cal-slots": ("calendar", "The slots of the schedule are free on Monday; slots fill fast."),
    "lint": ("lint", "Pylint reports E1101 when an attribute is missing."),
    "lint-other": ("lint", "Pylint reports E1102 when a non-callable is called."),
    "py-join": ("python", "Use os.path.join to build paths portably."),
    "py-os": ("python", "The os module handles each path; join strings with str.join."),
    "cpp": ("langs", "C++ templates are instantiated at compile time."),
    "c": ("langs", "The C language has no templates; C is small."),
    "py-init": ("python", "__init__ runs after __new__ has created the instance."),
    "py-new": ("python", "The instance is created by new and then initialised."),
}


def corpus_chunks(collection: str = "default") -> list[Chunk]:
    return [
        Chunk(chunk_id=cid, document_id=doc, text=text, position=i, title="", collection=collection)
        for i, (cid, (doc, text)) in enumerate(CORPUS.items())
    ]


def embedded(chunks: list[Chunk]) -> EmbeddedChunks:
    return EmbeddedChunks(chunks=chunks, vectors=[[0.0, 1.0] for _ in chunks])  # vectors are ignored


@dataclass
class Stack:
    keyword: KeywordClient
    client: RequestClient

    async def store(self, chunks: list[Chunk]) -> int:
        r = await self.client.request(t.CHUNK_STORE, embedded(chunks), IngestResult, timeout=TIMEOUT)
        assert r.error is None, r.error
        return r.count

    async def delete(self, document_id: str, collection: str = "default") -> int:
        request = DeleteDocument(document_id=document_id, collection=collection)
        r = await self.client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=TIMEOUT)
        assert r.error is None, r.error
        return r.count

    async def ids(self, query: str, limit: int = 10, collection: str = "default") -> list[str]:
        return [m.chunk_id for m in await self.keyword.query(query=query, limit=limit, collection=collection)]


def settings(data_dir, topic: str, **overrides) -> KeywordSettings:
    return KeywordSettings(topic=topic, group=f"keyword-{topic}", data_dir=str(data_dir), **overrides)


@contextlib.asynccontextmanager
async def keyword_stack(data_dir, *, writers: bool = True, **query_settings):
    query_settings.setdefault("refresh_interval_s", 0.0)  # read-your-writes, unless a test says otherwise
    """Store, delete and query processors on a private memory bus, all on ``data_dir``."""
    name = f"keyword-{uuid.uuid4().hex[:12]}"
    bus = await connect(f"memory://{name}")
    try:
        async with contextlib.AsyncExitStack() as stack:
            if writers:
                store = KeywordStoreProcessor("keyword-store", settings(data_dir, t.CHUNK_STORE))
                delete = KeywordDeleteProcessor("keyword-delete", settings(data_dir, t.DOCUMENT_DELETE))
                await stack.enter_async_context(serving(bus, store))
                await stack.enter_async_context(serving(bus, delete))
            query = KeywordQueryProcessor("keyword-query", settings(data_dir, t.KEYWORD_QUERY, **query_settings))
            await stack.enter_async_context(serving(bus, query))
            client = await stack.enter_async_context(RequestClient(bus))
            yield Stack(KeywordClient(client, timeout=TIMEOUT), client)
    finally:
        await bus.close()
        drop_memory_broker(name)


async def wait_for(condition, *, timeout: float, step: float = 0.02):
    """Poll the async ``condition`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await condition():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        await asyncio.sleep(step)


def test_default_tokenizer_breaks_identifiers_and_identifier_tokens_keep_them():
    # What tantivy's default analyzer does (ours is the same, registered under our own name)...
    assert words("7.3.2") == ["7", "3", "2"]
    assert words("__slots__") == ["slots"]
    assert words("C++") == ["c"]
    assert words("os.path.join") == ["os", "path", "join"]
    assert words("E1101") == ["e1101"]
    # ...and the identifiers indexed and searched whole beside the words.
    text = "See clause 7.3.2. Call os.path.join(a, b); __slots__ in C++ or C#, std::vector; E1101 is a word."
    assert identifier_tokens(text) == ["7.3.2", "os.path.join", "__slots__", "c++", "c#", "std::vector"]


async def test_an_exact_identifier_ranks_its_chunk_first(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        assert await kw.store(corpus_chunks()) == len(CORPUS)
        expected = {
            "7.3.2": "spec-732",  # not spec-723, which has the same three numbers
            "__slots__": "py-slots",  # not the calendar's slots
            "E1101": "lint",
            "os.path.join": "py-join",  # not the chunk with os, path and join apart
            "C++": "cpp",
            "__init__": "py-init",
            "see clause 7.3.2": "spec-732",
            "why does os.path.join fail?": "py-join",
        }
        for query, chunk_id in expected.items():
            ids = await kw.ids(query)
            assert ids and ids[0] == chunk_id, (query, ids)
        match = (await kw.keyword.query(query="E1101", limit=1))[0]
    assert match.chunk_id == "lint" and match.document_id == "lint" and match.position == 4
    assert match.text == CORPUS["lint"][1] and match.collection == "default" and match.title == ""
    assert match.score > 0


def test_the_english_analyser_stems_words_but_identifiers_stay_whole():
    assert stems("Classes defining __slots__") == ["class", "defin", "slot"]
    assert identifier_tokens("Classes defining __slots__") == ["__slots__"]


async def test_with_stemming_an_inflected_word_matches_and_an_identifier_still_matches_exactly(tmp_path):
    async with keyword_stack(tmp_path, stem_boost=1.0) as kw:
        assert await kw.store(corpus_chunks()) == len(CORPUS)
        # "instantiate" is in no chunk as written; its stem meets "instantiated" (the C++ chunk).
        assert (await kw.ids("instantiate"))[:1] == ["cpp"]
        for query, chunk_id in {"__slots__": "py-slots", "__init__": "py-init", "7.3.2": "spec-732",
                                "os.path.join": "py-join", "what is __slots__ for?": "py-slots"}.items():
            ids = await kw.ids(query)
            assert ids and ids[0] == chunk_id, (query, ids)
    async with keyword_stack(tmp_path / "plain", stem_boost=0.0) as kw:
        await kw.store(corpus_chunks())
        assert await kw.ids("instantiate") == []  # without stems, no chunk has the word


def test_an_index_written_before_the_stem_field_is_still_searched(tmp_path):
    import tantivy

    from ragbus.stores.keywords.index import LEGACY_SCHEMA
    from ragbus.stores.layout import keywords_dir

    path = keywords_dir(tmp_path, "default")
    path.mkdir(parents=True)
    tantivy.Index(LEGACY_SCHEMA, path=str(path))
    writer = KeywordIndex.open_writer(tmp_path, "default", KeywordSettings(stem_boost=1.0))
    assert not writer.stemmed
    writer.upsert(corpus_chunks())
    writer.commit()
    assert [m.chunk_id for m in writer.search("__slots__", 1)] == ["py-slots"]
    writer.close()


HOSTILE = [
    '"unbalanced (paren',
    "title:foo",
    "C++",
    "a AND",
    "*",
    '""',
    "",
    "   \t\n ",
    '"',
    "'",
    ":",
    ".",
    "7.3.2",
    "__slots__",
    "(",
    ")",
    "((retry",
    "retry))",
    "AND",
    "OR",
    "NOT",
    "NOT retry",
    "retry OR",
    "AND OR NOT",
    "-",
    "-retry",
    "+",
    "+retry -vendor",
    "retr*",
    "?",
    "^",
    "retry^2",
    "^^^",
    "~",
    "retry~1",
    '"log every"~2',
    "\\",
    "retry\\",
    "\\\\\\",
    "[1 TO 5]",
    "position:[0 TO 3}",
    "{",
    "}",
    "/regex.*/",
    "text:",
    ":text",
    "text:\"log\" AND title:(a OR",
    "!",
    "&&",
    "||",
    "IN [a b]",
    "chunk_id:spec-732",
    "\x00",
    "🙂 retry 🙂",
    "x" * 5000,
    " ".join(["retry"] * 2000),
    " ".join(f"w{i}" for i in range(3000)),
]


async def test_no_query_text_is_an_error(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        await kw.store(corpus_chunks())
        for query in HOSTILE:
            try:
                await kw.keyword.query(query=query, limit=5)
            except RemoteError as exc:
                pytest.fail(f"query {query[:40]!r} got an error: {exc}")
        # The words in hostile text are still searched.
        assert (await kw.ids('"unbalanced (retry'))[0] == "spec-732"
        assert (await kw.ids("text:\"log\" AND title:(vendor OR"))[0] == "spec-732"
        assert (await kw.ids("C++"))[0] == "cpp"
        # Text with no searchable token matches nothing rather than everything.
        for query in ["", "   \t\n ", "*", '""', "\\", "-", "^", "~", "(", "?", "!"]:
            assert await kw.ids(query) == [], query


async def test_re_ingesting_the_same_chunks_does_not_duplicate_them_and_updates_them(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        chunks = corpus_chunks()
        assert await kw.store(chunks) == len(CORPUS)
        assert await kw.store(chunks) == len(CORPUS)
        assert await kw.store(chunks[:3] + chunks[:3]) == 3  # twice in one message: stored once
        everything = await kw.ids(" ".join(" ".join(words(text)) for _, text in CORPUS.values()), limit=100)
        assert sorted(everything) == sorted(CORPUS)  # each chunk once
        # An upsert replaces the chunk's text: the old words no longer find it.
        changed = Chunk(chunk_id="lint", document_id="lint", text="Now about W0611 unused imports.", position=4)
        assert await kw.store([changed]) == 1
        assert await kw.ids("W0611") == ["lint"]
        assert "lint" not in await kw.ids("E1101")
    index = KeywordIndex.open_reader(tmp_path, "default", KeywordSettings())
    assert index is not None and index.count() == len(CORPUS)


async def test_deleting_a_document_removes_all_its_chunks_and_only_them(tmp_path):
    # The store and delete processors of the stack share one tantivy writer (a second one would
    # find the directory locked).
    async with keyword_stack(tmp_path) as kw:
        await kw.store(corpus_chunks())
        await kw.store(corpus_chunks("other"))
        assert await kw.delete("python") == 5
        assert await kw.ids("__slots__") == ["cal-slots"]  # its word "slots" is still in the calendar
        assert await kw.ids("os.path.join") == []
        remaining = ["c", "cpp", "lint", "lint-other", "spec-723", "spec-732"]
        assert sorted(await kw.ids("clause OR pylint OR templates")) == remaining
        assert await kw.delete("python") == 0  # already gone
        assert await kw.delete("no-such-document") == 0
        assert await kw.delete("python", collection="never-written") == 0
        # The same document in another collection is untouched.
        assert (await kw.ids("__slots__", collection="other"))[0] == "py-slots"
    assert not (tmp_path / "never-written").exists()  # a delete does not create a collection


async def test_the_index_survives_a_restart(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        await kw.store(corpus_chunks())
        assert (await kw.ids("7.3.2"))[0] == "spec-732"
    assert (tmp_path / "default" / "tantivy" / "meta.json").is_file()
    async with keyword_stack(tmp_path) as kw:  # new processors, new tantivy objects, same directory
        assert (await kw.ids("7.3.2"))[0] == "spec-732"
        fresh = Chunk(chunk_id="new", document_id="new", text="after the restart", position=0)
        assert await kw.store([fresh]) == 1
        assert await kw.ids("restart") == ["new"]  # the writer lock was released and taken again
        assert await kw.delete("spec") == 2


async def test_a_query_replica_sees_the_writers_commits_within_its_refresh_interval(tmp_path):
    interval = 0.2
    async with (
        keyword_stack(tmp_path) as writer,
        keyword_stack(tmp_path, writers=False, refresh_interval_s=interval) as replica,
    ):
        assert await replica.ids("7.3.2") == []  # the collection does not exist yet
        await writer.store(corpus_chunks()[:1])
        await wait_for(lambda: _finds(replica, "7.3.2", "spec-732"), timeout=interval + 5)
        # Now the replica holds the index open: a later commit shows after a reload.
        await writer.store([Chunk(chunk_id="late", document_id="late", text="committed while open", position=0)])
        started = time.monotonic()
        await wait_for(lambda: _finds(replica, "committed", "late"), timeout=interval + 5)
        seen_after = time.monotonic() - started
    assert seen_after < interval + 1.5  # the bound, with slack for a loaded machine


async def _finds(stack: Stack, query: str, chunk_id: str) -> bool:
    return chunk_id in await stack.ids(query)


def test_a_reader_reloads_at_most_once_per_refresh_interval(tmp_path):
    writer = KeywordIndex.open_writer(tmp_path, "default", KeywordSettings())
    try:
        writer.upsert(corpus_chunks()[:1])
        writer.commit()
        reader = KeywordIndex.open_reader(tmp_path, "default", KeywordSettings(refresh_interval_s=3600))
        assert reader is not None and reader.count() == 1
        writer.upsert([Chunk(chunk_id="b", document_id="b", text="second", position=0)])
        writer.commit()
        assert writer.count() == 2  # a writer sees its own commits at once
        assert reader.count() == 1 and reader.search("second", 5) == []  # within the interval: stale
        reader.reload()
        assert reader.count() == 2 and [m.chunk_id for m in reader.search("second", 5)] == ["b"]
    finally:
        writer.close()


async def test_limit_below_one_is_refused_and_a_huge_limit_is_clamped(tmp_path):
    async with keyword_stack(tmp_path, max_limit=3) as kw:
        await kw.store(corpus_chunks())
        for limit in (0, -1, -(2**40)):
            with pytest.raises(RemoteError) as caught:
                await kw.keyword.query(query="python", limit=limit)
            assert caught.value.error.type == "ValidationError"  # refused when read: schema/ bounds the limit
            assert caught.value.error.message == "invalid KeywordQueryRequest: Expected `int` >= 1 - at `$.limit`"
        assert len(await kw.ids("the OR instance OR clause", limit=2**40)) == 3
        assert len(await kw.ids("the OR instance OR clause", limit=2)) == 2


async def test_unknown_and_invalid_collections(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        await kw.store(corpus_chunks())
        assert await kw.ids("7.3.2", collection="nobody-stored-here") == []
        assert not (tmp_path / "nobody-stored-here").exists()  # a query creates nothing
        for bad in ("../escape", "a/b", ".hidden", "", "x" * 200):
            with pytest.raises(RemoteError) as caught:
                await kw.keyword.query(query="7.3.2", collection=bad)
            assert caught.value.error.type == "BadRequest" and "invalid collection name" in caught.value.error.message
        bad_chunk = Chunk(chunk_id="x", document_id="x", text="x", position=0, collection="../escape")
        r = await kw.client.request(t.CHUNK_STORE, embedded([bad_chunk]), IngestResult, timeout=TIMEOUT)
        assert r.error is not None and "invalid collection name" in r.error.message
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keyword-writer.lock", "default"]  # and the writer lock


async def test_chunks_of_several_collections_in_one_message_stay_apart(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        mixed = [
            Chunk(chunk_id="a1", document_id="a", text="alpha shared", position=0, collection="alpha"),
            Chunk(chunk_id="b1", document_id="b", text="beta shared", position=0, collection="beta"),
        ]
        assert await kw.store(mixed) == 2
        assert await kw.ids("shared", collection="alpha") == ["a1"]
        assert await kw.ids("shared", collection="beta") == ["b1"]


async def test_a_word_in_the_title_ranks_above_the_same_word_in_text(tmp_path):
    async with keyword_stack(tmp_path) as kw:
        await kw.store(
            [
                Chunk(chunk_id="body", document_id="d1", text="how the retry budget works in detail", position=0),
                Chunk(chunk_id="titled", document_id="d2", text="how it works", position=0, title="Retry"),
            ]
        )
        assert await kw.ids("retry") == ["titled", "body"]
        match = (await kw.keyword.query(query="retry", limit=1))[0]
        assert match.title == "Retry"


async def test_config_sections_wire_the_three_processors(tmp_path):
    """The sections proposed for config/defaults.toml, loaded as a user file."""
    config = tmp_path / "ragbus.toml"
    config.write_text(
        """
[processors.keyword-query]
class = "ragbus.keyword:KeywordQueryProcessor"

[processors.keyword-store]
class = "ragbus.keyword:KeywordStoreProcessor"
topic = "chunk-store"

[processors.keyword-delete]
class = "ragbus.keyword:KeywordDeleteProcessor"
topic = "document-delete"
"""
    )
    env = {"RAGBUS_PROCESSORS__KEYWORD_QUERY__MAX_LIMIT": "7", "RAGBUS_DATA_DIR": str(tmp_path)}
    loaded = load_settings(config, environ=env)
    query = build_processor(loaded, "keyword-query")
    store = build_processor(loaded, "keyword-store")
    delete = build_processor(loaded, "keyword-delete")
    assert isinstance(query, KeywordQueryProcessor) and query.settings.topic == t.KEYWORD_QUERY
    assert query.settings.max_limit == 7 and query.settings.refresh_interval_s == 1.0
    assert isinstance(store, KeywordStoreProcessor)
    assert (store.settings.topic, store.settings.group) == (t.CHUNK_STORE, "keyword-store")
    assert isinstance(delete, KeywordDeleteProcessor)
    assert (delete.settings.topic, delete.settings.group) == (t.DOCUMENT_DELETE, "keyword-delete")


def test_settings_refuse_a_writer_heap_too_small_for_its_threads():
    import msgspec

    with pytest.raises(msgspec.ValidationError, match="writer_threads=2"):
        msgspec.convert({"writer_heap_bytes": 20_000_000, "writer_threads": 2}, KeywordSettings)
    with pytest.raises(msgspec.ValidationError, match="max_limit"):
        msgspec.convert({"max_limit": 0}, KeywordSettings)


async def test_concurrent_stores_deletes_and_queries_all_succeed(tmp_path):
    """The handlers run concurrently; the writer's single thread puts their batches one after another."""
    async with keyword_stack(tmp_path) as kw:
        batches = [
            [Chunk(chunk_id=f"d{i}-{j}", document_id=f"d{i}", text=f"batch{i} item x.{i}.{j}", position=j)]
            for i in range(8)
            for j in range(2)
        ]
        results = await asyncio.gather(*(kw.store(b) for b in batches), *(kw.ids("batch1") for _ in range(16)))
        assert results[: len(batches)] == [1] * len(batches)
        assert (await kw.ids("x.7.1"))[0] == "d7-1"
        assert await asyncio.gather(*(kw.delete(f"d{i}") for i in range(0, 8, 2))) == [2] * 4
        left = {chunk_id.split("-")[0] for chunk_id in await kw.ids("item", limit=100)}
        assert sorted(left) == ["d1", "d3", "d5", "d7"]


async def test_a_staged_version_is_unseen_until_one_commit_switches_the_document(tmp_path):
    """A new version is staged beside the old one, unseen by queries, and replaces it in one commit."""
    import msgspec

    new = [Chunk(chunk_id=f"python#{i}", document_id="python", text=f"Ferries sail at {i}", position=i,
                 generation="v2") for i in range(2)]
    async with keyword_stack(tmp_path) as kw:
        await kw.store(corpus_chunks())

        async def request(message, topic=t.DOCUMENT_DELETE):
            r = await kw.client.request(topic, message, IngestResult, timeout=TIMEOUT)
            assert r.error is None, r.error
            return r.count

        staged = EmbeddedChunks(chunks=new, vectors=[[0.0]] * 2, staged=True)
        assert await request(staged, t.CHUNK_STORE) == 2
        assert await kw.ids("ferries") == [] and await kw.ids("__slots__") == ["py-slots", "cal-slots"]
        assert await request(DeleteDocument(document_id="python", activate="v2", chunks=2)) == 2
        assert await kw.ids("__slots__") == ["cal-slots"]  # every chunk of the old version went
        found = await kw.keyword.query(query="ferries", limit=10)
        assert sorted(m.chunk_id for m in found) == ["python#0", "python#1"] and {m.generation for m in found} == {"v2"}
        assert await request(DeleteDocument(document_id="python", activate="v2", chunks=2)) == 2  # again: no-op
        r = await kw.client.request(t.DOCUMENT_DELETE, DeleteDocument(document_id="python", activate="v9", chunks=2),
                                    IngestResult, timeout=TIMEOUT)
        assert "0 chunk(s) of version v9" in r.error.message  # nothing staged as v9: refused
        assert len(await kw.keyword.query(query="ferries", limit=10)) == 2
        staged = EmbeddedChunks(chunks=[msgspec.structs.replace(new[0], generation="v3")], vectors=[[0.0]],
                                staged=True)
        assert await request(staged, t.CHUNK_STORE) == 1
        assert await request(DeleteDocument(document_id="python", discard="v3")) == 0
        assert [f for f in (tmp_path / "default" / "staged").rglob("*") if f.is_file()] == []


def test_an_index_written_before_versions_is_searched_and_switched_without_them(tmp_path):
    import tantivy

    from ragbus.stores.keywords.index import UNVERSIONED_SCHEMA
    from ragbus.stores.layout import keywords_dir

    path = keywords_dir(tmp_path, "default")
    path.mkdir(parents=True)
    tantivy.Index(UNVERSIONED_SCHEMA, path=str(path))
    writer = KeywordIndex.open_writer(tmp_path, "default", KeywordSettings())
    assert writer.stemmed and not writer.versioned
    writer.upsert(corpus_chunks())
    writer.commit()
    assert [(m.chunk_id, m.generation) for m in writer.search("__slots__", 1)] == [("py-slots", "")]
    new = Chunk(chunk_id="python#0", document_id="python", text="Ferries sail", position=0, generation="v2")
    assert writer.replace_document("python", [new]) == 1
    writer.commit()
    assert writer.versions("python") == {"": 1} and writer.search("__slots__", 5)[0].chunk_id == "cal-slots"
    writer.close()


def test_a_new_load_of_a_version_clears_what_a_failed_one_staged(tmp_path):
    from ragbus.stores.staging import Staging

    staging = Staging(tmp_path)
    longer = [Chunk(chunk_id=f"d#{i}", document_id="d", text=f"old {i}", position=i, generation="v") for i in range(4)]
    staging.put(longer[:2])
    staging.put(longer[2:])  # a load that failed before its switch, with another chunking
    shorter = [Chunk(chunk_id=f"d#{i}", document_id="d", text=f"new {i}", position=i, generation="v") for i in range(2)]
    staging.put(shorter)
    assert staging.read("d", "v") == (shorter, [])


def test_deferred_commits_are_one_commit_at_flush_and_a_rollback_between_is_reported(tmp_path):
    writer = KeywordIndex.open_writer(tmp_path, "default", KeywordSettings())
    try:
        writer.defer()
        for i, text in enumerate(["first words", "second words", "third words"]):
            writer.replace_document(f"d{i}", [Chunk(chunk_id=f"d{i}#0", document_id=f"d{i}", text=text, position=0)])
            writer.commit()  # while deferring: noted, not committed
        writer.delete_document("d2")
        writer.commit()
        reader = KeywordIndex.open_reader(tmp_path, "default", KeywordSettings(refresh_interval_s=0))
        assert reader is not None and reader.count() == 0
        writer.flush()
        reader.reload()
        assert sorted(m.chunk_id for m in reader.search("words", 5)) == ["d0#0", "d1#0"]
        writer.defer()
        writer.replace_document("d0", [Chunk(chunk_id="d0#0", document_id="d0", text="changed", position=0)])
        writer.commit()
        writer.rollback()  # a later change failed: the deferred one went with it
        with pytest.raises(RuntimeError, match="rolled back every change deferred"):
            writer.flush()
        reader.reload()
        assert [m.chunk_id for m in reader.search("first", 5)] == ["d0#0"]
    finally:
        writer.close()
