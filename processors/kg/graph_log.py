"""The graph's log: the append-only file a collection's graph is rebuilt from.

Length-prefixed msgpack ``LoadTriples`` records, each what one batch
changed (``GraphStore.apply``'s ``result.log``), fsynced before the writer
replies. One writer, any number of readers; a reader applies what was
appended since its last look, and a record still being written (a short
tail) waits for the next.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ragbus.schema import LoadTriples, check_collection
from ragbus.schema.times import iso

__all__ = ["GraphLog", "graph_path", "stamped"]


class _Store(Protocol):
    """What a log is replayed into: ``GraphStore``, named by shape so the store can import its log."""

    def apply(self, batch: LoadTriples, *, warn: bool = True) -> Any: ...


_LENGTH = struct.Struct(">I")
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LoadTriples)


def graph_path(data_dir: Path, collection: str) -> Path:
    return data_dir / check_collection(collection) / "graph" / "log"


class GraphLog:
    """The append-only file a collection's graph is rebuilt from; one writer, any number of readers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # bytes of the file applied so far

    def catch_up(self, store: _Store, on_progress: Callable[[int, int], None] | None = None) -> int:
        """Apply every complete record appended since the last call; returns how many.

        A record still being written (a short tail) is left for the next call.
        """
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size <= self.offset:
            return 0
        applied = 0
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            while self.offset + _LENGTH.size <= size:
                header = fh.read(_LENGTH.size)
                (length,) = _LENGTH.unpack(header)
                if self.offset + _LENGTH.size + length > size:
                    break
                store.apply(_decoder.decode(fh.read(length)), warn=False)
                self.offset += _LENGTH.size + length
                applied += 1
                if on_progress is not None:
                    on_progress(self.offset, size)
        return applied

    def open_for_append(self, store: _Store) -> None:
        """Replay the log, then cut a torn last record (a writer that died mid-append)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.catch_up(store)
        if self.path.exists() and self.path.stat().st_size > self.offset:
            with self.path.open("r+b") as fh:
                fh.truncate(self.offset)

    def append(self, batch: LoadTriples) -> None:
        payload = _encoder.encode(batch)
        with self.path.open("ab") as fh:
            fh.write(_LENGTH.pack(len(payload)) + payload)
            fh.flush()
            os.fsync(fh.fileno())
        self.offset += _LENGTH.size + len(payload)


def stamped(batch: LoadTriples, now: datetime) -> LoadTriples:
    """The batch with ``recorded_at`` set on every fact (and on a retraction), as a producer dates its own.

    Applied, a fact under an id held with other content is a revision at ``now``, as it is when
    ``GraphStore.apply(batch, now=...)`` stamps it; two such facts under one id share that instant, so
    the second is refused either way.
    """
    stamp = iso(now)
    return msgspec.structs.replace(
        batch, facts=[f if f.recorded_at else msgspec.structs.replace(f, recorded_at=stamp) for f in batch.facts],
        recorded_at=batch.recorded_at or (stamp if batch.retract_sources else None),
    )
