"""Time-scoped filtering of graph contexts: the interval rules, at_time forms, no mutation."""

from __future__ import annotations

import copy
import logging
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from ragbus.kg.temporal import (
    DEFAULT_HEADER_TEMPLATE,
    RetrievedContext,
    TemporalGraphRetriever,
    filter_contexts,
    render_header,
)
from ragbus.schema.times import TimeError


def entity(id_, valid_from=None, valid_until=None, **extra):
    return {"id": id_, "name": id_.title(), "valid_from": valid_from, "valid_until": valid_until, **extra}


def rel(source, target, valid_from=None, valid_until=None, type_="r", **extra):
    return {"source": source, "target": target, "type": type_, "valid_from": valid_from,
            "valid_until": valid_until, **extra}


class Base:
    """A retriever that records its calls and returns the same contexts each time."""

    def __init__(self, contexts):
        self.contexts = contexts
        self.calls = []

    def retrieve(self, query, **kwargs):
        self.calls.append((query, kwargs))
        return self.contexts


def ctx(entities=(), relationships=(), **kw):
    return RetrievedContext(
        content=kw.get("content", "c"), score=kw.get("score", 0.5), source=kw.get("source", "src"),
        metadata=kw.get("metadata", {"m": 1}), related_entities=list(entities),
        related_relationships=list(relationships),
    )


def kept_ids(context):
    return [e["id"] for e in context.related_entities]


def test_retrieved_context_defaults_and_keywords():
    c = RetrievedContext()
    assert (c.content, c.score, c.source, c.metadata, c.related_entities, c.related_relationships) == (
        "", 0.0, "", {}, [], [])
    assert RetrievedContext(content="x", score=1.0).content == "x"
    assert RetrievedContext().metadata is not RetrievedContext().metadata


def test_attributes_and_default_template():
    base = Base([])
    r = TemporalGraphRetriever(base)
    assert r.base_retriever is base and r.at_time is None and r.header_template == DEFAULT_HEADER_TEMPLATE
    assert "{at_time}" in DEFAULT_HEADER_TEMPLATE and "{source}" in DEFAULT_HEADER_TEMPLATE
    r = TemporalGraphRetriever(base, at_time="2023-01-01", header_template="as of {at_time}")
    assert r.at_time == "2023-01-01" and r.header_template == "as of {at_time}"


def test_start_is_inclusive_end_is_exclusive_bounds_open():
    contexts = [ctx([
        entity("starts", valid_from="2023-01-01"),
        entity("ends", valid_until="2023-01-01"),
        entity("ended_before", valid_until="2022-12-31"),
        entity("starts_later", valid_from="2023-01-01T00:00:01Z"),
        entity("open"),
        entity("inside", "2020", "2030"),
    ])]
    kept, dropped = filter_contexts(contexts, "2023-01-01")
    assert kept_ids(kept[0]) == ["starts", "open", "inside"]
    assert dropped == []


def test_a_fact_ending_the_day_its_successor_starts_does_not_overlap():
    contexts = [ctx(relationships=[
        rel("merkel", "germany", "2005-11-22", "2021-12-08"),
        rel("scholz", "germany", "2021-12-08", None),
    ])]
    for at, expected in (("2021-12-07T23:59:59Z", "merkel"), ("2021-12-08", "scholz")):
        kept, _ = filter_contexts(contexts, at)
        assert [r["source"] for r in kept[0].related_relationships] == [expected]


@pytest.mark.parametrize(
    ("at", "kept"),
    [
        (datetime(2023, 1, 1), True),  # naive = UTC: exactly the start
        (datetime(2022, 12, 31, 23, 59), False),
        (date(2023, 1, 1), True),
        ("2023-01-01", True),
        ("2023-01-01T00:00:00Z", True),
        ("2022-12-31T23:59:59Z", False),
        ("2023-01-01T00:30:00+01:00", False),  # = 2022-12-31T23:30Z
        ("2022-12-31T20:00:00-05:00", True),  # = 2023-01-01T01:00Z
        (datetime(2023, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1))), True),
        (datetime(2023, 1, 1, 0, 59, tzinfo=timezone(timedelta(hours=1))), False),
    ],
)
def test_at_time_forms(at, kept):
    contexts = [ctx([entity("e", valid_from="2023-01-01T00:00:00Z")])]
    out = TemporalGraphRetriever(Base(contexts)).retrieve("q", at_time=at)
    assert kept_ids(out[0]) == (["e"] if kept else [])


