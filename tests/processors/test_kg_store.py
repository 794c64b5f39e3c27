"""The graph store and its log: real networkx graphs and files in tmp_path, no mocks."""

from __future__ import annotations

import pytest

from ragbus.kg.files import SAMPLE_GRAPH, SAMPLE_ONTOLOGY, read_items, read_ontology
from ragbus.kg.ontology import OntologyError
from ragbus.kg.store import GraphStore, load_log
from ragbus.stores.graph_log import GraphLog, stamped
from ragbus.stores.layout import graph_path
from ragbus.schema import Entity, Fact, LoadTriples
from ragbus.schema.times import parse_instant

ONTOLOGY = {
    "classes": {"Thing": "", "Person": "Thing", "Place": "Thing", "City": "Place"},
    "relations": {"lives_in": {"domain": "Person", "range": "Place", "irreflexive": True}},
    "disjoint": [["Person", "Place"]],
}


def at(text: str):
    return parse_instant(text)


def texts(result) -> list[str]:
    return [f.text for f in result.facts]


def sample_store() -> GraphStore:
    items = list(read_items(SAMPLE_GRAPH, bad := []))
    assert bad == []
    store = GraphStore()
    result = store.apply(LoadTriples(
        entities=[i for i in items if isinstance(i, Entity)],
        facts=[i for i in items if isinstance(i, Fact)],
        ontology=read_ontology(SAMPLE_ONTOLOGY),
    ))
    assert result.rejected == [] and result.count == len(items)
    return store


@pytest.fixture(scope="module")
def sample():
    return sample_store()


def test_the_sample_graph_answers_who_held_an_office_at_a_time(sample):
    found = sample.query("Who was chancellor of Germany?", at_time=at("2010-06-01"))
    assert found.entities == ["Germany"]
    assert texts(found) == ["Angela Merkel head_of_government_of Germany", "Berlin capital_of Germany"]
    assert found.facts[0].source == "sample:offices" and found.facts[0].valid_from == "2005-11-22"
    # The day a term ends is the successor's first day: intervals are half-open.
    assert "Olaf Scholz head_of_government_of Germany" in texts(sample.query("Germany", at_time=at("2021-12-08")))
    assert "Angela Merkel head_of_government_of Germany" not in texts(sample.query("Germany", at_time=at("2021-12-08")))
    assert "Bonn capital_of Germany" in texts(sample.query("Germany", at_time=at("1990-10-02T23:59:59Z")))


def test_without_a_time_every_current_fact_is_returned_in_store_order(sample):
    found = sample.query("Germany", limit=100)
    chancellors = [t for t in texts(found) if "head_of_government_of" in t]
    assert chancellors == [f"{p} head_of_government_of Germany" for p in
                           ["Helmut Kohl", "Gerhard Schröder", "Angela Merkel", "Olaf Scholz", "Friedrich Merz"]]
    assert len(sample.query("Germany", limit=3).facts) == 3
    assert sample.query("Germany", limit=0).facts == []


def test_an_entity_outside_its_lifetime_is_not_linked_and_takes_its_facts_along(sample):
    assert texts(sample.query("capital of the USSR", at_time=at("1980"))) == ["Moscow capital_of Soviet Union"]
    gone = sample.query("capital of the USSR", at_time=at("2000"))
    assert gone.entities == [] and gone.facts == []
    # Moscow itself is still linked in 2000, but its fact touches the dissolved Soviet Union.
    assert sample.query("Moscow", at_time=at("2000")).facts == []
    assert sample.query("Queen Elizabeth II and the UK", at_time=at("2023")).entities == ["United Kingdom"]


def test_as_of_answers_what_was_believed_then_about_another_time(sample):
    # Recorded in 2020, Merkel's term was open-ended: then, we believed she would still lead in 2023.
    believed = sample.query("Who leads Germany?", at_time=at("2023-01-01"), as_of=at("2020-01-01"))
    assert "Angela Merkel head_of_government_of Germany" in texts(believed)
    assert believed.facts[0].valid_until is None and believed.facts[0].recorded_at == "2005-11-22T00:00:00Z"
    now = sample.query("Who leads Germany?", at_time=at("2023-01-01"))
    assert "Olaf Scholz head_of_government_of Germany" in texts(now)
    assert "Angela Merkel head_of_government_of Germany" not in texts(now)
    # Before the store knew of Merz at all, no version of his fact is visible.
    assert not any("Merz" in t for t in texts(sample.query("Germany", as_of=at("2024"), limit=100)))


