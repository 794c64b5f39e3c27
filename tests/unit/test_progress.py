"""Progress on stderr: tqdm's bar on a terminal; plain lines, no ``\\r``, at an interval in a log."""

from __future__ import annotations

import fcntl
import io
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from ragbus.cli.progress import Progress, progress_bar

REPO = Path(__file__).resolve().parents[2]
RATE_LINE = r"\d+/\d+ \(100%\) \[\d\d:\d\d<00:00, +[\d.]+(\w+/s|s/\w+)\]$"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_plain_lines_with_count_rate_and_time_left():
    out = io.StringIO()
    show = progress_bar(out)
    assert not show.terminal
    for done in range(1, 51):
        show(done, 50, f"topic-{done}")
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # The first step and the last; the steps between came sooner than the interval.
    assert len(lines) == 2, lines
    assert lines[0].startswith("topic-1: 1/50 (2%) [") and "doc/s" in lines[0]
    assert lines[-1].startswith("topic-50: 50/50 (100%) [") and "<00:00" in lines[-1]


def test_a_log_gets_a_line_every_interval_not_every_step():
    out, clock = io.StringIO(), Clock()
    show = Progress(out, interval_s=10.0, clock=clock)
    for done in range(1, 21):
        clock.now += 3.0  # a step every 3 s: a line at most every 10 s
        show(done, 20, "doc")
    lines = out.getvalue().splitlines()
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["1/20", "5/20", "9/20", "13/20", "17/20", "20/20"]
    assert lines[-1].endswith("[01:00<00:00,  3.00s/doc]")  # 20 docs in 60 s: tqdm turns a slow rate round


def test_an_unknown_total_counts_and_close_writes_the_last_step():
    out, clock = io.StringIO(), Clock()
    show = Progress(out, unit="msg", interval_s=10.0, clock=clock)
    for n in range(1, 4):
        clock.now += 1.0
        show(n, None, "last on a")
    show.close()
    show(9, None, "after close")  # ignored
    lines = out.getvalue().splitlines()
    assert lines == [lines[0], lines[-1]] and lines[-1].startswith("last on a: 3 [") and "msg/s" in lines[-1]
    assert "after close" not in out.getvalue()


def test_a_terminal_gets_tqdms_bar_with_rate_and_time_left():
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    with open(follower, "w", closefd=True) as tty:
        show = progress_bar(tty)
        assert show.terminal
        for done in range(1, 6):
            show(done, 5, "topic")
        tty.flush()
    chunks = []
    while True:  # one read returns what the pty holds at that moment, not all of it
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the follower is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    shown = b"".join(chunks).decode()
    os.close(leader)
    assert "\r" in shown and "5/5" in shown and "100%" in shown and "doc/s" in shown


def test_kg_load_into_a_log_writes_plain_progress_lines(tmp_path):
    # As a user's CI job runs it: stderr is a pipe, not a terminal.
    env = dict(os.environ, RAGBUS_DATA_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "ragbus.cli", "kg", "load"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    finished = [line for line in done.stderr.splitlines() if re.search(RATE_LINE, line)]
    assert finished, done.stderr


async def test_record_into_a_log_counts_messages_in_plain_lines(tmp_path, capsys):
    import argparse
    import uuid

    from ragbus.bus import connect
    from ragbus.bus.memory import drop_memory_broker
    from ragbus.cli.records import _record

    url = f"memory://record-{uuid.uuid4().hex[:8]}"
    try:
        async with await connect(url) as bus:
            for i in range(3):  # kept for the recorder's group, which joins later
                await bus.publish("events", f"e{i}".encode())
            args = argparse.Namespace(bus=url, topics=["events"], out=str(tmp_path / "rec.jsonl"), limit=3, idle=5.0)
            assert await _record(args) == 0
    finally:
        drop_memory_broker(url.removeprefix("memory://"))
    err = capsys.readouterr().err
    assert "\r" not in err
    assert re.search(r"^last on events: 3/3 \(100%\) \[", err, re.M), err
    assert "recorded 3 message(s) from events to" in err
