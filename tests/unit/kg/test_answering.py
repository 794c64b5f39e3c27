"""Which facts answer a question: the rule an answer's graph path applies (processors/kg/answering.py),
over the real sample graph and its ontology."""

from __future__ import annotations

import pytest

from ragbus.kg.answering import about_itself, stem
from ragbus.kg.ontology import Ontology, OntologyError
from ragbus.schema.times import parse_instant
from scripts.eval_facts import sample_graph


@pytest.fixture(scope="module")
def graph():
    return sample_graph()


def served(graph, question: str, at: str | None = None, **kw) -> list[tuple[str, str, str]]:
    found = graph.query(question, at_time=parse_instant(at) if at else None, answering=True, **kw)
    return [(f.head, f.relation, f.tail) for f in found.facts]


def test_a_question_that_only_names_an_entity_in_passing_gets_no_fact(graph):
    question = "How does Python resolve a name inside a nested function?"
    assert graph.query(question).facts  # the entity is linked and has facts...
    assert served(graph, question) == []  # ...none of which answers


def test_the_relation_asked_for_is_served_by_its_ontology_phrases(graph):
    assert served(graph, "Who was chancellor of Germany?", "2010-01-01") == [
        ("Angela Merkel", "head_of_government_of", "Germany")]
    assert served(graph, "Where was Barack Obama born?") == [("Barack Obama", "born_in", "Honolulu")]
    assert served(graph, "Who designed Python?") == [("Guido van Rossum", "designed", "Python")]


def test_which_class_asks_for_a_fact_whose_other_end_is_of_that_class(graph):
    # no phrase of maintains here: "organization" is the class of the fact's other end
    assert served(graph, "Which organization is behind Python?") == [
        ("Python Software Foundation", "maintains", "Python")]


def test_a_question_about_the_entity_itself_gets_all_its_facts(graph):
    assert about_itself("Who is Angela Merkel?", ["Angela Merkel"])
    assert not about_itself("Who is Angela Merkel's successor?", ["Angela Merkel"])
    assert set(served(graph, "Who is Angela Merkel?")) == {
        ("Angela Merkel", "born_in", "Hamburg"), ("Angela Merkel", "head_of_government_of", "Germany")}


def test_facts_are_ranked_by_how_well_they_match_and_cut_after_ranking(graph):
    question = "Who designed Python, and which organization maintains it?"
    # both relations are asked; maintains also has the asked class, so it ranks first though the
    # store holds the designed fact before it
    stored = [f.relation for f in graph.query(question).facts]
    assert stored.index("designed") < stored.index("maintains")
    assert served(graph, question) == [("Python Software Foundation", "maintains", "Python"),
                                       ("Guido van Rossum", "designed", "Python")]
    assert served(graph, question, limit=1) == [("Python Software Foundation", "maintains", "Python")]


def test_time_scoping_still_applies_before_the_choice(graph):
    assert served(graph, "Who was the capital of Germany?", "1980-01-01") == [("Bonn", "capital_of", "Germany")]
    assert served(graph, "What is the capital of Germany?", "2000-01-01") == [("Berlin", "capital_of", "Germany")]


def test_stems_meet_the_forms_a_question_uses():
    assert stem("designed") == stem("design") == stem("designs")
    assert stem("released") == stem("release")
    assert stem("born") == "born"


def test_asked_by_must_be_a_list_of_phrases():
    relation = {"domain": None, "range": None, "asked_by": "capital"}
    with pytest.raises(OntologyError, match="asked_by is a list of words or phrases"):
        Ontology(relations={"capital_of": relation})
    assert Ontology(relations={"capital_of": {"asked_by": ["capital"]}}).relations["capital_of"].asked_by == (
        "capital",)
