"""Writes this process published to a data dir, so its own readers see them at once.

On the embedded default every processor runs in one process: the stores' writers publish a
change (a faiss generation, a tantivy commit) before the write is answered, and each reader
reloads a collection before its next read once a write to it was published here, instead of
within its ``refresh_interval_s``. A read that starts after a write was answered therefore sees
it. Readers of a data dir written by another process still reload within ``refresh_interval_s``,
or at once for a read that carries ``must_see`` (``stores/seen.py`` ``wait_seen``).
"""

from __future__ import annotations

import os
from pathlib import Path

_published: dict[tuple[str, str], int] = {}  # (data dir, collection) -> writes published by this process


def _key(data_dir: Path | str, collection: str) -> tuple[str, str]:
    return os.path.abspath(data_dir), collection


def published(data_dir: Path | str, collection: str) -> None:
    """A writer of this process made a change to ``collection`` visible to a reader that reloads."""
    key = _key(data_dir, collection)
    _published[key] = _published.get(key, 0) + 1


class Freshness:
    """One reader's count of the writes published here that it has reloaded after, by collection."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}

    def stale(self, data_dir: Path | str, collection: str) -> bool:
        """Whether a write to ``collection`` was published here since this reader last asked (reload if so)."""
        key = _key(data_dir, collection)
        now = _published.get(key, 0)
        if self._seen.get(key, 0) == now:
            return False
        self._seen[key] = now
        return True
