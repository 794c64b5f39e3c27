"""The embed processor over the in-process bus, through EmbedClient: the real model, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from ragbus.config.settings import SettingsError, load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.embed import EmbedProcessor, EmbedSettings, OnnxSettings, OpenAISettings
from ragbus.embed.onnx_backend import BULK_NICENESS, ModelError, OnnxBackend, default_vocab_path, load_vocab
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import EmbedClient, RemoteError
from ragbus.runtime.worker import build_processor

from ..helpers.openai_stand_in import OpenAIStandIn, error
from ..helpers.serving import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUESTION = "How do I define a function in Python?"
PARAPHRASE = "What is the syntax to write a Python function?"
UNRELATED = "The cat sat on the mat"


@contextlib.asynccontextmanager
async def serve(processor: EmbedProcessor):
    """An EmbedClient talking to ``processor`` on a private memory bus."""
    name = f"embed-{uuid.uuid4().hex[:12]}"
    bus = await connect(f"memory://{name}")
    try:
        async with serving(bus, processor), RequestClient(bus) as client:
            yield EmbedClient(client, topic=processor.settings.topic, timeout=60)
    finally:
        await bus.close()
        drop_memory_broker(name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def embed():
    """One processor for the module: the model loads once. Small batches, so orders cross batches."""
    settings = EmbedSettings(topic="embed", group="embed", onnx=OnnxSettings(batch_size=3))
    async with serve(EmbedProcessor("embed", settings)) as client:
        yield client


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_vectors_are_384_dimensional_unit_vectors(embed):
    vectors = await embed.embed([QUESTION, UNRELATED])
    assert len(vectors) == 2
    for v in vectors:
        assert len(v) == 384
        assert abs(np.linalg.norm(v) - 1.0) < 1e-5


async def test_a_paraphrase_is_much_closer_than_an_unrelated_sentence(embed):
    q, p, u = await embed.embed([QUESTION, PARAPHRASE, UNRELATED])
    assert cosine(q, p) > 0.7
    assert cosine(q, u) < 0.2 and cosine(p, u) < 0.2
    assert cosine(q, p) - cosine(q, u) > 0.5


async def test_results_are_in_input_order_whatever_the_lengths(embed):
    texts = [
        "word " * 400,  # truncated to 256 tokens
        "a",
        UNRELATED,
        "",
        QUESTION + " " + PARAPHRASE * 5,
        "zebra",
        PARAPHRASE,
    ]
    together = await embed.embed(texts)
    alone = [(await embed.embed([t]))[0] for t in texts]
    assert len(together) == len(texts)
    for i, (a, b) in enumerate(zip(together, alone, strict=True)):
        assert cosine(a, b) > 0.99999, f"text {i} got another text's vector"
    # and shuffled: each text keeps its vector
    reordered = await embed.embed(list(reversed(texts)))
    assert np.allclose(reordered, together[::-1], atol=1e-6)


async def test_the_same_texts_give_the_same_vectors_twice(embed):
    texts = [QUESTION, UNRELATED, "déjà vu in Zürich", "東京"]
    first = await embed.embed(texts)
    second = await embed.embed(texts)
    assert first == second


async def test_an_empty_list_gives_no_vectors(embed):
    assert await embed.embed([]) == []


async def test_empty_and_blank_texts_are_embedded(embed):
    vectors = await embed.embed(["", "   \n\t", QUESTION])
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert abs(np.linalg.norm(vectors[0]) - 1.0) < 1e-5
    assert cosine(vectors[0], vectors[1]) > 0.999  # both are just [CLS] [SEP]


async def test_a_text_over_max_chars_is_refused_naming_it(embed):
    with pytest.raises(RemoteError) as caught:
        await embed.embed(["fine", "x" * 100_001])
    assert caught.value.error.type == "BadRequest"
    assert "text 1 has 100001 characters" in caught.value.error.message
    assert "max_chars=100000" in caught.value.error.message
    assert len((await embed.embed(["x" * 100_000]))[0]) == 384  # the limit itself is allowed


async def test_more_texts_than_max_batch_are_refused(embed):
    with pytest.raises(RemoteError) as caught:
        await embed.embed(["a"] * 257)
    assert caught.value.error.type == "BadRequest"
    assert "257 texts" in caught.value.error.message and "max_batch=256" in caught.value.error.message
    assert len(await embed.embed(["a"] * 256)) == 256


async def test_the_event_loop_keeps_running_while_the_model_works(embed):
    lags = []

    async def ticker(stop: asyncio.Event):
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    stop = asyncio.Event()
    tick = asyncio.ensure_future(ticker(stop))
    started = time.perf_counter()
    await embed.embed([f"{i} " + "long text to embed " * 60 for i in range(24)])
    took = time.perf_counter() - started
    stop.set()
    await tick
    assert took > 0.3  # long enough for a blocked loop to show
    assert max(lags) < 0.2, f"the loop stalled {max(lags):.3f}s while embedding for {took:.2f}s"


@pytest.mark.timeout(900)
async def test_a_question_is_embedded_while_a_bulk_load_is_still_being_embedded():
    """The bulk lane (ingestion's) runs beside the questions' lane: a question sent after a long bulk
    request is answered before it, which it is not when both queue on one thread."""
    # The bulk lane's thread is niced: on a loaded machine its 128 passages may take minutes, which the
    # verdict (questions answered first) must not depend on, so neither side times out before it ends.
    settings = EmbedSettings(topic="embed-q", group="embed-q", bulk_topic="embed-q-bulk", handler_timeout_s=900)
    async with serve(EmbedProcessor("embed", settings)) as questions:
        bulk = EmbedClient(questions.client, topic="embed-q-bulk", timeout=900)
        load = asyncio.ensure_future(bulk.embed([f"chunk {i}: " + "a long passage of a document " * 40
                                                 for i in range(128)]))
        await questions.embed(["warm"])  # both lanes' consumers are up, the bulk request is being embedded
        asked = [await questions.embed([QUESTION]) for _ in range(3)]
        answered_first = not load.done()
        vectors = await load
    assert answered_first, "the questions waited for the bulk request"
    assert len(vectors) == 128 and all(len(v) == 384 for v in vectors)
    assert all(np.allclose(a, asked[0]) for a in asked)


def niceness_of(thread_name: str) -> set[int]:
    """The niceness of this process's threads named ``thread_name`` (Linux: /proc/self/task/TID/stat, field 19)."""
    tids = [t.native_id for t in threading.enumerate() if t.name == thread_name]
    return {int(Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16]) for tid in tids}


