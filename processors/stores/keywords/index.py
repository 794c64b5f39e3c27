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

import heapq
import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path

import tantivy
from tantivy import Occur, Query

from ragbus.stores.layout import keywords_dir
from ragbus.schema import Chunk, ChunkMatch
from ragbus.schema.retrieval import FieldTokens, KeywordStatistics, TermCount

from . import bm25
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
# Scoring as one index would (a shard's search with ``statistics``): the candidates tantivy is first asked for,
# times the limit, then four times as many until the bound holds; the bound's allowance for tantivy's f32.
OVERFETCH = 2
OVERFETCH_MIN = 10
SLACK = 1e-5
# Chunks read for a term of each field, whose explained score gives the field's average length.
PROBE_CHUNKS = 16

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


def _ordinals(*, stem: bool) -> dict[str, int]:
    """Each searched field's number in ``_schema`` (the order it adds them): how explanations name them."""
    return {name: i for i, name in enumerate(["chunk_id", "document_id", "title", "text",
                                              *(["stem"] if stem else []), "ident"])}


SCHEMA = _schema()
# Indexes written by older versions, newest first: before the generation field, before the stem field.
UNVERSIONED_SCHEMA = _schema(generation=False)
LEGACY_SCHEMA = _schema(stem=False, generation=False)


