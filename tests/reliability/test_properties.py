"""Property-based tests of the public functions that take user data.

Each property is checked against an oracle written here from the documented
rule, not from the implementation: the fused RRF score is recomputed from
``sum weight / (60 + rank)``, entity linking is redone by brute force from
``normalise`` and the longest-first claim rule, and so on. Every test is
bounded (``max_examples``) so the whole file runs in seconds; boundary inputs
that random generation would rarely hit are pinned with ``@example``.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from itertools import pairwise

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ragbus import schema
from ragbus.document_rag import rrf_fuse
from ragbus.keyword import KeywordIndex, KeywordSettings
from ragbus.kg import EntityLinker, TimeError, link_entities, parse_instant
from ragbus.kg.linking import normalise
from ragbus.schema import SCHEMAS, Chunk, ChunkMatch, DecodeError, decode, encode

# database=None: no .hypothesis/ directory in the checkout; failures are pinned with @example instead.
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Text of every kind a user can paste: any code point but lone surrogates (which no bus
# delivers: they cannot be encoded), so controls, RTL marks, combining marks, CJK, emoji.
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)


# --- rrf_fuse -------------------------------------------------------------------------------

IDS = st.sampled_from(["", "a", "b", "c", "d", "e", "f", "g", "h", "doc#0", "doc#1"])
RANKED = st.lists(st.lists(IDS.map(lambda cid: ChunkMatch(chunk_id=cid)), max_size=12), max_size=5)
WEIGHT = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@st.composite
def fusion_inputs(draw):
    lists = draw(RANKED)
    weights = draw(st.lists(WEIGHT, min_size=len(lists), max_size=len(lists)))
    limit = draw(st.integers(min_value=0, max_value=15))
    return lists, weights, limit


def reference_scores(lists, weights):
    """Fused score per chunk id, from the documented formula; plus first-seen match and order."""
    scores: dict[str, float] = {}
    first: dict[str, ChunkMatch] = {}
    for matches, weight in zip(lists, weights, strict=True):
        non_empty = [m for m in matches if m.chunk_id]
        seen = set()
        for rank, match in enumerate(non_empty, start=1):  # rank among the list's real matches
            if match.chunk_id in seen:
                continue  # a repeat counts at its best (first) rank only
            seen.add(match.chunk_id)
            first.setdefault(match.chunk_id, match)
            scores[match.chunk_id] = scores.get(match.chunk_id, 0.0) + weight / (60 + rank)
    return scores, first


@FAST
@given(fusion_inputs())
def test_rrf_fuse_is_the_top_of_the_fused_ranking(inputs):
    lists, weights, limit = inputs
    out = rrf_fuse(lists, weights, limit)
    scores, first = reference_scores(lists, weights)
    ids = [m.chunk_id for m in out]

    assert len(out) == min(limit, len(scores))  # <= limit, <= distinct non-empty ids, no fewer
    assert len(set(ids)) == len(ids), f"duplicate ids {ids}"
    assert set(ids) <= set(scores), "an id that no input list holds"
    for match in out:
        assert match is first[match.chunk_id], "not the first-seen ChunkMatch object of its id"
    fused = [scores[c] for c in ids]
    assert all(a >= b for a, b in pairwise(fused)), f"not by fused score: {list(zip(ids, fused, strict=True))}"
    # Nothing left out beats anything kept: the output is the top of the ranking, not some of it.
    if out:
        left_out = [scores[c] for c in scores if c not in set(ids)]
        assert all(s <= fused[-1] for s in left_out)
    # Ties are broken by first appearance (lists in order, each best first).
    appearance = list(first)
    for a, b in pairwise(ids):
        if scores[a] == scores[b]:
            assert appearance.index(a) < appearance.index(b), f"tie between {a} and {b} broken late-first"


@FAST
@given(fusion_inputs(), st.integers(min_value=0, max_value=5))
def test_rrf_fuse_is_deterministic_and_limit_only_truncates(inputs, more):
    lists, weights, limit = inputs
    out = rrf_fuse(lists, weights, limit)
    again = rrf_fuse(lists, weights, limit)
    longer = rrf_fuse(lists, weights, limit + more)
    assert [m.chunk_id for m in again] == [m.chunk_id for m in out]
    assert [m.chunk_id for m in longer[: len(out)]] == [m.chunk_id for m in out]
    # The inputs are not modified (the output holds the very objects, so no copy to compare).
    assert all(m.score == 0.0 for lst in lists for m in lst)


@FAST
@given(fusion_inputs(), st.randoms(use_true_random=False))
def test_rrf_fuse_scores_do_not_depend_on_the_order_of_the_lists(inputs, rnd):
    """Permuting the lists (with their weights) changes tie order and which object is kept, not scores."""
    lists, weights, _ = inputs
    limit = 100  # everything, so ties at a cut-off cannot change the id set
    pairs = list(zip(lists, weights, strict=True))
    rnd.shuffle(pairs)
    shuffled = rrf_fuse([p[0] for p in pairs], [p[1] for p in pairs], limit)
    out = rrf_fuse(lists, weights, limit)
    scores, _ = reference_scores(lists, weights)
    assert sorted(m.chunk_id for m in shuffled) == sorted(m.chunk_id for m in out)
    got = [scores[m.chunk_id] for m in shuffled]
    # Sums in another order may differ in the last bits: compare the ranking up to rounding.
    assert all(a >= b - 1e-12 for a, b in pairwise(got))


@FAST
@given(fusion_inputs(), WEIGHT)
def test_rrf_fuse_ignores_empty_lists_and_empty_ids(inputs, weight):
    lists, weights, limit = inputs
    out = rrf_fuse(lists, weights, limit)
    padded = rrf_fuse([*lists, [], [ChunkMatch(chunk_id="")]], [*weights, weight, weight], limit)
    assert [m.chunk_id for m in padded] == [m.chunk_id for m in out]
    assert all(m.chunk_id for m in out)


def test_rrf_fuse_uses_k_60():
    """Pins the constant: ``a`` scores 1/61 and ``b`` 1.0162/62, just less; with K = 61 ``b`` would win."""
    a, z, b = ChunkMatch("a"), ChunkMatch("z"), ChunkMatch("b")
    assert rrf_fuse([[a], [z, b]], [1.0, 1.0162], 3) == [z, a, b]
    assert rrf_fuse([[a], [z, b]], [1.0, 1.0165], 3) == [z, b, a]


@pytest.mark.parametrize(
    ("lists", "weights", "limit", "error"),
    [
        ([[ChunkMatch("a")]], [], 1, ValueError),  # one weight per list
        ([[ChunkMatch("a")]], [1.0], -1, ValueError),
        ([[ChunkMatch("a")]], [1.0], True, TypeError),  # a bool is not a limit
        ([[ChunkMatch("a")]], [1.0], 1.5, TypeError),
    ],
)
def test_rrf_fuse_refuses_bad_arguments(lists, weights, limit, error):
    with pytest.raises(error):
        rrf_fuse(lists, weights, limit)


# --- entity linking --------------------------------------------------------------------------

# Small alphabets so that names share words and collide with the question; case and width
# variants, a decomposed accent and a typographic apostrophe exercise the normalisation.
WORD = st.sampled_from(
    ["new", "york", "city", "NEW", "York", "zürich", "zu\u0308rich", "ＺÜＲＩＣＨ", "côte", "d", "ivoire",
     "straße", "STRASSE", "日本", "हिन्दी", "u", "s", "x1", "_"]
)
SEP = st.sampled_from([" ", "  ", "-", "'", "’", ".", ", ", "\n", "\t", "!", "(", ")", "/", "\u200f", "\u00a0"])
NAME = st.builds(lambda ws, ss: "".join(w + s for w, s in zip(ws, ss, strict=False)).strip(),
                 st.lists(WORD, min_size=1, max_size=3), st.lists(SEP, min_size=3, max_size=3))
NAMES = st.lists(NAME | ANY_TEXT, max_size=8)


@st.composite
def questions(draw, names):
    """Text mixing some of ``names``, other words, separators and arbitrary junk."""
    parts = draw(st.lists(st.sampled_from(names) if names else WORD, max_size=5))
    parts += draw(st.lists(WORD | ANY_TEXT, max_size=4))
    draw(st.randoms(use_true_random=False)).shuffle(parts)
    seps = draw(st.lists(SEP, min_size=len(parts), max_size=len(parts)))
    return "".join(p + s for p, s in zip(parts, seps, strict=True))


def occurrences(tokens: tuple[str, ...], key: tuple[str, ...]) -> list[int]:
    return [i for i in range(len(tokens) - len(key) + 1) if tokens[i : i + len(key)] == key]


def reference_link(question: str, names: list[str]) -> list[str]:
    """The module docstring's rule, by brute force: claim longest first, then leftmost."""
    tokens = normalise(question)
    keys = {normalise(n) for n in names} - {()}
    candidates = sorted(((len(k), i, k) for k in keys for i in occurrences(tokens, k)), key=lambda m: (-m[0], m[1]))
    claimed: set[int] = set()
    first: dict[tuple[str, ...], int] = {}
    for length, start, key in candidates:
        span = set(range(start, start + length))
        if span & claimed:
            continue
        claimed |= span
        first[key] = min(first.get(key, start), start)
    linked = {(first[normalise(n)], n) for n in names if normalise(n) in first}
    return [n for _, n in sorted(linked)]


