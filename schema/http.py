"""The bodies of the HTTP gateway (``ragbus serve``): what its clients send and get besides the bus's own
Structs (``DocumentRagResponse``, ``KgQueryResponse``, ``IngestResult`` travel as they are).

The OpenAPI document the gateway serves is generated from these Structs and those, so
the HTTP schema and the bus schema cannot drift apart. The chat Structs are the subset
of OpenAI's chat-completions API that ragbus answers; unknown fields are ignored.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .changelog import ReplicaReport
from .common import Limit, MustSee
from .ingest import Superseded
from .rag import DocumentRagPiece, DocumentRagResponse, History
from .retrieval import DEFAULT_COLLECTION

Text = Annotated[str, msgspec.Meta(min_length=1)]


class AskRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/ask``. ``stream``: answer as Server-Sent Events (``sources``, ``answer`` deltas, ``final``).
    ``history``: the conversation before the question, oldest first (a follow-up is made standalone from it)."""

    question: Text
    mode: Literal["vector", "keyword", "hybrid"] | None = None
    at_time: str | None = None
    as_of: str | None = None  # the graph as recorded then (see DocumentRagRequest)
    doc_limit: Limit | None = None
    collection: str = DEFAULT_COLLECTION
    stream: bool = False
    history: History = []
    # With stores from the log: writes the answer must see (a document upload's ``seen``).
    must_see: MustSee = []


