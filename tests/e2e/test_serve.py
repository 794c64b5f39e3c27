"""``ragbus serve`` for real: the command in its own process, asked over HTTP by the official ``openai``
client and by httpx, on the memory bus and against a real Kafka broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid

import httpx
import openai
import pytest

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.testing.stores import build_stores
from ragbus.runtime.worker import processors_running
from ragbus.testing.gateway import GatewayProcess

from ..helpers.brokers import settings_for_tests
from ..helpers.rag_pipeline import DOCS
from ..helpers.serve_stores import stores

QUESTION = "How does a context manager wrap a block of code?"


def check_chat(client: openai.OpenAI, **extra) -> None:
    """Chat, whole and streamed: the answer cites a chunk; streamed, it comes in more than one piece."""
    messages = [{"role": "system", "content": "Answer from the documents."}, {"role": "user", "content": QUESTION}]
    whole = client.chat.completions.create(model="ragbus-hybrid", messages=messages, **extra)
    answer = whole.choices[0].message.content
    sources = whole.ragbus  # the documented extra field: the whole DocumentRagResponse
    assert sources["cited"] and sources["cited"][0].startswith("with#")
    assert f"[{sources['cited'][0]}]" in answer and sources["answer"] == answer
    assert whole.choices[0].finish_reason == "stop" and whole.model == "ragbus-hybrid"

    stream = client.chat.completions.create(model="ragbus-hybrid", messages=messages, stream=True, **extra)
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(pieces) > 1
    assert "".join(pieces) == answer
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].ragbus["kind"] == "sources"
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].ragbus["response"]["cited"] == sources["cited"]
    assert len({c.id for c in chunks}) == 1


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return stores(tmp_path_factory)


@pytest.fixture(scope="module")
def gateway(data_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    with GatewayProcess(env={"RAGBUS_DATA_DIR": str(data_dir)}, log_path=log) as g:
        yield g


def test_openai_client_chats_with_ragbus_on_the_memory_bus(gateway):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused")
    check_chat(client)
    assert [m.id for m in client.models.list()] == ["ragbus", "ragbus-vector", "ragbus-keyword", "ragbus-hybrid"]
    with pytest.raises(openai.NotFoundError, match="unknown model"):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.BadRequestError, match="no message has role 'user'"):
        client.chat.completions.create(model="ragbus", messages=[{"role": "system", "content": QUESTION}])


async def test_the_async_openai_client_on_its_aiohttp_transport(gateway):
    """The README's advice for callers with many questions in flight: answers, whole and streamed, side by side."""
    messages = [{"role": "user", "content": QUESTION}]
    async with openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused",
                                  http_client=openai.DefaultAioHttpClient()) as client:

        async def streamed() -> list[str]:
            stream = await client.chat.completions.create(model="ragbus-hybrid", messages=messages, stream=True)
            return [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]

        whole = [client.chat.completions.create(model="ragbus-hybrid", messages=messages) for _ in range(4)]
        *answers, pieces = await asyncio.gather(*whole, streamed())
    assert {a.choices[0].message.content for a in answers} == {"".join(pieces)}
    assert len(pieces) > 1 and f"[{answers[0].ragbus['cited'][0]}]" in "".join(pieces)