async def test_the_bulk_thread_yields_the_cores_to_the_rest_of_the_process():
    backend = OnnxBackend(OnnxSettings())
    await backend.start()
    try:
        await backend.embed(["a chunk"], bulk=True)
        assert niceness_of("embed-onnx-bulk_0") == {BULK_NICENESS} and niceness_of("embed-onnx_0") == {0}
    finally:
        await backend.close()


async def test_defaults_wire_the_onnx_processor_and_env_picks_the_openai_backend():
    processor = build_processor(load_settings(environ={}), "embed")
    assert isinstance(processor, EmbedProcessor)
    assert processor.settings.topic == "embed" and processor.settings.backend == "onnx"
    assert processor.settings.onnx.max_tokens == 256
    env = {
        "RAGBUS_PROCESSORS__EMBED__BACKEND": "openai",
        "RAGBUS_PROCESSORS__EMBED__OPENAI__BASE_URL": "http://127.0.0.1:9/v1",
        "RAGBUS_PROCESSORS__EMBED__OPENAI__TIMEOUT_S": "2.5",
        "RAGBUS_PROCESSORS__EMBED__OPENAI__MAX_RETRIES": "1",
    }
    settings = build_processor(load_settings(environ=env), "embed").settings
    assert settings.backend == "openai"
    assert settings.openai.base_url == "http://127.0.0.1:9/v1" and settings.openai.timeout_s == 2.5
    # The retry fields and defaults are the prompt backend's: one RetrySettings for both.
    assert settings.openai.max_retries == 1 and settings.openai.backoff_base_s == 0.5
    assert settings.openai.max_retry_after_s == 30.0


async def test_settings_refuse_an_unknown_backend_naming_the_key():
    env = {"RAGBUS_PROCESSORS__EMBED__BACKEND": "sentencepiece"}
    with pytest.raises(SettingsError, match="backend"):
        build_processor(load_settings(environ=env), "embed")


async def test_a_vocab_txt_gives_the_same_vectors_as_the_packaged_tokenizer(tmp_path):
    """vocab_path takes a plain vocab.txt (one token a line, the line number is the id)."""
    vocab = load_vocab(default_vocab_path())
    assert len(vocab) == 30522 and vocab["[PAD]"] == 0 and vocab["[CLS]"] == 101 and vocab["the"] == 1996
    vocab_txt = tmp_path / "vocab.txt"
    vocab_txt.write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])), encoding="utf-8")
    texts = [QUESTION, "Déjà vu: naïve café, 東京!", ""]
    packaged, plain = OnnxBackend(OnnxSettings()), OnnxBackend(OnnxSettings(vocab_path=str(vocab_txt)))
    assert np.array_equal(packaged.embed_sync(texts), plain.embed_sync(texts))