def test_aliases_and_names_link_to_the_entity_id(sample):
    assert sample.query("what did the USSR do").entities == ["Soviet Union"]
    assert sample.query("Wer ist Schröder?").entities == ["Gerhard Schröder"]
    assert sample.query("Tell us about Guido and Python").entities == ["Guido van Rossum", "Python"]


def test_a_revision_supersedes_and_the_old_version_stays_queryable():
    store = GraphStore()
    store.apply(LoadTriples(facts=[Fact("ada", "lives_in", "paris", "2020", id="f1")]), now=at("2021"))
    # Other content under the id, stamped by the store: a revision recorded then, in the log as such.
    moved_out = Fact("ada", "lives_in", "paris", "2020", "2022", id="f1")
    revised = store.apply(LoadTriples(facts=[moved_out]), now=at("2023"))
    assert (revised.count, revised.rejected) == (1, [])
    assert revised.log is not None and [f.recorded_at for f in revised.log.facts] == ["2023-01-01T00:00:00Z"]
    assert [(f.valid_until, f.recorded_at) for f in store.query("ada").facts] == [("2022", "2023-01-01T00:00:00Z")]
    assert [f.valid_until for f in store.query("ada", as_of=at("2022")).facts] == [None]
    assert store.query("ada", as_of=at("2020")).facts == []
    # A revision recorded between two others slots in between, whatever order it arrives in.
    store.apply(LoadTriples(facts=[Fact("ada", "lives_in", "paris", "2019", id="f1", recorded_at="2022")]))
    assert [f.valid_from for f in store.query("ada", as_of=at("2022-06")).facts] == ["2019"]
    assert [f.valid_from for f in store.query("ada", as_of=at("2021-06")).facts] == ["2020"]
    assert [f.valid_from for f in store.query("ada").facts] == ["2020"]


def test_a_batch_keeps_an_ids_first_fact_the_store_stamps_and_every_dated_version():
    batch = LoadTriples(facts=[
        Fact("ada", "lives_in", "paris", id="f1"),
        Fact("ada", "lives_in", "rome", id="f1"),
        Fact("ada", "lives_in", "paris", id=" f1 "),  # the same statement, and still given twice
        Fact("ada", "lives_in", "london", id="f1", recorded_at="2000"),  # a dated version is one of its own
        Fact("ada", "lives_in", "berlin", id="f1", recorded_at="2001"),
    ])
    twice = ["fact 1 ('ada lives_in rome'): fact id 'f1' is given twice in this batch; fact 0 is kept",
             "fact 2 ('ada lives_in paris'): fact id 'f1' is given twice in this batch; fact 0 is kept"]
    store = GraphStore()
    first = store.apply(batch, now=at("2023"))
    assert (first.count, first.rejected) == (3, twice)
    assert first.log is not None and [f.tail for f in first.log.facts] == ["paris", "london", "berlin"]
    # Sent again, the same decision: the first is unchanged and the second is no revision of it.
    again = store.apply(batch, now=at("2024"))
    assert (again.count, again.unchanged, again.rejected, again.log) == (0, 3, twice, None)
    assert [f.tail for f in store.query("ada").facts] == ["paris"]
    assert [f.tail for f in store.query("ada", as_of=at("2000-06")).facts] == ["london"]
    assert [f.tail for f in store.query("ada", as_of=at("2022")).facts] == ["berlin"]


def test_loading_the_same_facts_again_changes_nothing():
    store = sample_store()
    versions = len(store)
    items = list(read_items(SAMPLE_GRAPH, []))
    again = store.apply(LoadTriples(facts=[i for i in items if isinstance(i, Fact)]), now=at("2030"))
    assert again.count == 0 and again.unchanged == 62 and again.rejected == [] and len(store) == versions


def test_reloading_the_sample_is_a_no_op_that_counts_everything_unchanged():
    store = sample_store()
    def declared():
        return [(n.id, n.name, n.type, n.aliases, n.valid_from, n.valid_until) for n in store.nodes.values()]

    versions, nodes = len(store), declared()
    items = list(read_items(SAMPLE_GRAPH, []))
    again = store.apply(LoadTriples(
        entities=[i for i in items if isinstance(i, Entity)],
        facts=[i for i in items if isinstance(i, Fact)],
        ontology=read_ontology(SAMPLE_ONTOLOGY),
    ), now=at("2030"))
    assert (again.count, again.unchanged, again.rejected) == (0, len(items), [])
    assert not again.ontology_changed and again.warnings == []
    assert len(store) == versions and declared() == nodes
    # The same id with other content is still refused, and the first declaration kept.
    other = store.apply(LoadTriples(entities=[Entity(id="Germany", name="Deutschland", type="Country")]))
    assert other.count == other.unchanged == 0
    assert other.rejected == [("entity 0 ('Germany'): duplicate entity id 'Germany' with other content: "
                               "the first declaration is kept")]
    assert store.nodes["Germany"].name == "Germany"