# Few words, so that names overlap each other in the question ("new york" / "york city").
TINY = st.sampled_from(["new", "york", "city", "York", "NEW", "hall"])


@st.composite
def overlapping_cases(draw):
    def run(min_size, max_size):
        words = draw(st.lists(TINY, min_size=min_size, max_size=max_size))
        seps = draw(st.lists(SEP, min_size=len(words), max_size=len(words)))
        return "".join(w + s for w, s in zip(words, seps, strict=True))

    names = [run(1, 3) for _ in range(draw(st.integers(0, 6)))]
    return run(0, 12), names


@st.composite
def linking_cases(draw):
    if draw(st.booleans()):
        return draw(overlapping_cases())
    names = draw(NAMES)
    return draw(questions(names)), names


@FAST
@given(linking_cases())
def test_linking_follows_the_longest_first_claim_rule(case):
    question, names = case
    linked = link_entities(question, names)
    assert set(linked) <= set(names)
    assert len(linked) == len(set(linked)), "a name linked twice"
    tokens = normalise(question)
    for name in linked:
        assert occurrences(tokens, normalise(name)), f"{name!r} linked but its tokens are not in the question"
    assert linked == reference_link(question, names)


@FAST
@given(linking_cases(), st.randoms(use_true_random=False))
def test_linking_does_not_depend_on_the_order_of_the_names(case, rnd):
    question, names = case
    shuffled = list(names)
    rnd.shuffle(shuffled)
    assert link_entities(question, shuffled) == link_entities(question, names)
    assert link_entities(question, names) == link_entities(question, names)