@pytest.mark.parametrize("bad", [True, False, "not a date", "2023-13-01", 20230101, 3.5, object()])
def test_bad_at_time_is_refused_at_call_and_construction(bad):
    base = Base([ctx([entity("e")])])
    with pytest.raises((TimeError, TypeError), match="at_time"):
        TemporalGraphRetriever(base).retrieve("q", at_time=bad)
    with pytest.raises((TimeError, TypeError), match="at_time"):
        TemporalGraphRetriever(base, at_time=bad)
    assert base.calls == []  # refused before the base did any work


def test_call_site_at_time_wins_over_the_constructor():
    contexts = [ctx([entity("old", valid_until="2020-01-01"), entity("new", valid_from="2020-01-01")])]
    r = TemporalGraphRetriever(Base(contexts), at_time="2019-06-01")
    assert kept_ids(r.retrieve("q")[0]) == ["old"]
    assert kept_ids(r.retrieve("q", at_time="2021-06-01")[0]) == ["new"]
    assert r.at_time == "2019-06-01"  # no per-call state


def test_base_is_called_once_with_the_query_and_kwargs_but_not_at_time():
    base = Base([ctx()])
    TemporalGraphRetriever(base, at_time="2020").retrieve("who?", at_time="2021", k=3, collection="c")
    assert base.calls == [("who?", {"k": 3, "collection": "c"})]
    base.calls.clear()
    TemporalGraphRetriever(base).retrieve("who?", k=1)
    assert base.calls == [("who?", {"k": 1})]


def test_without_at_time_the_base_result_is_returned_unchanged():
    result = [ctx([entity("e", valid_until="1900")])]
    out = TemporalGraphRetriever(Base(result)).retrieve("q")
    assert out is result
    assert out[0] is result[0]


def test_base_objects_are_not_mutated_and_fields_are_kept():
    contexts = [
        ctx([entity("a", valid_until="2000"), entity("b")], [rel("a", "b"), rel("b", "b")],
            content="A and B", score=0.9, source="kg", metadata={"fact_id": 7}),
    ]
    before = copy.deepcopy(contexts)
    out = TemporalGraphRetriever(Base(contexts)).retrieve("q", at_time="2023")
    assert contexts == before
    assert out[0] is not contexts[0]
    assert (out[0].content, out[0].score, out[0].source, out[0].metadata) == ("A and B", 0.9, "kg", {"fact_id": 7})
    assert kept_ids(out[0]) == ["b"]
    assert out[0].related_relationships == [rel("b", "b")]
    out[0].related_entities[0]["name"] = "changed"
    out[0].metadata["x"] = 1
    assert contexts == before


def test_each_context_is_filtered_independently_and_all_are_returned():
    contexts = [
        ctx([entity("x", valid_until="2000")], [rel("x", "y")]),
        ctx([entity("x")], [rel("x", "y")]),
        ctx([entity("gone", valid_until="2000")]),
    ]
    out = TemporalGraphRetriever(Base(contexts)).retrieve("q", at_time="2023")
    assert len(out) == 3
    assert out[0].related_relationships == []  # its x was filtered out
    assert out[1].related_relationships == [rel("x", "y")]  # the other context's x does not matter
    assert out[2].related_entities == [] and out[2].content == "c"


def test_relationship_dropped_when_its_own_interval_does_not_cover():
    contexts = [ctx([entity("a"), entity("b")], [rel("a", "b", valid_until="2020"), rel("a", "b", "2020")])]
    kept, _ = filter_contexts(contexts, "2023")
    assert [r["valid_from"] for r in kept[0].related_relationships] == ["2020"]


def test_endpoints_by_source_id_target_id_and_by_name_without_id():
    gone_by_name = {"name": "Old Name", "valid_until": "2000"}
    contexts = [ctx(
        [entity("a", valid_until="2000"), entity("b"), gone_by_name],
        [
            {"source_id": "a", "target_id": "b", "type": "r1"},
            {"source_id": "b", "target_id": "b", "type": "r2"},
            {"source": "b", "target_id": "a", "type": "r3"},
            {"source": "Old Name", "target": "b", "type": "r4"},
            {"source": "b", "target": "not in context", "type": "r5"},
        ],
    )]
    kept, _ = filter_contexts(contexts, "2023")
    assert [r["type"] for r in kept[0].related_relationships] == ["r2", "r5"]