def test_facts_the_collections_ontology_rejects_are_stored_with_a_warning():
    store = GraphStore()
    first = store.apply(LoadTriples(ontology=ONTOLOGY, entities=[Entity(id="ada", type="Person")]))
    assert first.ontology_changed and first.warnings == []
    # A later batch without an ontology is checked against the collection's.
    later = store.apply(LoadTriples(facts=[Fact("ada", "admires", "bob"), Fact("ada", "lives_in", "paris")]))
    assert later.count == 2 and later.rejected == []
    assert later.warnings == [("fact 0 ('ada admires bob'): stored, but the collection's ontology rejects it: "
                               "unknown_relation: 'admires' is not a relation of the ontology")]
    assert [r.fact.text for r in store.query("ada").rejected] == ["ada admires bob"]  # as warned
    # Reloading the batch warns again: the facts are no more usable than the first time.
    again = store.apply(LoadTriples(facts=[Fact("ada", "admires", "bob")]))
    assert again.unchanged == 1 and len(again.warnings) == 1
    # Without an ontology there is nothing to break.
    assert GraphStore().apply(LoadTriples(facts=[Fact("ada", "admires", "bob")])).warnings == []


def test_bad_items_are_reported_and_the_rest_of_the_batch_is_kept():
    store = GraphStore()
    result = store.apply(LoadTriples(
        entities=[
            Entity(id="ada", name="Ada Lovelace", type="Person"),
            Entity(id="ada", name="Another Ada", type="Place"),
            Entity(id="  "),
            Entity(id="nameless"),
            Entity(id="old", valid_from="2020", valid_until="2010"),
        ],
        facts=[
            Fact("ada", "lives_in", "london", "1815-12-10", "1852-11-27"),
            Fact("", "lives_in", "x"),
            Fact("ada", "lives_in", "paris", "not a date"),
            Fact("ada", "lives_in", "rome", "2020-01-01", "2019-01-01"),
            Fact("ada", "knows", "bob", id="k", recorded_at="2020"),
            Fact("ada", "knows", "carol", id="k", recorded_at="2020"),
            Fact("ada", "knows", "dan", valid_from=True),  # type: ignore[arg-type]
        ],
    ))
    reasons = "\n".join(result.rejected)
    assert result.count == 4  # ada, nameless, the london fact, the first version of k
    assert len(result.rejected) == 8
    for expected in ["entity 1 ('ada'): duplicate entity id 'ada' with other content: the first declaration is kept",
                     "entity 2", "non-empty id", "entity 4 ('old'): inverted interval", "fact 1", "empty head",
                     "fact 2", "'not a date' is not an ISO 8601", "fact 3", "inverted interval",
                     "fact 5", "duplicate fact 'k'", "fact 6", "got True"]:
        assert expected in reasons, expected
    assert store.nodes["ada"].name == "Ada Lovelace" and store.nodes["ada"].type == "Person"
    assert store.query("nameless").entities == ["nameless"]  # no name: the id is the name
    assert texts(store.query("Ada Lovelace")) == ["Ada Lovelace lives_in london", "Ada Lovelace knows bob"]


def test_the_ontology_rejects_facts_at_query_time_with_their_reasons():
    store = GraphStore()
    store.apply(LoadTriples(
        ontology=ONTOLOGY,
        entities=[Entity(id="ada", type="Person"), Entity(id="paris", type="City"), Entity(id="bob", type="Person")],
        facts=[Fact("ada", "lives_in", "paris"), Fact("ada", "lives_in", "bob"), Fact("ada", "admires", "bob"),
               Fact("paris", "lives_in", "paris"), Fact("ada", "lives_in", "somewhere")],
    ))
    found = store.query("ada and paris", limit=10)
    assert texts(found) == ["ada lives_in paris", "ada lives_in somewhere"]  # untyped: unconstrained
    rejected = {r.fact.text: r.reasons for r in found.rejected}
    assert set(rejected) == {"ada lives_in bob", "ada admires bob", "paris lives_in paris"}
    assert rejected["ada lives_in bob"][0].startswith("range_violation")
    assert rejected["ada admires bob"][0].startswith("unknown_relation")
    assert {r.split(":")[0] for r in rejected["paris lives_in paris"]} >= {"domain_violation", "irreflexive_violation"}


