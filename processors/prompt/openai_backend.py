"""The model backend: any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp's server).

One ``POST {base_url}/chat/completions`` per request, the rendered template
as the only (user) message. Token counts come from the answer's ``usage``
(0 when the server sends none).

Failures (retries of 429, 5xx and failed connections; none of other 4xx
or read timeouts; no sleep past the request's deadline) are handled by
``processors.runtime.http.OpenAIEndpoint``, shared with the embed backend:
every one is an ``EndpointError`` naming the URL, the status and the
server's message.

``extract-concepts`` answers are lines: the model's non-blank lines, list
markers removed, each once, the question first (prepended when the model
left it out), at most ``max_concepts`` after it.
"""

from __future__ import annotations

import re

import msgspec

from processors.runtime.http import EndpointError, OpenAIEndpoint, retry_after_s
from schema import PromptResult

from .settings import OpenAISettings
from .variables import EXTRACT_CONCEPTS, PromptInput, one_line

# EndpointError and retry_after_s moved to runtime.http; still importable from here, where callers found them.
__all__ = ["NAME", "EndpointError", "OpenAIBackend", "concept_lines", "retry_after_s"]

NAME = "openai"

_LIST_MARKER = re.compile(r"^(?:[-*•+]|\d+[.)])\s+")


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Answer(msgspec.Struct):
    choices: list[_Choice]
    usage: _Usage | None = None


def concept_lines(text: str, question: str, limit: int) -> list[str]:
    """The model's concepts as lines, the question first, each once, at most ``limit`` after it."""
    first = one_line(question)
    lines, seen = [first], {first.casefold()}
    for raw in text.splitlines():
        line = one_line(_LIST_MARKER.sub("", raw.strip()))
        if line and line.casefold() not in seen:
            seen.add(line.casefold())
            lines.append(line)
    return lines[: limit + 1]


class OpenAIBackend:
    name = NAME

    def __init__(self, settings: OpenAISettings, max_concepts: int) -> None:
        self.settings = settings
        self.max_concepts = max_concepts
        url = settings.base_url.rstrip("/") + "/chat/completions"
        self.endpoint = OpenAIEndpoint(url, settings.api_key, settings.timeout_s, retry=settings)

    async def start(self) -> None:
        await self.endpoint.start()

    async def close(self) -> None:
        await self.endpoint.close()

    async def answer(self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None) -> PromptResult:
        text, usage = await self.complete(prompt, deadline)
        if template_id == EXTRACT_CONCEPTS:
            lines = concept_lines(text, inp.query, self.max_concepts)
            return self._result("lines", "\n".join(lines), template_id, usage)
        return self._result("text", text.strip(), template_id, usage)

    def _result(self, kind: str, text: str, template_id: str, usage: _Usage) -> PromptResult:
        return PromptResult(
            kind,
            text,
            template_id=template_id,
            backend=NAME,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )

    async def complete(self, prompt: str, deadline: float | None = None) -> tuple[str, _Usage]:
        """The model's reply to ``prompt`` and its usage; ``deadline`` is on the event loop's clock."""
        s = self.settings
        body = {
            "model": s.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            "stream": False,
        }
        return _parse(self.endpoint, await self.endpoint.post_json(body, deadline))


def _parse(endpoint: OpenAIEndpoint, content: bytes) -> tuple[str, _Usage]:
    try:
        answer = msgspec.json.decode(content, type=_Answer)
    except msgspec.DecodeError as exc:
        raise endpoint.error(f"unexpected answer: {exc}") from None
    if not answer.choices:
        raise endpoint.error("the answer has no choices")
    return answer.choices[0].message.content or "", answer.usage or _Usage()

