"""Reloading a graph file is a no-op, whatever its bad and duplicate lines and however it is batched.

Real kg-store and kg-query processors on the memory bus, the real ``ragbus kg`` command in a process
of its own, the graph read back by replaying its log as a query replica would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from ragbus.kg.files import load_graph
from ragbus.kg.store import load_log
from ragbus.stores.layout import graph_path
from ragbus.runtime.typed_clients import KgClient
from ragbus.schema.times import iso, parse_instant

from ..helpers.kg_pipeline import kg_processors

GOOD = [
    {"kind": "entity", "id": "Atlantis", "type": "Country"},
    {"kind": "entity", "id": "Poseidon", "name": "Poseidon", "aliases": ["Neptune"]},
    {"kind": "entity", "id": "Atlantis", "type": "Country"},  # again, identical: unchanged
    {"kind": "fact", "id": "f5", "head": "Poseidon", "relation": "head_of_state_of", "tail": "Atlantis",
     "valid_from": "1000-01-01", "source": "t"},
    {"head": "Poseidon", "relation": "rules", "tail": "Atlantis", "source": ""},  # no kind, no id
    {"head": "Poseidon", "relation": "rules", "tail": "Atlantis"},  # the same statement: no source is no source
    # A revision dated by the file itself: both versions are kept, the later believed.
    {"id": "f7", "head": "Atlantis", "relation": "capital", "tail": "Poseidonia", "recorded_at": "2000"},
    {"id": "f7", "head": "Atlantis", "relation": "capital", "tail": "Basileia", "recorded_at": "2001"},
]
BAD = [  # (line, what the reason says)
    ({"kind": "entity", "id": "Atlantis", "type": "City"}, "duplicate entity id 'Atlantis' with other content"),
    ({"kind": "fact", "id": "f5", "head": "Poseidon", "relation": "ruler_of", "tail": "Atlantis",
      "valid_from": "1000-01-01", "source": "t"}, "fact id 'f5' is given twice in this load; line 4 is kept"),
    # The very statement of line 4 under the same id: still given twice in one load.
    ({"kind": "fact", "id": " f5", "head": "Poseidon", "relation": "head_of_state_of", "tail": "Atlantis",
      "valid_from": "1000-01-01", "source": "t"}, "fact id 'f5' is given twice in this load; line 4 is kept"),
    ({"id": "f7", "head": "Atlantis", "relation": "capital", "tail": "Atlantis City", "recorded_at": "2001"},
     "another version is recorded at 2001-01-01T00:00:00Z"),
    ({"id": "Kraken", "name": "Kraken"}, 'no "kind": a line must say "kind": "entity" or "fact"'),
    ({"head": "Poseidon", "relation": "rules", "tail": "Lemuria", "valid_from": "1000", "valid_until": "1000"},
     "empty interval"),
    ({"head": "Poseidon", "relation": "rules", "tail": "Mu", "valid_from": "1000", "valid_until": "0900"},
     "inverted interval"),
    ({"head": "Posei\x00don", "relation": "rules", "tail": "Mu"}, "holds a control character (U+0000)"),
    ({"kind": "entity", "id": "Tri\x1b[31mton"}, "holds a control character (U+001B)"),
    ({"head": " ", "relation": "rules", "tail": "Mu"}, "empty head"),
    ({"head": "Poseidon", "relation": "rules", "tail": "Mu", "valid_from": "someday"}, "'someday' is not an ISO"),
    ({"head": "Poseidon", "relation": "rules", "tal": "Mu"}, "tal"),
    ({"kind": "rule", "id": "x"}, "kind must be"),
]


def write_file(path) -> list[bytes]:
    """The file: good lines, then bad ones, then lines no JSON reader takes; the bad lines' bytes."""
    bad = [json.dumps(item).encode() for item, _ in BAD]
    lines = [json.dumps(item).encode() for item in GOOD] + bad  # a duplicate after the line it duplicates
    lines += [b"{oops", b"[1, 2]", b"", b'{"head": "Poseidon", "relation": "rules", "tail": "\xffMu"}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    return bad


def graph_content(data_dir) -> tuple:
    """Everything the collection holds, read back from its log as a new query replica would."""
    store, _ = load_log(graph_path(data_dir, "default"))
    facts = [(v.fact, v.superseded, v.retracted) for v in store.versions]
    nodes = sorted((n.id, n.name, n.type, n.aliases, n.valid_from, n.valid_until, n.declared)
                   for n in store.nodes.values())
    return facts, nodes


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
async def test_reloading_a_file_of_bad_and_duplicate_lines_changes_nothing(batch_size, tmp_path, monkeypatch):
    graph = tmp_path / "atlantis.jsonl"
    write_file(graph)
    contents, summaries = [], []
    async with kg_processors(f"memory://{tmp_path.name}", tmp_path / "data", monkeypatch) as client:
        for _ in range(3):
            summary = await load_graph(client, graph, batch_size=batch_size)
            summaries.append({k: v for k, v in dataclasses.asdict(summary).items() if k != "seconds"})
            contents.append(graph_content(tmp_path / "data"))
    first, second, third = summaries
    assert first["stored"] == 6 and first["unchanged"] == 2  # Atlantis again, the blank-source statement
    assert second == third and second["stored"] == 0 and second["unchanged"] == first["stored"] + first["unchanged"]
    # Every load refuses the same lines for the same reasons: one decision, reported every time.
    assert first["rejected"] == second["rejected"]
    # Each refusal names its line, whether the reader or the store refused it, whatever the batch size.
    by_line = {}
    for rejection in first["rejected"]:
        where, _, reason = rejection.partition(": ")
        by_line[where] = reason
    assert len(by_line) == len(first["rejected"]) == len(BAD) + 3  # and {oops, [1, 2]
    for number, (_, expected) in enumerate(BAD, len(GOOD) + 1):
        assert expected in by_line[f"{graph}:{number}"], (number, expected, by_line)
    assert by_line[f"{graph}:{len(GOOD) + len(BAD) + 4}"] == "not UTF-8: byte 0xFF at character 52"
    assert contents[0] == contents[1] == contents[2]
    # Nothing any load refused is in the graph.
    facts, nodes = contents[0]
    said = {(f.head, f.relation, f.tail) for f, _, _ in facts}
    assert ("Poseidon", "ruler_of", "Atlantis") not in said and not any("Mu" in t or "Lemuria" in t for _, _, t in said)
    assert ("Atlantis", "capital", "Atlantis City") not in said and len(facts) == 4
    assert {n[0]: n[2] for n in nodes}["Atlantis"] == "Country" and "Kraken" not in {n[0] for n in nodes}
    assert [f.tail for f, superseded, _ in facts if f.id == "f7" and superseded is None] == ["Basileia"]


@pytest.mark.parametrize("batch_size", [1, 1000])
async def test_an_edited_fact_loaded_again_is_revised_and_the_old_version_stays_queryable(
    batch_size, tmp_path, monkeypatch
):
    graph = tmp_path / "atlantis.jsonl"
    lines = [{"kind": "entity", "id": "Atlantis"}, {"kind": "entity", "id": "Poseidon"},
             {"id": "f7", "head": "Atlantis", "relation": "capital", "tail": "Poseidonia"},
             {"id": "f8", "head": "Poseidon", "relation": "rules", "tail": "Atlantis"}]
    graph.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    async with kg_processors(f"memory://{tmp_path.name}", tmp_path / "data", monkeypatch) as client:
        kg = KgClient(client, timeout=30)
        first = await load_graph(client, graph, batch_size=batch_size)
        assert (first.stored, first.unchanged, first.rejected) == (4, 0, [])
        between = datetime.now(UTC)
        lines[2]["tail"] = "Basileia"  # the user edits the line, the id stays
        graph.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        second = await load_graph(client, graph, batch_size=batch_size)
        assert (second.stored, second.unchanged, second.rejected) == (1, 3, [])
        revised = graph_content(tmp_path / "data")
        now = [f.text for f in (await kg.query("Atlantis")).facts]
        then = [f.text for f in (await kg.query("Atlantis", as_of=iso(between))).facts]
        assert now == ["Poseidon rules Atlantis", "Atlantis capital Basileia"]
        assert then == ["Atlantis capital Poseidonia", "Poseidon rules Atlantis"]
        third = await load_graph(client, graph, batch_size=batch_size)
        assert (third.stored, third.unchanged, third.rejected) == (0, 4, [])
        assert graph_content(tmp_path / "data") == revised
    f7 = [(f.tail, f.recorded_at, superseded) for f, superseded, _ in revised[0] if f.id == "f7"]
    assert [tail for tail, _, _ in f7] == ["Poseidonia", "Basileia"]
    (_, recorded, superseded), (_, revised_at, still) = f7
    assert parse_instant(recorded) <= between < parse_instant(revised_at) == superseded and still is None


def _ragbus(*args: str, data_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGBUS_DATA_DIR": str(data_dir), "RAGBUS_BUS__URL": "memory://"}
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], check=False, capture_output=True,
                          text=True, env=env, timeout=120)