def test_a_bad_ontology_refuses_the_whole_batch():
    store = GraphStore()
    with pytest.raises(OntologyError, match="cycle"):
        store.apply(LoadTriples(ontology={"classes": {"A": "B", "B": "A"}}, facts=[Fact("a", "r", "b")]))
    assert len(store) == 0 and store.ontology is None


def test_a_cycle_in_the_facts_is_just_a_graph(sample):
    store = GraphStore()
    store.apply(LoadTriples(facts=[Fact("a", "next", "b"), Fact("b", "next", "c"), Fact("c", "next", "a"),
                                   Fact("a", "same", "a")]))
    assert texts(store.query("a", limit=10)) == ["a next b", "c next a", "a same a"]


def test_readers_rebuild_the_store_from_the_log_and_follow_it(tmp_path):
    path = graph_path(tmp_path, "default")
    writer_store, writer_log = GraphStore(), GraphLog(path)
    writer_log.open_for_append(writer_store)
    items = list(read_items(SAMPLE_GRAPH, []))
    first = stamped(LoadTriples(entities=[i for i in items if isinstance(i, Entity)],
                                ontology=read_ontology(SAMPLE_ONTOLOGY)), at("2030"))
    writer_store.apply(first)
    writer_log.append(first)

    reader, reader_log = load_log(path)
    assert len(reader.nodes) == len(writer_store.nodes) and reader.ontology is not None
    assert reader_log.catch_up(reader) == 0  # nothing new

    second = stamped(LoadTriples(facts=[i for i in items if isinstance(i, Fact)]), at("2030"))
    writer_store.apply(second)
    writer_log.append(second)
    assert reader_log.catch_up(reader) == 1
    question = "Who led France?"
    assert texts(reader.query(question, at_time=at("2010"))) == texts(writer_store.query(question, at_time=at("2010")))
    assert texts(reader.query(question, at_time=at("2010"))) == ["Nicolas Sarkozy head_of_state_of France",
                                                                 "Paris capital_of France"]


def test_a_torn_last_record_is_waited_for_by_readers_and_cut_by_the_next_writer(tmp_path):
    path = graph_path(tmp_path, "c1")
    store, log = GraphStore(), GraphLog(path)
    log.open_for_append(store)
    batch = LoadTriples(facts=[Fact("ada", "knows", "bob", recorded_at="2020")])
    log.append(batch)
    good = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b"\x00\x00\x10\x00partial")  # a writer died mid-append
    reader, _ = load_log(path)
    assert len(reader) == 1
    again, again_log = GraphStore(), GraphLog(path)
    again_log.open_for_append(again)
    assert path.stat().st_size == good and len(again) == 1
    again_log.append(LoadTriples(facts=[Fact("bob", "knows", "carol", recorded_at="2020")]))
    assert len(load_log(path)[0]) == 2


async def test_a_batch_the_log_could_not_take_is_applied_again_on_retry(tmp_path, monkeypatch):
    from ragbus.kg import KgSettings, KgStoreProcessor
    from ragbus.stores.graph_log import GraphLog as Log
    from ragbus.runtime.processor import RequestContext

    writer = KgStoreProcessor("kg-store", KgSettings(topic="t", group="g", data_dir=str(tmp_path)))
    await writer.start()
    try:
        real_append = Log.append
        calls = []

        def full_disk(self, batch):
            calls.append(batch)
            if len(calls) == 1:
                raise OSError(28, "No space left on device")
            real_append(self, batch)

        monkeypatch.setattr(Log, "append", full_disk)
        batch = LoadTriples(facts=[Fact("ada", "knows", "bob")])
        context = RequestContext(envelope=None, topic="t", delivery_attempt=1)  # type: ignore[arg-type]
        with pytest.raises(OSError):
            await writer.handle(batch, context)
        again = await writer.handle(batch, context)  # the bus redelivers it
        assert again.count == 1  # applied anew, not taken for "already held"
    finally:
        await writer.close()
    assert texts(load_log(graph_path(tmp_path, "default"))[0].query("ada")) == ["ada knows bob"]


# --- retraction: a deleted document's facts --------------------------------------------------------------


