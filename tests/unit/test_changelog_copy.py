"""A replica's local copy of a log: every whole frame replayed with its checkpoint, a torn tail cut off."""

from __future__ import annotations

import pytest

from processors.bus import LogRecord
from processors.runtime.changelog import LocalCopy, ReplicaDirInUse


def record(i: int, body: bytes | None = b"x") -> LogRecord:
    return LogRecord("ragbus.changelog.t", f"k{i}", body, {"n": str(i)}, None, str(i))


def test_replay_applies_every_frame_in_order_and_returns_the_last_checkpoint(tmp_path):
    copy = LocalCopy(tmp_path / "copy.log")
    assert copy.replay(lambda r: None, "t") is None
    for i in range(3):
        copy.append(record(i, None if i == 1 else f"b{i}".encode()), f"cp{i}")
    copy.close()
    seen = []
    again = LocalCopy(tmp_path / "copy.log")
    assert again.replay(seen.append, "ragbus.changelog.t") == "cp2"
    assert [(r.key, r.body, dict(r.headers), r.position) for r in seen] == [
        ("k0", b"b0", {"n": "0"}, "0"), ("k1", None, {"n": "1"}, "1"), ("k2", b"b2", {"n": "2"}, "2")]
    again.close()


@pytest.mark.parametrize("cut", [1, 5, 12])
def test_a_torn_last_frame_is_cut_and_the_copy_resumes_before_it(tmp_path, cut):
    path = tmp_path / "copy.log"
    copy = LocalCopy(path)
    copy.replay(lambda r: None, "t")
    copy.append(record(0), "cp0")
    whole = path.stat().st_size
    copy.append(record(1), "cp1")
    copy.close()
    with path.open("r+b") as fh:  # killed while writing the second frame
        fh.truncate(path.stat().st_size - cut)
    seen = []
    again = LocalCopy(path)
    assert again.replay(seen.append, "t") == "cp0"
    assert [r.key for r in seen] == ["k0"] and path.stat().st_size == whole
    again.append(record(1), "cp1")  # and appends go on after the last whole frame
    again.close()
    final = LocalCopy(path)
    assert final.replay(lambda r: None, "t") == "cp1"
    final.close()


def test_a_record_the_replica_refuses_is_skipped_on_replay_as_when_read(tmp_path, caplog):
    copy = LocalCopy(tmp_path / "copy.log")
    copy.replay(lambda r: None, "t")
    for i in range(3):
        copy.append(record(i), f"cp{i}")
    copy.close()
    seen = []

    def apply(r):
        if r.key == "k1":
            raise ValueError("not a batch")
        seen.append(r.key)

    again = LocalCopy(tmp_path / "copy.log")
    assert again.replay(apply, "t") == "cp2"
    assert seen == ["k0", "k2"] and "refused and skipped" in caplog.text
    again.close()


def test_two_replicas_cannot_share_one_copy(tmp_path):
    one = LocalCopy(tmp_path / "copy.log")
    one.replay(lambda r: None, "t")
    with pytest.raises(ReplicaDirInUse, match="data dir of its own"):
        LocalCopy(tmp_path / "copy.log").replay(lambda r: None, "t")
    one.close()
    free = LocalCopy(tmp_path / "copy.log")
    free.replay(lambda r: None, "t")  # free again once the first closed
    free.close()
