"""The in-process facade: time-scoped retrieval, one LLM call, the prompt and its header."""

from __future__ import annotations

import pytest

from ragbus.kg.facade import ContextRetriever, build_prompt, reasoning_paths
from ragbus.kg.store import GraphStore
from ragbus.kg.temporal import RetrievedContext
from ragbus.schema.times import TimeError


def fact(head, relation, tail, valid_from=None, valid_until=None):
    return RetrievedContext(
        content=f"{head} {relation} {tail}",
        score=1.0,
        source="KnowledgeGraph",
        metadata={"fact": (head, relation, tail)},
        related_entities=[
            {"id": head, "name": head, "type": None, "valid_from": None, "valid_until": None},
            {"id": tail, "name": tail, "type": None, "valid_from": None, "valid_until": None},
        ],
        related_relationships=[
            {"source": head, "target": tail, "type": relation, "valid_from": valid_from,
             "valid_until": valid_until, "id": f"{head}|{relation}|{tail}"}
        ],
    )


CONTEXTS = [
    fact("Angela Merkel", "head_of_government_of", "Germany", "2005-11-22", "2021-12-08"),
    fact("Olaf Scholz", "head_of_government_of", "Germany", "2021-12-08"),
    fact("Berlin", "capital_of", "Germany"),
]


class FakeGraph:
    def __init__(self, contexts=CONTEXTS):
        self.contexts = contexts
        self.calls = []

    def retrieve(self, query, **kwargs):
        self.calls.append((query, kwargs))
        return self.contexts[: kwargs.get("k", 8)]


class FakeLLM:
    def __init__(self):
        self.prompts = []

    def generate(self, prompt):
        self.prompts.append(prompt)
        return "answer"


def test_generate_is_called_exactly_once_and_its_answer_returned():
    llm = FakeLLM()
    assert ContextRetriever(FakeGraph()).query_with_reasoning("Who governs Germany?", llm) == "answer"
    assert len(llm.prompts) == 1
    prompt = llm.prompts[0]
    assert "Who governs Germany?" in prompt
    assert "Retrieved Context:" in prompt
    for c in CONTEXTS:
        assert c.content in prompt
    assert "valid as of" not in prompt and "KnowledgeGraph snapshot" not in prompt


def test_at_time_adds_the_header_before_the_context_and_scopes_the_facts():
    llm = FakeLLM()
    ContextRetriever(FakeGraph()).query_with_reasoning("Who governs Germany?", llm, at_time="2023-06-01")
    (prompt,) = llm.prompts
    header = "Graph context valid as of 2023-06-01T00:00:00Z (source: KnowledgeGraph snapshot)"
    assert header in prompt
    assert prompt.index(header) < prompt.index("Retrieved Context:")
    assert "Olaf Scholz head_of_government_of Germany" in prompt
    assert "Angela Merkel" not in prompt  # stale fact: its context lost its only relationship


def test_at_time_forms_render_utc():
    llm = FakeLLM()
    ContextRetriever(FakeGraph()).query_with_reasoning("q", llm, at_time="2023-06-01T01:30:00+02:00")
    assert "valid as of 2023-05-31T23:30:00Z" in llm.prompts[0]


def test_prompt_without_at_time_is_byte_identical():
    prompts = []
    for kwargs in ({}, {"at_time": None}, {"at_time": None, "header_template": "X {at_time}"}):
        llm = FakeLLM()
        ContextRetriever(FakeGraph()).query_with_reasoning("Who governs Germany?", llm, **kwargs)
        prompts.append(llm.prompts[0])
    assert prompts[0] == prompts[1] == prompts[2]


def test_custom_template_is_filled_by_plain_substitution():
    llm = FakeLLM()
    template = "As of {at_time} ({source}) {query} {0} {x.__class__} {"
    ContextRetriever(FakeGraph()).query_with_reasoning("Q?", llm, at_time="2023-06-01", header_template=template)
    prompt = llm.prompts[0]
    assert "As of 2023-06-01T00:00:00Z (KnowledgeGraph snapshot) {query} {0} {x.__class__} {" in prompt
    assert prompt.index("As of 2023-06-01") < prompt.index("Retrieved Context:")
    assert "Graph context valid as of" not in prompt


def test_user_text_with_braces_is_not_formatted():
    llm = FakeLLM()
    graph = FakeGraph([RetrievedContext(content="a {query} and {0}")])
    ContextRetriever(graph).query_with_reasoning("why {0} {at_time}?", llm, at_time="2023-06-01")
    prompt = llm.prompts[0]
    assert "why {0} {at_time}?" in prompt and "a {query} and {0}" in prompt


