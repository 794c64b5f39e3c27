"""The default backend: no model, deterministic, offline. Same request, same answer.

- ``extract-concepts``: ``lines``: the question, then its concepts (``concepts.py``);
- ``document-prompt``: ``text``: the given sentences and facts most relevant
  to the question, each cited (``answer.py``);
- any other template: ``text``: the rendered template itself, which makes
  this backend a plain template filler.

The work is pure Python and grows with the input (a request may carry a
megabyte of documents), so it runs on one thread of this backend's own:
the event loop keeps serving other requests, and the default executor stays
free for the other processors of the process.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from schema import PromptResult

from . import answer, concepts
from .settings import ExtractiveSettings
from .variables import DOCUMENT_PROMPT, EXTRACT_CONCEPTS, PromptInput

NAME = "extractive"


class ExtractiveBackend:
    name = NAME

    def __init__(self, settings: ExtractiveSettings, max_concepts: int) -> None:
        self.settings = settings
        self.max_concepts = max_concepts
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-extractive")

    async def close(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    async def answer(self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None) -> PromptResult:
        """The answer; ``deadline`` is not needed here: the processor's time limit cancels the wait."""
        if self._executor is None:
            raise RuntimeError("the extractive backend is not started")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.answer_sync, template_id, prompt, inp)

    def answer_sync(self, template_id: str, prompt: str, inp: PromptInput) -> PromptResult:
        if template_id == EXTRACT_CONCEPTS:
            text = "\n".join(concepts.extract(inp.query, self.max_concepts))
            return PromptResult("lines", text, template_id=template_id, backend=NAME)
        if template_id == DOCUMENT_PROMPT:
            return PromptResult("text", answer.compose(inp, self.settings), template_id=template_id, backend=NAME)
        return PromptResult("text", prompt, template_id=template_id, backend=NAME)