@FAST
@given(linking_cases())
def test_linked_names_claim_disjoint_spans(case):
    """Distinct linked normalised forms can be placed on non-overlapping runs of the question."""
    question, names = case
    tokens = normalise(question)
    keys = sorted({normalise(n) for n in link_entities(question, names)}, key=len, reverse=True)

    def place(i: int, claimed: frozenset[int]) -> bool:
        if i == len(keys):
            return True
        for start in occurrences(tokens, keys[i]):
            span = frozenset(range(start, start + len(keys[i])))
            if not span & claimed and place(i + 1, claimed | span):
                return True
        return False

    assert place(0, frozenset()), f"overlapping links {keys} in {tokens}"


@FAST
@given(NAME | ANY_TEXT, SEP, SEP, ANY_TEXT.map(lambda s: "".join(c for c in s if not c.isalnum())))
def test_a_name_links_wherever_it_stands_alone(name, left, right, filler):
    """A known name between separators links, whatever punctuation-only text surrounds it."""
    assume(normalise(name))
    question = f"{filler}{left}{name}{right}{filler}"
    # Composition across the boundary (a combining mark in the filler after the name) may merge
    # the name's last character with it; that is Unicode, not linking, so keep such cases out.
    assume(occurrences(normalise(question), normalise(name)))
    assert name in link_entities(question, [name])
    assert name in link_entities(name, [name])


