"""What a document id may hold: no control character, no bidirectional override, embedding or isolate.

An id is shown wherever its document is: ``ragbus documents``, an answer's sources, the page, the
logs. One holding ESC would drive the terminal that prints it, a newline or NUL forge or cut a line,
U+202E show the id's end reversed. Such ids are refused where a document enters, in the ingestion
layer (``processors/ingestion/send.py``), naming the character and where it is. Titles and texts may
hold them; what prints one escapes them (``processors/cli/printable.py``).
"""

from __future__ import annotations

import unicodedata

from .common import BadRequest

# Bidirectional embeddings and overrides (U+202A-U+202E) and isolates (U+2066-U+2069): they reorder
# what follows them on screen, so an id could show as another. Marks (U+200E, U+200F) reorder nothing.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Unicode gives control characters no names; the ones an id is likeliest to carry, as terminals call them.
_CONTROL_NAMES = {0x00: "NUL", 0x07: "BELL", 0x08: "BACKSPACE", 0x09: "TAB", 0x0A: "LINE FEED (a newline)",
                  0x0D: "CARRIAGE RETURN", 0x1B: "ESCAPE", 0x7F: "DELETE"}


def is_control(char: str) -> bool:
    """Whether ``char`` (one character) is a control character (category Cc) or a bidirectional control."""
    return char in BIDI_CONTROLS or unicodedata.category(char) == "Cc"


def check_document_id(document_id: str) -> str:
    """``document_id`` if it holds no control character, else ``BadRequest`` naming the first and its place."""
    for place, char in enumerate(document_id, 1):
        if is_control(char):
            kind = "a bidirectional control" if char in BIDI_CONTROLS else "a control character"
            name = unicodedata.name(char, "") or _CONTROL_NAMES.get(ord(char), "")
            shown = document_id if len(document_id) <= 80 else document_id[:77] + "..."
            raise BadRequest(
                f"invalid document_id {shown!r}: it holds {kind}, U+{ord(char):04X}{' ' + name if name else ''}, "
                f"at character {place}; ids are printed wherever their document is shown, so they may hold "
                "no control characters (Unicode category Cc) and no bidirectional overrides or isolates"
            )
    return document_id
