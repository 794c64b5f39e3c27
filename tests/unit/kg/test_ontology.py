"""The ontology: class hierarchy, relation constraints, named reasons, clear definition errors."""

from __future__ import annotations

import json

import pytest

from ragbus.kg.files import SAMPLE_ONTOLOGY
from ragbus.kg.ontology import (
    DISJOINTNESS,
    DOMAIN_VIOLATION,
    IRREFLEXIVE_VIOLATION,
    RANGE_VIOLATION,
    REASON_NAMES,
    UNKNOWN_RELATION,
    Ontology,
    OntologyError,
    Relation,
    reason_name,
)

SPEC = {
    "classes": {
        "Thing": "",
        "Agent": "Thing",
        "Person": "Agent",
        "Politician": "Person",
        "Place": "Thing",
        "Country": "Place",
        "City": "Place",
    },
    "relations": {
        "head_of_government_of": {"domain": "Person", "range": "Country", "irreflexive": True},
        "capital_of": {"domain": "City", "range": "Country"},
        "knows": {"domain": "Person", "range": "Person"},
        "related_to": {},
    },
    "disjoint": [["Agent", "Place"]],
}


@pytest.fixture
def onto() -> Ontology:
    return Ontology.from_dict(SPEC)


def names(reasons: list[str]) -> list[str]:
    return [reason_name(r) for r in reasons]


def test_reason_names_are_stable():
    assert REASON_NAMES == (
        "unknown_relation",
        "domain_violation",
        "range_violation",
        "irreflexive_violation",
        "disjointness",
    )


def test_is_a_walks_up_and_a_class_is_itself(onto):
    assert onto.is_a("Politician", "Agent")
    assert onto.is_a("Politician", "Politician")
    assert not onto.is_a("Agent", "Politician")
    assert not onto.is_a("City", "Agent")
    assert onto.ancestors("Politician") == ("Politician", "Person", "Agent", "Thing")
    assert onto.parent("Thing") is None
    assert "Country" in onto.classes


def test_unknown_class_is_a_root_of_its_own(onto):
    assert onto.ancestors("Robot") == ("Robot",)
    assert onto.is_a("Robot", "Robot")
    assert not onto.is_a("Robot", "Thing")
    assert not onto.are_disjoint("Robot", "Place")
    reasons = onto.check_triple("R2", "knows", "Ann", {"R2": "Robot", "Ann": "Person"})
    assert names(reasons) == [DOMAIN_VIOLATION]


def test_a_valid_fact_has_no_reasons_and_a_subclass_satisfies_its_ancestors(onto):
    types = {"Merkel": "Politician", "Germany": "Country"}
    assert onto.check_triple("Merkel", "head_of_government_of", "Germany", types) == []


def test_untyped_entities_are_unconstrained(onto):
    assert onto.check_triple("X", "head_of_government_of", "Y", {}) == []
    assert onto.check_triple("X", "head_of_government_of", "Y", None) == []
    assert onto.check_triple("X", "capital_of", "Y", {"Y": "Country"}) == []
    assert onto.check_triple("X", "related_to", "Y", {"X": "City", "Y": "Person"}) == []


def test_unknown_relation(onto):
    reasons = onto.check_triple("A", "married_to", "B", {})
    assert names(reasons) == [UNKNOWN_RELATION]
    assert "married_to" in reasons[0]


def test_domain_violation(onto):
    reasons = onto.check_triple("Berlin", "knows", "Ann", {"Berlin": "City", "Ann": "Person"})
    assert DOMAIN_VIOLATION in names(reasons)
    assert RANGE_VIOLATION not in names(reasons)
    assert "Berlin" in reasons[0] and "Person" in reasons[0]


def test_range_violation_without_disjointness(onto):
    # Agent is not a Person but not disjoint with it either: only the range is wrong
    reasons = onto.check_triple("Ann", "knows", "ACME", {"Ann": "Person", "ACME": "Agent"})
    assert names(reasons) == [RANGE_VIOLATION]


def test_irreflexive_violation(onto):
    reasons = onto.check_triple("Merkel", "head_of_government_of", "Merkel", {})
    assert names(reasons) == [IRREFLEXIVE_VIOLATION]
    assert onto.check_triple("Ann", "knows", "Ann", {}) == []  # knows is not irreflexive


def test_disjointness_when_a_fact_would_make_an_entity_two_disjoint_classes(onto):
    reasons = onto.check_triple("Berlin", "head_of_government_of", "Germany", {"Berlin": "City", "Germany": "Country"})
    assert names(reasons) == [DOMAIN_VIOLATION, DISJOINTNESS]
    assert "'Berlin'" in reasons[1] and "disjoint" in reasons[1]


def test_disjointness_is_inherited_and_applies_to_the_tail_too(onto):
    assert onto.are_disjoint("Politician", "City")
    reasons = onto.check_triple("Ann", "knows", "Paris", {"Ann": "Person", "Paris": "City"})
    assert names(reasons) == [RANGE_VIOLATION, DISJOINTNESS]
    assert reasons[1].startswith("disjointness: tail 'Paris'")


