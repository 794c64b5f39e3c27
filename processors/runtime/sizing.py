"""Splitting work into messages that fit the bus: how much a body may hold, and packing items into bodies.

The bus refuses a body over ``max_message_bytes`` (``Bus.check_size``), and
a broker whose own limit is about that size also counts the envelope's
headers and its record framing, so a sender that splits work keeps room for
them. Document-load packs its store writes with this, and ``ragbus ingest``
cuts large documents into parts with it: one rule for both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

# The envelope's headers take about 300 bytes and a broker's record framing a few dozen;
# this leaves ample room for both (an eighth of a limit smaller than 32 KB).
HEADER_ROOM = 4096


def body_budget(max_message_bytes: int) -> int:
    """The bytes a body may take on a bus with this limit, leaving room for headers."""
    return max_message_bytes - min(HEADER_ROOM, max_message_bytes // 8)


def pack(sizes: Sequence[int], budget: int, *, overhead: int = 0, max_items: int | None = None) -> Iterator[range]:
    """Consecutive runs of items (as index ranges) whose sizes, plus ``overhead`` per run, fit ``budget``.

    At most ``max_items`` items a run. An item that does not fit even alone
    raises ``ValueError`` naming its size, since no split can send it.
    """
    start, used = 0, overhead
    for i, size in enumerate(sizes):
        if overhead + size > budget:
            raise ValueError(f"item {i} takes {size} bytes, more than the {budget - overhead} a message has room for")
        full = max_items is not None and i - start >= max_items
        if i > start and (used + size > budget or full):
            yield range(start, i)
            start, used = i, overhead
        used += size
    if start < len(sizes):
        yield range(start, len(sizes))