def _field_terms(field: str, title: str, text: str) -> list[str]:
    """The terms a chunk of ``title`` and ``text`` holds in the searched ``field``, as ``upsert`` indexes them."""
    if field == "stem":
        return stems(f"{title}\n{text}")
    if field == "ident":
        return identifier_tokens(title) + identifier_tokens(text)
    return words(title if field == "title" else text)


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
        self._ordinals = _ordinals(stem=self.stemmed)
        self._searched = [f for f in ("title", "text", "stem", "ident") if f in self._ordinals]
        # (chunks, tokens of each searched field) as tantivy counts them: read once a reload (_field_lengths).
        self._lengths: tuple[int, dict[str, int]] | None = None
        self._probe_terms: dict[str, str] = {}  # a term each field held when last read
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
        self._lengths = None
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

        ``statistics``: score as one index with these would (a sharded collection's, summed over its shards),
        so the shards' scores merge into that index's ranking: ``_search_as_one``."""
        if limit <= 0:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.maybe_reload()
        searcher = self._index.searcher()
        if searcher.num_docs == 0:
            return []
        if statistics is not None:
            return self._search_as_one(searcher, query, limit, statistics)
        built = self.build_query(query)
        if built is None:
            return []
        return self._top(searcher, built, limit)

    def _top(self, searcher, built: Query, limit: int) -> list[ChunkMatch]:
        """tantivy's best ``limit`` for ``built``, equal scores in chunk id order, as a sharded collection's
        merge orders them; tantivy's own is the order the chunks were written in, also for which of those
        equal to the ``limit``-th it keeps, so it is asked for one more, and more while they are equal."""
        # tantivy sizes its top-k heap by the limit: never more than the index holds.
        want = min(limit + 1, searcher.num_docs)
        hits = searcher.search(built, want).hits
        while len(hits) == want < searcher.num_docs and len(hits) > limit and hits[-1][0] == hits[limit - 1][0]:
            want = min(want * 2, searcher.num_docs)
            hits = searcher.search(built, want).hits
        cut = hits[min(limit, len(hits)) - 1][0] if hits else 0.0
        matches = [self._match(searcher, address, float(score)) for score, address in hits if score >= cut]
        return sorted(matches, key=lambda m: (-m.score, m.chunk_id))[:limit]

    def _search_as_one(self, searcher, query: str, limit: int, statistics: KeywordStatistics) -> list[ChunkMatch]:
        """The best ``limit`` chunks by the BM25 one index with ``statistics`` (chunks, chunks holding each term,
        tokens of each field) gives them, with those scores: exact up to float rounding (f64 here, f32 in
        tantivy, so about 1e-7 of a score).

        tantivy scores with this index's statistics only. The idf is corrected in the query (each clause's
        boost times its terms' idf under ``statistics`` over that here); the length normalisation cannot be:
        a clause scores ``idf * 2.2 * tf / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl))``, avgdl the field's
        average length. So tantivy gives candidates, best first by the corrected query, and each is scored
        again from tantivy's explanation of it (each matched clause's tf and dl) with the average lengths of
        ``statistics``. No chunk is left out that belongs: with r the largest ratio of a searched field's
        average length there to that here (at least 1), no clause scores more than r times what the corrected
        query gave it, so no chunk after a candidate of score L, asked for or not, scores more than r * L;
        candidates are rescored until the ``limit``-th best beats that, asking tantivy for four times as many
        when they run out, up to every chunk the query matches. ``statistics`` without ``lengths`` (a sender
        that does not count them): the idf alone is corrected, tantivy's scores returned.
        """
        chunks, lengths = self._field_lengths(searcher)
        clauses = self._clauses(query)
        if not clauses:
            return []
        scale = _IdfScale(chunks, searcher, statistics)
        built = self._query(clauses, scale)
        if built is None:
            return []
        if not statistics.lengths or statistics.chunks <= 0:
            return self._top(searcher, built, limit)
        here = {f: t / chunks for f, t in lengths.items() if chunks > 0 and t > 0}
        there = {f.field: f.tokens / statistics.chunks for f in statistics.lengths if f.tokens > 0}
        average = {f: there.get(f, here.get(f, 1.0)) for f in {field for field, _, _ in clauses}}
        ratio = max([1.0, *(average[f] / here[f] for f in average if f in here)]) * (1 + SLACK)
        weights = {}  # a matched part's key -> (the field whose average length it takes, boost times idf there)
        for field, terms, boost in clauses:
            key = bm25.PHRASE if len(terms) > 1 else (self._ordinals[field], terms[0])
            weights[key] = (field, boost * scale.there(field, terms))

        def exact(address, tantivy_score: float) -> float:
            total = 0.0
            for part in bm25.parts(built.explain(searcher, address).to_json()):
                if part.key not in weights:  # an explanation this code does not read: tantivy's own score
                    log.warning("%s: an explained clause %r matches no clause of the query; scored by tantivy",
                                self.path, part.key)
                    return tantivy_score
                field, weight = weights[part.key]
                total += weight * bm25.score(1.0, part.frequency, part.length, average[field])
            return total

        rescored: list[tuple[float, object]] = []
        best: list[float] = []  # the limit best scores found, the least first (a heap)
        seen: set[tuple[int, int]] = set()
        want = min(max(limit * OVERFETCH, limit + OVERFETCH_MIN), searcher.num_docs)
        while True:
            hits = searcher.search(built, want, count=False).hits
            for score, address in hits:
                if (address.segment_ord, address.doc) in seen:
                    continue
                if len(best) == limit and ratio * float(score) < best[0]:
                    return self._best(searcher, rescored, limit)  # none after this candidate can enter
                seen.add((address.segment_ord, address.doc))
                own = exact(address, float(score))
                rescored.append((own, address))
                (heapq.heappush if len(best) < limit else heapq.heappushpop)(best, own)
            if len(hits) < want or want >= searcher.num_docs:
                return self._best(searcher, rescored, limit)  # every chunk the query matches was a candidate
            want = min(want * 4, searcher.num_docs)

    def _best(self, searcher, rescored: list[tuple[float, object]], limit: int) -> list[ChunkMatch]:
        """The best ``limit`` of (score, address) pairs, ties by chunk id as a merge orders them."""
        if not rescored:
            return []
        cut = sorted((s for s, _ in rescored), reverse=True)[min(limit, len(rescored)) - 1]
        matches = [self._match(searcher, address, s) for s, address in rescored if s >= cut]
        return sorted(matches, key=lambda m: (-m.score, m.chunk_id))[:limit]

    def _match(self, searcher, address, score: float) -> ChunkMatch:
        doc = searcher.doc(address)
        return ChunkMatch(
            chunk_id=doc.get_first("chunk_id") or "",  # always stored: upsert writes it
            score=score,
            text=doc.get_first("text"),
            document_id=doc.get_first("document_id"),
            title=doc.get_first("title"),
            position=doc.get_first("position"),
            collection=self.collection,
            generation=(doc.get_first("generation") or "") if self.versioned else "",
        )

    def query_terms(self, query: str) -> list[tuple[str, str]]:
        """Every (field, term) the query of ``query`` scores by: what its BM25 statistics are of."""
        return [(field, term) for field, terms, _ in self._clauses(query) for term in terms]

    def statistics(self, query: str) -> KeywordStatistics:
        """This index's BM25 statistics of the terms of ``query``: its chunks, how many hold each term and the
        tokens of each searched field, as tantivy counts them (with deleted chunks its segments still hold)."""
        self.maybe_reload()
        searcher = self._index.searcher()
        chunks, lengths = self._field_lengths(searcher)
        pairs = dict.fromkeys(self.query_terms(query))
        return KeywordStatistics(
            chunks=chunks,
            terms=[TermCount(field, term, searcher.doc_freq(field, term)) for field, term in pairs],
            lengths=[FieldTokens(field, tokens) for field, tokens in lengths.items()])

    def _field_lengths(self, searcher) -> tuple[int, dict[str, int]]:
        """(chunks, tokens of each searched field) as tantivy's BM25 counts them, read once a reload.

        tantivy-py tells neither (its ``num_docs`` leaves out deleted chunks, which BM25 counts until a merge
        drops them), but the explanation of a term's score does: N and the field's average length. So each
        field is asked for one term it holds: the one it held last time, else one of a few chunks' own. The
        explanation writes both as f32: chunks exact up to 2**24, tokens exact up to about 2**23, within
        about 1e-7 of them beyond (as close as tantivy's own f32 arithmetic)."""
        if self._lengths is None:
            chunks: int | None = None
            tokens: dict[str, int] = {}
            for field in self._searched:
                tokens[field] = 0  # no chunk holds a term of it: none of its tokens counts
                for term in self._probe_candidates(searcher, field):
                    q = Query.term_query(self.schema, field, term, index_option="freq")
                    hits = searcher.search(q, 1, count=False).hits
                    told = bm25.totals(q.explain(searcher, hits[0][1]).to_json()) if hits else None
                    if told is not None:
                        chunks, tokens[field] = round(told[0]), round(told[0] * told[1])
                        self._probe_terms[field] = term
                        break
            self._lengths = (searcher.num_docs if chunks is None else chunks), tokens
        return self._lengths

    def _probe_candidates(self, searcher, field: str) -> Iterable[str]:
        """Terms ``field`` may hold: the one it held last time, the first of each of a few chunks, and the most
        frequent of the field's dictionary (read whole: the last resort)."""
        if (held := self._probe_terms.get(field)) is not None:
            yield held
        for _, address in searcher.search(Query.all_query(), PROBE_CHUNKS, count=False).hits:
            doc = searcher.doc(address)
            if terms := _field_terms(field, doc.get_first("title") or "", doc.get_first("text") or ""):
                yield terms[0]
        for term, _ in searcher.terms_with_prefix(field, "", limit=1):
            yield term

    def build_query(self, query: str) -> Query | None:
        """A should-match-any query of the words and identifiers of ``query``; None if it has neither."""
        return self._query(self._clauses(query))

    def _query(self, clauses: list[tuple[str, list[str], float]], scale: _IdfScale | None = None) -> Query | None:
        """The query of ``clauses`` (``_clauses``). ``scale``: each clause's boost times its terms' idf under
        other statistics over their idf here."""
        schema = self.schema
        queries: list[tuple[Occur, Query]] = []
        for field, terms, boost in clauses:
            if len(terms) == 1:
                q = Query.term_query(schema, field, terms[0], index_option="freq")
            else:
                phrase_words: list[str | tuple[int, str]] = [*terms]  # the stub's type: words or (offset, word)
                q = Query.phrase_query(schema, field, phrase_words)
            if scale is not None:
                boost *= scale(field, terms)
            queries.append((Occur.Should, q if boost == 1 else Query.boost_query(q, boost)))
        if not queries:
            return None
        return Query.boolean_query(queries)

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


class _IdfScale:
    """Per clause: its terms' idf (summed, as tantivy scores a phrase) under ``statistics`` over that here,
    where tantivy counts ``chunks`` (``KeywordIndex._field_lengths``)."""

    def __init__(self, chunks: int, searcher, statistics: KeywordStatistics) -> None:
        self._here = chunks
        self._searcher = searcher
        self._chunks = statistics.chunks
        self._holding = {(t.field, t.term): t.chunks for t in statistics.terms}

    def there(self, field: str, terms: list[str]) -> float:
        """The idf of ``terms`` (summed) under ``statistics``."""
        return sum(bm25.idf(self._chunks, self._holding.get((field, term), 0)) for term in terms)

    def __call__(self, field: str, terms: list[str]) -> float:
        here = sum(bm25.idf(self._here, self._searcher.doc_freq(field, term)) for term in terms)
        return self.there(field, terms) / here if here > 0 else 1.0


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
