"""Every default of the keyword processors, in one place.

The three keyword processors share this one Settings class, so a
``[processors.NAME]`` section of any of them may set any key, e.g.::

    [processors.keyword-query]
    class = "ragbus.keyword:KeywordQueryProcessor"
    data_dir = "/var/lib/ragbus"
    refresh_interval_s = 0.5

and environment variables override them:
``RAGBUS_PROCESSORS__KEYWORD_QUERY__MAX_LIMIT=50``. The writers
(keyword-store, keyword-delete) and every query replica must name the same
``data_dir``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.settings import StoreSettings

# tantivy refuses an indexing thread with less than this much heap.
MIN_HEAP_PER_THREAD = 15_000_000

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class KeywordSettings(StoreSettings, kw_only=True, forbid_unknown_fields=True):
    # Query side. A search sees every commit that finished at least this long before it started:
    # a query replica reloads its view of the index, before searching, once this much time has
    # passed since its last reload. 0 = reload before every search.
    refresh_interval_s: NonNegative = 1.0
    # A request asking for more matches gets this many (clamped, not refused); limit <= 0 is refused.
    max_limit: Annotated[int, msgspec.Meta(ge=1)] = 100
    # BM25 over text and title; a query word found in a chunk's title counts this many times
    # as much as in its text. 0 = titles are not searched.
    title_boost: NonNegative = 1.5
    # The query's words matched exactly in the text (as written, lowercased), and English-stemmed
    # against the stemmed title and text ("classes" finds "class"). 0 = that clause is left out.
    # Stems on: on the dev half of scripts/eval/questions.jsonl, +0.01 nDCG@10 for keyword and
    # hybrid, identifiers kept.
    word_boost: NonNegative = 1.0
    stem_boost: NonNegative = 1.0
    # An identifier-ish token of the query (7.3.2, __slots__, os.path.join, C++, std::vector),
    # matched whole against the same tokens of the chunks, on top of its words.
    identifier_boost: NonNegative = 2.0
    # Bonus for the query's words appearing in the text as a phrase, in order. 0 = no phrase clause.
    phrase_boost: NonNegative = 1.0
    # Distinct words (and, separately, identifiers) of one query that are searched; the rest are
    # ignored, so a pasted page costs no more than a long question.
    max_query_terms: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64

    # Write side (keyword-store, keyword-delete). The writer's indexing memory before it flushes
    # a segment, shared by its threads; tantivy wants at least 15 MB a thread.
    writer_heap_bytes: Annotated[int, msgspec.Meta(ge=MIN_HEAP_PER_THREAD)] = 50_000_000
    writer_threads: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1

    def __post_init__(self) -> None:
        if self.writer_heap_bytes < MIN_HEAP_PER_THREAD * self.writer_threads:
            raise ValueError(
                f"writer_heap_bytes={self.writer_heap_bytes} is under {MIN_HEAP_PER_THREAD} bytes "
                f"for each of writer_threads={self.writer_threads}"
            )
