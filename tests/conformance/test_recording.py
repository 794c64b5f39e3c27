"""Record topics to a file and replay the file onto a bus, on every backend."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time

import pytest

from ragbus.runtime.recording import read_recording, record, replay

from ..helpers.receiving import receive

# One key per topic: Kafka orders messages only within a partition.
MESSAGES = [
    ("a", b"\x00binary\xff", {"request-id": "r1", "traceparent": "00-abc-def-01"}, "k1"),
    ("b", b'{"json": true}', {"request-id": "r2"}, "k2"),
    ("a", b"third", {}, "k1"),
    ("b", b"", {"empty": ""}, "k2"),
]


async def test_record_then_replay_reproduces_messages_in_order(open_bus, topic, tmp_path):
    bus = await open_bus()
    topics = {"a": f"{topic}-a", "b": f"{topic}-b"}
    path = tmp_path / "rec.jsonl"
    for name, body, headers, key in MESSAGES[:1]:
        await bus.publish(topics[name], body, headers, key)  # before the recorder: still recorded
    recorder = asyncio.ensure_future(record(bus, list(topics.values()), path, limit=len(MESSAGES)))
    for name, body, headers, key in MESSAGES[1:]:
        await bus.publish(topics[name], body, headers, key)
    assert await asyncio.wait_for(recorder, 60) == len(MESSAGES)

    recorded = list(read_recording(path))
    as_sent = {(topics[n], b, tuple(sorted(h.items())), k) for n, b, h, k in MESSAGES}
    assert {(r.topic, r.body, tuple(sorted(r.headers.items())), r.key) for r in recorded} == as_sent
    per_topic = {t: [r.body for r in recorded if r.topic == t] for t in topics.values()}
    for name, t in topics.items():
        assert per_topic[t] == [b for n, b, _, _ in MESSAGES if n == name]  # order kept per topic

    rename = {t: f"{t}-replayed" for t in topics.values()}
    subs = {t: await bus.subscribe(new, f"check-{topic}") for t, new in rename.items()}
    assert await replay(bus, path, rename=rename) == len(MESSAGES)
    for r in recorded:
        d = await receive(subs[r.topic])
        assert (d.body, d.headers, d.key) == (r.body, r.headers, r.key)
        await d.ack()


async def test_recording_keeps_the_publish_gaps_of_a_backlog(open_bus, topic, tmp_path):
    """Recorded times are publish times: a backlog read at once keeps its gaps."""
    bus = await open_bus()
    gap = 0.3
    published = []
    for i in range(3):
        if i:
            await asyncio.sleep(gap)  # the gap under test, not a wait for a condition
        published.append(time.time())
        await bus.publish(topic, f"m{i}".encode(), {}, key="one-partition")
    # The recorder's group starts from the earliest message, so it receives all three within
    # milliseconds of each other: only the broker's publish times still show the gaps.
    path = tmp_path / "gaps.jsonl"
    assert await asyncio.wait_for(record(bus, [topic], path, limit=3), 60) == 3

    recorded = list(read_recording(path))
    assert [r.body for r in recorded] == [b"m0", b"m1", b"m2"]
    times = [r.time for r in recorded]
    assert all(b - a >= gap * 0.6 for a, b in itertools.pairwise(times)), times
    # Epoch seconds (not milliseconds), from around when each was published.
    assert all(abs(t - p) < 5 for t, p in zip(times, published, strict=True)), (times, published)


async def test_replay_keeps_recorded_timing_when_asked(open_bus, topic, tmp_path):
    from ragbus.runtime.recording import Recorded, _encoder

    path = tmp_path / "timed.jsonl"
    lines = [_encoder.encode(Recorded(time=t, topic=topic, body=str(i).encode())) + b"\n"
             for i, t in enumerate([100.0, 100.2, 100.4])]
    await asyncio.to_thread(path.write_bytes, b"".join(lines))
    bus = await open_bus()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await replay(bus, path, speed=2.0)  # 0.4 s of recording at double speed
    assert loop.time() - started >= 0.19


def test_bad_recording_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"time": 1, "topic": "t", "body": ""}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(read_recording(path))


async def _run(*argv, env=None):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ragbus.cli", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, out.decode(), err.decode()


async def test_record_on_the_default_memory_bus_warns_that_it_is_private(tmp_path):
    """The default bus is memory://: say so in one line, and name the way to the shared bus."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUS_")}
    env["RAGBUS_DATA_DIR"] = str(tmp_path / "data")
    code, _, err = await _run("record", "some-topic", "-o", str(tmp_path / "r.jsonl"), "--idle", "0.1", env=env)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err
    assert "memory://" in warnings[0] and "private to this process" in warnings[0]
    assert "--bus" in warnings[0] and "RAGBUS_BUS__URL" in warnings[0]


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_record_and_replay_commands_against_a_real_broker(which, request, topic, tmp_path):
    from ragbus.bus import connect

    from ..helpers.brokers import settings_for_tests

    url = request.getfixturevalue(f"{which}_broker").url
    env = dict(os.environ, RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD="8")
    bus = await connect(url, settings_for_tests())
    try:
        for i in range(3):
            await bus.publish(topic, f"m{i}".encode(), {"n": str(i)}, key="one-partition")
        path = tmp_path / "cli.jsonl"
        code, _, err = await _run("record", topic, "-o", str(path), "--bus", url, "--limit", "3", env=env)
        assert code == 0, err
        assert "warning" not in err  # a shared bus: nothing to warn about
        assert [r.body for r in read_recording(path)] == [b"m0", b"m1", b"m2"]
        sub = await bus.subscribe(f"{topic}-copy", f"check-{topic}")
        code, _, err = await _run("replay", str(path), "--bus", url, "--rename", f"{topic}={topic}-copy", env=env)
        assert code == 0, err
        assert "replayed 3" in err
        for i in range(3):
            d = await receive(sub)
            assert (d.body, d.headers["n"]) == (f"m{i}".encode(), str(i))
            await d.ack()
    finally:
        await bus.close()