def test_chat_reads_the_conversation_and_asks_a_follow_up_standalone(gateway):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused-without-keys")
    first = client.chat.completions.create(model="ragbus-keyword", messages=[{"role": "user", "content": QUESTION}])
    follow_up = "Which method runs before its block?"
    messages = [{"role": "system", "content": "Answer from the documents."}, {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": follow_up}]
    answered = client.chat.completions.create(model="ragbus-keyword", messages=messages)
    assert answered.ragbus["standalone"] == f"{follow_up} (context manager wrap block of code)"
    assert answered.ragbus["cited"][0] == "with#0" and "__enter__" in answered.choices[0].message.content
    alone = client.chat.completions.create(model="ragbus-keyword", messages=messages[-1:])
    assert alone.ragbus["standalone"] is None


def test_a_question_over_the_question_limit_is_refused_naming_that_limit_and_its_setting(gateway):
    """A 5 MB question fits the body limit but not a bus message: it is refused for what it is, too long a
    question (document-rag's max_query_chars), before the bus's own limit could speak of message bytes."""
    huge = "x" * 5_000_000
    chats = [
        ([{"role": "user", "content": huge}], "$.messages[0].content"),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": huge}]}],
         "$.messages[1].content"),
    ]
    refused = [(httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "ragbus", "messages": messages,
                                                                         "stream": stream}, timeout=60), param)
               for messages, param in chats for stream in (False, True)]
    refused.append((httpx.post(f"{gateway.url}/v1/ask", json={"question": huge}, timeout=60), "$.question"))
    for answer, param in refused:
        assert answer.status_code == 400, answer.text[:500]
        error = answer.json()["error"]
        assert error["type"] == "QuestionTooLong" and error["param"] == param, error
        assert "5,000,000 characters" in error["message"] and "max_query_chars" in error["message"]
        assert "over the question limit of 10,000 characters" in error["message"]
        assert "max_message_bytes" not in error["message"]


def test_a_chat_message_of_no_chat_role_is_refused_naming_the_role_and_the_roles_there_are(gateway):
    for messages, at in (([{"role": "wizard", "content": QUESTION}], 0),
                         ([{"role": "user", "content": "hello"}, {"role": "wizard", "content": QUESTION}], 1)):
        answer = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "ragbus", "messages": messages},
                            timeout=60)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == f"$.messages[{at}].role", error
        assert error["message"] == (f"message {at} has role 'wizard', which is no chat role: the roles are system, "
                                    "developer, user, assistant, tool and function (the last user message is the "
                                    "question)"), error
    # Known roles but no user among them: the question is missing, as before.
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=60,
                        json={"model": "ragbus", "messages": [{"role": "system", "content": "Be brief."}]})
    assert answer.status_code == 400 and "no message has role 'user'" in answer.json()["error"]["message"]


def test_ask_whole_and_as_server_sent_events(gateway):
    whole = httpx.post(f"{gateway.url}/v1/ask", json={"question": QUESTION, "mode": "hybrid"}, timeout=60)
    assert whole.status_code == 200
    r = whole.json()
    assert r["cited"][0].startswith("with#") and r["timings_ms"]["total"] > 0
    events = []
    with httpx.stream("POST", f"{gateway.url}/v1/ask", json={"question": QUESTION, "mode": "hybrid", "stream": True},
                      timeout=60) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in streamed.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    kinds = [e for e, _ in events]
    assert kinds[0] == "sources" and kinds[-1] == "final" and set(kinds[1:-1]) == {"answer"} and len(kinds) > 3
    assert "".join(d["text"] for e, d in events if e == "answer") == r["answer"]
    assert events[-1][1]["response"]["cited"] == r["cited"]


@pytest.mark.parametrize("body, param", [
    ({"question": ""}, "$.question"),
    ({"question": QUESTION, "mode": "semantic"}, "$.mode"),
    ({"question": QUESTION, "doc_limit": 0}, "$.doc_limit"),
    ({"question": QUESTION, "at_time": "the day before"}, "$.at_time"),
    ({"question": QUESTION, "collection": "no such/collection"}, "$.collection"),
    ({"question": QUESTION, "colour": "blue"}, "$.colour"),
    ({"quest": QUESTION}, "$.quest"),
    ({"mode": "vector"}, "$.question"),
    ({"question": QUESTION, "history": [{"role": "robot", "content": "beep"}]}, "$.history[0].role"),
    ({"question": QUESTION, "history": [{"role": "user", "content": "q"}] * 41}, "$.history"),
])
def test_bad_input_is_a_4xx_json_error_naming_the_field(gateway, body, param):
    answer = httpx.post(f"{gateway.url}/v1/ask", json=body, timeout=60)
    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()["error"]
    assert error["message"] and "Traceback" not in answer.text
    assert error["param"] == param, error


