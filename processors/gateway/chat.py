"""OpenAI-compatible chat: a chat request becomes a document-rag question, its answer a chat completion.

- ``model``: ``ragbus`` (the configured default mode) or ``ragbus-vector``,
  ``ragbus-keyword``, ``ragbus-hybrid``;
- the question is the last user message (its text parts, when it is a list); the user and
  assistant messages before it are its ``history``, so a follow-up is made standalone
  (system messages are not part of it); a message of no chat role (``ROLES``) is refused
  naming it, and a question over document-rag's ``max_query_chars`` naming that limit;
- the answer keeps its ``[chunk-id]`` citations; the whole ``DocumentRagResponse`` travels
  in the extra field ``ragbus`` (streamed: the ``sources`` piece on the first chunk, the
  final response on the last).
"""

from __future__ import annotations

import os
import time

from ragbus.schema import MAX_TURNS, DocumentRagPiece, DocumentRagRequest, DocumentRagResponse, Turn
from ragbus.schema.http import (
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
from .pipeline import QuestionTooLong, too_long

MODELS = {"ragbus": None, "ragbus-vector": "vector", "ragbus-keyword": "keyword", "ragbus-hybrid": "hybrid"}
ROLES = ("system", "developer", "user", "assistant", "tool", "function")  # the roles of OpenAI's chat messages


def models() -> ModelList:
    return ModelList(data=[Model(id=name) for name in MODELS])


def question_of(chat: ChatRequest, max_chars: int | None = None) -> DocumentRagRequest:
    """The question the chat asks; ``max_chars``: document-rag's question limit (None: its answer says)."""
    if chat.model not in MODELS:
        raise HTTPError(404, "model_not_found", f"unknown model {chat.model[:100]!r}; use one of {', '.join(MODELS)}",
                        "$.model")
    for i, m in enumerate(chat.messages):
        if m.role not in ROLES:
            roles = f"{', '.join(ROLES[:-1])} and {ROLES[-1]}"
            raise HTTPError(400, "ValidationError", f"message {i} has role {m.role[:40]!r}, which is no chat role: "
                            f"the roles are {roles} (the last user message is the question)", f"$.messages[{i}].role")
    for i in range(len(chat.messages) - 1, -1, -1):
        m = chat.messages[i]
        if m.role != "user":
            continue
        text = _text(m)
        if not text.strip():
            raise HTTPError(400, "ValidationError", "the last user message has no text", f"$.messages[{i}].content")
        if max_chars is not None and len(text) > max_chars:
            raise HTTPError(400, QuestionTooLong.__name__, too_long(len(text), max_chars, "the question, the last user "
                                                             "message,"), f"$.messages[{i}].content")
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
