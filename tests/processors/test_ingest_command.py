"""`ragbus ingest` and `ragbus delete` as a user runs them, on the embedded bus."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ragbus.ingestion.convert import SUFFIXES

from ..helpers.documents_made import write_pdf
from ..helpers.scans_made import need_tesseract, pages_of

REPO = Path(__file__).resolve().parents[2]


def ragbus(*args: str, data_dir: Path, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAGBUS_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_ingest_reports_progress_and_a_summary_then_delete_removes_the_document(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "one.md").write_text("# One\n\nThe walrus operator := assigns inside an expression.")
    (docs / "two.txt").write_text("Generators yield values lazily, one at a time.")
    (docs / "bad.txt").write_bytes("déjà vu ".encode() + b"\xff broken")
    data = tmp_path / "data"
    run = ragbus("ingest", str(docs), data_dir=data)
    assert run.returncode == 1, run.stderr  # one file skipped
    assert "2 document(s), 2 chunk(s)" in run.stderr and "1 skipped" in run.stderr
    assert f"  skipped: {docs / 'bad.txt'}: not UTF-8" in run.stderr and "2/2" in run.stderr  # progress reached the end
    assert (data / "default" / "faiss").is_dir() and (data / "default" / "tantivy").is_dir()
    gone = ragbus("delete", str((docs / "one.md").resolve()), data_dir=data)
    assert gone.returncode == 0, gone.stderr
    assert "removed 1 chunk(s)" in gone.stderr


def test_a_folder_with_files_no_converter_reads_lists_each_and_fails(tmp_path):
    """A folder of unreadable files once reported `0 document(s)` and exited 0: now each file it could not read
    is listed with the reason, the readable ones are ingested, and it exits 1."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("The Osprey ferry leaves Bergen at seven.")
    (docs / "empty.md").write_text("")
    (docs / "slides.key").write_bytes(b"PK\x03\x04 a Keynote file")
    (docs / "latin1.txt").write_bytes("Crème brûlée is served after seven.".encode("latin-1"))
    run = ragbus("ingest", str(docs), str(tmp_path / "missing"), data_dir=tmp_path / "data")
    assert run.returncode == 1, run.stderr
    skipped = [line for line in run.stderr.splitlines() if line.startswith("  skipped: ")]
    assert skipped == [
        f"  skipped: {docs / 'empty.md'}: empty file",
        f"  skipped: {docs / 'slides.key'}: unsupported file type '.key'; ragbus reads {' '.join(SUFFIXES)}",
        f"  skipped: {tmp_path / 'missing'}: no such file or directory",
    ], run.stderr
    assert "2 document(s), 2 chunk(s)" in run.stderr and "3 skipped" in run.stderr and "Traceback" not in run.stderr


