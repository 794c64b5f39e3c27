"""A replica's local copy of a log: every whole frame replayed with its checkpoint, a torn tail cut off."""

from __future__ import annotations

import pytest

from ragbus.bus import LogRecord
from ragbus.stores.snapshots import CheckpointFile, LocalCopy, ReplicaDirInUse


def record(i: int, body: bytes | None = b"x") -> LogRecord:
    return LogRecord("ragbus.changelog.t", f"k{i}", body, {"n": str(i)}, None, str(i))


def test_load_returns_every_frame_in_order_and_the_last_checkpoint(tmp_path):
    copy = LocalCopy(tmp_path / "copy.log")
    assert copy.load("t") == ([], None)
    for i in range(3):
        copy.append(record(i, None if i == 1 else f"b{i}".encode()), f"cp{i}")
    copy.close()
    again = LocalCopy(tmp_path / "copy.log")
    seen, checkpoint = again.load("ragbus.changelog.t")
    assert checkpoint == "cp2"
    assert [(r.key, r.body, dict(r.headers), r.position) for r in seen] == [
        ("k0", b"b0", {"n": "0"}, "0"), ("k1", None, {"n": "1"}, "1"), ("k2", b"b2", {"n": "2"}, "2")]
    again.close()


@pytest.mark.parametrize("cut", [1, 5, 12])
def test_a_torn_last_frame_is_cut_and_the_copy_resumes_before_it(tmp_path, cut):
    path = tmp_path / "copy.log"
    copy = LocalCopy(path)
    copy.load("t")
    copy.append(record(0), "cp0")
    whole = path.stat().st_size
    copy.append(record(1), "cp1")
    copy.close()
    with path.open("r+b") as fh:  # killed while writing the second frame
        fh.truncate(path.stat().st_size - cut)
    again = LocalCopy(path)
    seen, checkpoint = again.load("t")
    assert checkpoint == "cp0"
    assert [r.key for r in seen] == ["k0"] and path.stat().st_size == whole
    again.append(record(1), "cp1")  # and appends go on after the last whole frame
    again.close()
    final = LocalCopy(path)
    assert final.load("t")[1] == "cp1"
    final.close()


def test_two_replicas_cannot_share_one_copy(tmp_path):
    one = LocalCopy(tmp_path / "copy.log")
    one.load("t")
    with pytest.raises(ReplicaDirInUse, match="data dir of its own"):
        LocalCopy(tmp_path / "copy.log").load("t")
    one.close()
    free = LocalCopy(tmp_path / "copy.log")
    free.load("t")  # free again once the first closed
    free.close()


def test_a_checkpoint_file_keeps_the_last_checkpoint_synced_and_nothing_else(tmp_path):
    path = tmp_path / "log.checkpoint"
    one = CheckpointFile(path)
    assert one.load("t") == ([], None)
    one.append(record(0), "0=1")
    one.append(record(1), "0=2")
    assert not path.exists()  # not before a sync
    one.sync()
    assert path.read_text() == "0=2\n"
    one.append(record(2), "0=3")
    one.close()  # closing syncs
    again = CheckpointFile(path)
    assert again.load("t") == ([], "0=3")
    with pytest.raises(ReplicaDirInUse):
        CheckpointFile(path).load("t")
    again.close()