def test_an_entity_typed_with_disjoint_classes_violates_disjointness(onto):
    reasons = onto.check_triple("X", "related_to", "Y", {"X": ["Person", "City"]})
    assert names(reasons) == [DISJOINTNESS]
    # several compatible types are fine, and one of them satisfies the domain
    assert onto.check_triple("X", "knows", "Y", {"X": {"Agent", "Person"}}) == []


def test_all_reasons_in_order(onto):
    reasons = onto.check_triple("Rome", "head_of_government_of", "Rome", {"Rome": "City"})
    assert names(reasons) == [DOMAIN_VIOLATION, RANGE_VIOLATION, IRREFLEXIVE_VIOLATION, DISJOINTNESS]
    reasons = onto.check_triple("X", "married_to", "X", {"X": ["Person", "City"]})
    assert names(reasons) == [UNKNOWN_RELATION, DISJOINTNESS, DISJOINTNESS]  # once as head, once as tail


def test_a_bad_type_value_is_a_type_error(onto):
    with pytest.raises(TypeError):
        onto.check_triple("X", "knows", "Y", {"X": 3})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"classes": {"A": "B", "B": "C", "C": "A"}}, "cycle"),
        ({"classes": {"A": "A"}}, "cycle"),
        ({"classes": {"Root": "", "A": "B", "B": "A"}}, "cycle"),
        ({"classes": {"A": "Nope"}}, "'Nope' is not a class"),
        ({"classes": {"A": ""}, "relations": {"r": {"domain": "Nope"}}}, "domain 'Nope' is not a class"),
        ({"classes": {"A": ""}, "relations": {"r": {"range": "Nope"}}}, "range 'Nope' is not a class"),
        ({"classes": {"A": ""}, "relations": {"r": {"domian": "A"}}}, "unknown keys"),
        ({"classes": {"A": ""}, "relations": {"r": {"irreflexive": "yes"}}}, "irreflexive"),
        ({"classes": {"A": "", "B": ""}, "disjoint": [["A", "Nope"]]}, "'Nope' is not a class"),
        ({"classes": {"A": "", "B": "A"}, "disjoint": [["A", "B"]]}, "subclass"),
        ({"classes": {"A": ""}, "disjoint": [["A"]]}, "two or more"),
        ({"classes": {"A": ""}, "disjoint": ["AB"]}, "list of class names"),
        ({"klasses": {}}, "unknown ontology keys"),
        ({"classes": ["A"]}, "wrong shape"),
        ({"classes": {"": ""}}, "non-empty"),
    ],
)
def test_bad_definitions_raise_a_clear_ontology_error(spec, message):
    with pytest.raises(OntologyError, match=message):
        Ontology.from_dict(spec)


def test_ontology_error_is_a_value_error():
    assert issubclass(OntologyError, ValueError)


def test_constructor_takes_relation_objects():
    onto = Ontology({"P": ""}, {"r": Relation("r", domain="P", irreflexive=True)})
    assert onto.relations["r"] == Relation("r", "P", None, True)
    assert names(onto.check_triple("a", "r", "a", {})) == [IRREFLEXIVE_VIOLATION]


TOML = """
disjoint = [["Person", "Place"]]

[classes]
Thing = ""
Agent = "Thing"
Person = "Agent"
Place = "Thing"
Country = "Place"

[relations]
head_of_government_of = { domain = "Person", range = "Country", irreflexive = true }
"""


def test_load_toml_and_json(tmp_path):
    toml_path = tmp_path / "onto.toml"
    toml_path.write_text(TOML, encoding="utf-8")
    json_path = tmp_path / "onto.json"
    json_path.write_text(json.dumps(SPEC), encoding="utf-8")
    for onto in (Ontology.load(toml_path), Ontology.load(str(json_path))):
        assert onto.is_a("Person", "Thing")
        reasons = onto.check_triple("Ann", "head_of_government_of", "Ann", {"Ann": "Person"})
        assert names(reasons) == [RANGE_VIOLATION, IRREFLEXIVE_VIOLATION, DISJOINTNESS]


def test_load_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[classes]\nA = "B"\nB = "A"\n', encoding="utf-8")
    with pytest.raises(OntologyError, match=r"bad\.toml.*cycle"):
        Ontology.load(bad)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(OntologyError, match=r"broken\.json"):
        Ontology.load(broken)
    with pytest.raises(OntologyError, match=r"\.toml or \.json"):
        Ontology.load(tmp_path / "onto.yaml")
    with pytest.raises(OntologyError, match=r"missing\.toml"):
        Ontology.load(tmp_path / "missing.toml")


def test_the_sample_ontology_loads():
    assert SAMPLE_ONTOLOGY.is_file(), f"the shipped sample ontology {SAMPLE_ONTOLOGY} is missing"
    onto = Ontology.load(SAMPLE_ONTOLOGY)
    assert onto.is_a("Person", "Agent")
