"""A store write appended to its log, and the reads that must see it (``must_see`` tokens).

A writer appends each change as a record of its kind (``append_change``) and answers with the
record's token; a read carrying tokens waits (``wait_seen``) until this process's replica of that
log for the reader's data dir applied them. The followers of this process register here.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import msgspec

from ragbus.bus import LogTopics
from ragbus.runtime.processor import Unavailable
from ragbus.schema import BadRequest, encode
from ragbus.schema.changelog import FILE_WRITES, KIND, parse_token

from .follower import LogFollower


async def append_change(bus: LogTopics, topic: str, kind: str, message: msgspec.Struct, *, key: str,
                        order_key: str) -> str:
    """Append one store write to a log topic as a record of ``kind`` (``schema/changelog.py``); its position."""
    return await bus.append(topic, encode(message), key=key, order_key=order_key, headers={KIND: kind})


class NotYetApplied(Unavailable):
    """A write a request must see is not applied on this replica within its bound (its error type names it)."""


# The followers of this process by (log topic, data dir): what a query processor waits on for a request's
# ``must_see`` (documents-replica registers for the data dir it writes, kg-query for its own graphs).
_FOLLOWING: dict[tuple[str, Path], list[LogFollower]] = {}


def _dir(data_dir: Path) -> Path:
    return Path(os.path.abspath(data_dir))  # as named, without asking the file system


def register_follower(follower: LogFollower, data_dir: Path) -> None:
    _FOLLOWING.setdefault((follower.topic, _dir(data_dir)), []).append(follower)


def unregister_follower(follower: LogFollower, data_dir: Path) -> None:
    followers = _FOLLOWING.get((follower.topic, _dir(data_dir)), [])
    if follower in followers:
        followers.remove(follower)


class ReplicaMissing(Unavailable):
    """A read must see a write of a log, and this process, which says its stores come from it, follows none.

    Not retriable: the process's settings are wrong (no replica runs beside its readers), not late."""

    retriable = False


async def wait_seen(tokens: list[str], data_dir: Path, topic: str, timeout_s: float, *, from_log: bool) -> bool:
    """Wait until this process's followers for ``data_dir`` have applied the tokens they follow; whether
    there was one to wait for.

    ``topic`` is the caller's own log, and ``from_log`` whether its stores come from it (its
    ``changelog`` setting): then a token of it needs a follower here (else ``ReplicaMissing``, saying
    how replicas are laid out). A store of a shared data dir has no log to wait for: given the token
    of a write to files (``FILE_WRITES``) it is told to reload them now (True), since the write was
    on disk before it was answered; without one it sees a write within its ``refresh_interval_s``.
    A token of another log is waited for where this process follows that log for ``data_dir`` too.
    ``BadRequest`` for a token that is not one; ``NotYetApplied`` past ``timeout_s``.
    """
    waits: list[tuple[LogFollower, str, str]] = []
    reload = False
    for value in tokens:
        try:
            log_topic, position = parse_token(value)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if log_topic == FILE_WRITES:
            reload = reload or not from_log
            continue
        followers = _FOLLOWING.get((log_topic, _dir(data_dir)))
        if followers:
            waits.append((followers[0], log_topic, position))
        elif log_topic == topic and from_log:
            raise ReplicaMissing(
                f"must_see names {topic}, but no replica of it writes {data_dir} in this process: run "
                f"documents-replica in the same worker as the query processors (pipelines.LOG_REPLICA)"
            )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for follower, log_topic, position in waits:
        if not await follower.wait_for(position, max(0.0, deadline - loop.time())):
            raise NotYetApplied(f"{log_topic}@{position} is not applied on this replica within {timeout_s} s: "
                                f"it is behind the log (see its status)")
    return bool(waits) or reload
