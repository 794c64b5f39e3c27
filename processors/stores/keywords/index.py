"""One collection's BM25 keyword index: a tantivy index in ``<data_dir>/<collection>/tantivy/``.

Fields:

- ``chunk_id``, ``document_id``: stored, indexed whole (tantivy's ``raw``
  tokenizer), for upserts and deletes;
- ``title``, ``text``: stored, split into words by ``WORDS``, searched with BM25;
- ``stem``: not stored; title and text by ``ENGLISH`` (the words, Snowball-stemmed:
  "classes" and "class", "defining" and "defines" meet), searched with BM25
  beside ``text`` (``stem_boost``; the exact words keep ``word_boost``);
- ``ident``: not stored; the identifier-ish tokens of title and text (below);
- ``position``: stored integer;
- ``generation``: stored, indexed whole: the version of its document the chunk is
  (``Chunk.generation``), so a hybrid answer can keep one version per document.

Queries are the user's raw text and never reach tantivy's query parser:
they are tokenised here, with the very analyzer the index uses, and built
into term, phrase and boolean queries, so no input is a syntax error.
Quotes, colons, ``AND``, ``-``, ``*``, ``^``, ``~``, ``\\``, unbalanced
parentheses are just characters; a query with no word in it matches nothing.

Identifiers. tantivy's default tokenizer (split on every character that is
not alphanumeric, drop tokens over 40 bytes, lowercase) takes ``7.3.2`` to
``7 3 2``, ``__slots__`` to ``slots``, ``C++`` to ``c``, ``os.path.join`` to
``os path join``, ``std::vector`` to ``std vector`` (``E1101`` stays
``e1101``). So words alone would rank "section 7.2.3" with "clause 7.3.2"
and any "slots" with ``__slots__``. ``identifier_tokens`` keeps them whole:
runs of word characters (letters, digits, ``_``) joined by ``. : / @ -``,
optionally ending in ``++`` or ``#``, lowercased, kept only when they are not
plain words (those the word field already has). The same function tokenises
the chunks (into ``ident``) and the query, so an identifier in the query
matches exactly that identifier, on top of its words: stemming the words
("slots" -> "slot") never loosens it.

An index written before the ``stem`` field existed is opened with its own
schema and searched without it (a warning says so); ingest it again to
stem. One written before the ``generation`` field is opened likewise: its
chunks carry no version (""), which document-rag takes as any version.

``replace_document`` switches a document to a new version: the old chunks'
delete and the new ones' adds go into one commit, so a search sees the one
version or the other, never both, never neither.

Freshness. A writer sees its own commits at once. A reader (a query replica,
possibly another process, on the same directory) reloads its view of the
index before a search when ``refresh_interval_s`` has passed since its last
reload: a search sees every commit that finished at least
``refresh_interval_s`` before it started. Nothing happens between searches,
so an idle replica costs nothing.

A ``KeywordIndex`` is not thread-safe: its owner calls it from one thread.
At most one writer may hold a directory (tantivy's lock file), in any
process; readers take no lock.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable
from pathlib import Path

import tantivy
from tantivy import Occur, Query

from ragbus.stores.layout import keywords_dir
from ragbus.schema import Chunk, ChunkMatch
from ragbus.schema.retrieval import KeywordStatistics, TermCount

from .settings import KeywordSettings

log = logging.getLogger(__name__)

WORDS_TOKENIZER = "ragbus_words"
ENGLISH_TOKENIZER = "ragbus_english"

# tantivy's "default" analyzer, spelled out and registered under a name of our own, so the
# index and the query tokeniser are one object and cannot drift apart.
WORDS = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40)).filter(
    tantivy.Filter.lowercase()
).build()
ENGLISH = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40)).filter(
    tantivy.Filter.lowercase()
).filter(tantivy.Filter.stemmer("english")).build()

_IDENT = re.compile(r"\w+(?:[.:/@\-]+\w+)*(?:\+\+|#)?")
MAX_IDENT_CHARS = 128

def words(text: str) -> list[str]:
    """The terms of ``text`` in the ``title`` and ``text`` fields, in order."""
    return WORDS.analyze(text)


def stems(text: str) -> list[str]:
    """The terms of ``text`` in the ``stem`` field, in order."""
    return ENGLISH.analyze(text)


def identifier_tokens(text: str) -> list[str]:
    """Identifier-ish tokens of ``text`` that the word tokenizer would break up, lowercased, in order."""
    tokens = []
    for match in _IDENT.finditer(text):
        token = match.group()
        if not token.isalnum() and len(token) <= MAX_IDENT_CHARS:
            tokens.append(token.lower())
    return tokens


def _schema(*, stem: bool = True, generation: bool = True) -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    b.add_text_field("document_id", stored=True, tokenizer_name="raw", index_option="basic")
    b.add_text_field("title", stored=True, tokenizer_name=WORDS_TOKENIZER)
    b.add_text_field("text", stored=True, tokenizer_name=WORDS_TOKENIZER)
    if stem:
        b.add_text_field("stem", stored=False, tokenizer_name=ENGLISH_TOKENIZER)
    # Tokens joined by spaces (see _ident_field), split back by tantivy's whitespace tokenizer.
    b.add_text_field("ident", stored=False, tokenizer_name="whitespace", index_option="freq")
    b.add_integer_field("position", stored=True)
    if generation:
        b.add_text_field("generation", stored=True, tokenizer_name="raw", index_option="basic")
    return b.build()


SCHEMA = _schema()
# Indexes written by older versions, newest first: before the generation field, before the stem field.
UNVERSIONED_SCHEMA = _schema(generation=False)
LEGACY_SCHEMA = _schema(stem=False, generation=False)


def _unique(items: Iterable[str], limit: int) -> list[str]:
    return list(dict.fromkeys(items))[:limit]


def _clean(text: str) -> str:
    # A lone surrogate cannot cross into Rust; the bus never delivers one, a direct caller might.
    return text.encode("utf-8", "replace").decode("utf-8")


class KeywordIndex:
    """One collection's index; ``open_writer`` to change it, ``open_reader`` to search it."""

    def __init__(
        self,
        index: tantivy.Index,
        path: Path,
        collection: str,
        settings: KeywordSettings,
        *,
        writable: bool,
    ) -> None:
        self.path = path
        self.collection = collection
        self.settings = settings
        self._index = index
        index.register_tokenizer(WORDS_TOKENIZER, WORDS)
        index.register_tokenizer(ENGLISH_TOKENIZER, ENGLISH)
        self.stemmed = _has_field(index, "stem")
        self.versioned = _has_field(index, "generation")
        self.schema = SCHEMA if self.versioned else UNVERSIONED_SCHEMA if self.stemmed else LEGACY_SCHEMA
        if not self.stemmed:
            log.warning("%s has no stem field (written by an older ragbus): searched without stemming; "
                        "ingest its documents again to stem", path)
        # Manual: this object decides when to reload (maybe_reload), no watcher thread.
        index.config_reader(reload_policy="Manual")
        # While deferring (a replica catching up): commit() only notes a change, flush() commits them all.
        self._deferred = self._uncommitted = self._rolled_back = False
        self._loaded_at = time.monotonic()
        self._writer = None
        if writable:
            s = settings
            self._writer = index.writer(heap_size=s.writer_heap_bytes, num_threads=s.writer_threads)

    @classmethod
    def open_writer(cls, data_dir: Path, collection: str, settings: KeywordSettings) -> KeywordIndex:
        """Open the collection's index for writing, creating it if need be."""
        path = keywords_dir(data_dir, collection)
        path.mkdir(parents=True, exist_ok=True)
        return cls(_open(path, create=True), path, collection, settings, writable=True)

    @classmethod
    def open_reader(cls, data_dir: Path, collection: str, settings: KeywordSettings) -> KeywordIndex | None:
        """Open the collection's index for searching; None while no writer has created it."""
        path = keywords_dir(data_dir, collection)
        if not exists(path):
            return None
        return cls(_open(path, create=False), path, collection, settings, writable=False)

    @property
    def writable(self) -> bool:
        return self._writer is not None

    def close(self) -> None:
        """Let background merges finish and release the writer's lock. Uncommitted changes are lost."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.wait_merging_threads()

    # Writing

    def upsert(self, chunks: Iterable[Chunk]) -> int:
        """Replace or add each chunk, by ``chunk_id``; visible after ``commit``. Returns the distinct chunks."""
        writer = self._require_writer()
        latest: dict[str, Chunk] = {}
        for chunk in chunks:
            if not chunk.chunk_id:
                raise ValueError(f"a chunk of document {chunk.document_id!r} has an empty chunk_id")
            latest[chunk.chunk_id] = chunk  # the last one of an id in a batch wins
        for chunk in latest.values():
            # A delete applies to documents added before it only, so this never removes the new one.
            writer.delete_documents_by_term("chunk_id", chunk.chunk_id)
            doc = tantivy.Document()
            doc.add_text("chunk_id", chunk.chunk_id)
            doc.add_text("document_id", chunk.document_id)
            doc.add_text("title", chunk.title)
            doc.add_text("text", chunk.text)
            if self.stemmed:
                doc.add_text("stem", f"{chunk.title}\n{chunk.text}")
            doc.add_text("ident", " ".join(identifier_tokens(chunk.title) + identifier_tokens(chunk.text)))
            doc.add_integer("position", chunk.position)
            if self.versioned:
                doc.add_text("generation", chunk.generation)
            writer.add_document(doc)
        return len(latest)

    def replace_document(self, document_id: str, chunks: list[Chunk]) -> int:
        """Make ``chunks`` the whole of ``document_id`` (every earlier chunk of it goes); visible after ``commit``.

        One commit then holds both the delete and the adds: a reader sees the old chunks or the new.
        """
        writer = self._require_writer()
        for chunk in chunks:  # refused before anything changes
            if not chunk.chunk_id:
                raise ValueError(f"a chunk of document {chunk.document_id!r} has an empty chunk_id")
        writer.delete_documents_by_term("document_id", document_id)  # applies to what was added before only
        return self.upsert(chunks)

    def versions(self, document_id: str) -> dict[str, int]:
        """How many chunks of each version of ``document_id`` the index holds, as this object sees it."""
        self.maybe_reload()
        query = Query.term_query(self.schema, "document_id", document_id, index_option="basic")
        searcher = self._index.searcher()
        found = searcher.search(query, 1, count=True).count or 0  # type: ignore[attr-defined]  # stub lacks count
        counts: dict[str, int] = {}
        if not found:
            return counts
        for _, address in searcher.search(query, found).hits:
            version = searcher.doc(address).get_first("generation") if self.versioned else ""
            counts[version or ""] = counts.get(version or "", 0) + 1
        return counts

    def delete_document(self, document_id: str) -> int:
        """Remove every chunk of ``document_id``; visible after ``commit``. Returns how many committed ones go."""
        writer = self._require_writer()
        query = Query.term_query(self.schema, "document_id", document_id, index_option="basic")
        found = self._index.searcher().search(query, 1, count=True).count or 0  # type: ignore[attr-defined]  # as above
        writer.delete_documents_by_term("document_id", document_id)
        return found

    def commit(self) -> None:
        """Persist and publish every change since the last commit; this object sees them at once.

        While deferring, the changes wait for ``flush``.
        """
        if self._deferred:
            self._uncommitted = True
            return
        self._require_writer().commit()
        self._uncommitted = False
        self.reload()

    def rollback(self) -> None:
        """Drop every change since the last commit (while deferring, every change since the last flush)."""
        self._require_writer().rollback()
        self._rolled_back = self._rolled_back or (self._deferred and self._uncommitted)
        self._uncommitted = False

    def defer(self) -> None:
        """From now on, ``commit`` waits for ``flush``: one commit for many changes (``versions`` and
        ``delete_document``'s count see what was committed)."""
        self._require_writer()
        self._deferred = True

    def flush(self) -> None:
        """Commit what was deferred and stop deferring. RuntimeError if a rollback dropped deferred changes."""
        self._deferred = False
        if self._rolled_back:
            self._rolled_back = False
            raise RuntimeError(f"{self.path}: a failed change rolled back every change deferred with it")
        if self._uncommitted:
            self.commit()

    # Reading

    def reload(self) -> None:
        started = time.monotonic()  # before: a commit racing the reload is picked up by the next one
        self._index.reload()
        self._loaded_at = started

    def maybe_reload(self) -> None:
        """Reload if ``refresh_interval_s`` has passed since the last reload (writers are always current)."""
        if self._writer is not None:
            return
        if time.monotonic() - self._loaded_at >= self.settings.refresh_interval_s:
            try:
                self.reload()
            except ValueError as exc:  # e.g. a segment merged away between reading meta.json and opening it
                log.warning("%s: reload failed, searching the previous commit: %s", self.path, exc)

    def count(self) -> int:
        """Chunks in the index, as this object currently sees it."""
        self.maybe_reload()
        return self._index.searcher().num_docs

    def search(self, query: str, limit: int, statistics: KeywordStatistics | None = None) -> list[ChunkMatch]:
        """The best ``limit`` chunks for the raw text ``query``, by BM25; [] if it has no searchable token.

        ``statistics``: score as an index with these would (a sharded collection's, summed over its shards),
        so every shard's scores compare: each clause's boost is scaled by the ratio of its terms' idf under
        them to its idf here. The length normalisation stays this index's own (tantivy takes no other)."""
        if limit <= 0:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.maybe_reload()
        searcher = self._index.searcher()
        if searcher.num_docs == 0:
            return []
        built = self.build_query(query, None if statistics is None else _IdfScale(searcher, statistics))
        if built is None:
            return []
        matches = []
        # tantivy sizes its top-k heap by the limit: never more than the index holds.
        for score, address in searcher.search(built, min(limit, searcher.num_docs)).hits:
            doc = searcher.doc(address)
            matches.append(
                ChunkMatch(
                    chunk_id=doc.get_first("chunk_id") or "",  # always stored: upsert writes it
                    score=float(score),
                    text=doc.get_first("text"),
                    document_id=doc.get_first("document_id"),
                    title=doc.get_first("title"),
                    position=doc.get_first("position"),
                    collection=self.collection,
                    generation=(doc.get_first("generation") or "") if self.versioned else "",
                )
            )
        return matches

    def query_terms(self, query: str) -> list[tuple[str, str]]:
        """Every (field, term) the query of ``query`` scores by: what its BM25 statistics are of."""
        return [(field, term) for field, terms, _ in self._clauses(query) for term in terms]

    def statistics(self, query: str) -> KeywordStatistics:
        """This index's BM25 statistics of the terms of ``query``: its chunks, and how many hold each term."""
        self.maybe_reload()
        searcher = self._index.searcher()
        pairs = dict.fromkeys(self.query_terms(query))
        return KeywordStatistics(chunks=searcher.num_docs, terms=[
            TermCount(field, term, searcher.doc_freq(field, term)) for field, term in pairs])

    def build_query(self, query: str, scale: _IdfScale | None = None) -> Query | None:
        """A should-match-any query of the words and identifiers of ``query``; None if it has neither.
        ``scale``: each clause's boost times its terms' idf under other statistics over their idf here."""
        schema = self.schema
        clauses: list[tuple[Occur, Query]] = []
        for field, terms, boost in self._clauses(query):
            if len(terms) == 1:
                q = Query.term_query(schema, field, terms[0], index_option="freq")
            else:
                phrase_words: list[str | tuple[int, str]] = [*terms]  # the stub's type: words or (offset, word)
                q = Query.phrase_query(schema, field, phrase_words)
            if scale is not None:
                boost *= scale(field, terms)
            clauses.append((Occur.Should, q if boost == 1 else Query.boost_query(q, boost)))
        if not clauses:
            return None
        return Query.boolean_query(clauses)

    def _clauses(self, query: str) -> list[tuple[str, list[str], float]]:
        """(field, its terms: one, or a phrase's words, boost) of each clause of the query of ``query``."""
        s = self.settings
        text = _clean(query)
        all_words = words(text)
        terms = _unique(all_words, s.max_query_terms)
        idents = _unique(identifier_tokens(text), s.max_query_terms)
        if not terms and not idents:
            return []
        clauses: list[tuple[str, list[str], float]] = []
        for term in terms:
            if s.word_boost > 0:
                clauses.append(("text", [term], s.word_boost))
            if s.title_boost > 0:
                clauses.append(("title", [term], s.title_boost))
        if s.stem_boost > 0 and self.stemmed:
            clauses += [("stem", [term], s.stem_boost) for term in _unique(stems(text), s.max_query_terms)]
        if s.identifier_boost > 0:
            clauses += [("ident", [ident], s.identifier_boost) for ident in idents]
        if s.phrase_boost > 0 and 2 <= len(all_words) <= s.max_query_terms and len(set(all_words)) > 1:
            clauses.append(("text", all_words, s.phrase_boost))
        return clauses

    def _require_writer(self):
        if self._writer is None:
            raise RuntimeError(f"{self.path} is open for reading only")
        return self._writer


def idf(chunks: int, holding: int) -> float:
    """tantivy's BM25 idf of a term ``holding`` of ``chunks`` chunks hold (tantivy's query/bm25.rs): written out
    because tantivy-py takes no statistics but the index's own, so a shard rescales its clauses by it."""
    return math.log(1.0 + (max(chunks - holding, 0) + 0.5) / (holding + 0.5))


class _IdfScale:
    """Per clause: its terms' idf (summed, as tantivy scores a phrase) under ``statistics`` over that here."""

    def __init__(self, searcher, statistics: KeywordStatistics) -> None:
        self._searcher = searcher
        self._chunks = statistics.chunks
        self._holding = {(t.field, t.term): t.chunks for t in statistics.terms}

    def __call__(self, field: str, terms: list[str]) -> float:
        here = sum(idf(self._searcher.num_docs, self._searcher.doc_freq(field, term)) for term in terms)
        there = sum(idf(self._chunks, self._holding.get((field, term), 0)) for term in terms)
        return there / here if here > 0 else 1.0


def exists(path: Path) -> bool:
    if not path.is_dir():
        return False
    try:
        return tantivy.Index.exists(str(path))
    except ValueError:  # removed between the two checks
        return False


def _has_field(index: tantivy.Index, field: str) -> bool:
    try:
        index.parse_query("x", [field])
    except ValueError:
        return False
    return True


def _open(path: Path, *, create: bool) -> tantivy.Index:
    try:
        # reuse=True opens an existing index (and checks its schema) without writing to it.
        return tantivy.Index(SCHEMA, path=str(path), reuse=True)
    except ValueError as exc:
        if "schema does not match" in str(exc):
            for older in (UNVERSIONED_SCHEMA, LEGACY_SCHEMA):  # searched (and written) without the fields it lacks
                try:
                    return tantivy.Index(older, path=str(path), reuse=True)
                except ValueError:
                    pass
        what = "create" if create else "open"
        raise ValueError(f"cannot {what} the keyword index {path}: {exc}") from None