@FAST
@given(st.text(st.characters(), max_size=40))
def test_normalising_is_idempotent(text):
    """A name written in its normalised form is the same name (and links as such)."""
    tokens = normalise(text)
    assert normalise(" ".join(tokens)) == tokens


@FAST
@given(NAMES, st.data())
def test_incremental_add_and_discard_equal_a_fresh_linker(names, data):
    gone = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    question = data.draw(questions(names))
    linker = EntityLinker(names)
    for name in gone:
        linker.discard(name)
    linker.discard("never added")
    kept = [n for n in names if n not in gone]
    assert linker.link(question) == EntityLinker(kept).link(question)
    assert len(linker) == len({n for n in kept if normalise(n)})


@FAST
@given(
    st.text(st.characters(), max_size=200),  # every category, lone surrogates included
    st.lists(st.text(st.characters(), max_size=20), max_size=5),
)
@example("\u202eevil\u202c \u0000\u0007 e\u0301\u0301\u0301 \ufeff", ["evil", "\u0301", ""])
@example("x" * 100_000, ["x"])
def test_linking_never_raises_on_any_text(question, names):
    linked = link_entities(question, names)
    assert set(linked) <= set(names)


@pytest.mark.parametrize("bad", [None, 1, b"bytes", ["list"]])
def test_linking_refuses_a_question_that_is_not_text_with_a_type_error(bad):
    with pytest.raises(TypeError):
        link_entities(bad, ["x"])


# --- time parsing ----------------------------------------------------------------------------

OFFSETS = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59)).map(
    lambda d: timezone(timedelta(minutes=int(d.total_seconds() // 60)))
)
AWARE = st.datetimes(timezones=OFFSETS)
EDGE_PLUS_ONE = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # UTC equivalent: year 0
EDGE_MINUS_ONE = datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1)))  # UTC: year 10000


def utc_equivalent(dt: datetime) -> datetime | None:
    """``dt`` in UTC, or None when that instant lies outside what ``datetime`` can hold."""
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        return None


@FAST
@given(AWARE)
@example(EDGE_PLUS_ONE)
@example(EDGE_MINUS_ONE)
def test_iso_text_of_an_aware_datetime_parses_back_to_the_same_instant(dt):
    expected = utc_equivalent(dt)
    if expected is None:
        with pytest.raises(TimeError):
            parse_instant(dt.isoformat())
        return
    got = parse_instant(dt.isoformat())
    assert got == expected and got.tzinfo is UTC
    assert parse_instant(dt.isoformat().replace("+00:00", "Z")) == expected


@FAST
@given(AWARE)
@example(EDGE_PLUS_ONE)
@example(EDGE_MINUS_ONE)
def test_an_aware_datetime_is_its_instant_in_utc_or_a_time_error(dt):
    """The docstring: anything that cannot be read is refused with ``TimeError``, values included."""
    expected = utc_equivalent(dt)
    if expected is None:
        with pytest.raises(TimeError):
            parse_instant(dt)
        return
    got = parse_instant(dt)
    assert got == expected and got.tzinfo is UTC


