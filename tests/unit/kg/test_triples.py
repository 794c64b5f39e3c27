"""Typed retrieval over a list of facts: linking, dedup, store order, k, schema rejection."""

from __future__ import annotations

import pytest

from ragbus.kg.ontology import Ontology, reason_name
from ragbus.kg.triples import retrieve_triples

FACTS = [
    ("Angela Merkel", "head_of_government_of", "Germany"),
    ("Olaf Scholz", "head_of_government_of", "Germany"),
    ("Berlin", "capital_of", "Germany"),
    ("Paris", "capital_of", "France"),
    ("Angela Merkel", "born_in", "Hamburg"),
]

ONTOLOGY = Ontology.from_dict(
    {
        "classes": {"Thing": "", "Person": "Thing", "Place": "Thing", "Country": "Place", "City": "Place"},
        "relations": {
            "head_of_government_of": {"domain": "Person", "range": "Country", "irreflexive": True},
            "capital_of": {"domain": "City", "range": "Country"},
            "born_in": {"domain": "Person", "range": "City"},
        },
        "disjoint": [["Person", "Place"]],
    }
)
TYPES = {
    "Angela Merkel": "Person",
    "Olaf Scholz": "Person",
    "Germany": "Country",
    "Berlin": "City",
    "Hamburg": "City",
    "Paris": "City",
    "France": "Country",
}


def test_facts_touching_a_linked_entity_in_store_order():
    out = retrieve_triples(FACTS, "Who governs Germany?")
    assert out == {
        "entities": ["Germany"],
        "facts": [FACTS[0], FACTS[1], FACTS[2]],
        "rejected": [],
    }


def test_head_or_tail_links_and_facts_are_tuples():
    out = retrieve_triples([list(f) for f in FACTS], "Where was angela merkel born, and what about paris?")
    assert out["entities"] == ["Angela Merkel", "Paris"]
    assert out["facts"] == [FACTS[0], FACTS[3], FACTS[4]]
    assert all(type(f) is tuple for f in out["facts"])


def test_nothing_linked_gives_nothing():
    assert retrieve_triples(FACTS, "What is the weather?") == {"entities": [], "facts": [], "rejected": []}


def test_duplicates_count_once_at_their_first_position():
    facts = [FACTS[2], FACTS[0], FACTS[2], list(FACTS[0]), FACTS[1]]
    out = retrieve_triples(facts, "Germany", k=8)
    assert out["facts"] == [FACTS[2], FACTS[0], FACTS[1]]


def test_k_caps_the_facts():
    assert retrieve_triples(FACTS, "Germany", k=2)["facts"] == [FACTS[0], FACTS[1]]
    out = retrieve_triples(FACTS, "Germany", k=0)
    assert out["facts"] == [] and out["rejected"] == []
    assert out["entities"] == ["Germany"]


@pytest.mark.parametrize("k", [True, False, 2.0, "3", None])
def test_k_must_be_an_int(k):
    with pytest.raises(TypeError, match="k must be an int"):
        retrieve_triples(FACTS, "Germany", k=k)


def test_negative_k_is_a_value_error():
    with pytest.raises(ValueError, match="k must be >= 0"):
        retrieve_triples(FACTS, "Germany", k=-1)


def test_a_one_shot_iterator_is_read_once():
    pulled = []

    def facts():
        for f in FACTS:
            pulled.append(f)
            yield f

    gen = facts()
    out = retrieve_triples(gen, "Germany")
    assert out["facts"] == [FACTS[0], FACTS[1], FACTS[2]]
    assert pulled == FACTS  # every item pulled exactly once
    assert next(gen, None) is None


def test_a_bad_k_does_not_consume_the_iterator():
    gen = iter(FACTS)
    with pytest.raises(TypeError):
        retrieve_triples(gen, "Germany", k=True)
    assert next(gen) == FACTS[0]


@pytest.mark.parametrize(
    "bad",
    [("a", "b"), ("a", "b", "c", "d"), "abc", {"head": 1, "relation": 2, "tail": 3}, 42, None, {"a", "b", "c"}],
)
def test_a_malformed_triple_names_its_index(bad):
    with pytest.raises(ValueError, match="index 2"):
        retrieve_triples([FACTS[0], FACTS[1], bad, FACTS[2]], "Germany")


def test_an_unhashable_item_is_a_value_error_naming_the_index():
    with pytest.raises(ValueError, match="index 1"):
        retrieve_triples([FACTS[0], ("a", "r", ["b"])], "Germany")


def test_the_ontology_rejects_violating_facts_with_reasons():
    facts = [
        *FACTS,
        ("Germany", "head_of_government_of", "Germany"),
        ("Angela Merkel", "capital_of", "Germany"),
        ("Germany", "borders", "France"),
    ]
    out = retrieve_triples(facts, "Germany", ontology=ONTOLOGY, types=TYPES)
    assert out["facts"] == [FACTS[0], FACTS[1], FACTS[2]]
    rejected = {r["fact"]: [reason_name(x) for x in r["reasons"]] for r in out["rejected"]}
    assert list(rejected) == [facts[5], facts[6], facts[7]]
    assert rejected[facts[5]] == ["domain_violation", "irreflexive_violation", "disjointness"]
    assert rejected[facts[6]] == ["domain_violation", "disjointness"]
    assert rejected[facts[7]] == ["unknown_relation"]
    assert all(isinstance(r["fact"], tuple) for r in out["rejected"])


def test_rejected_do_not_count_towards_k_and_are_capped_at_k():
    bad = [("Germany", "borders", f"Country{i}") for i in range(5)]
    facts = [bad[0], bad[1], FACTS[0], bad[2], FACTS[1], bad[3], FACTS[2]]
    out = retrieve_triples(facts, "Germany", ontology=ONTOLOGY, types=TYPES, k=2)
    assert out["facts"] == [FACTS[0], FACTS[1]]
    assert [r["fact"] for r in out["rejected"]] == [bad[0], bad[1]]


def test_without_an_ontology_types_are_ignored():
    out = retrieve_triples([("Germany", "borders", "France")], "Germany", types={"Germany": "Person"})
    assert out["facts"] == [("Germany", "borders", "France")]


def test_untyped_entities_pass_the_ontology():
    out = retrieve_triples(FACTS, "Germany", ontology=ONTOLOGY)
    assert out["facts"] == [FACTS[0], FACTS[1], FACTS[2]]
    assert out["rejected"] == []


def test_non_string_names_are_not_linked_but_their_facts_may_be():
    out = retrieve_triples([(1, "r", "Germany"), ("Germany", "r", None)], "Germany 1")
    assert out["entities"] == ["Germany"]
    assert out["facts"] == [(1, "r", "Germany"), ("Germany", "r", None)]