def test_a_question_to_a_collection_that_holds_nothing_is_404_as_the_command_line_says(gateway):
    empty = {"question": QUESTION, "collection": "nothing-here"}
    whole = httpx.post(f"{gateway.url}/v1/ask", json=empty, timeout=60)
    streamed = httpx.post(f"{gateway.url}/v1/ask", json={**empty, "stream": True}, timeout=60)
    graph = httpx.get(f"{gateway.url}/v1/kg/query", params={"question": "Who was chancellor of Germany?",
                                                           "collection": "nothing-here"}, timeout=60)
    for answer in (whole, streamed, graph):
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["type"] == "EmptyCollection" and error["param"] == "$.collection"
        assert ("collection 'nothing-here' has no documents: ingest some with POST /v1/documents or "
                "`ragbus ingest PATH... --collection nothing-here`") in error["message"]
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused")
    messages = [{"role": "user", "content": QUESTION}]
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError, match="has no documents"):
            client.chat.completions.create(model="ragbus", messages=messages, stream=stream,
                                           extra_body={"collection": "nothing-here"})
    # A collection that holds documents but nothing for this question: answered, as before.
    unmatched = httpx.post(f"{gateway.url}/v1/ask", json={"question": "zyxwvut", "mode": "keyword"}, timeout=60)
    assert unmatched.status_code == 200 and not unmatched.json()["chunks"], unmatched.text


def test_documents_go_in_and_out_through_the_pipeline(gateway):
    url = gateway.url
    stored = httpx.post(f"{url}/v1/documents", json={
        "text": "Pumpkins are orange squashes harvested in autumn.", "document_id": "pumpkin", "title": "Pumpkins",
        "collection": "garden"}, timeout=60)
    assert stored.status_code == 201, stored.text
    body = stored.json()
    (seen,) = body.pop("seen")  # the token of its write to the data dir's files, for an ask's must_see
    assert body == {"document_id": "pumpkin", "collection": "garden", "chunks": 1}
    assert seen.startswith("ragbus.changelog.files@"), seen
    upload = httpx.post(f"{url}/v1/documents", files={"file": ("beans.txt", b"Runner beans climb poles in summer.")},
                        data={"document_id": "beans", "collection": "garden"}, timeout=60)
    assert upload.status_code == 201 and upload.json()["chunks"] == 1
    asked = httpx.post(f"{url}/v1/ask", json={"question": "When are pumpkins harvested?", "collection": "garden",
                                              "mode": "keyword"}, timeout=60).json()
    assert asked["cited"] == ["pumpkin#0"]
    assert httpx.delete(f"{url}/v1/documents/pumpkin", params={"collection": "garden"}).json()["count"] == 1
    gone = httpx.delete(f"{url}/v1/documents/pumpkin", params={"collection": "garden"})
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFound"
    bad = httpx.post(f"{url}/v1/documents", files={"file": ("x.bin", b"\xff\xfe\x00")}, timeout=60)
    assert bad.status_code == 415 and bad.json()["error"]["param"] == "file"  # no converter reads .bin