def test_an_entity_with_an_id_is_not_referred_to_by_name():
    contexts = [ctx([{"id": "Q1", "name": "Merkel", "valid_until": "2000"}], [rel("Merkel", "x")])]
    kept, _ = filter_contexts(contexts, "2023")
    assert kept[0].related_relationships == [rel("Merkel", "x")]


def test_one_kept_version_of_an_entity_keeps_its_relationships():
    contexts = [ctx([entity("a", valid_until="2000"), entity("a", valid_from="2000")], [rel("a", "b")])]
    kept, _ = filter_contexts(contexts, "2023")
    assert kept[0].related_relationships == [rel("a", "b")]


def test_malformed_and_inverted_intervals_are_dropped_and_reported(caplog):
    contexts = [
        ctx(
            [entity("bad", valid_from="yesterday"), entity("inverted", "2024", "2020"), entity("ok")],
            [rel("ok", "ok", valid_until="soon", id="r-bad"), rel("ok", "ok", id="r-ok"), "not a mapping"],
        ),
        ctx([entity("fine")]),
    ]
    with caplog.at_level(logging.WARNING, logger="ragbus.kg.temporal"):
        kept, dropped = filter_contexts(contexts, "2023")
    assert kept_ids(kept[0]) == ["ok"]
    assert [r["id"] for r in kept[0].related_relationships] == ["r-ok"]
    assert kept_ids(kept[1]) == ["fine"]
    assert [(d.context_index, d.kind) for d in dropped] == [
        (0, "entity"), (0, "entity"), (0, "relationship"), (0, "relationship")]
    assert "yesterday" in dropped[0].reason
    assert "inverted" in dropped[1].reason
    assert dropped[2].item["id"] == "r-bad"
    messages = [r.getMessage() for r in caplog.records if r.name == "ragbus.kg.temporal"]
    assert len(messages) == 4
    assert "'bad'" in messages[0] and "yesterday" in messages[0]
    assert "'inverted'" in messages[1] and "inverted" in messages[1]


def test_retrieve_scoped_reports_without_state_on_the_retriever():
    contexts = [ctx([entity("bad", valid_from="??"), entity("ok")])]
    r = TemporalGraphRetriever(Base(contexts), at_time="2023")
    scoped = r.retrieve_scoped("q")
    assert scoped.at_time == datetime(2023, 1, 1, tzinfo=UTC)
    assert scoped.base == contexts
    assert kept_ids(scoped.contexts[0]) == ["ok"]
    assert [d.item["id"] for d in scoped.dropped] == ["bad"]
    assert kept_ids(r.retrieve("q")[0]) == ["ok"]


def test_render_header_default_reads_valid_as_of_with_utc_iso_time():
    header = render_header(DEFAULT_HEADER_TEMPLATE, "2023-06-01")
    assert header == "Graph context valid as of 2023-06-01T00:00:00Z (source: KnowledgeGraph snapshot)"
    assert render_header("{at_time}", "2023-06-01T02:00:00+02:00") == "2023-06-01T00:00:00Z"
    assert render_header("{at_time}", datetime(2023, 6, 1, 12)) == "2023-06-01T12:00:00Z"


def test_render_header_substitutes_only_its_two_placeholders():
    template = "{0} {query} {x.__class__} {at_time} {{source}} {source} {"
    out = render_header(template, "2023-06-01", source="S {at_time}")
    assert out == "{0} {query} {x.__class__} 2023-06-01T00:00:00Z {S {at_time}} S {at_time} {"


def test_header_uses_the_effective_time_and_the_template():
    r = TemporalGraphRetriever(Base([]), at_time="2020-01-01", header_template="snapshot {at_time}")
    assert r.header() == "snapshot 2020-01-01T00:00:00Z"
    assert r.header("2021-05-05") == "snapshot 2021-05-05T00:00:00Z"
    assert TemporalGraphRetriever(Base([])).header() is None


def test_a_non_string_template_is_refused():
    with pytest.raises(TypeError):
        TemporalGraphRetriever(Base([]), header_template=3)
    with pytest.raises(TypeError):
        render_header(None, "2023")