@FAST
@given(st.datetimes())
def test_naive_datetimes_and_their_text_mean_utc(dt):
    expected = dt.replace(tzinfo=UTC)
    assert parse_instant(dt) == expected and parse_instant(dt).tzinfo is UTC
    assert parse_instant(dt.isoformat()) == expected


@FAST
@given(st.dates())
def test_a_date_means_its_midnight_in_utc(d):
    expected = datetime(d.year, d.month, d.day, tzinfo=UTC)
    assert parse_instant(d) == expected
    assert parse_instant(d.isoformat()) == expected


@FAST
@given(st.integers(min_value=1, max_value=9999), st.integers(min_value=1, max_value=12))
def test_reduced_dates_mean_their_first_instant(year, month):
    assert parse_instant(f"{year:04d}") == datetime(year, 1, 1, tzinfo=UTC)
    assert parse_instant(f"{year:04d}-{month:02d}") == datetime(year, month, 1, tzinfo=UTC)


ISO_ALPHABET = st.sampled_from([*"0123456789-+:.TtZz W", "\u0660", "\uff11", "\x00", "\u2212"])


@FAST
@given(st.one_of(st.text(ISO_ALPHABET, max_size=40), st.text(st.characters(), max_size=40)))
@example("2023-06-01T12:00:00+25:00")
@example("0000")
@example("-0001")
@example("9999-12-31T23:59:59-23:59")
@example("2023-02-30")
@example("x" * 100_000)
def test_any_text_is_an_aware_utc_datetime_or_a_time_error(text):
    try:
        got = parse_instant(text)
    except TimeError as exc:
        assert isinstance(exc, ValueError)
        return
    assert isinstance(got, datetime) and got.tzinfo is UTC


@pytest.mark.parametrize("bad", [True, False, None, 2023, 1.5, b"2023", [2023]])
def test_non_time_values_are_refused_with_a_time_error(bad):
    with pytest.raises(TimeError):
        parse_instant(bad)


# --- keyword query escaping ------------------------------------------------------------------

CORPUS = {
    "spec#0": "Clause 7.3.2 requires the vendor to log every retry AND every failure.",
    "py#0": "Defining __slots__ on a class saves memory; os.path.join builds paths.",
    "cpp#0": "C++ templates (and std::vector) are instantiated at compile time: title^2 ~fuzzy*",
    "de#0": "Die Straße in Zürich heißt nicht NOT OR \"quoted\" [range] {braces} \\ back+slash -minus",
    "ja#0": "日本語のテキスト と عربى text with RTL \u200f marks and e\u0301 combining.",
}
SYNTAX = st.sampled_from(
    ["AND", "OR", "NOT", "(", ")", '"', ":", "^", "~", "*", "?", "[", "]", "{", "}", "\\", "+", "-", "&&", "||",
     "!", "/", "title:", "text:x", "chunk_id:*", "7.3.2", "__slots__", "C++", "std::vector", "IN [a TO b]", "^2",
     "~1", "'", "\x00", "\u200f", "retry", "Zürich", "日本語"]
)
QUERY = st.lists(SYNTAX | ANY_TEXT, max_size=12).map(" ".join) | st.text(st.characters(), max_size=100)


@pytest.fixture(scope="module")
def keyword_index(tmp_path_factory):
    index = KeywordIndex.open_writer(tmp_path_factory.mktemp("kw"), "default", KeywordSettings())
    index.upsert(
        Chunk(chunk_id=cid, document_id=cid.split("#")[0], text=text, position=0, title=cid)
        for cid, text in CORPUS.items()
    )
    index.commit()
    yield index
    index.close()