def test_collections_and_a_collections_documents_page_by_page(gateway):
    url = gateway.url
    for n in range(3):
        doc = {"text": f"Shelf {n} holds the atlases.", "document_id": f"shelf-{n}", "title": f"Shelf {n}",
               "collection": "library"}
        assert httpx.post(f"{url}/v1/documents", json=doc, timeout=60).status_code == 201
    assert {"default", "library"} <= set(httpx.get(f"{url}/v1/collections").json()["collections"])
    first = httpx.get(f"{url}/v1/documents", params={"collection": "library", "limit": 2}).json()
    assert [d["document_id"] for d in first["documents"]] == ["shelf-0", "shelf-1"] and first["more"]
    assert first["documents"][0]["title"] == "Shelf 0" and first["documents"][0]["chunks"] == 1
    rest = httpx.get(f"{url}/v1/documents", params={"collection": "library", "after": "shelf-1"}).json()
    assert [d["document_id"] for d in rest["documents"]] == ["shelf-2"] and not rest["more"]
    one = httpx.get(f"{url}/v1/documents", params={"collection": "library", "document_id": "shelf-1"}).json()
    assert [d["document_id"] for d in one["documents"]] == ["shelf-1"]
    for params, param in (({"limit": "0"}, "$.limit"), ({"limit": "x"}, "$.limit"), ({"page": "2"}, None),
                          ({"collection": "no such/collection"}, "collection")):
        bad = httpx.get(f"{url}/v1/documents", params=params)
        assert bad.status_code == 422 and bad.json()["error"]["param"] == param, (params, bad.text)


def test_kg_query_over_http(gateway):
    r = httpx.get(f"{gateway.url}/v1/kg/query", params={"question": "Who was head of government of the United Kingdom?",
                                                        "at_time": "2012-03-01"}, timeout=60)
    assert r.status_code == 200
    assert "David Cameron head_of_government_of United Kingdom" in [f["text"] for f in r.json()["facts"]]
    bad = httpx.get(f"{gateway.url}/v1/kg/query", params={"question": "x", "limit": "many"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "$.limit"
    # Past what a message can carry: refused where it is read, not a 502 when it is sent on (found by the fuzzer).
    huge = httpx.get(f"{gateway.url}/v1/kg/query", params={"question": "x", "limit": str(2**64)})
    assert huge.status_code == 422 and huge.json()["error"]["param"] == "$.limit", huge.text


def test_health_ready_and_the_openapi_document(gateway):
    assert httpx.get(f"{gateway.url}/health").json()["status"] == "ok"
    assert httpx.get(f"{gateway.url}/ready").json()["status"] == "ready"
    doc = httpx.get(f"{gateway.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert {"AskRequest", "DocumentRagResponse", "ChatCompletion", "ChunkMatch"} <= set(schemas)
    # Generated from the Structs: the bus response's fields are the HTTP answer's.
    assert set(schemas["DocumentRagResponse"]["properties"]) >= {"answer", "chunks", "cited", "timings_ms", "error"}


@pytest.mark.brokers
def test_openai_client_chats_with_gateway_replicas_on_kafka(kafka_broker, tmp_path, monkeypatch):
    """On a broker the gateway starts no processor: it publishes and waits, so two replicas answer alike."""
    import asyncio

    collection = f"serve-{uuid.uuid4().hex[:8]}"

    async def main():
        import msgspec

        await build_stores(tmp_path, collection, [msgspec.structs.replace(d, collection=collection) for d in DOCS])
        monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
        settings = load_settings()
        suffix = uuid.uuid4().hex[:8]
        for name in pipelines.QUERY:
            settings.processors[name]["group"] = f"{name}-{suffix}"
        settings.bus = settings_for_tests()
        async with processors_running(settings, list(pipelines.QUERY), kafka_broker.url, ready_timeout=120):
            env = {**os.environ, "RAGBUS_DATA_DIR": str(tmp_path / "unused")}
            # Started from a thread: their readiness waits block, and these processors must answer meanwhile.
            replicas = [GatewayProcess(kafka_broker.url, env=env, log_path=tmp_path / f"{i}.log") for i in range(2)]
            try:
                for g in replicas:
                    await asyncio.to_thread(g.start)
                for g in replicas:
                    client = openai.OpenAI(base_url=f"{g.url}/v1", api_key="unused")
                    await asyncio.to_thread(check_chat, client, extra_body={"collection": collection})
            finally:
                for g in replicas:
                    await asyncio.to_thread(g.stop)
        assert not (tmp_path / "unused").exists()  # no store opened by a gateway

    asyncio.run(main())


ALLOWED_ORIGIN = "https://chat.example.com"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    # A data dir of its own: a gateway on memory:// runs the writers, one process per data dir.
    config = tmp_path_factory.mktemp("guarded-config") / "ragbus.toml"
    config.write_text(f'[gateway]\ncors_origins = ["{ALLOWED_ORIGIN}"]\n')
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_API_KEYS": "sk-one, sk-two",
           "RAGBUS_GATEWAY__MAX_BODY_BYTES": "2000", "RAGBUS_GATEWAY__MAX_IN_FLIGHT": "1",
           "RAGBUS_GATEWAY__RETRY_AFTER_S": "3", "RAGBUS_CONFIG": str(config)}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("guarded") / "serve.log") as g:
        yield g


def test_with_keys_set_a_request_needs_one(guarded):
    ask = {"question": QUESTION}
    refused = httpx.post(f"{guarded.url}/v1/ask", json=ask)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "Unauthorized"
    assert refused.headers["www-authenticate"] == "Bearer"
    wrong = httpx.post(f"{guarded.url}/v1/ask", json=ask, headers={"Authorization": "Bearer sk-three"})
    assert wrong.status_code == 401
    assert httpx.post(f"{guarded.url}/v1/ask", json=ask, headers={"Authorization": "Bearer sk-two"}).status_code == 200
    client = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="sk-one")
    assert client.chat.completions.create(model="ragbus", messages=[{"role": "user", "content": QUESTION}]).ragbus
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="sk-nope").models.list()
    assert httpx.get(f"{guarded.url}/health").status_code == 200  # probes stay open


