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
