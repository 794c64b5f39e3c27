"""Requests and responses of prompt."""

from __future__ import annotations

import msgspec

from .common import Error

# A template variable is text or a list of texts (documents, facts).
Variable = str | list[str]


class PromptRequest(msgspec.Struct, kw_only=True):
    template_id: str
    variables: dict[str, Variable] = {}


class PromptResult(msgspec.Struct):
    """``response_type`` says what ``text`` is: ``text`` (an answer) or ``lines`` (one item per line).

    ``PromptResult("text", "Paris.")`` is valid; an error result has
    ``response_type="error"`` and an empty text.
    """

    response_type: str
    text: str
    template_id: str = ""
    backend: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: Error | None = None


class PromptPiece(msgspec.Struct, kw_only=True):
    """One piece of a streamed prompt answer (see ``processors/runtime/envelope.py``: ``seq``, ``final``).

    Every piece but the last carries ``text``, the next part of the answer; the
    pieces' texts joined are the answer as the model wrote it. The last piece
    carries ``result``: the whole ``PromptResult`` a non-streaming call gets
    (its text cleaned up as the backend does for that call, its token counts),
    or only ``error`` when the request failed.
    """

    text: str = ""
    result: PromptResult | None = None
    error: Error | None = None
