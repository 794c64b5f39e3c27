"""Instants, validity intervals and the snapshot header: the one place that reads a user's time.

Every time ragbus compares is an aware ``datetime`` in UTC, so a fact dated
``2021-12-08`` and a question asked ``at 2021-12-08T00:00:00+01:00`` compare
the way a reader expects. What is accepted:

- a ``datetime`` (a naive one means UTC), a ``date`` (its midnight, UTC);
- an ISO 8601 string: ``2023``, ``2023-06``, ``2023-06-01``,
  ``2023-06-01T12:00``, with seconds, fractions, ``Z`` or an offset.
  A reduced date means its first instant (``2023`` = 2023-01-01T00:00Z).

``bool`` (a ``date`` nowhere, though Python lets it pass for an int), numbers
and anything unparseable are refused with ``TimeError`` naming the value.

A validity interval is half-open, ``[valid_from, valid_until)``: a fact that
ends on the day its successor starts does not overlap it. A missing bound is
open. An interval whose end lies before its start is refused as inverted.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from .common import BadRequest

__all__ = [
    "DEFAULT_HEADER_TEMPLATE",
    "DEFAULT_SOURCE",
    "Instant",
    "TimeError",
    "covers",
    "iso",
    "parse_bound",
    "parse_instant",
    "parse_interval",
    "render_header",
]

Instant = datetime | date | str


class TimeError(BadRequest):
    """A time that cannot be read, or an interval that ends before it starts (a ``ValueError``)."""


_YEAR = re.compile(r"^([+-]?[0-9]{4})$")
_YEAR_MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")
# fromisoformat accepts digits of any script and stops reading at a NUL; neither is ISO 8601.
_NOT_ISO = re.compile(r"[^0-9A-Za-z:+\-.,_ ]")


def parse_instant(value: object, *, what: str = "time") -> datetime:
    """``value`` as an aware UTC datetime; ``what`` names it in the error."""
    if isinstance(value, bool) or value is None:
        raise TimeError(f"{what} must be an ISO 8601 date or datetime, got {value!r}")
    if isinstance(value, datetime):
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+01:00 is before the first instant Python has
            raise TimeError(f"{what} {value.isoformat()} is out of range in UTC") from None
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str):
        raise TimeError(f"{what} must be an ISO 8601 date or datetime, got {type(value).__name__} {value!r}")
    text = value.strip()
    try:
        if _NOT_ISO.search(text):
            raise ValueError(text)
        if m := _YEAR.match(text):
            return datetime(int(m.group(1)), 1, 1, tzinfo=UTC)
        if m := _YEAR_MONTH.match(text):
            return datetime(int(m.group(1)), int(m.group(2)), 1, tzinfo=UTC)
        # fromisoformat reads "Z", offsets, fractions and a lone date from 3.11 on; it also
        # reads compact forms like 20230601, which are ISO 8601 too.
        return parse_instant(datetime.fromisoformat(text), what=what)
    except (ValueError, OverflowError):
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise TimeError(f"{what} {shown!r} is not an ISO 8601 date or datetime") from None


def parse_bound(value: object, *, what: str = "bound") -> datetime | None:
    """An interval bound: ``None`` and ``""`` are open, anything else must parse."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return parse_instant(value, what=what)


def parse_interval(valid_from: object, valid_until: object) -> tuple[datetime | None, datetime | None]:
    """Both bounds, checked: ``TimeError`` if either is malformed or the interval is inverted."""
    start = parse_bound(valid_from, what="valid_from")
    end = parse_bound(valid_until, what="valid_until")
    if start is not None and end is not None and end < start:
        raise TimeError(f"inverted interval: valid_until {iso(end)} is before valid_from {iso(start)}")
    return start, end


def covers(start: datetime | None, end: datetime | None, at: datetime) -> bool:
    """Whether the half-open interval ``[start, end)`` holds ``at``; ``None`` bounds are open."""
    return (start is None or start <= at) and (end is None or at < end)


def iso(value: datetime) -> str:
    """The canonical text of an instant: ``2023-06-01T00:00:00Z``."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# The line a prompt puts above graph facts when the question names a time (document-rag and
# the kg library's ContextRetriever write the same header).
DEFAULT_HEADER_TEMPLATE = "Graph context valid as of {at_time} (source: {source})"
DEFAULT_SOURCE = "KnowledgeGraph snapshot"

_PLACEHOLDER = re.compile(r"\{(at_time|source)\}")


def render_header(template: str, at_time: Instant, source: str = DEFAULT_SOURCE) -> str:
    """``template`` with ``{at_time}`` (UTC ISO) and ``{source}`` filled in; any other brace is literal.

    One pass of plain substitution, never ``str.format``: a template or a
    source holding ``{0}``, ``{query}`` or ``{x.__class__}`` is text, and a
    source containing ``{at_time}`` is not expanded again.
    """
    if not isinstance(template, str):
        raise TypeError(f"header_template must be a str, got {type(template).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    values = {"at_time": iso(parse_instant(at_time, what="at_time")), "source": source}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
