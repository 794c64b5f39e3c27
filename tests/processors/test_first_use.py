"""First use, as ``ragbus ask`` runs it on the embedded bus: all or resumed, and only into an empty default collection.

The corpus is cut to a few short topics of the Python language reference
(the real first use ingests 79), so each test embeds seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.cli import seed
from ragbus.ingestion import files
from ragbus.cli.main import main
from ragbus.stores.layout import graph_path
from ragbus.runtime.request_client import RequestClient
from ragbus.stores.writer_lock import take_writer_lock
from ragbus.runtime.typed_clients import FetchChunkClient, KgClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import topics as t

TOPICS = ["assert", "break", "continue", "for", "if", "pass", "while", "with"]


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    """The data dir of this test, and a corpus of a few topics in place of the whole reference."""
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RAGBUS_BUS__URL", raising=False)
    monkeypatch.setattr(seed, "builtin_corpus",
                        lambda c: [d for d in files.builtin_corpus(c) if d.title in TOPICS])
    yield tmp_path / "data"
    drop_memory_broker("")  # what `ragbus` commands ran on: memory://


class InterruptAfter:
    """The loader's client: once ``n`` documents are stored, the first use is cancelled, as Ctrl-C does."""

    def __init__(self, client: RequestClient, n: int) -> None:
        self.client, self.n = client, n
        self.bus = client.bus  # ingest() sizes document parts by the bus's limit
        self.task: asyncio.Task | None = None

    async def request(self, topic, message, response_type, **kwargs):
        response = await self.client.request(topic, message, response_type, **kwargs)
        if topic == t.DOCUMENT_LOAD:
            self.n -= 1
            if self.n == 0:
                assert self.task is not None
                self.task.cancel()
        return response


async def interrupted_first_use(stored: int) -> None:
    settings = load_settings()
    url = f"memory://{uuid.uuid4().hex[:8]}"
    async with (
        processors_running(settings, list(seed.pipelines.EVERYTHING), url, ready_timeout=120),
        await connect(url) as bus,
        RequestClient(bus, name="ingest") as client,
    ):
        loader = InterruptAfter(client, stored)
        loader.task = asyncio.ensure_future(seed.first_use(loader, settings, "default"))  # type: ignore[arg-type]
        with pytest.raises(asyncio.CancelledError):
            await loader.task
    drop_memory_broker(url.removeprefix("memory://"))


async def corpus_stored() -> set[str] | None:
    """What documents-query says of the default collection: the corpus's topics it holds while first use is
    unfinished, None once it is done."""
    url = f"memory://{uuid.uuid4().hex[:8]}"
    async with (
        processors_running(load_settings(), ["documents-query"], url, ready_timeout=120),
        await connect(url) as bus,
        RequestClient(bus, name="check") as client,
    ):
        stored = await seed.corpus_stored(client, "default", timeout=30)
    drop_memory_broker(url.removeprefix("memory://"))
    return stored


async def stored_topics_and_germany_facts() -> tuple[list[str], list[str]]:
    url = f"memory://{uuid.uuid4().hex[:8]}"
    async with (
        processors_running(load_settings(), ["fetch-chunk", "kg-query"], url, ready_timeout=120),
        await connect(url) as bus,
        RequestClient(bus, name="check") as client,
    ):
        chunks = await FetchChunkClient(client, timeout=30).fetch([f"pydoc:{name}#0" for name in TOPICS])
        facts = await KgClient(client, timeout=30).query("Who was chancellor of Germany?")
    drop_memory_broker(url.removeprefix("memory://"))
    return [c.document_id.removeprefix("pydoc:") for c in chunks], [f.text for f in facts.facts]


def ask(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["ask", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_interrupted_first_use_is_finished_by_the_next_ask(data, capsys):
    asyncio.run(interrupted_first_use(stored=3))
    unfinished = asyncio.run(corpus_stored())
    assert unfinished is not None and 3 <= len(unfinished) < len(TOPICS)

    code, out, err = ask(capsys, "What does the with statement do?", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["cited"] and answer["cited"][0].startswith("pydoc:with#"), answer["answer"]
    topics, facts = asyncio.run(stored_topics_and_germany_facts())
    assert sorted(topics) == TOPICS
    assert any(f.endswith(" Germany") for f in facts), facts  # the sample graph is in
    # The documents stored before the interruption (3, or one more answered in the same instant) were not sent again.
    resumed = re.search(r"resuming: (\d+) already in", err)
    assert resumed and 3 <= int(resumed[1]) < len(TOPICS), err
    assert asyncio.run(corpus_stored()) is None  # done: the whole corpus is in
    assert list(data.rglob("first-use*")) == []  # known from the stores, no marks beside them

    # Done: the next ask seeds nothing, so starts no writer, so runs beside a writer of the data dir.
    held = [take_writer_lock(data, store, processor="another writer") for store in ("keyword", "kg")]
    try:
        code, out, err = ask(capsys, "When does the else clause of a while loop run?", "--json")
    finally:
        for lock in held:
            lock.release()
    assert code == 0, err
    assert "first use" not in err and json.loads(out)["cited"][0].startswith("pydoc:while#")


def test_a_default_collection_the_user_filled_gets_neither_the_corpus_nor_the_sample_graph(data, tmp_path, capsys):
    doc = tmp_path / "shipping.txt"
    doc.write_text("Parcels ship within two working days. Express parcels ship the same day.")
    assert main(["ingest", str(doc)]) == 0
    code, out, err = ask(capsys, "How fast do parcels ship?", "--json")
    assert code == 0, err
    assert "first use" not in err
    answer = json.loads(out)
    assert {c["document_id"] for c in answer["chunks"]} == {str(doc.resolve())}
    assert not graph_path(data, "default").exists()  # no sample graph either
    topics, facts = asyncio.run(stored_topics_and_germany_facts())
    assert topics == [] and facts == []


def test_asking_an_empty_collection_other_than_the_default_says_how_to_fill_it_and_seeds_nothing(data, capsys):
    code, out, err = ask(capsys, "What does the with statement do?", "--collection", "defualt")
    assert code != 0 and out == ""
    assert err.splitlines() == [
        "ragbus: error: collection 'defualt' has no documents: ingest some with "
        "`ragbus ingest PATH... --collection defualt` (or load a graph with "
        "`ragbus kg load FILE --collection defualt`); first use fills only 'default'"
    ]
    assert not data.exists() or list(data.iterdir()) == []
