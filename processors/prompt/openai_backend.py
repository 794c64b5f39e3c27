"""The model backend: any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp's server).

One ``POST {base_url}/chat/completions`` per request, the rendered template
as the only (user) message. Token counts come from the answer's ``usage``
(0 when the server sends none).

Failures (retries of 429, 5xx and failed connections; none of other 4xx
or read timeouts; no sleep past the request's deadline) are handled by
``ragbus.runtime.http.OpenAIEndpoint``, shared with the embed backend:
every one is an ``EndpointError`` naming the URL, the status and the
server's message.

``extract-concepts`` answers are lines: the model's non-blank lines, list
markers removed, each once, the question first (prepended when the model
left it out), at most ``max_concepts`` after it. ``condense-question`` answers
are the rewritten question: the model's first line, without a label or quotes
(``condense.model_line``).

Streamed (``stream``), the same POST asks ``"stream": true`` and each
content delta of the server's Server-Sent Events becomes a piece as it
arrives; the final piece carries the whole result, its text stripped as the
non-streamed call strips it, token counts from the last chunk's ``usage``
when the server sends one (``stream_options.include_usage``). A stream that
ends without a ``finish_reason`` was cut short (llama.cpp's server does that
to a stream when another request arrives, unless ``--interrupt_requests
false``) and is an error, not a shorter answer.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import msgspec

from ragbus.runtime.http import EndpointError, OpenAIEndpoint, retry_after_s
from ragbus.schema import PromptPiece, PromptResult


from .extractive import condense
from .settings import OpenAISettings
from .variables import CONDENSE_QUESTION, EXTRACT_CONCEPTS, PromptInput, one_line

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


class _Delta(msgspec.Struct):
    content: str | None = None


class _ChunkChoice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """One Server-Sent Event of a streamed chat completion."""

    choices: list[_ChunkChoice] = []
    usage: _Usage | None = None
    error: dict | str | None = None  # a server that fails after the 200 (llama.cpp: context too long) says so here


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

    async def answer(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> PromptResult:
        text, usage = await self.complete(prompt, deadline)
        if template_id == EXTRACT_CONCEPTS:
            lines = concept_lines(text, inp.query, self.max_concepts)
            return self._result("lines", "\n".join(lines), template_id, usage)
        if template_id == CONDENSE_QUESTION:
            return self._result("text", condense.model_line(text, inp.query), template_id, usage)
        return self._result("text", text.strip(), template_id, usage)

    async def stream(
        self, template_id: str, prompt: str, inp: PromptInput, deadline: float | None = None
    ) -> AsyncIterator[PromptPiece]:
        """The model's text as it writes it, then the whole result; concepts (lines) come whole at the end."""
        s = self.settings
        body = {
            "model": s.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        parts: list[str] = []
        usage = _Usage()
        finished = False
        async with self.endpoint.post_stream(body, deadline) as answer:
            async for line in answer.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = msgspec.json.decode(data, type=_Chunk)
                except msgspec.DecodeError as exc:
                    raise self.endpoint.error(f"unexpected stream event: {exc}") from None
                if chunk.error is not None:
                    message = chunk.error.get("message", chunk.error) if isinstance(chunk.error, dict) else chunk.error
                    raise self.endpoint.error(f"the stream failed: {str(message)[:500]}")
                usage = chunk.usage or usage
                finished = finished or any(c.finish_reason for c in chunk.choices)
                text = "".join(c.delta.content or "" for c in chunk.choices if c.delta is not None)
                if not text:
                    continue
                if not parts:
                    text = text.lstrip()  # the whole answer is stripped; so is its beginning
                    if not text:
                        continue
                parts.append(text)
                if template_id != EXTRACT_CONCEPTS:
                    yield PromptPiece(text=text)
        if not finished:
            # llama.cpp's server ends a stream it interrupts (another request came) with [DONE] too:
            # without a finish_reason, what came is not the whole answer.
            raise self.endpoint.error("the stream ended before the answer did (no finish_reason)")
        text = "".join(parts)
        if template_id == EXTRACT_CONCEPTS:
            lines = "\n".join(concept_lines(text, inp.query, self.max_concepts))
            result = self._result("lines", lines, template_id, usage)
        elif template_id == CONDENSE_QUESTION:
            result = self._result("text", condense.model_line(text, inp.query), template_id, usage)
        else:
            result = self._result("text", text.strip(), template_id, usage)
        yield PromptPiece(result=result)

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

