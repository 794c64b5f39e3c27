"""kg-store and kg-query as processors: graph files loaded over the bus, questions asked over it.

On the memory bus, on Kafka and Pulsar against the real brokers, and
through the ``ragbus kg`` command in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, load_graph, read_items, read_ontology
from ragbus.runtime.typed_clients import KgClient, RemoteError
from ragbus.schema import Entity, Fact, IngestResult, LoadTriples
from ragbus.schema import topics as t

from ..helpers.brokers import settings_for_tests
from ..helpers.kg_pipeline import kg_processors


async def load_sample(client, collection: str = "default") -> None:
    progress = []
    summary = await load_graph(client, SAMPLE_GRAPH, ontology=read_ontology(SAMPLE_ONTOLOGY), batch_size=20,
                               collection=collection,
                               on_progress=lambda done, total, label: progress.append((done, total)))
    assert summary.rejected == [] and summary.stored == summary.sent == 107
    assert progress[-1] == (107, 107) and [d for d, _ in progress] == sorted(d for d, _ in progress)


async def check_questions(client, collection: str = "default") -> None:
    kg = KgClient(client, timeout=30)
    r = await kg.query("Who was president of France?", at_time="2010-06-01", collection=collection)
    assert r.entities == ["France"] and r.at_time == "2010-06-01T00:00:00Z"
    assert [f.text for f in r.facts] == ["Nicolas Sarkozy head_of_state_of France", "Paris capital_of France"]
    assert r.facts[0].source == "sample:offices" and r.facts[0].valid_from == "2007-05-16"
    # What the store believed in 2020 about 2023, then what it knows now.
    believed = await kg.query("Germany", at_time="2023-01-01", as_of="2020-01-01", collection=collection)
    assert believed.as_of == "2020-01-01T00:00:00Z"
    assert believed.facts[0].text == "Angela Merkel head_of_government_of Germany"
    now = await kg.query("Germany", at_time="2023-01-01", collection=collection)
    assert now.facts[0].text == "Olaf Scholz head_of_government_of Germany"


async def test_load_then_query_on_the_memory_bus(tmp_path, monkeypatch):
    async with kg_processors(f"memory://{tmp_path.name}", tmp_path, monkeypatch) as client:
        await load_sample(client)
        await check_questions(client)
        kg = KgClient(client, timeout=30)
        # Bad input: an error response naming the problem, never a crash or a silence.
        for kwargs, message in [
            ({"question": "Germany", "at_time": "yesterday"}, "at_time 'yesterday' is not an ISO 8601"),
            ({"question": "Germany", "as_of": "2020-13-01"}, "as_of '2020-13-01'"),
            ({"question": "Germany", "limit": -1}, "Expected `int` >= 0 - at `$.limit`"),
            ({"question": "   "}, "question is empty"),
            ({"question": "Germany " * 20_000}, "over max_question_chars"),
            ({"question": "Germany", "collection": "../etc"}, "collection"),
        ]:
            with pytest.raises(RemoteError, match=r"BadRequest|TimeError|ValidationError") as caught:
                await kg.query(**kwargs)
            assert message in str(caught.value), (kwargs, caught.value)
        # A collection nobody loaded has no facts; a limit above max_limit is clamped, not refused.
        assert (await kg.query("Germany", collection="empty")).facts == []
        assert len((await kg.query("Germany", limit=10_000)).facts) == 7
        # Items the store refuses come back, with why; the batch's good items are stored.
        refused = await client.request(t.TRIPLES_LOAD, LoadTriples(
            entities=[Entity(id="Germany", name="Deutschland")],
            facts=[Fact("Ada", "knows", "Bob", "1830-01-01", "1820-01-01"), Fact("Ada", "knows", "Carol")],
        ), IngestResult, timeout=30)
        assert refused.error is None and refused.count == 1 and len(refused.rejected) == 2
        assert "duplicate entity id 'Germany'" in refused.rejected[0] and "inverted" in refused.rejected[1]
        # Stored, but the sample's ontology has no "knows": the load warns, and the query says so.
        assert refused.warnings == [("fact 1 ('Ada knows Carol'): stored, but the collection's ontology rejects "
                                     "it: unknown_relation: 'knows' is not a relation of the ontology")]
        ada = await kg.query("What does Ada know?")
        assert ada.facts == [] and [r.fact.text for r in ada.rejected] == ["Ada knows Carol"]
        assert ada.rejected[0].reasons[0].startswith("unknown_relation")
        bad_ontology = await client.request(t.TRIPLES_LOAD, LoadTriples(ontology={"classes": {"A": "B", "B": "A"}}),
                                            IngestResult, timeout=30)
        assert bad_ontology.error is not None and "cycle" in bad_ontology.error.message
    # A new kg-query replica replays the log: the graph survived its processes.
    async with kg_processors(f"memory://{tmp_path.name}-again", tmp_path, monkeypatch) as client:
        await check_questions(client)


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_load_then_query_against_a_real_broker(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    # A broker outlives a test and a new consumer group reads its topic from the start: a
    # collection of this test's own keeps earlier tests' triples-load messages out of its graph.
    collection = f"kg-{uuid.uuid4().hex[:8]}"
    async with kg_processors(url, tmp_path, monkeypatch, bus_settings=settings_for_tests()) as client:
        await load_sample(client, collection)
        await check_questions(client, collection)


def test_graph_files_in_jsonl_csv_and_ntriples_are_read_with_bad_lines_reported(tmp_path):
    jsonl = tmp_path / "g.jsonl"
    jsonl.write_text("\n".join([
        json.dumps({"kind": "entity", "id": "ada", "name": "Ada", "aliases": ["Lovelace"]}),
        json.dumps({"head": "ada", "relation": "knows", "tail": "bob", "valid_from": "1833"}),
        json.dumps({"head": "ada", "relation": "knows", "tail": "bob", "valid_untill": "1840"}),
        "not json",
        json.dumps(["a", "list"]),
        json.dumps({"kind": "rule", "id": "x"}),
        "",
    ]), encoding="utf-8")
    bad: list[str] = []
    items = list(read_items(jsonl, bad))
    assert items == [Entity(id="ada", name="Ada", aliases=["Lovelace"]), Fact("ada", "knows", "bob", "1833")]
    assert [b.split(": ")[0] for b in bad] == [f"{jsonl}:{n}" for n in (3, 4, 5, 6)]
    assert "valid_untill" in bad[0] and "kind must be" in bad[3]

    csv_file = tmp_path / "g.csv"
    csv_file.write_text("head,relation,tail,valid_from,source\nada,knows,bob,1833,letters\n"
                        "ada,,carol,,\nada,knows,dan,1833,x,extra\n", encoding="utf-8")
    bad = []
    items = list(read_items(csv_file, bad))
    assert items[0] == Fact("ada", "knows", "bob", "1833", source="letters")
    # A row with an empty relation, or more values than columns, is reported with its line.
    assert len(items) == 1 and len(bad) == 2
    assert f"{csv_file}:3:" in bad[0] and "relation" in bad[0]
    assert f"{csv_file}:4:" in bad[1] and "more values than columns" in bad[1]

    nt = tmp_path / "g.nt"
    nt.write_text('<http://ex.org/ada> <http://ex.org/rel#knows> <http://ex.org/bob> .\n'
                  '# a comment\n'
                  '<http://ex.org/ada> <http://ex.org/name> "Ada \\"the first\\""@en .\n'
                  'garbage line\n', encoding="utf-8")
    bad = []
    items = list(read_items(nt, bad))
    assert [(f.head, f.relation, f.tail) for f in items] == [
        ("ada", "knows", "bob"), ("ada", "name", 'Ada "the first"'),
    ]
    assert len(bad) == 1 and ":4:" in bad[0]

    with pytest.raises(ValueError, match="unknown graph format"):
        read_items(tmp_path / "g.xml", [])


def test_a_line_that_is_not_utf8_is_reported_and_the_rest_read_in_every_format(tmp_path):
    files = {
        "g.jsonl": b'{"head": "a", "relation": "r", "tail": "b"}\n{"head": "a\xff", "relation": "r", "tail": "c"}\n'
                   b'{"head": "a", "relation": "r", "tail": "\\ud800"}\n{"head": "a", "relation": "r", "tail": "d"}\n',
        "g.csv": b'head,relation,tail\na,r,b\na,r,\xe9t\xe9\n"a\nb",r,"\xc3"\na,r,d\n',
        "g.nt": b"<a> <r> <b> .\n<a> <r> <\xfe> .\n<a> <r> \"\\ud800\" .\n<a> <r> <d> .\n",
    }
    expected = {"g.jsonl": [":2: not UTF-8: byte 0xFF at character 12", ":3: a lone surrogate (U+D800) is not text"],
                "g.csv": [":3: not UTF-8: byte 0xE9", ":5: not UTF-8: byte 0xC3"],
                "g.nt": [":2: not UTF-8: byte 0xFE at character 10", ":3: a lone surrogate (U+D800) is not text"]}
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        bad: list[str] = []
        assert [f.tail for f in read_items(path, bad)] == ["b", "d"], name
        assert len(bad) == 2 and all(b.startswith(f"{path}{e}") for b, e in zip(bad, expected[name], strict=True)), bad
    (tmp_path / "h.csv").write_bytes(b"head,relation,t\xffail\na,r,b\n")
    bad = []
    assert list(read_items(tmp_path / "h.csv", bad)) == []
    assert bad == [f"{tmp_path / 'h.csv'}:1: the header is not UTF-8: byte 0xFF at character 16"]


def test_a_line_without_kind_must_look_like_a_fact_to_be_one(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"id": "ada", "name": "Ada"}\n{"head": "ada", "relation": "knows"}\n'
                    '{"kind": "entity", "id": "ada"}\n{"tail": "bob", "relation": "knows", "head": "ada"}\n')
    bad: list[str] = []
    assert list(read_items(path, bad)) == [Entity(id="ada"), Fact("ada", "knows", "bob")]
    assert bad == [(f'{path}:1: no "kind": a line must say "kind": "entity" or "fact", or have head, relation and '
                    "tail to be a fact"), f"{path}:2: Object missing required field `tail`"]


def _ragbus(*args: str, data_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGBUS_DATA_DIR": str(data_dir), "RAGBUS_BUS__URL": "memory://"}
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], check=False, capture_output=True,
                          text=True,
                          env=env, timeout=120)


def test_the_kg_commands_load_the_sample_and_answer_in_another_process(tmp_path):
    loaded = _ragbus("kg", "load", data_dir=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert "sent 107 item(s), stored 107, rejected 0" in loaded.stderr and "107/107" in loaded.stderr
    asked = _ragbus("kg", "query", "Who was UK prime minister?", "--at", "2016-01-01", "--json", data_dir=tmp_path)
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    assert answer["entities"] == ["United Kingdom"]
    assert answer["facts"][0]["text"] == "David Cameron head_of_government_of United Kingdom"
    shown = _ragbus("kg", "query", "Soviet Union", "--at", "1991-01-01", data_dir=tmp_path)
    assert "Mikhail Gorbachev head_of_state_of Soviet Union [1990-03-15, 1991-12-25)" in shown.stdout
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text('{"head": "a", "relation": "r", "tail": "b", "valid_from": "someday"}\n{oops\n')
    refused = _ragbus("kg", "load", str(bad_file), data_dir=tmp_path)
    assert refused.returncode == 1
    assert "bad.jsonl:2" in refused.stderr and "'someday' is not an ISO 8601" in refused.stderr
    wrong_time = _ragbus("kg", "query", "Germany", "--at", "soon", data_dir=tmp_path)
    assert wrong_time.returncode == 2 and "argument --at: 'soon' is not an ISO 8601" in wrong_time.stderr
    assert "Traceback" not in wrong_time.stderr  # refused by the command line, not by the worker


def test_loading_the_same_graph_twice_is_a_no_op_that_says_so(tmp_path):
    first = _ragbus("kg", "load", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    log = tmp_path / "default" / "graph" / "log"
    size = log.stat().st_size
    again = _ragbus("kg", "load", data_dir=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "duplicate" not in again.stderr
    assert "sent 107 item(s), stored 0, rejected 0, unchanged 107" in again.stderr
    assert "nothing new" in again.stderr
    assert log.stat().st_size == size  # nothing appended: the reload changed nothing
    # Other content under a declared id is still refused.
    clash = tmp_path / "clash.jsonl"
    clash.write_text('{"kind": "entity", "id": "Germany", "type": "City"}\n')
    refused = _ragbus("kg", "load", str(clash), data_dir=tmp_path)
    assert refused.returncode == 1 and "duplicate entity id 'Germany' with other content" in refused.stderr


def test_loading_facts_the_collections_ontology_rejects_warns_at_load(tmp_path):
    assert _ragbus("kg", "load", data_dir=tmp_path).returncode == 0  # the sample, with its ontology
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"head": "Ada Lovelace", "relation": "worked_with", "tail": "Charles Babbage"}\n'
                    '{"head": "Berlin", "relation": "capital_of", "tail": "Germany", "source": "mine"}\n')
    loaded = _ragbus("kg", "load", str(mine), data_dir=tmp_path)
    assert loaded.returncode == 0, loaded.stderr  # stored: the ontology may yet change
    warnings = [line for line in loaded.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2, loaded.stderr
    assert "'Ada Lovelace worked_with Charles Babbage'" in warnings[0] and "unknown_relation" in warnings[0]
    assert f"warning: {mine}:1: fact ('Ada Lovelace" in warnings[0]  # the line, not the index in a batch
    assert "1 fact(s) stored that the collection's ontology rejects" in warnings[1] and "--ontology" in warnings[1]
    asked = _ragbus("kg", "query", "Ada Lovelace", "--json", data_dir=tmp_path)
    assert [r["fact"]["text"] for r in json.loads(asked.stdout)["rejected"]] == [
        "Ada Lovelace worked_with Charles Babbage"]  # what the load warned of


def test_items_of_a_sample_line_and_of_the_store_agree():
    # Every sample fact's ends are declared entities with a type the ontology knows.
    items = list(read_items(SAMPLE_GRAPH, []))
    entities = {i.id: i for i in items if isinstance(i, Entity)}
    ontology = read_ontology(SAMPLE_ONTOLOGY)
    for fact in (i for i in items if isinstance(i, Fact)):
        assert fact.head in entities and fact.tail in entities, fact
        assert entities[fact.head].type in ontology["classes"] and fact.relation in ontology["relations"]