def test_delete_takes_the_path_a_document_was_ingested_by_and_fails_when_nothing_is_removed(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shipping.txt").write_text("Parcels ship within two working days; express parcels the same day.")
    (docs / "returns.txt").write_text("Returns are accepted within thirty days of delivery.")
    data = tmp_path / "data"
    run = ragbus("ingest", "docs/shipping.txt", "docs/returns.txt", data_dir=data, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # The relative path the user typed, from where it was typed; and another path to the other file.
    gone = ragbus("delete", "docs/shipping.txt", data_dir=data, cwd=tmp_path)
    assert gone.returncode == 0, gone.stderr
    assert f"docs/shipping.txt ({docs.resolve() / 'shipping.txt'}): removed 1 chunk(s)" in gone.stderr
    gone = ragbus("delete", "returns.txt", data_dir=data, cwd=docs)
    assert gone.returncode == 0 and "removed 1 chunk(s)" in gone.stderr, gone.stderr
    # Nothing left to remove, and an id never ingested: each named, and the command fails.
    again = ragbus("delete", "docs/shipping.txt", "pydoc:nonesuch", data_dir=data, cwd=tmp_path)
    assert again.returncode == 1, again.stderr
    assert (f"docs/shipping.txt ({docs.resolve() / 'shipping.txt'}): no such document in collection 'default'; "
            "nothing removed") in again.stderr
    assert "pydoc:nonesuch: no such document in collection 'default'; nothing removed" in again.stderr


def test_ingest_sends_a_file_larger_than_a_message_in_parts_and_shows_their_progress(tmp_path):
    """A file over the bus's max_message_bytes was once refused (or dead-lettered) whole: now it is sent in
    parts, with a line of progress for each."""
    import pydoc_data.topics

    corpus = "\n\n".join(text for _, text in sorted(pydoc_data.topics.topics.items()))
    big = tmp_path / "big.txt"
    big.write_text(corpus[:200_000] + "\n\nThe Skarvøy lighthouse was automated in 1987.")
    run = ragbus(
        "ingest", str(big), data_dir=tmp_path / "data",
        RAGBUS_BUS__MAX_MESSAGE_BYTES="60000",
        RAGBUS_PROCESSORS__DOCUMENT_LOAD__EMBED_BATCH="8",  # 8 vectors fit a 60 KB answer, 32 would not
        RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS="32",  # MiniLM on a short window: seconds, not minutes
        RAGBUS_CLIENT__PROGRESS_INTERVAL_S="0",  # stderr is a pipe: a line of progress for every part
    )
    assert run.returncode == 0, run.stderr
    sent = re.search(r"1 document\(s\), \d+ chunk\(s\) in [\d.]+s \(sent in (\d+) parts\)", run.stderr)
    assert sent is not None and int(sent[1]) >= 3, run.stderr
    assert "big part 2 (" in run.stderr and f"big part {sent[1]} (" in run.stderr  # progress per part


def test_delete_retracts_the_documents_graph_facts_and_as_of_before_still_shows_them(tmp_path):
    """`ragbus delete DOC` once left the facts whose source was DOC, served as evidence: now it retracts them,
    and a query as of before the delete still shows them."""
    from datetime import UTC, datetime

    docs = tmp_path / "docs"
    docs.mkdir()
    report = docs / "heron.txt"
    report.write_text("The Heron drone is made by Acme and sold in Norway.")
    data = tmp_path / "data"
    assert ragbus("ingest", str(report), data_dir=data).returncode == 0
    source = str(report.resolve())
    facts = tmp_path / "facts.jsonl"
    facts.write_text(
        f'{{"kind": "fact", "head": "Heron", "relation": "made_by", "tail": "Acme", "source": "{source}"}}\n'
        f'{{"kind": "fact", "head": "Heron", "relation": "sold_in", "tail": "Norway", "source": "{source}"}}\n'
        '{"kind": "fact", "head": "Heron", "relation": "rated", "tail": "IP54", "source": "sheet.pdf"}\n'
    )
    loaded = ragbus("kg", "load", str(facts), data_dir=data)
    assert loaded.returncode == 0, loaded.stderr
    before_delete = datetime.now(UTC).isoformat()
    gone = ragbus("delete", str(report), data_dir=data)
    assert gone.returncode == 0, gone.stderr
    assert "removed 1 chunk(s), retracted 2 graph fact(s)" in gone.stderr
    now = ragbus("kg", "query", "Heron", data_dir=data)
    assert "Heron rated IP54" in now.stdout and "made_by" not in now.stdout and "sold_in" not in now.stdout, now.stdout
    then = ragbus("kg", "query", "Heron", "--as-of", before_delete, data_dir=data)
    assert "Heron made_by Acme" in then.stdout and "Heron sold_in Norway" in then.stdout, then.stdout
    # Nothing is left of the document: a second delete says so and fails.
    again = ragbus("delete", str(report), data_dir=data)
    assert again.returncode == 1 and "nothing removed" in again.stderr, again.stderr


def test_a_delete_whose_graph_step_failed_is_finished_by_the_next_delete(tmp_path):
    """A delete whose graph step fails leaves a state the next `delete` repairs."""
    report = tmp_path / "heron.txt"
    report.write_text("The Heron drone is made by Acme.")
    data = tmp_path / "data"
    assert ragbus("ingest", str(report), data_dir=data).returncode == 0
    facts = tmp_path / "facts.jsonl"
    facts.write_text(f'{{"kind": "fact", "head": "Heron", "relation": "made_by", "tail": "Acme", '
                     f'"source": "{report.resolve()}"}}\n')
    assert ragbus("kg", "load", str(facts), data_dir=data).returncode == 0
    # The graph does not answer (its topic is wrong): the chunks go, the delete fails and says why.
    broken = ragbus("delete", str(report), data_dir=data,
                    RAGBUS_PROCESSORS__DOCUMENT_DELETE__RETRACT_TOPIC="triples-nowhere",
                    RAGBUS_PROCESSORS__DOCUMENT_DELETE__CALL_TIMEOUT_S="2")
    assert broken.returncode == 1 and "triples-nowhere" in broken.stderr, broken.stderr
    assert "Heron made_by Acme" in ragbus("kg", "query", "Heron", data_dir=data).stdout
    # The next delete finds no chunks left, retracts the facts, and succeeds.
    fixed = ragbus("delete", str(report), data_dir=data)
    assert fixed.returncode == 0, fixed.stderr
    assert "removed 0 chunk(s), retracted 1 graph fact(s)" in fixed.stderr
    assert "made_by" not in ragbus("kg", "query", "Heron", data_dir=data).stdout


def test_reingesting_an_unchanged_folder_embeds_nothing_and_vanished_files_are_reported_then_pruned(tmp_path):
    """Unchanged documents are skipped by content hash; vanished files are reported, then pruned on request;
    the listings show what is held."""
    import json

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.txt").write_text("The Osprey ferry leaves Bergen at seven.")
    (docs / "kettle.md").write_text("# Kettles\n\nAcme kettles carry a seven-year warranty.")
    (docs / "bus.txt").write_text("The night bus runs every forty minutes.")
    data = tmp_path / "data"
    first = ragbus("ingest", str(docs), data_dir=data)
    assert first.returncode == 0 and "3 document(s), 3 chunk(s)" in first.stderr, first.stderr
    listed = ragbus("documents", "--json", data_dir=data)
    assert listed.returncode == 0, listed.stderr
    held = {d["document_id"]: d for d in json.loads(listed.stdout)}
    assert set(held) == {str((docs / n).resolve()) for n in ("ferry.txt", "kettle.md", "bus.txt")}
    kettle = held[str((docs / "kettle.md").resolve())]
    assert (kettle["title"], kettle["chunks"], kettle["collection"]) == ("Kettles", 1, "default")
    assert kettle["content_hash"].startswith("sha256:") and kettle["ingested_at"]
    assert kettle["source"].endswith("kettle.md")

    # Unchanged: nothing is chunked or stored again (test_ingest counts that embed is not asked either).
    again = ragbus("ingest", str(docs), data_dir=data)
    assert again.returncode == 0, again.stderr
    assert "0 document(s), 0 chunk(s)" in again.stderr and "3 unchanged" in again.stderr, again.stderr
    assert json.loads(ragbus("documents", "--json", data_dir=data).stdout) == list(held.values())

    # One file changed, one gone: the changed one is stored again, the gone one reported, then pruned.
    (docs / "ferry.txt").write_text("The Osprey ferry now leaves Bergen at eight.")
    (docs / "bus.txt").unlink()
    changed = ragbus("ingest", str(docs), data_dir=data)
    assert changed.returncode == 0, changed.stderr
    assert "1 document(s), 1 chunk(s)" in changed.stderr and "1 unchanged" in changed.stderr, changed.stderr
    bus = (docs / "bus.txt").resolve()
    assert f"  vanished: {bus}: ingested before, no longer in its folder (--prune removes it)" in changed.stderr
    pruned = ragbus("ingest", "--prune", str(docs), data_dir=data)
    assert pruned.returncode == 0 and f"  pruned: {bus}: no longer in its folder; removed 1 chunk(s)" in pruned.stderr
    assert "2 unchanged" in pruned.stderr, pruned.stderr
    remaining = {d["document_id"] for d in json.loads(ragbus("documents", "--json", data_dir=data).stdout)}
    assert remaining == {str((docs / n).resolve()) for n in ("ferry.txt", "kettle.md")}

    # The same content cut into chunks of another size is not the same: it is stored again.
    resized = ragbus("ingest", str(docs), data_dir=data, RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_SIZE="500")
    assert resized.returncode == 0 and "2 document(s)" in resized.stderr and "unchanged" not in resized.stderr

    # Collections, and a whole collection deleted.
    other = ragbus("ingest", "--collection", "manuals", str(docs / "kettle.md"), data_dir=data)
    assert other.returncode == 0, other.stderr
    assert ragbus("collections", data_dir=data).stdout.split() == ["default", "manuals"]
    wiped = ragbus("delete", "--all", data_dir=data)
    assert wiped.returncode == 0 and "deleting all 2 document(s) of collection 'default'" in wiped.stderr, wiped.stderr
    assert json.loads(ragbus("documents", "--json", data_dir=data).stdout) == []
    assert len(json.loads(ragbus("documents", "--json", "--collection", "manuals", data_dir=data).stdout)) == 1
    refused = ragbus("delete", data_dir=data)
    assert refused.returncode == 2 and "--all" in refused.stderr


def test_links_in_a_folder_are_followed_once_and_a_loop_or_a_broken_link_is_skipped_with_why(tmp_path):
    """A folder with a link loop, a dangling link and a link to a folder elsewhere read `0 document(s)`, exit 0."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    (docs / "sub").mkdir()
    outside.mkdir()
    (outside / "ferry.txt").write_text("The Osprey ferry leaves Bergen at seven.")
    (docs / "loop").symlink_to("..")  # holds docs: following it would walk docs again, and again
    (docs / "sub" / "up").symlink_to("../..")
    (docs / "dangling.txt").symlink_to("nowhere.txt")
    (docs / "a.txt").symlink_to("b.txt")  # two links pointing at each other
    (docs / "b.txt").symlink_to("a.txt")
    (docs / "elsewhere").symlink_to(outside)  # a folder outside the one named: followed
    (docs / "same.txt").symlink_to(outside / "ferry.txt")  # the file again, by another path: read once
    run = ragbus("ingest", str(docs), data_dir=tmp_path / "data")
    assert run.returncode == 1, run.stderr  # as for any file skipped
    skipped = [line for line in run.stderr.splitlines() if line.startswith("  skipped: ")]
    assert skipped == [
        f"  skipped: {docs / 'a.txt'}: symbolic link to b.txt, a chain of links that loops; not followed",
        f"  skipped: {docs / 'b.txt'}: symbolic link to a.txt, a chain of links that loops; not followed",
        f"  skipped: {docs / 'dangling.txt'}: symbolic link to nowhere.txt, which does not exist",
        f"  skipped: {docs / 'loop'}: symbolic link to .., a folder that holds it (a loop); not followed",
        f"  skipped: {docs / 'sub' / 'up'}: symbolic link to ../.., a folder that holds it (a loop); not followed",
    ], run.stderr
    assert "1 document(s), 1 chunk(s)" in run.stderr and "5 skipped" in run.stderr, run.stderr
    listed = ragbus("documents", data_dir=tmp_path / "data")
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [str((outside / "ferry.txt").resolve())]


def test_a_file_whose_name_is_not_utf8_is_skipped_naming_it(tmp_path):
    """Its name became a document id no message could carry: the ingest failed with Python's codec message."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.txt").write_text("The Osprey ferry leaves Bergen at seven.")
    name = os.fsencode(docs) + b"/caf\xe9.txt"
    with open(name, "w") as f:
        f.write("Crème brûlée is served after seven.")
    run = ragbus("ingest", str(docs), data_dir=tmp_path / "data")
    assert run.returncode == 1, run.stderr
    assert (f"  skipped: {name!r}: the file's name is not UTF-8, which its "
            "document id must be; rename it") in run.stderr, run.stderr
    assert "1 document(s), 1 chunk(s)" in run.stderr and "1 skipped" in run.stderr and "codec" not in run.stderr


def test_ingest_reads_a_scan_a_page_at_a_time_and_names_the_package_of_a_language_not_installed(tmp_path):
    need_tesseract()
    printed = write_pdf(tmp_path / "manual.pdf", "Heron Drone Manual", [
        ("Flying", ["The Heron flies for twenty-two minutes on one charge in calm weather.",
                    "Never fly the Heron above one hundred and twenty metres or near airports."]),
    ])
    page = pages_of(printed)[0]
    docs = tmp_path / "docs"
    docs.mkdir()
    scan = docs / "manual.tiff"
    page.save(scan, save_all=True, append_images=[page.rotate(180)], dpi=(300, 300))
    data = tmp_path / "data"
    run = ragbus("ingest", str(scan), data_dir=data, RAGBUS_CLIENT__PROGRESS_INTERVAL_S="0")
    assert run.returncode == 0, run.stderr
    assert "manual page 1 of 2 (OCR)" in run.stderr and "manual page 2 of 2 (OCR)" in run.stderr, run.stderr
    assert "1 document(s)" in run.stderr
    answer = ragbus("ask", "How long does the Heron fly on one charge?", data_dir=data)
    assert "twenty-two minutes" in answer.stdout, answer.stdout + answer.stderr
    missing = ragbus("ingest", "--language", "eng+chi_sim", str(scan), data_dir=data)
    assert missing.returncode == 1 and "apt-get install tesseract-ocr-chi-sim" in missing.stderr, missing.stderr
    wrong = ragbus("ingest", "--language", "eng;rm", str(scan), data_dir=data)
    assert wrong.returncode == 2 and "is not Tesseract language codes" in wrong.stderr, wrong.stderr
