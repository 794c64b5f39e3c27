"""The prompt processor: a template id and its variables to text, with the backend its settings name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import msgspec

from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.threads import OneThread
from ragbus.schema import PromptPiece, PromptRequest, PromptResult

from . import templates, variables

from .extractive import answer
from .settings import PromptSettings
from .templates import Template
from .variables import PromptInput


class Backend(Protocol):
    name: str  # what PromptResult.backend says

    async def start(self) -> None: ...

    async def answer(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> PromptResult:
        """The result for the rendered ``prompt``; ``deadline`` is on the event loop's clock."""
        ...

    def stream(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> AsyncIterator[PromptPiece]:
        """The same answer in pieces of text, then one piece carrying the whole result."""
        ...

    async def close(self) -> None: ...


def make_backend(settings: PromptSettings) -> Backend:
    # Imported here: each backend's dependencies load only when it is chosen.
    if settings.backend == "extractive":
        from .extractive.backend import ExtractiveBackend

        return ExtractiveBackend(settings.extractive, settings.max_concepts)
    if settings.backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(settings.openai, settings.max_concepts)
    raise ValueError(f"unknown prompt backend {settings.backend!r}; expected 'extractive' or 'openai'")


def load_templates(settings: PromptSettings) -> dict[str, Template]:
    """Every template of the settings' directory, checked; ``TemplateError`` names the first bad one."""
    directory = Path(settings.templates_dir).expanduser() if settings.templates_dir else templates.DEFAULT_DIR
    allowed_for, default_allowed = variables.allowed_names(settings.template_variables)
    return templates.load_dir(directory, allowed_for, default_allowed)


class PromptProcessor(Processor[PromptRequest, PromptResult]):
    request_type = PromptRequest
    response_type = PromptResult
    piece_type = PromptPiece
    Settings = PromptSettings

    settings: PromptSettings

    def __init__(self, name: str, settings: PromptSettings) -> None:
        super().__init__(name, settings)
        self.templates: dict[str, Template] = {}
        self.backend: Backend | None = None
        # With a model that reads whole sentences (openai context "sentences"): where they are chosen,
        # off the event loop (a request may carry a megabyte of documents).
        self._narrowing: OneThread | None = None

    async def start(self) -> None:
        # A broken template stops the start: better than an error on every request that uses it.
        self.templates = load_templates(self.settings)
        backend = make_backend(self.settings)
        try:
            await backend.start()
        except BaseException:
            await backend.close()  # the base calls close() only after a successful start()
            raise
        self.backend = backend
        if self.settings.backend == "openai" and self.settings.openai.context == "sentences":
            self._narrowing = OneThread("prompt-context")

    async def close(self) -> None:
        if self.backend is not None:
            backend, self.backend = self.backend, None
            await backend.close()
        if self._narrowing is not None:
            thread, self._narrowing = self._narrowing, None
            await thread.close(cancel_pending=True)

    async def handle(self, request: PromptRequest, context: RequestContext) -> PromptResult:
        prepared = await self._prepare(request)
        if isinstance(prepared, PromptResult):
            return prepared
        assert self.backend is not None
        template, prompt, inp = prepared
        return await self.backend.answer(template.template_id, prompt, inp, self.handler_deadline(context))

    async def stream(self, request: PromptRequest, context: RequestContext) -> AsyncIterator[PromptPiece]:
        prepared = await self._prepare(request)
        if isinstance(prepared, PromptResult):
            yield PromptPiece(error=prepared.error)
            return
        assert self.backend is not None
        template, prompt, inp = prepared
        async for piece in self.backend.stream(template.template_id, prompt, inp, self.handler_deadline(context)):
            yield piece

    def is_final(self, piece: PromptPiece) -> bool:
        return piece.result is not None

    async def _prepare(self, request: PromptRequest) -> tuple[Template, str, PromptInput] | PromptResult:
        """The template, rendered prompt and checked input; or the refusal of a bad request."""
        if self.backend is None:
            raise RuntimeError(f"{self.name} is not started")
        # The caller's mistakes are answered as such, not logged as failures of this processor.
        try:
            template = templates.lookup(self.templates, request.template_id)
            inp = variables.check(template, request.variables)
        except templates.UnknownTemplate as exc:
            return self._refuse(request, "UnknownTemplate", str(exc))
        except variables.VariablesError as exc:  # on the wire as a request that does not validate
            return self._refuse(request, "ValidationError", str(exc))
        if self._narrowing is not None and template.placeholders & {"documents", "facts"}:
            # the model reads what an answer could be made of: whole sentences, each once, and the
            # facts that match the question, not every chunk as retrieval cut it
            inp = await self._narrowing.run(
                answer.narrowed, inp, self.settings.extractive, self.settings.openai.context_sentences
            )
        return template, template.render(inp.values(template.placeholders)), inp

    def _refuse(self, request: PromptRequest, error_type: str, message: str) -> PromptResult:
        refused = self._bad_request(error_type, message)
        return msgspec.structs.replace(refused, template_id=request.template_id[:200])
