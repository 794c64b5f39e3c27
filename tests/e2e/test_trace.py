"""One question, one trace: every hop document-rag makes while answering carries a child of the question's
traceparent."""

from __future__ import annotations

import pytest

from ragbus.bus import Bus
from ragbus.runtime.envelope import ATTEMPT, REPLY_TO, TRACEPARENT
from ragbus.schema import topics

from ..helpers.rag_pipeline import pipeline

SUB_REQUESTS = {topics.EMBED, topics.DOC_EMBEDDINGS_QUERY, topics.KEYWORD_QUERY, topics.KG_QUERY, topics.PROMPT}


def parts(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


@pytest.mark.parametrize("backend", ["memory", pytest.param("kafka", marks=pytest.mark.brokers)])
async def test_every_hop_of_one_question_is_in_its_trace(backend, request, tmp_path, monkeypatch):
    # A Kafka of the test's own: on the session's, requests other tests left in document-rag's topic would be
    # answered by this pipeline too, each in a trace of its own, and recorded beside the question's hops.
    url = f"memory://{tmp_path.name}" if backend == "memory" else request.getfixturevalue("own_kafka_broker").url
    sent: list[tuple[str, dict[str, str]]] = []
    publish = Bus.publish

    async def recorded(self, topic, body, headers=None, key=None):
        sent.append((topic, dict(headers or {})))
        return await publish(self, topic, body, headers, key)

    async with pipeline(url, tmp_path, monkeypatch, collection=f"trace-{tmp_path.name[-8:].lower()}") as ask:
        monkeypatch.setattr(Bus, "publish", recorded)
        sent.clear()
        response = await ask("What does the else clause of a for loop do?", mode="hybrid")
    assert response.error is None and response.cited
    requests = [(t, h) for t, h in sent if REPLY_TO in h]  # requests, not responses
    (question,) = [h for t, h in requests if t == topics.DOCUMENT_RAG]
    trace_id, question_span = parts(question[TRACEPARENT])
    hops = [(t, h) for t, h in requests if t != topics.DOCUMENT_RAG]
    assert {t for t, _ in hops} >= SUB_REQUESTS, [t for t, _ in hops]
    for topic, headers in hops:
        hop_trace, hop_span = parts(headers[TRACEPARENT])
        assert hop_trace == trace_id, f"{topic} started a trace of its own"
        assert hop_span != question_span
        assert headers[ATTEMPT] == "1"
    # Responses continue the trace too.
    assert all(parts(h[TRACEPARENT])[0] == trace_id for t, h in sent if REPLY_TO not in h and TRACEPARENT in h)
