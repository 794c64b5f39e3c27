"""What the graph store refuses in an item, and what makes two facts the same.

In one module so that every client of kg-store (``ragbus kg load``, a
user's own producer, a replay of the log) gets the same refusals and the
same idea of "held already", whatever file format or batching brought the
item in:

- a control character (C0, DEL, C1) or a lone surrogate in an id, a name, a
  relation or a provenance field: it would be stored, linked against and
  printed raw (a NUL ends a C string, an escape sequence repaints a
  terminal), and a lone surrogate cannot even be written to the log;
- a validity interval that is inverted, or empty (``valid_until`` equal to
  ``valid_from``: half-open, it holds at no instant, so the item would be
  stored and never found);
- a fact's identity (``fact_key``) and content (``fact_content``) come from
  one tuple, so a fact can never be "the same key but other content" by a
  quirk of spelling: blank optional fields are absent, surrounding
  whitespace is not part of a value;
- a second fact under one id in one load, both stamped by the store
  (``first_under_id``): the store applies it within a batch, ``ragbus kg
  load`` across a file's batches, so a file decides the same way however it
  is batched.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

import msgspec

from ragbus.schema import Fact
from ragbus.schema.times import TimeError, iso, parse_interval

__all__ = [
    "check_text", "fact_content", "fact_key", "first_under_id", "interval", "normalised", "optional_text",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTENT = ("head", "relation", "tail", "valid_from", "valid_until", "source", "chunk_id")
_encoder = msgspec.msgpack.Encoder()


def check_text(what: str, value: object) -> None:
    """ValueError naming ``what`` if ``value`` is text holding a control character or a lone surrogate."""
    if not isinstance(value, str):
        return
    m = _CONTROL.search(value)
    if m is not None:
        char = m.group()
        kind = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise ValueError(f"{what} {shown!r} holds {kind} (U+{ord(char):04X}) at position {m.start()}: "
                         "ids, names and relations must be printable text")


def optional_text(value: object) -> object:
    """An optional field as the store keeps it: stripped, and ``None`` when blank; a non-string as given."""
    if isinstance(value, str):
        return value.strip() or None
    return value


def interval(valid_from: object, valid_until: object) -> tuple[datetime | None, datetime | None]:
    """Both bounds, read: ``TimeError`` if either is malformed, or the interval inverted or empty."""
    start, end = parse_interval(valid_from, valid_until)
    if start is not None and start == end:
        raise TimeError(f"empty interval: valid_until equals valid_from ({iso(start)}), so it holds at no "
                        "instant (the interval is half-open); give a later valid_until, or none")
    return start, end


def normalised(f: Fact) -> Fact:
    """``f`` with its text fields as the store keeps and compares them (``ValueError`` if one is unusable)."""
    head, relation, tail = (optional_text(v) or "" for v in (f.head, f.relation, f.tail))
    empty = [n for n, v in (("head", head), ("relation", relation), ("tail", tail)) if not v]
    if empty:
        raise ValueError(f"empty {' and '.join(empty)}")
    fact = msgspec.structs.replace(
        f, head=head, relation=relation, tail=tail, id=optional_text(f.id), source=optional_text(f.source),
        chunk_id=optional_text(f.chunk_id), valid_from=optional_text(f.valid_from),
        valid_until=optional_text(f.valid_until), text=None,
    )
    for name in ("id", *_CONTENT):
        check_text(name, getattr(fact, name))
    return fact


def fact_content(f: Fact) -> tuple:
    """What a fact says: two versions with equal content are the same statement (``recorded_at`` aside)."""
    return tuple(getattr(f, name) for name in _CONTENT)


def fact_key(f: Fact) -> str:
    """The chain a fact's versions form: its ``id``, else its content (so a reload finds it again).

    Encoded, not joined with a separator, so no value can run into the next; prefixed, so no ``id``
    can pass for the key of some content.
    """
    if f.id is not None:
        return "id:" + f.id
    return "content:" + hashlib.sha1(_encoder.encode(fact_content(f))).hexdigest()


def first_under_id(f: Fact, position: int, first: dict[str, int]) -> int | None:
    """Where an earlier fact under ``f``'s id was, when both leave ``recorded_at`` to the store.

    ``first`` maps each id to where its first such fact was, and learns ``f``'s. Were the second
    taken, the next load would find the first unchanged and the second a revision of it: a fact that
    flips on every reload. A fact carrying its own ``recorded_at`` is a version of its own: no part.
    """
    fact_id = optional_text(f.id)
    if not isinstance(fact_id, str) or f.recorded_at:
        return None
    kept = first.setdefault(fact_id, position)
    return kept if kept != position else None