def test_the_kg_command_keeps_one_version_of_a_duplicated_fact_on_every_reload(tmp_path):
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(json.dumps(item) for item in [
        {"kind": "entity", "id": "Atlantis", "type": "Country"},
        {"kind": "entity", "id": "Poseidon", "type": "Person"},
        {"kind": "fact", "id": "f5", "head": "Poseidon", "relation": "head_of_state_of", "tail": "Atlantis",
         "valid_from": "1000-01-01", "source": "t"},
        {"kind": "fact", "id": "f5", "head": "Poseidon", "relation": "ruler_of", "tail": "Atlantis",
         "valid_from": "1000-01-01", "source": "t"},
    ]) + "\n", encoding="utf-8")
    loads, answers = [], []
    for _ in range(4):
        loaded = _ragbus("kg", "load", str(dup), data_dir=tmp_path / "data")
        assert loaded.returncode == 1, loaded.stderr  # a line was refused, every time
        loads.append([line for line in loaded.stderr.splitlines() if "rejected" in line])
        answers.append(_ragbus("kg", "query", "Atlantis", data_dir=tmp_path / "data").stdout)
    assert loads[0][0] == (f"  rejected: {dup}:4: fact ('Poseidon ruler_of Atlantis'): fact id 'f5' is given twice "
                           "in this load; line 3 is kept")
    assert loads[0][-1].startswith("sent 3 item(s), stored 3, rejected 1, unchanged 0")  # the second f5 is not sent
    assert all(load[0] == loads[0][0] for load in loads)
    assert all(load[-1].startswith("sent 3 item(s), stored 0, rejected 1, unchanged 3") for load in loads[1:])
    assert answers == [answers[0]] * 4 and "Poseidon head_of_state_of Atlantis" in answers[0]
    assert "ruler_of" not in answers[0]
