"""tantivy's BM25 written out (its query/bm25.rs), and what its explanations of a score say.

tantivy-py scores only with the index's own statistics. A shard of a sharded collection that must score as
the one index holding every shard would reads, from tantivy's explanation of a chunk's score, each matched
clause's term frequency and field length, and scores them here with the whole collection's statistics.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import msgspec

K1 = 1.2  # term saturation
B = 0.75  # length normalisation
PHRASE = ("phrase",)  # the key of a phrase clause's part (a query has at most one)

_TERM = re.compile(r'Term=Term\(field=(\d+), type=Str, "(.*)"\)', re.DOTALL)
_ESCAPE = re.compile(r"\\(u\{([0-9a-fA-F]{1,6})\}|.)", re.DOTALL)
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t", "0": "\0"}
_FREQ, _LENGTH, _AVERAGE, _CHUNKS = "freq, occur", "dl, length", "avgdl, average", "N, total"
_FACTOR = "freq / (freq"


def idf(chunks: int, holding: int) -> float:
    """The idf of a term ``holding`` of ``chunks`` chunks hold."""
    return math.log(1.0 + (max(chunks - holding, 0) + 0.5) / (holding + 0.5))


def score(idf_: float, frequency: float, length: float, average_length: float) -> float:
    """BM25 of a clause whose terms' idf (summed, for a phrase) is ``idf_``, found ``frequency`` times in a
    field ``length`` tokens long (as tantivy stores it, one byte) whose average length is ``average_length``."""
    return idf_ * (1.0 + K1) * frequency / (frequency + K1 * (1.0 - B + B * length / average_length))


@dataclass(frozen=True, slots=True)
class Part:
    """One matched clause of an explained score: ``key`` (field number, term) or ``PHRASE``; its term
    frequency (a phrase's: how often the phrase occurs) and the field's length in the chunk, as tantivy used."""

    key: tuple
    frequency: float
    length: float


class _Node(msgspec.Struct):
    """A node of tantivy's explanation, as ``Explanation.to_json`` writes it."""

    value: float = 0.0
    description: str = ""
    details: list[_Node] = []
    context: list[str] = []


_DECODE = msgspec.json.Decoder(_Node).decode


def parts(explanation: str) -> list[Part]:
    """The matched clauses of tantivy's explanation (``Explanation.to_json``) of a boolean query's score."""
    tree = _DECODE(explanation)
    # As tantivy 0.25 explains: a sum of one node a matched clause, its term query's or phrase's, maybe boosted.
    children = tree.details if tree.description.startswith("BooleanClause") else [tree]
    read = [_part(child) for child in children]
    found = [part for part in read if part is not None]
    if len(found) == len(read):
        return found
    found = []  # nested otherwise: walked whole
    _walk(tree, None, found)
    return found


def totals(explanation: str) -> tuple[float, float] | None:
    """(N, avgdl) of a term query's explained score: the chunks the index counts (deleted ones its segments
    still hold too) and the average length of the term's field. None if it says neither."""
    tree = _DECODE(explanation)
    factor, idf_node = _first(tree, _FACTOR), _first(tree, "idf")
    chunks = None if idf_node is None else _detail(idf_node, _CHUNKS)
    average = None if factor is None else _detail(factor, _AVERAGE)
    return None if chunks is None or average is None else (chunks, average)


def _part(node: _Node) -> Part | None:
    while node.description.startswith("Boost") and node.details:
        node = node.details[0]
    if node.description == "Phrase Scorer" and node.details:
        key: tuple | None = PHRASE
        node = node.details[0]
    else:
        m = _TERM.fullmatch(node.context[0]) if node.context else None
        key = None if m is None else (int(m.group(1)), _unescape(m.group(2)))
    factor = node.details[-1] if node.details else None
    if key is None or factor is None or not factor.description.startswith(_FACTOR) or len(factor.details) < 4:
        return None
    frequency, length = factor.details[0], factor.details[3]
    if not frequency.description.startswith(_FREQ) or not length.description.startswith(_LENGTH):
        return None
    return Part(key, frequency.value, length.value)


def _walk(node: _Node, key: tuple | None, found: list[Part]) -> None:
    for context in node.context:
        if m := _TERM.fullmatch(context):
            key = (int(m.group(1)), _unescape(m.group(2)))
    if node.description == "Phrase Scorer":
        key = PHRASE
    if node.description.startswith(_FACTOR):
        frequency, length = _detail(node, _FREQ), _detail(node, _LENGTH)
        if key is not None and frequency is not None and length is not None:
            found.append(Part(key, frequency, length))
        return
    for child in node.details:
        _walk(child, key, found)


def _first(node: _Node, description: str) -> _Node | None:
    if node.description.startswith(description):
        return node
    for child in node.details:
        if (hit := _first(child, description)) is not None:
            return hit
    return None


def _detail(node: _Node, description: str) -> float | None:
    for child in node.details:
        if child.description.startswith(description):
            return child.value
    return None


def _unescape(debug: str) -> str:
    """A string as Rust's ``{:?}`` wrote it (between the quotes), back to itself."""
    def one(m: re.Match) -> str:
        if m.group(2) is not None:
            return chr(int(m.group(2), 16))
        return _ESCAPED.get(m.group(1), m.group(1))

    return _ESCAPE.sub(one, debug)
