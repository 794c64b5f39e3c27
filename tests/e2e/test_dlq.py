"""Dead letters read back and redriven, on every bus: poison, fix the cause, redrive, handled.

The processor under test is a one-way one (no response type), like a store
writer: a failure of its handler is retried and, after ``max_attempts``,
dead-lettered (a processor that answers turns a failure into an error
response instead, which is never dead-lettered). Its "disk" fails until the
test fixes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pytest

from ragbus.config.settings import ProcessorSettings
from ragbus.bus.dead_letters import REDRIVEN, REDRIVES, pending, redrive
from ragbus.runtime.envelope import request_headers
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import encode

from ..helpers.brokers import settings_for_tests
from ..helpers.serving import serving

REPO = Path(__file__).resolve().parents[2]
MAX_ATTEMPTS = 2


class Entry(msgspec.Struct, kw_only=True):
    text: str


class Ledger(Processor[Entry, None]):
    """Writes entries down; while ``cause`` is set, every write fails with it, as a full disk would."""

    request_type = Entry
    response_type = None

    def __init__(self, name: str, settings: ProcessorSettings) -> None:
        super().__init__(name, settings)
        self.cause: str | None = "no space left on the ledger's disk"
        self.written: list[tuple[str, int]] = []  # (text, delivery attempt)
        self.changed = asyncio.Event()

    async def handle(self, request: Entry, context: RequestContext) -> None:
        if self.cause is not None:
            raise OSError(self.cause)
        self.written.append((request.text, context.delivery_attempt))
        self.changed.set()


def ledger(topic: str) -> Ledger:
    return Ledger("ledger", ProcessorSettings(topic=topic, group=f"{topic}-writers", max_attempts=MAX_ATTEMPTS))


async def write(bus, topic: str, *texts: str) -> list[str]:
    ids = []
    for text in texts:
        ids.append(uuid.uuid4().hex)
        await bus.publish(topic, encode(Entry(text=text)), request_headers(request_id=ids[-1], reply_to=None,
                                                                              timeout_s=None))
    return ids


async def eventually(check, timeout: float = 60.0):
    """Poll ``check`` (async, returns a value) until it is truthy; its last value otherwise fails the test."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await check()
        if value or loop.time() > end:
            assert value, f"not within {timeout}s: {value!r}"
            return value
        await asyncio.sleep(0.1)


async def test_poison_then_fix_then_redrive_is_handled_once_with_fresh_attempts(open_bus, topic):
    bus = await open_bus()
    dlq = f"{topic}{bus.dead_letter_suffix}"
    writer = ledger(topic)
    async with serving(bus, writer):
        ids = await write(bus, topic, "alpha", "beta", "gamma")

        async def all_dead():
            return len(letters := await pending(bus, dlq)) == 3 and letters

        letters = await eventually(all_dead)
        assert {d.request_id for d in letters} == set(ids)
        for d in letters:
            assert (d.origin, d.attempts, d.redrives, d.error) == (topic, MAX_ATTEMPTS, 0, "OSError")
            assert "no space left" in d.reason and d.group == f"{topic}-writers" and d.time is not None
        assert writer.written == []
        # Listing consumed nothing: the same letters, at the same positions, again.
        assert [d.position for d in await pending(bus, dlq)] == [d.position for d in letters]

        # Redriven before the fix: it fails its full MAX_ATTEMPTS again (the count was reset, not carried
        # over) and comes back once, as a new dead letter that says it was redriven.
        sent, skipped = await redrive(bus, dlq, limit=1)
        assert len(sent) == 1 and skipped == []

        async def back_again():
            now = await pending(bus, dlq)
            return len(now) == 3 and any(d.redrives == 1 for d in now) and now

        again = await eventually(back_again)
        [second] = [d for d in again if d.redrives == 1]
        assert (second.request_id, second.attempts) == (sent[0].request_id, MAX_ATTEMPTS)
        assert second.position != sent[0].position

        writer.cause = None  # the disk is fixed
        sent, skipped = await redrive(bus, dlq)
        assert len(sent) == 3 and skipped == []
        assert await pending(bus, dlq) == []  # marked redriven at once

        async def all_written():
            return len(writer.written) >= 3

        await eventually(all_written)
        assert sorted(writer.written) == [("alpha", 1), ("beta", 1), ("gamma", 1)]  # each once, first attempt

        # A second redrive finds nothing to send: no message is redriven twice.
        assert await redrive(bus, dlq) == ([], [])

    # What the redrive published: each entry again, its redrive count in a header and no dead-letter headers.
    resent = [m for m in await bus.read_retained(topic) if REDRIVES in m.headers]
    assert len(resent) == 4 and all(not any(k.startswith("x-dead-letter-") for k in m.headers) for m in resent)
    markers = [m for m in await bus.read_retained(dlq) if REDRIVEN in m.headers]
    assert len(markers) == 4 and all(m.body == b"" for m in markers)


