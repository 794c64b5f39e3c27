"""OpenAI-compatible chat: a chat request becomes a document-rag question, its answer a chat completion.

- ``model``: ``ragbus`` (the configured default mode) or ``ragbus-vector``,
  ``ragbus-keyword``, ``ragbus-hybrid``;
- the question is the last user message (its text parts, when it is a list); the user and
  assistant messages before it are its ``history``, so a follow-up is made standalone
  (system messages are not part of it);
- the answer keeps its ``[chunk-id]`` citations; the whole ``DocumentRagResponse`` travels
  in the extra field ``ragbus`` (streamed: the ``sources`` piece on the first chunk, the
  final response on the last).
"""

from __future__ import annotations

import os
import time

from schema import MAX_TURNS, DocumentRagPiece, DocumentRagRequest, DocumentRagResponse, Turn
from schema.http import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChatMessage,
    ChatReply,
    ChatRequest,
    Model,
    ModelList,
)

from .errors import HTTPError

MODELS = {"ragbus": None, "ragbus-vector": "vector", "ragbus-keyword": "keyword", "ragbus-hybrid": "hybrid"}


def models() -> ModelList:
    return ModelList(data=[Model(id=name) for name in MODELS])


def question_of(chat: ChatRequest) -> DocumentRagRequest:
    if chat.model not in MODELS:
        raise HTTPError(404, "model_not_found", f"unknown model {chat.model[:100]!r}; use one of {', '.join(MODELS)}",
                        "$.model")
    for i in range(len(chat.messages) - 1, -1, -1):
        m = chat.messages[i]
        if m.role != "user":
            continue
        text = _text(m)
        if not text.strip():
            raise HTTPError(400, "ValidationError", "the last user message has no text", f"$.messages[{i}].content")
        history = [Turn(role="user" if e.role == "user" else "assistant", content=_text(e)) for e in chat.messages[:i]
                   if e.role in ("user", "assistant") and _text(e).strip()][-MAX_TURNS:]
        return DocumentRagRequest(query=text, mode=MODELS[chat.model], at_time=chat.at_time,
                                  doc_limit=chat.doc_limit, collection=chat.collection, history=history)
    raise HTTPError(400, "ValidationError", "no message has role 'user': the last user message is the question",
                    "$.messages")


def _text(message: ChatMessage) -> str:
    if isinstance(message.content, list):
        return " ".join(str(p.get("text", "")) for p in message.content if p.get("type") == "text")
    return message.content or ""


def _id() -> str:
    return f"chatcmpl-{os.urandom(12).hex()}"


def completion(chat: ChatRequest, r: DocumentRagResponse) -> ChatCompletion:
    return ChatCompletion(id=_id(), created=int(time.time()), model=chat.model,
                          choices=[ChatChoice(message=ChatReply(content=r.answer))], ragbus=r)


class ChunkMaker:
    """The chunks of one streamed completion: one id, one clock."""

    def __init__(self, chat: ChatRequest) -> None:
        self.id, self.created, self.model = _id(), int(time.time()), chat.model

    def chunk(self, delta: ChatDelta, finish: str | None = None, piece: DocumentRagPiece | None = None):
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                   choices=[ChatChunkChoice(delta=delta, finish_reason=finish)], ragbus=piece)

    def of(self, piece: DocumentRagPiece) -> ChatCompletionChunk:
        if piece.kind == "sources":
            return self.chunk(ChatDelta(role="assistant", content=""), piece=piece)
        if piece.kind == "answer":
            return self.chunk(ChatDelta(content=piece.text))
        return self.chunk(ChatDelta(), "stop", piece)