async def test_a_missing_model_or_vocabulary_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read vocabulary"):
        OnnxBackend(OnnxSettings(vocab_path=str(tmp_path / "nope.txt"))).load()
    (tmp_path / "vocab.txt").write_text("[PAD]\nhello\n")
    with pytest.raises(ModelError, match=r"lacks \[UNK\], \[CLS\], \[SEP\]"):
        OnnxBackend(OnnxSettings(vocab_path=str(tmp_path / "vocab.txt"))).load()
    with pytest.raises(ModelError, match="cannot load ONNX model"):
        OnnxBackend(OnnxSettings(model_path=str(tmp_path / "vocab.txt"))).load()


# The openai backend, against a small /v1/embeddings server of the test's own on loopback.


class EmbeddingsServer(OpenAIStandIn):
    """Answers POST /v1/embeddings with vector [len(text), index + 1, 0, ...], listed in reverse order.

    ``script``: (status, message, headers) answered first, one per request, as OpenAI-style errors.
    """

    def __init__(self, script: list[tuple[int, str, dict]] | None = None) -> None:
        self.status = 200  # any other: answer that status with an OpenAI-style error
        self.script = list(script or [])
        super().__init__(self._answer)

    def _answer(self, request: dict):
        if request["path"] != "/v1/embeddings":
            return error(404, f"no route {request['path']}")
        if self.script:
            status, message, headers = self.script.pop(0)
            return error(status, message, headers)
        if self.status != 200:
            return error(self.status, "input is too long", kind="invalid_request_error")
        texts = request["json"]["input"]
        data = [{"object": "embedding", "index": i, "embedding": [float(len(t)), float(i + 1), 0.0, 0.0]}
                for i, t in enumerate(texts)]
        return (200, {}, {"object": "list", "data": data[::-1], "model": "test-embed", "usage": {}})


def openai_processor(handler_timeout_s: float = 30.0, **openai) -> EmbedProcessor:
    topic = f"embed-openai-{uuid.uuid4().hex[:8]}"
    settings = EmbedSettings(
        topic=topic, group=topic, backend="openai", handler_timeout_s=handler_timeout_s, openai=OpenAISettings(**openai)
    )
    return EmbedProcessor("embed", settings)


async def test_openai_backend_posts_the_texts_and_returns_unit_vectors_in_order():
    with EmbeddingsServer() as server:
        processor = openai_processor(base_url=server.base_url, model="test-embed", api_key="sk-test", timeout_s=5)
        async with serve(processor) as client:
            vectors = await client.embed(["abc", "", "abcd"])
            assert await client.embed([]) == []
            with pytest.raises(RemoteError) as caught:
                await client.embed(["x" * 100_001])
    assert len(server.requests) == 1  # the empty list and the refused text never reached it
    sent = server.requests[0]
    assert sent["path"] == "/v1/embeddings"
    assert sent["json"] == {"model": "test-embed", "input": ["abc", "", "abcd"], "encoding_format": "float"}
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["headers"]["Content-Type"] == "application/json"
    # [len, index + 1] normalised, in input order although the server listed them reversed
    expected = [[3, 1], [0, 1], [4, 3]]
    for v, (a, b) in zip(vectors, expected, strict=True):
        n = (a * a + b * b) ** 0.5
        assert np.allclose(v, [a / n, b / n, 0, 0])
    assert "max_chars" in caught.value.error.message


async def test_openai_backend_reports_the_endpoints_refusal_and_an_unreachable_endpoint():
    with EmbeddingsServer() as server:
        server.status = 400
        async with serve(openai_processor(base_url=server.base_url + "/", model="m")) as client:
            with pytest.raises(RemoteError) as refused:
                await client.embed(["too long"])
    assert "Authorization" not in server.requests[0]["headers"]  # no api_key, no header
    assert refused.value.error.type == "EndpointError"
    assert "HTTP 400" in refused.value.error.message and "input is too long" in refused.value.error.message

    closed = server.base_url  # the server is gone now: nothing listens on that port
    processor = openai_processor(base_url=closed, model="m", timeout_s=5, max_retries=1, backoff_base_s=0.01)
    async with serve(processor) as client:
        with pytest.raises(RemoteError) as unreachable:
            await client.embed(["hello"])
    assert unreachable.value.error.type == "EndpointError"
    assert closed + "/embeddings" in unreachable.value.error.message
    assert "Connect" in unreachable.value.error.message
    assert "gave up after 2 attempts" in unreachable.value.error.message  # a failed connection is retried