async def test_reason_and_limit_pick_what_is_redriven():
    from ragbus.bus import connect

    bus = await connect(f"memory://dlq-{uuid.uuid4().hex[:8]}", settings_for_tests())
    try:
        topic = "ledger"
        writer = ledger(topic)
        async with serving(bus, writer):
            async def dead(n):
                return len(await pending(bus, f"{topic}.dlq")) == n

            await write(bus, topic, "one", "two")
            await eventually(lambda: dead(2))
            writer.cause = "the ledger is read-only"
            await write(bus, topic, "three", "four", "five")
            await eventually(lambda: dead(5))
            assert len(await pending(bus, f"{topic}.dlq", reason="read-only")) == 3
            assert len(await pending(bus, f"{topic}.dlq", reason="OSError")) == 5
            writer.cause = None
            sent, _ = await redrive(bus, f"{topic}.dlq", reason="read-only", limit=2)
            assert [d.reason.count("read-only") for d in sent] == [1, 1]
            assert len(await pending(bus, f"{topic}.dlq")) == 3

            async def two_written():
                return len(writer.written) == 2

            await eventually(two_written)
            assert sorted(text for text, _ in writer.written) == ["four", "three"]  # oldest first
    finally:
        await bus.close()


def ragbus(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


@pytest.mark.parametrize("backend", ["kafka", "pulsar"])
async def test_the_command_lists_and_redrives_until_the_topic_is_empty(bus_url, topic):
    from ragbus.bus import connect

    async with await connect(bus_url, settings_for_tests()) as bus:
        writer = ledger(topic)
        async with serving(bus, writer):
            await write(bus, topic, "left", "right")

            async def two_dead():
                return len(await pending(bus, f"{topic}.dlq")) == 2

            await eventually(two_dead)

    listed = ragbus("dlq", "list", topic, "--bus", bus_url, "--json")
    assert listed.returncode == 0, listed.stderr
    letters = json.loads(listed.stdout)["dead_letters"]
    assert [(d["origin"], d["attempts"], d["error"]) for d in letters] == [(topic, MAX_ATTEMPTS, "OSError")] * 2

    everything = ragbus("dlq", "list", "--bus", bus_url)  # no topic: every dead-letter topic it can find
    assert everything.returncode == 0, everything.stderr
    if bus_url.startswith("kafka"):  # Pulsar without metrics_url can only list the wiring's topics
        assert f"{topic}.dlq" in everything.stdout

    unknown = ragbus("dlq", "redrive", f"no-{topic}", "--bus", bus_url)  # a typo: refused, not "redrove 0"
    assert unknown.returncode == 2, (unknown.stdout, unknown.stderr)
    assert unknown.stderr.startswith(f"ragbus dlq redrive: error: no topic 'no-{topic}.dlq' on {bus_url}" if
                                     bus_url.startswith("kafka") else f"ragbus dlq redrive: error: 'no-{topic}.dlq' "
                                     f"holds nothing on {bus_url}"), unknown.stderr
    if bus_url.startswith("kafka"):
        assert f"{topic}.dlq" in unknown.stderr  # the dead-letter topics it has

    redriven = ragbus("dlq", "redrive", f"{topic}.dlq", "--bus", bus_url)
    assert redriven.returncode == 0, redriven.stderr
    assert f"redrove 2 message(s) from {topic}.dlq; 0 left in it" in redriven.stdout, redriven.stdout
    again = ragbus("dlq", "redrive", topic, "--bus", bus_url)
    assert f"redrove 0 message(s) from {topic}.dlq; 0 left in it" in again.stdout, again.stdout
    after = ragbus("dlq", "list", topic, "--bus", bus_url, "--json")
    assert json.loads(after.stdout)["dead_letters"] == []


def test_on_the_embedded_bus_the_commands_say_it_is_their_own_and_refuse_a_topic_it_lacks():
    """memory:// lives in the command's own process: empty, whatever workers elsewhere dead-lettered."""
    private = "ragbus dlq {}: warning: memory:// is a bus private to this process"
    listed = ragbus("dlq", "list", "--bus", "memory://")
    assert listed.returncode == 0 and "0 dead letter(s)" in listed.stdout, listed.stderr
    assert listed.stderr.startswith(private.format("list")) and "--bus" in listed.stderr, listed.stderr
    redriven = ragbus("dlq", "redrive", "nosuchtopic", "--bus", "memory://")
    assert redriven.returncode == 2 and redriven.stdout == "", redriven.stdout
    first, second = redriven.stderr.splitlines()
    assert first == "ragbus dlq redrive: error: no topic 'nosuchtopic.dlq' on memory:// (its dead-letter topics: none)"
    assert second.startswith(private.format("redrive"))
