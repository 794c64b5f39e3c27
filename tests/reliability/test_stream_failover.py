"""A worker killed (SIGKILL) in the middle of a stream: the caller still gets every piece once, in order.

Two ``ragbus worker`` processes serve a streaming echo in one group on a real broker; the one
that started the stream is killed after its first pieces. The caller resends after a silence
(and the broker may redeliver the unacknowledged request too); the survivor serves it from the
start, and the caller keeps each piece number once.
"""

from __future__ import annotations

import os
import signal

import pytest

from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient

from ..helpers.brokers import settings_for_tests
from ..helpers.echo import EchoPiece, EchoRequest
from ..runtime.workers import Worker

WORDS = [f"w{i}" for i in range(12)]


def streaming_config(path, topic):
    path.write_text("\n".join([
        "[processors.echo]",
        'class = "tests.helpers.echo:StreamingEcho"',
        f'topic = "{topic}"',
        f'group = "echo-{topic}"',
        "drain_timeout_s = 0.5",
    ]) + "\n")
    return path


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_a_worker_killed_mid_stream_loses_and_repeats_no_piece(which, request, tmp_path, topic):
    url = request.getfixturevalue(f"{which}_broker").url
    config = streaming_config(tmp_path / "ragbus.toml", topic)
    workers = [await Worker.start(url, config) for _ in range(2)]
    try:
        for w in workers:
            await w.ready()
        async with (
            await connect(url, settings_for_tests()) as bus,
            RequestClient(bus, name="stream", resend_after_s=1.0) as client,
        ):
            pieces: list[EchoPiece] = []
            killed = None
            message = EchoRequest(text=" ".join(WORDS), delay_s=0.2)
            async for piece in client.stream(topic, message, EchoPiece, timeout=90):
                pieces.append(piece)
                if killed is None and len(pieces) == 3:
                    killed = piece.pid
                    os.kill(killed, signal.SIGKILL)
    finally:
        for w in workers:
            await w.reap()
    assert [p.text for p in pieces] == [*WORDS, " ".join(WORDS)]
    # The pieces after the kill came from the other worker, which served the request from its start.
    survivors = {p.pid for p in pieces[4:]}  # (the 4th may have been on its way when the kill came)
    assert killed not in survivors and len(survivors) == 1
    assert {w.proc.pid for w in workers} == {killed, *survivors}
    assert client.stats.answered == 1 and client.stats.timeouts == 0
    assert client.stats.duplicates >= 3  # the survivor's copies of the pieces already yielded, dropped