class DocumentUpload(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/documents`` as JSON (a file upload is ``multipart/form-data`` with ``file`` and these as fields)."""

    text: Text
    document_id: Text | None = None  # default: a hash of the text
    title: str = ""
    collection: str = DEFAULT_COLLECTION


class DocumentsQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``GET /v1/documents``'s query: a page of a collection's documents in id order (``after`` the last id
    of the page before), or the one ``document_id``."""

    collection: str = DEFAULT_COLLECTION
    after: str = ""
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 100
    document_id: str = ""


class CollectionList(msgspec.Struct, kw_only=True):
    """``GET /v1/collections``: the collections holding documents or a graph that the key may read."""

    collections: list[str] = []


class KeyScope(msgspec.Struct, kw_only=True):
    """``GET /v1/key``: what the request's API key may do, so a client (the page) offers only that.

    ``role``: ``read`` (ask, search, read the graph, list), ``ingest`` (also add and delete documents)
    or ``admin`` (every role), each including the one before; over ``collections`` (``*``: every one).
    With no keys configured every request may do everything: admin over ``*``."""

    role: Literal["read", "ingest", "admin"]
    collections: list[str]


class ProcessorStatus(msgspec.Struct, kw_only=True):
    """One processor topic of the wiring: its group's live members, what waits for it, its dead letters.

    None: the backend cannot tell (``waiting``: Kafka lag over the topic and its retry topic, Pulsar
    backlog; ``lag``: the same by partition, ``topic:N`` and ``retry-topic:N``)."""

    processor: str
    topic: str
    group: str
    members: int | None = None
    waiting: int | None = None
    lag: dict[str, int] | None = None
    oldest_s: float | None = None
    dead_letters: int = 0


class ShardHolder(msgspec.Struct, kw_only=True):
    """One replica of a shard, as its latest report says (``ReplicaReport``)."""

    host: str  # the host part of its replica id: its shard host's host id
    replica: str  # <processor>.shard-<k>@<host>:<data dir>
    behind: int | None = None  # records of the shard's partitions it had not applied; None: cannot count
    caught_up: bool = False
    reported_at: float = 0.0  # Unix time of the report


class ShardRow(msgspec.Struct, kw_only=True):
    """One shard of a sharded log, as its replicas last reported (``processors/runtime/shard_status.py``).

    ``owners``: the replicas whose host said it serves the shard, by host; none: no owner.
    More than one: a handover, or an owner that stopped without a word (its report grows old).
    ``standbys``: the replicas whose host keeps the shard without serving it: standbys, and an owner
    still catching up before it serves. ``ready``: an owner said it has caught up."""

    log_topic: str
    shard: int
    owners: list[ShardHolder] = []
    standbys: list[ShardHolder] = []
    ready: bool = False


class PipelineStatus(msgspec.Struct, kw_only=True):
    """``GET /v1/status`` (an admin key's) and ``ragbus status --json``: every processor topic of the wiring."""

    bus: str
    topics: list[ProcessorStatus] = []
    # With stores from the log: each running replica's latest report (how far it has applied its log).
    replicas: list[ReplicaReport] = []
    # With sharded query hosts: each shard of each sharded log, from those reports.
    shards: list[ShardRow] = []


class DocumentStored(msgspec.Struct, kw_only=True, omit_defaults=True):
    document_id: str
    collection: str
    chunks: int
    # Where the stores hold the document (an ask's ``must_see``): log tokens, or a write to a data dir's files.
    seen: list[str] = []
    # Another writer's version of the document is served instead (schema/ingest.py ``Superseded``).
    superseded: Superseded | None = None


class ErrorDetail(msgspec.Struct, kw_only=True):
    """``type``: ``ValidationError``, ``Unauthorized``, ``Overloaded``, ``Timeout``...; ``param``: the
    request field at fault (``$.question``), when one is."""

    type: str
    message: str
    param: str | None = None


class ErrorBody(msgspec.Struct, kw_only=True):
    """Every 4xx and 5xx answer of the gateway (the shape OpenAI clients read)."""

    error: ErrorDetail


class UploadLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A line of ``POST /v1/documents`` with ``Accept: application/x-ndjson``: a page as it is converted
    (``page`` of ``pages``, ``ocr``: read by OCR); the last line is ``stored`` (the 201 body) or ``error``
    (the 4xx/5xx body's detail) with the ``status`` the request would have had."""

    page: int | None = None
    pages: int | None = None
    ocr: bool | None = None
    stored: DocumentStored | None = None
    error: ErrorDetail | None = None
    status: int | None = None


class Health(msgspec.Struct, kw_only=True):
    status: str  # "ok" / "ready" / "starting" / "stopping"
    detail: str = ""


# -- OpenAI-compatible chat --------------------------------------------------------------------


class ChatMessage(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[dict] | None = None  # text, or OpenAI's list of parts (the text parts are read)


class ChatRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/chat/completions``. The last user message is the question; ``model`` picks the mode
    (``ragbus`` = the configured default, ``ragbus-vector``, ``ragbus-keyword``, ``ragbus-hybrid``).
    ragbus extras (``extra_body`` in the openai client): ``collection``, ``at_time``, ``doc_limit``."""

    model: str
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    stream: bool = False
    collection: str = DEFAULT_COLLECTION
    at_time: str | None = None
    doc_limit: Limit | None = None


class ChatReply(msgspec.Struct, kw_only=True):
    role: str = "assistant"
    content: str = ""


class ChatChoice(msgspec.Struct, kw_only=True):
    index: int = 0
    message: ChatReply
    finish_reason: str = "stop"


class ChatUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(msgspec.Struct, kw_only=True):
    """The answer keeps its ``[chunk-id]`` citations; ``ragbus`` is the whole ``DocumentRagResponse``
    (chunks with text, cited ids, facts, timings): the sources, in a field OpenAI clients pass through."""

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage = msgspec.field(default_factory=ChatUsage)
    ragbus: DocumentRagResponse | None = None


class ChatDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, kw_only=True):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    """One Server-Sent Event of a streamed chat answer; the last one (``finish_reason`` ``stop``)
    carries the whole ``DocumentRagResponse`` in ``ragbus``, the first one the sources (a ``sources`` piece)."""

    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    ragbus: DocumentRagPiece | None = None


class Model(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "ragbus"


class ModelList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[Model] = []
