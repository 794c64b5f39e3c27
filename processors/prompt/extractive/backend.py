"""The default backend: no model, deterministic, offline. Same request, same answer.

- ``extract-concepts``: ``lines``: the question, then its concepts (``concepts.py``);
- ``document-prompt``: ``text``: the given sentences and facts most relevant
  to the question, each cited (``answer.py``);
- ``condense-question``: ``text``: the follow-up made standalone from the
  conversation's earlier questions (``condense.py``);
- any other template: ``text``: the rendered template itself, which makes
  this backend a plain template filler.

Streamed, a ``document-prompt`` answer comes one cited sentence (or fact)
a piece, each line with its newline; any other answer in one piece.

The work is pure Python and grows with the input (a request may carry a
megabyte of documents), so it runs on one thread of this backend's own:
the event loop keeps serving other requests, and the default executor stays
free for the other processors of the process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ragbus.runtime.threads import OneThread
from ragbus.schema import PromptPiece, PromptResult

from . import answer, concepts, condense
from ..settings import ExtractiveSettings
from ..variables import CONDENSE_QUESTION, DOCUMENT_PROMPT, EXTRACT_CONCEPTS, PromptInput

NAME = "extractive"


class ExtractiveBackend:
    name = NAME

    def __init__(self, settings: ExtractiveSettings, max_concepts: int) -> None:
        self.settings = settings
        self.max_concepts = max_concepts
        self._thread: OneThread | None = None  # from start to close

    async def start(self) -> None:
        self._thread = OneThread("prompt-extractive")

    async def close(self) -> None:
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await thread.close(cancel_pending=True)

    async def answer(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> PromptResult:
        """The answer; ``deadline`` is not needed here: the processor's time limit cancels the wait."""
        if self._thread is None:
            raise RuntimeError("the extractive backend is not started")
        return await self._thread.run(self.answer_sync, template_id, prompt, inp)

    async def stream(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> AsyncIterator[PromptPiece]:
        """The answer a line a piece, then the whole result."""
        if self._thread is None:
            raise RuntimeError("the extractive backend is not started")
        lines = await self._thread.run(self.lines_sync, template_id, prompt, inp)
        for i, line in enumerate(lines):
            yield PromptPiece(text=line if i == len(lines) - 1 else line + "\n")
        kind = "lines" if template_id == EXTRACT_CONCEPTS else "text"
        yield PromptPiece(result=PromptResult(kind, "\n".join(lines), template_id=template_id, backend=NAME))

    def lines_sync(self, template_id: str, prompt: str, inp: PromptInput) -> list[str]:
        if template_id == DOCUMENT_PROMPT:
            return answer.compose_lines(inp, self.settings)
        return [self.answer_sync(template_id, prompt, inp).text]

    def answer_sync(self, template_id: str, prompt: str, inp: PromptInput) -> PromptResult:
        if template_id == EXTRACT_CONCEPTS:
            text = "\n".join(concepts.extract(inp.query, self.max_concepts))
            return PromptResult("lines", text, template_id=template_id, backend=NAME)
        if template_id == DOCUMENT_PROMPT:
            return PromptResult("text", answer.compose(inp, self.settings), template_id=template_id, backend=NAME)
        if template_id == CONDENSE_QUESTION:
            history = inp.raw.get("history", [])
            text = condense.standalone(inp.query, history if isinstance(history, list) else [])
            return PromptResult("text", text, template_id=template_id, backend=NAME)
        return PromptResult("text", prompt, template_id=template_id, backend=NAME)