@SLOW
@given(QUERY, st.integers(min_value=1, max_value=8))
@example("(" * 5000 + "retry" + '"' * 5000, 3)
@example(" ".join(["AND OR NOT retry^ ~ * ?"] * 3000), 8)
@example("title:retry AND chunk_id:spec#0", 1)
@example("\ud800 retry \udfff", 2)  # a lone surrogate, as a direct caller might pass
def test_keyword_search_takes_any_text(keyword_index, query, limit):
    matches = keyword_index.search(query, limit)
    assert len(matches) <= limit
    assert {m.chunk_id for m in matches} <= set(CORPUS)
    scores = [m.score for m in matches]
    assert all(math.isfinite(s) for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert [m.chunk_id for m in keyword_index.search(query, limit)] == [m.chunk_id for m in matches]


@SLOW
@given(st.lists(SYNTAX, max_size=6), st.sampled_from(["retry", "vendor", "templates", "zürich", "memory"]))
def test_a_corpus_word_among_query_syntax_still_finds_its_chunk(keyword_index, junk, word):
    """Operators are plain characters: a real word next to them is searched, not swallowed."""
    query = " ".join([*junk, word, *junk])
    found = {m.chunk_id for m in keyword_index.search(query, len(CORPUS))}
    expected = {cid for cid, text in CORPUS.items() if word in text.lower()}
    assert expected <= found, f"{query!r} missed {expected - found}"


def test_keyword_search_refuses_a_limit_below_one(keyword_index):
    with pytest.raises(ValueError):
        keyword_index.search("retry", 0)


# --- schema decoding -------------------------------------------------------------------------

REQUEST_TYPES = sorted({s.request for s in SCHEMAS.values()}, key=lambda t: t.__name__)
ALL_TYPES = sorted({t for s in SCHEMAS.values() for t in s}, key=lambda t: t.__name__)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOAT = st.floats(allow_nan=False)  # NaN != NaN would fail equality, not the codec
PLAIN = st.none() | st.booleans() | INT64 | FLOAT | st.text(max_size=20)
ANY_VALUE = st.recursive(
    PLAIN, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def strategy_for(info: mi.Type) -> st.SearchStrategy:
    """A strategy producing valid values of a msgspec type, built from ``msgspec.inspect``."""
    if isinstance(info, mi.StructType):
        fields = {}
        for f in info.fields:
            value = strategy_for(f.type)
            fields[f.name] = value if f.required else st.one_of(st.just(msgspec.UNSET), value)
        return st.fixed_dictionaries(fields).map(
            lambda kw, cls=info.cls: cls(**{k: v for k, v in kw.items() if v is not msgspec.UNSET})
        )
    if isinstance(info, mi.IntType):  # within the field's bounds (schema/ bounds every limit)
        lows = [-(2**63), info.ge, None if info.gt is None else info.gt + 1]
        highs = [2**63 - 1, info.le, None if info.lt is None else info.lt - 1]
        low, high = max(v for v in lows if v is not None), min(v for v in highs if v is not None)
        return st.integers(min_value=low, max_value=high)
    if isinstance(info, mi.StrType) and info.pattern is not None:  # a token: what the pattern allows
        alphabet = st.characters(codec="utf-8", exclude_characters="\n")
        fit = st.from_regex(info.pattern, fullmatch=True, alphabet=alphabet)
        return fit.filter(lambda s, most=info.max_length: most is None or len(s) <= most)
    if isinstance(info, mi.StrType) and (info.min_length or info.max_length is not None):
        return st.text(min_size=info.min_length or 0, max_size=min(20, info.max_length or 20))
    if isinstance(info, mi.BytesType):  # a file's part (ConvertPart.data): any bytes, few of them
        return st.binary(min_size=info.min_length or 0, max_size=min(64, info.max_length or 64))
    simple = {
        mi.StrType: st.text(max_size=20),
        mi.FloatType: FLOAT,
        mi.BoolType: st.booleans(),
        mi.NoneType: st.none(),
        mi.AnyType: ANY_VALUE,
    }
    for kind, strategy in simple.items():
        if isinstance(info, kind):
            return strategy
    if isinstance(info, mi.ListType):
        return st.lists(strategy_for(info.item_type), max_size=3)
    if isinstance(info, mi.DictType):
        return st.dictionaries(strategy_for(info.key_type), strategy_for(info.value_type), max_size=3)
    if isinstance(info, mi.UnionType):
        return st.one_of([strategy_for(t) for t in info.types])
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    raise NotImplementedError(f"no strategy for {info!r}: extend strategy_for")


# Bodies a decoder may meet: random bytes, and well-formed msgpack of the wrong shape.
WRONG_SHAPE = st.one_of(
    ANY_VALUE,
    st.dictionaries(st.sampled_from(["texts", "query", "limit", "chunks", "vectors", "facts", "x"]), ANY_VALUE),
).map(msgspec.msgpack.encode)


@pytest.mark.parametrize("message_type", REQUEST_TYPES, ids=lambda t: t.__name__)
@FAST
@given(body=st.binary(max_size=200) | WRONG_SHAPE)
@example(body=b"")
@example(body=b"\xc1")  # never used in msgpack
@example(body=b"\xdd\xff\xff\xff\xff")  # an array claiming 4 billion items
@example(body=b"\xc7\x01\xff\x00")  # an extension type msgspec does not know
def test_decoding_any_bytes_gives_the_type_or_a_decode_error(message_type, body):
    try:
        value = decode(body, message_type)
    except DecodeError:
        return
    assert isinstance(value, message_type)


def nested(depth: int) -> bytes:
    """``[[[...null...]]]`` nested ``depth`` deep, as msgpack: about ``depth`` bytes."""
    return b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_body_is_a_decode_error(depth):
    """Nesting inside a field the reader skips (unknown) or keeps as ``Any`` (``LoadTriples.ontology``).

    1 000 levels is a 1 KB body, far below any size limit; it must be refused
    like any other invalid body (``DecodeError``, so a processor answers a
    ``ValidationError`` or dead-letters it at once) rather than escape as
    another exception that the consume loop retries ``max_attempts`` times.
    """
    bodies = {
        "unknown field": b"\x81\xa1x" + nested(depth),
        "ontology": b"\x82\xa8ontology\x81\xa1k" + nested(depth) + b"\xa5facts\x90",
    }
    escaped = []
    for message_type in REQUEST_TYPES:
        for where, body in bodies.items():
            try:
                decode(body, message_type)
            except DecodeError:
                pass
            except Exception as exc:
                escaped.append(f"{message_type.__name__} ({where}): {type(exc).__name__}: {exc}")
    assert not escaped, "decode raised something other than DecodeError:\n" + "\n".join(escaped)


@pytest.mark.parametrize("message_type", ALL_TYPES, ids=lambda t: t.__name__)
@SLOW
@given(data=st.data())
def test_every_message_survives_an_encode_decode_round_trip(message_type, data):
    value = data.draw(strategy_for(mi.type_info(message_type)))
    assert decode(encode(value), message_type) == value


def test_every_topic_has_a_strategy_for_its_messages():
    """Guards the round trip above: a new field type must get a strategy, not be skipped."""
    for message_type in ALL_TYPES:
        strategy_for(mi.type_info(message_type))
    assert schema.DecodeError is DecodeError and issubclass(DecodeError, ValueError)


def test_reference_helpers_agree_on_a_hand_checked_case():
    """The oracles above are code too: pin them on examples checked by hand."""
    lists = [[ChunkMatch("a"), ChunkMatch(""), ChunkMatch("b")], [ChunkMatch("b")]]
    scores, _ = reference_scores(lists, [1.0, 1.0])
    assert scores == {"a": 1 / 61, "b": 1 / 62 + 1 / 61}
    names = ["New York City", "York", "new york"]
    assert reference_link("New York City and york", names) == ["New York City", "York"]
    assert link_entities("New York City and york", names) == ["New York City", "York"]
    assert parse_instant("2021-12-08T00:00:00+01:00") == datetime(2021, 12, 7, 23, tzinfo=UTC)
    assert parse_instant(date(2020, 2, 29)) == datetime(2020, 2, 29, tzinfo=UTC)