async def test_openai_backend_retries_a_503_and_a_429_then_succeeds_but_not_a_400():
    script = [(503, "loading", {}), (429, "slow down", {"Retry-After": "0"})]
    with EmbeddingsServer(script) as server:
        async with serve(openai_processor(base_url=server.base_url, model="m", backoff_base_s=0.01)) as client:
            vectors = await client.embed(["abc", ""])
    assert len(server.requests) == 3  # 503, 429, then the answer
    assert all(r["json"]["input"] == ["abc", ""] for r in server.requests)
    n = 10**0.5
    assert np.allclose(vectors, [[3 / n, 1 / n, 0, 0], [0, 1, 0, 0]])

    with EmbeddingsServer([(400, "input is too long", {})]) as server:
        async with serve(openai_processor(base_url=server.base_url, model="m", backoff_base_s=0.01)) as client:
            with pytest.raises(RemoteError) as refused:
                await client.embed(["abc"])
    assert len(server.requests) == 1  # a 400 is refused again: never retried
    assert refused.value.error.type == "EndpointError"
    assert f"POST {server.base_url}/embeddings: HTTP 400: input is too long" in refused.value.error.message


async def test_openai_backend_reads_retry_after_and_never_waits_past_the_deadline():
    with EmbeddingsServer([(429, "slow down", {"Retry-After": "120"})]) as server:
        async with serve(openai_processor(base_url=server.base_url, model="m", max_retry_after_s=30)) as client:
            with pytest.raises(RemoteError) as too_long:
                await client.embed(["abc"])
    assert len(server.requests) == 1
    assert "HTTP 429: slow down; Retry-After 120s exceeds max_retry_after_s=30" in too_long.value.error.message

    # The retry would sleep 20 s of a 2 s handler time: the error says what the endpoint said instead.
    with EmbeddingsServer([(503, "maintenance", {"Retry-After": "20"})]) as server:
        async with serve(openai_processor(handler_timeout_s=2.0, base_url=server.base_url, model="m")) as client:
            with pytest.raises(RemoteError) as past:
                await client.embed(["abc"])
    assert len(server.requests) == 1
    assert past.value.error.type == "EndpointError"
    assert "HTTP 503: maintenance; a retry in 20.0s would pass the deadline" in past.value.error.message


async def test_a_processor_whose_model_cannot_load_fails_to_start(tmp_path):
    onnx = OnnxSettings(model_path=str(tmp_path / "x"))
    settings = EmbedSettings(topic="embed-broken", group="embed-broken", onnx=onnx)
    processor = EmbedProcessor("embed", settings)
    with pytest.raises(ModelError, match="cannot load ONNX model"):
        await processor.start()
    assert processor.backend is None


async def test_the_optimised_model_is_kept_and_gives_the_same_vectors_bit_for_bit(tmp_path, caplog):
    """The first start writes the optimised model to the cache; later starts load it, for the same vectors."""
    texts = [QUESTION, "Déjà vu: naïve café, 東京!", "x " * 300, ""]
    uncached = OnnxBackend(OnnxSettings(optimized_cache="off"))
    expected = uncached.embed_sync(texts)
    assert uncached.loaded_from.suffix == ".onnx" and ".cache" not in str(uncached.loaded_from)
    first = OnnxBackend(OnnxSettings(optimized_cache=str(tmp_path)))
    assert np.array_equal(first.embed_sync(texts), expected)
    (kept,) = tmp_path.glob("*.onnx")
    assert first.loaded_from == kept and kept.stat().st_size > 50_000_000  # the weights, as floats
    assert list(tmp_path.glob("*.tmp")) == []
    again = OnnxBackend(OnnxSettings(optimized_cache=str(tmp_path)))
    assert np.array_equal(again.embed_sync(texts), expected) and again.loaded_from == kept
    # A damaged cache is set aside: the export answers, with the same vectors, and the next start rewrites it.
    kept.write_bytes(b"not a model")
    damaged = OnnxBackend(OnnxSettings(optimized_cache=str(tmp_path)))
    assert np.array_equal(damaged.embed_sync(texts), expected)
    assert damaged.loaded_from != kept and "cannot load the optimised model" in caplog.text
    assert OnnxBackend(OnnxSettings(optimized_cache=str(tmp_path))).embed_sync(texts[:1]).shape == (1, 384)
    assert kept.stat().st_size > 50_000_000


async def test_the_optimised_model_is_named_by_the_export_and_the_runtime(tmp_path):
    from ragbus.embed.onnx_backend import optimized_path

    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(b"one export")
    b.write_bytes(b"another export")
    assert optimized_path(a, "off", "1.0") is None
    assert optimized_path(a, str(tmp_path / "c"), "1.0").parent == tmp_path / "c"
    assert optimized_path(a, "", "1.0") != optimized_path(b, "", "1.0")
    assert optimized_path(a, "", "1.0") != optimized_path(a, "", "1.1")