def test_deleting_a_document_retracts_its_facts_as_a_recorded_event(tmp_path):
    path = graph_path(tmp_path, "default")
    store, log = GraphStore(), GraphLog(path)
    log.open_for_append(store)

    def apply(batch: LoadTriples, now: str):
        batch = stamped(batch, at(now))
        result = store.apply(batch)
        log.append(batch)
        return result

    apply(LoadTriples(facts=[
        Fact("Heron", "made_by", "Acme", source="/docs/heron.pdf", chunk_id="/docs/heron.pdf#0"),
        Fact("Heron", "sold_in", "Norway", source="/docs/heron.pdf"),
        Fact("Heron", "rated", "IP54", source="/docs/other.pdf"),
        Fact("Heron", "launched_in", "2024"),
    ]), "2025-01-01")
    gone = apply(LoadTriples(retract_sources=["/docs/heron.pdf"]), "2025-06-01")
    assert gone.retracted == 2 and gone.count == 0
    assert texts(store.query("Heron")) == ["Heron rated IP54", "Heron launched_in 2024"]
    # Believed before the deletion: as_of then still shows them; as_of after does not.
    assert texts(store.query("Heron", as_of=at("2025-03-01"))) == [
        "Heron made_by Acme", "Heron sold_in Norway", "Heron rated IP54", "Heron launched_in 2024"]
    assert "Heron made_by Acme" not in texts(store.query("Heron", as_of=at("2025-07-01")))
    # Retracting again retracts nothing: a repeated delete is harmless.
    assert apply(LoadTriples(retract_sources=["/docs/heron.pdf"]), "2025-06-02").retracted == 0
    # The log rebuilds the same beliefs, in time as now.
    replayed, _ = load_log(path)
    assert texts(replayed.query("Heron")) == texts(store.query("Heron"))
    assert texts(replayed.query("Heron", as_of=at("2025-03-01"))) == texts(store.query("Heron", as_of=at("2025-03-01")))
    # The document ingested and its facts loaded again: believed again, from then on only.
    again = apply(LoadTriples(facts=[Fact("Heron", "made_by", "Acme", source="/docs/heron.pdf",
                                          chunk_id="/docs/heron.pdf#0")]), "2026-01-01")
    assert again.count == 1 and again.unchanged == 0
    assert "Heron made_by Acme" in texts(store.query("Heron"))
    assert "Heron made_by Acme" not in texts(store.query("Heron", as_of=at("2025-09-01")))
    assert "Heron made_by Acme" in texts(store.query("Heron", as_of=at("2025-03-01")))


def test_an_empty_interval_or_a_control_character_is_refused_with_why():
    store = GraphStore()
    result = store.apply(LoadTriples(
        entities=[Entity(id="ada\x00"), Entity(id="bob", name="B\x7fob"), Entity(id="cy", aliases=["C\u0085y"]),
                  Entity(id="gone", valid_from="2020", valid_until="2020-01-01"), Entity(id="ada", type="Person")],
        facts=[Fact("ada", "knows", "bob", "2020-01-01", "2020"), Fact("ada", "kn\tows", "bob"),
               Fact("ada", "knows", "bob", id="k\x1b"), Fact("ada", "knows", "bob", source="d\u009b"),
               Fact("ada", "knows", "bob\ud800"), Fact("ada", "knows", "bob", "2020", "2019"),
               Fact("ada", "knows", "bob", "2020", "2021")],
    ))
    assert result.count == 2 and len(store) == 1 and [e for e in store.nodes] == ["ada", "bob"]
    reasons = result.rejected
    assert len(reasons) == 10
    for reason, expected in zip(reasons, [
        "entity 0 ('ada\\x00'): id 'ada\\x00' holds a control character (U+0000) at position 3",
        "entity 1 ('bob'): name 'B\\x7fob' holds a control character (U+007F) at position 1",
        "entity 2 ('cy'): alias 'C\\x85y' holds a control character (U+0085)",
        "entity 3 ('gone'): empty interval: valid_until equals valid_from (2020-01-01T00:00:00Z)",
        "fact 0 ('ada knows bob'): empty interval",
        "fact 1 ('ada kn\\tows bob'): relation 'kn\\tows' holds a control character (U+0009)",
        "fact 2 ('ada knows bob'): id 'k\\x1b' holds a control character (U+001B)",
        "fact 3 ('ada knows bob'): source 'd\\x9b' holds a control character (U+009B)",
        "fact 4 ('ada knows bob\\ud800'): tail 'bob\\ud800' holds a lone surrogate (U+D800)",
        "fact 5 ('ada knows bob'): inverted interval",
    ], strict=True):
        assert reason.startswith(expected), (reason, expected)
    assert "ids, names and relations must be printable text" in reasons[0]
    assert result.log is not None and result.log.facts == [Fact("ada", "knows", "bob", "2020", "2021",
                                                                  recorded_at=result.log.facts[0].recorded_at)]