def test_a_body_over_the_limit_is_refused_with_413(guarded):
    headers = {"Authorization": "Bearer sk-one"}
    big = {"question": "x" * 3000}
    declared = httpx.post(f"{guarded.url}/v1/ask", json=big, headers=headers)
    assert declared.status_code == 413 and "max_body_bytes=2000" in declared.json()["error"]["message"]

    def chunked():  # no Content-Length: the limit is found while reading
        yield b'{"question": "'
        yield b"x" * 3000
        yield b'"}'

    streamed = httpx.post(f"{guarded.url}/v1/ask", content=chunked(), headers=headers)
    assert streamed.status_code == 413


def test_past_the_in_flight_bound_a_request_gets_503_with_retry_after(guarded):
    """max_in_flight=1: of questions asked together, those that find another being answered get 503 at once.
    (A body still arriving holds no place, ``test_slow_bodies.py``: the place is held by a question answered.)"""
    async def together(count: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=guarded.url, headers={"Authorization": "Bearer sk-one"},
                                     timeout=60) as client:
            return list(await asyncio.gather(*(client.post("/v1/ask", json={"question": QUESTION})
                                               for _ in range(count))))

    deadline = time.monotonic() + 60
    while True:
        answers = asyncio.run(together(16))
        assert {a.status_code for a in answers} <= {200, 503}
        busy = [a for a in answers if a.status_code == 503]
        if busy:
            break
        assert time.monotonic() < deadline, "no question ever found another in flight"
    assert busy[0].headers["retry-after"] == "3" and busy[0].json()["error"]["type"] == "Overloaded"
    ok = None
    for _ in range(100):  # the questions in flight end with their answers
        ok = httpx.post(f"{guarded.url}/v1/ask", json={"question": QUESTION},
                        headers={"Authorization": "Bearer sk-one"})
        if ok.status_code == 200:
            break
    assert ok is not None and ok.status_code == 200


