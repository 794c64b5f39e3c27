"""Entity linking: normalisation, longest-first whole-token matching, a stable order."""

from __future__ import annotations

import random

import pytest

from ragbus.kg.linking import EntityLinker, link_entities, normalise


def test_normalise_is_casefolded_nfkc_and_keeps_accented_words_whole():
    assert normalise("Zürich") == ("zürich",)
    assert normalise("Zu\u0308rich") == ("zürich",)  # decomposed u + diaeresis composes
    assert normalise("ＳÃO  Paulo") == ("são", "paulo")  # fullwidth letters fold
    assert normalise("Straße") == ("strasse",)
    assert normalise("हिन्दी") == ("हिन्दी",)  # combining vowel signs stay in the word


def test_apostrophes_hyphens_and_dots_separate_tokens():
    assert normalise("Côte d'Ivoire") == ("côte", "d", "ivoire")
    assert normalise("Côte d’Ivoire") == normalise("Côte d'Ivoire")
    assert normalise("Baden-Württemberg") == ("baden", "württemberg")
    assert normalise("U.S.") == ("u", "s")
    assert normalise("  ,;!  ") == ()


def test_accented_names_link_as_whole_words():
    names = ["Zürich", "São Paulo", "Côte d'Ivoire", "Paulo"]
    assert link_entities("Flights from ZÜRICH to são paulo?", names) == ["Zürich", "São Paulo"]
    assert link_entities("Who leads Côte d’Ivoire?", names) == ["Côte d'Ivoire"]
    # "Zürich" is one token: neither "z" nor "rich" is a word of it
    assert link_entities("z rich", ["Z", "rich", "Zürich"]) == ["Z", "rich"]
    assert link_entities("Zürich", ["Z", "rich"]) == []


def test_names_match_whole_tokens_only():
    assert link_entities("Germany's chancellor", ["Germany", "Germ", "many"]) == ["Germany"]
    assert link_entities("Berliner Zeitung", ["Berlin"]) == []


def test_longest_name_first_and_a_claimed_span_is_not_linked_again():
    names = ["York", "New York City", "New York"]
    assert link_entities("Mayor of New York City", names) == ["New York City"]
    # a York outside the claimed span still links
    assert link_entities("New York City and York", names) == ["New York City", "York"]


def test_overlapping_names_of_equal_length_leftmost_wins():
    assert link_entities("a b c", ["b c", "a b"]) == ["a b"]


def test_every_alias_sharing_a_normalised_form_is_linked():
    names = ["ZÜRICH", "Zürich", "zürich", "Geneva"]
    assert link_entities("zurich or zürich", names) == ["ZÜRICH", "Zürich", "zürich"]


def test_order_is_first_mention_then_raw_name_whatever_the_input_order():
    names = ["Paris", "Berlin", "berlin", "Rome", "New York", "York"]
    question = "Rome, then Berlin, New York and Paris, then Rome again"
    expected = ["Rome", "Berlin", "berlin", "New York", "Paris"]
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(names)
        assert link_entities(question, names) == expected


def test_blank_and_punctuation_names_are_ignored():
    assert link_entities("anything at all", ["", "   ", "--", "all"]) == ["all"]
    linker = EntityLinker()
    assert linker.add("  ") is False
    assert len(linker) == 0
    assert linker.link("") == []


def test_non_strings_are_refused():
    with pytest.raises(TypeError):
        link_entities(None, ["x"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        link_entities("x", [None])  # type: ignore[list-item]


def test_linker_is_incremental_and_can_forget():
    linker = EntityLinker(["York"])
    assert linker.link("New York City") == ["York"]
    linker.add("New York City")
    assert linker.link("New York City") == ["New York City"]
    assert "New York City" in linker
    linker.discard("New York City")
    assert "New York City" not in linker
    assert linker.link("New York City") == ["York"]
    linker.discard("never added")  # no error
    linker.add("YORK")
    linker.discard("York")
    assert linker.link("york") == ["YORK"]


def test_a_duplicate_name_is_linked_once():
    assert link_entities("Paris and Paris", ["Paris", "Paris"]) == ["Paris"]


def test_link_cost_does_not_depend_on_names_sharing_nothing_with_the_question():
    # Only the question's tokens are looked up: 100k names starting with other words are never
    # compared. Count comparisons through the one index the linker consults per position.
    linker = EntityLinker(f"entity {i} of the graph" for i in range(2_000))
    linker.add("Berlin")
    lookups = []

    class Spy(dict):
        def __contains__(self, key):
            lookups.append(key)
            return super().__contains__(key)

    linker._aliases = Spy(linker._aliases)
    assert linker.link("Where is Berlin?") == ["Berlin"]
    assert lookups == [("berlin",)]
