"""Entity linking: which known entity names a question mentions.

A question and a name are compared as token tuples, both made by ``normalise``:

- Unicode NFKC, then case-folded (``Straße`` = ``strasse``, ``ＺÜRICH`` =
  ``zürich``), then NFKC again (folding can undo composition);
- a token is a run of word characters: letters, digits, ``_`` and combining
  marks, so ``Zürich`` (precomposed or not), ``São`` and ``हिन्दी`` each stay
  one word;
- everything else separates tokens, apostrophes, hyphens and dots included:
  ``Côte d'Ivoire`` is ``côte d ivoire``, ``Baden-Württemberg`` is ``baden
  württemberg``, ``U.S.`` is ``u s``. That way a possessive still links
  (``Germany's`` contains the token ``germany``) and a name written with a
  typographic apostrophe (``d’Ivoire``) or a space for the hyphen matches
  the same name written with ASCII punctuation.

Scripts written without spaces (Chinese, Japanese, Thai) give one token per
run of characters; names in them link only as whole runs.

A name links where its tokens occur as a contiguous run of the question's
tokens. Longer names win: matches are claimed longest first (then leftmost),
and a match overlapping a claimed span is discarded, so "new york city" links
before "york" and its "york" cannot link again (a "york" elsewhere in the
question still does). Every raw name sharing a linked normalised form is
linked ("Zürich" and "ZÜRICH" both).

Result order: by the position of the name's first linked mention in the
question, then by raw name (code point order); it does not depend on the
order in which names were given.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["EntityLinker", "link_entities", "normalise"]

Tokens = tuple[str, ...]

_NON_WORD = re.compile(r"\W")


def _keep_marks(match: re.Match[str]) -> str:
    # Python's \w leaves out combining marks (Devanagari vowel signs, a decomposed accent NFKC
    # could not compose); they belong to the word they sit on. Every other non-word char splits.
    char = match.group()
    return char if unicodedata.category(char).startswith("M") else " "


def normalise(text: str) -> Tokens:
    """The tokens of ``text`` as linking compares them; names and questions alike."""
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__} {text!r}")
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return tuple(_NON_WORD.sub(_keep_marks, folded).split())


class EntityLinker:
    """An index of known names that links a question in time independent of how many there are.

    Names are indexed by their normalised token tuple, and each first token
    remembers the token lengths of the names starting with it. Linking looks
    up, at each question position, only those lengths: its cost grows with the
    question, not with the number of names. ``add`` and ``discard`` are
    incremental. Not safe to change from one thread while another links.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._aliases: dict[Tokens, set[str]] = {}
        self._lengths: dict[str, Counter[int]] = {}
        for name in names:
            self.add(name)

    def __len__(self) -> int:
        """How many distinct raw names are known."""
        return sum(len(raws) for raws in self._aliases.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._aliases.get(normalise(name), ())

    def add(self, name: str) -> bool:
        """Know ``name``; False when it has no token (blank, punctuation only) and is ignored."""
        key = normalise(name)
        if not key:
            return False
        raws = self._aliases.get(key)
        if raws is None:
            raws = self._aliases[key] = set()
            self._lengths.setdefault(key[0], Counter())[len(key)] += 1
        raws.add(name)
        return True

    def discard(self, name: str) -> None:
        """Forget ``name`` (its aliases stay); nothing happens when it is unknown."""
        key = normalise(name)
        raws = self._aliases.get(key)
        if raws is None or name not in raws:
            return
        raws.discard(name)
        if not raws:
            del self._aliases[key]
            lengths = self._lengths[key[0]]
            lengths[len(key)] -= 1
            if not lengths[len(key)]:
                del lengths[len(key)]
            if not lengths:
                del self._lengths[key[0]]

    def link(self, question: str) -> list[str]:
        """The raw names the question mentions, in the order the module docstring gives."""
        tokens = normalise(question)
        matches: list[tuple[int, int, Tokens]] = []
        for start, token in enumerate(tokens):
            for length in self._lengths.get(token, ()):
                span = tokens[start : start + length]
                if len(span) == length and span in self._aliases:
                    matches.append((length, start, span))
        matches.sort(key=lambda m: (-m[0], m[1]))
        claimed = [False] * len(tokens)
        first_mention: dict[Tokens, int] = {}
        for length, start, key in matches:
            if any(claimed[start : start + length]):
                continue
            claimed[start : start + length] = [True] * length
            first_mention[key] = min(start, first_mention.get(key, start))
        linked = [(start, raw) for key, start in first_mention.items() for raw in self._aliases[key]]
        return [raw for _, raw in sorted(linked)]


def link_entities(question: str, entities: Iterable[str]) -> list[str]:
    """The names among ``entities`` that ``question`` mentions; see the module docstring for the rules."""
    return EntityLinker(entities).link(question)