def test_at_time_and_header_template_are_passed_as_keywords():
    seen = {}

    class Spy(ContextRetriever):
        def _generate_reasoned_response(self, query, contexts, reasoning_paths, llm, **kwargs):
            seen.update(query=query, contexts=contexts, paths=reasoning_paths, llm=llm, kwargs=kwargs)
            return "spied"

    llm = FakeLLM()
    out = Spy(FakeGraph()).query_with_reasoning("Germany?", llm, at_time="2023-06-01", header_template="T {at_time}")
    assert out == "spied"
    assert seen["kwargs"] == {"at_time": "2023-06-01", "header_template": "T {at_time}"}
    assert seen["query"] == "Germany?" and seen["llm"] is llm
    assert [c.content for c in seen["contexts"]] == [CONTEXTS[1].content, CONTEXTS[2].content]
    assert llm.prompts == []
    Spy(FakeGraph()).query_with_reasoning("Germany?", llm)
    assert seen["kwargs"] == {"at_time": None, "header_template": None}


def test_bad_at_time_is_refused_before_the_graph_or_the_llm():
    graph, llm = FakeGraph(), FakeLLM()
    for bad in (True, "garbage"):
        with pytest.raises((TimeError, TypeError)):
            ContextRetriever(graph).query_with_reasoning("q", llm, at_time=bad)
    assert graph.calls == [] and llm.prompts == []


def test_retrieve_passes_k_and_scopes_only_with_at_time():
    graph = FakeGraph()
    r = ContextRetriever(graph, k=2)
    assert r.retrieve("Germany") == CONTEXTS[:2]
    assert graph.calls == [("Germany", {"k": 2})]
    assert r.retrieve("Germany", k=3, at_time="2023-06-01") == [
        CONTEXTS[1], CONTEXTS[2]]
    assert graph.calls[-1] == ("Germany", {"k": 3})
    before = [c.related_relationships[0]["valid_until"] for c in CONTEXTS]
    r.retrieve("Germany", at_time="2010")
    assert [c.related_relationships[0]["valid_until"] for c in CONTEXTS] == before


def test_contexts_without_relationships_survive_time_scoping():
    plain = RetrievedContext(content="a note")
    r = ContextRetriever(FakeGraph([plain, CONTEXTS[0]]))
    assert [c.content for c in r.retrieve("q", at_time="2023")] == ["a note"]


@pytest.mark.parametrize(("k", "error"), [(True, TypeError), (-1, ValueError), ("2", TypeError)])
def test_k_is_checked(k, error):
    with pytest.raises(error):
        ContextRetriever(FakeGraph(), k=k)
    with pytest.raises(error):
        ContextRetriever(FakeGraph()).retrieve("q", k=k)


def test_reasoning_paths_between_the_entities_the_question_names():
    contexts = [
        fact("Angela Merkel", "head_of_government_of", "Germany"),
        fact("Olaf Scholz", "head_of_government_of", "Germany"),
        fact("Berlin", "capital_of", "Germany"),
    ]
    paths = reasoning_paths("How are Angela Merkel, Olaf Scholz and Berlin related?", contexts)
    assert paths == [
        "Angela Merkel -[head_of_government_of]-> Germany <-[head_of_government_of]- Olaf Scholz",
        "Angela Merkel -[head_of_government_of]-> Germany <-[capital_of]- Berlin",
        "Olaf Scholz -[head_of_government_of]-> Germany <-[capital_of]- Berlin",
    ]
    assert reasoning_paths("How are Angela Merkel, Olaf Scholz and Berlin related?", contexts[::-1]) == paths
    assert reasoning_paths("Tell me about Germany", contexts) == []  # one entity: no pair
    assert reasoning_paths("Merkel", contexts, limit=0) == []
    assert len(reasoning_paths("Angela Merkel Olaf Scholz Berlin", contexts, limit=2)) == 2


def test_reasoning_paths_appear_in_the_prompt_only_when_there_are_any():
    llm = FakeLLM()
    ContextRetriever(FakeGraph()).query_with_reasoning("Olaf Scholz and Berlin?", llm)
    assert "Reasoning Paths:\n- Olaf Scholz -[head_of_government_of]-> Germany <-[capital_of]- Berlin" in llm.prompts[0]
    assert llm.prompts[0].index("Retrieved Context:") < llm.prompts[0].index("Reasoning Paths:")
    llm = FakeLLM()
    ContextRetriever(FakeGraph()).query_with_reasoning("Germany?", llm)
    assert "Reasoning Paths:" not in llm.prompts[0]


def test_build_prompt_with_no_context():
    prompt = build_prompt("q?", [])
    assert "Retrieved Context:\n(none)" in prompt
    assert build_prompt("q?", [], at_time=None, header_template="H") == prompt


def test_no_argument_facade_uses_an_empty_graph_store():
    llm = FakeLLM()
    r = ContextRetriever()
    assert isinstance(r.graph, GraphStore) and len(r.graph) == 0
    assert r.retrieve("Who governs Germany?") == []
    assert r.query_with_reasoning("Who governs Germany?", llm, at_time="2023-06-01") == "answer"
    assert "Retrieved Context:" in llm.prompts[0]