def test_with_keys_a_preflight_of_an_allowed_origin_is_answered_and_the_key_checked_after(guarded):
    """A browser's preflight carries no key: CORS answers it; the request after it still needs one, and its
    refusals carry the allow headers, so the page can read them."""
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    allowed = httpx.options(f"{guarded.url}/v1/ask", headers={"Origin": ALLOWED_ORIGIN, **preflight})
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = httpx.options(f"{guarded.url}/v1/ask", headers={"Origin": "https://elsewhere.example", **preflight})
    assert "access-control-allow-origin" not in other.headers

    origin = {"Origin": ALLOWED_ORIGIN}
    refused = httpx.post(f"{guarded.url}/v1/ask", json={"question": QUESTION}, headers=origin)
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "www-authenticate" in refused.headers["access-control-expose-headers"].lower()
    too_big = httpx.post(f"{guarded.url}/v1/ask", json={"question": "x" * 3000},
                         headers={**origin, "Authorization": "Bearer sk-one"})
    assert too_big.status_code == 413 and too_big.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    asked = httpx.post(f"{guarded.url}/v1/ask", json={"question": QUESTION},
                       headers={**origin, "Authorization": "Bearer sk-one"}, timeout=60)
    assert asked.status_code == 200 and asked.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    elsewhere = httpx.post(f"{guarded.url}/v1/ask", json={"question": QUESTION},
                           headers={"Origin": "https://elsewhere.example", "Authorization": "Bearer sk-one"},
                           timeout=60)
    assert elsewhere.status_code == 200 and "access-control-allow-origin" not in elsewhere.headers


def test_cors_is_off_by_default(gateway):
    answer = httpx.options(f"{gateway.url}/v1/ask", headers={
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in answer.headers
    asked = httpx.post(f"{gateway.url}/v1/ask", json={"question": QUESTION}, headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in asked.headers


def test_serve_says_the_bus_cannot_be_reached_and_never_that_it_serves(tmp_path):
    """A Kafka URL on a loopback port nobody listens on: a clear error and exit 2, no "serving" line before it."""
    import subprocess
    import sys

    from ragbus.testing.brokers import free_port

    url = f"kafka://127.0.0.1:{free_port()}"
    env = {**os.environ, "RAGBUS_DATA_DIR": str(tmp_path), "RAGBUS_BUS__CONNECT_TIMEOUT_S": "2"}
    done = subprocess.run([sys.executable, "-m", "ragbus.cli", "serve", "--port", str(free_port()), "--bus", url],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"ragbus: error: the bus at {url} cannot be reached: " in done.stderr
    assert "serving" not in done.stderr + done.stdout


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "gateway.example"])
def test_without_keys_serve_refuses_an_address_other_than_loopback(host, tmp_path):
    """Nothing is bound and nothing served: the error says why and how (keys, or --insecure in so many words)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAGBUS_API_KEYS"}
    env["RAGBUS_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "ragbus.cli", "serve", "--host", host, "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"no API key is set, so ragbus serve answers on loopback only; {host} would" in done.stderr
    assert "--insecure" in done.stderr and "RAGBUS_API_KEYS" in done.stderr
    assert "serving" not in done.stderr + done.stdout and not list(tmp_path.iterdir())


def test_loopback_is_what_keyless_serving_may_bind():
    from ragbus.cli.serve import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", "localhost.example"))


@pytest.mark.brokers
def test_ready_is_503_while_no_pipeline_answers(pulsar_broker, tmp_path):
    """/health answers from the start; /ready only once document-rag does (here: never, no worker runs)."""
    env = {"RAGBUS_DATA_DIR": str(tmp_path), "RAGBUS_BUS__PULSAR__CONSUMER_ID_SPREAD": "8"}
    g = GatewayProcess(pulsar_broker.url, env=env, log_path=tmp_path / "serve.log").launch()
    try:
        for _ in range(300):  # until it listens: a process offers no event to wait on
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{g.url}/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.1)
        details = []
        for _ in range(30):  # connecting to the bus, then asking document-rag, which never answers
            ready = httpx.get(f"{g.url}/ready", timeout=30)
            assert ready.status_code == 503 and ready.json()["status"] == "starting"
            details.append(ready.json()["detail"])
            if "does not answer" in details[-1]:
                break
            time.sleep(0.2)
        assert "does not answer" in details[-1], details
    finally:
        g.stop()
