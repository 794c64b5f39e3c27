"""A caller's mistake is answered, logged without a stack, and counted as a bad request, not as an error.

Real processors (kg-query, document-rag) on every bus backend get requests a user's
typo produces (``ragbus kg query --at yesterday``, ``ragbus ask ""``...). Each must
come back as an error response that says what is wrong; the worker must log it at
INFO without a traceback, and count it in ``ragbus_bad_requests`` rather than in
``ragbus_errors``, which is what an operator alerts on.
"""

from __future__ import annotations

import logging

import pytest

from ragbus.document_rag import DocumentRagProcessor
from ragbus.document_rag.settings import DocumentRagSettings
from ragbus.kg import KgQueryProcessor
from ragbus.kg.settings import KgSettings
from ragbus.runtime import metrics
from ragbus.schema import DocumentRagRequest, DocumentRagResponse, KgQueryRequest, KgQueryResponse

from ..helpers.metrics import counter
from ..helpers.serving import client_on, serving


def kg_query(topic: str, tmp_path) -> KgQueryProcessor:
    return KgQueryProcessor("kg-query", KgSettings(topic=topic, group=f"kg-{topic}", data_dir=str(tmp_path)))


def document_rag(topic: str) -> DocumentRagProcessor:
    # Bad input is refused before any sub-request, so no other processor needs to run.
    settings = DocumentRagSettings(topic=topic, group=f"rag-{topic}", max_doc_limit=20)
    return DocumentRagProcessor("document-rag", settings)


def problems(caplog) -> list[str]:
    """Records a worker must not write for a caller's mistake: ERROR and above, or any with a stack."""
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


KG_CASES = [
    (KgQueryRequest(question="Germany", at_time="yesterday"), "TimeError", "at_time 'yesterday' is not an ISO 8601"),
    (KgQueryRequest(question="Germany", as_of="2020-13-01"), "TimeError", "as_of '2020-13-01'"),
    (KgQueryRequest(question="   "), "BadRequest", "question is empty"),
    (KgQueryRequest(question="Germany", collection="../etc"), "BadRequest", "invalid collection name"),
    # Refused when the body is read: schema/ bounds the limit.
    (KgQueryRequest(question="Germany", limit=-1), "ValidationError", "`$.limit`"),
]


@pytest.mark.parametrize(("request_", "error_type", "says"), KG_CASES, ids=[c[1] + ":" + c[2] for c in KG_CASES])
async def test_kg_query_answers_a_bad_request_and_counts_it_as_bad_not_as_an_error(
    open_bus, topic, tmp_path, caplog, request_, error_type, says
):
    caplog.set_level(logging.INFO)
    bus = await open_bus()
    bad_before = counter(metrics.bad_requests, "kg-query", error_type)
    errors_before = counter(metrics.errors, "kg-query", error_type)
    async with serving(bus, kg_query(topic, tmp_path)), client_on(bus) as client:
        response = await client.request(topic, request_, KgQueryResponse, timeout=30)
        fine = await client.request(topic, KgQueryRequest(question="Germany"), KgQueryResponse, timeout=30)
    assert response.error is not None and response.error.type == error_type and says in response.error.message
    assert response.error.caller  # the caller's mistake, so said on the wire
    assert fine.error is None  # and it goes on serving
    assert counter(metrics.bad_requests, "kg-query", error_type) == bad_before + 1
    assert counter(metrics.errors, "kg-query", error_type) == errors_before
    assert problems(caplog) == []
    refused = [r for r in caplog.records if r.name == "ragbus.runtime.processor" and says in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.INFO]


RAG_CASES = [
    (DocumentRagRequest(query=""), "BadRequest", "the question is empty"),
    (DocumentRagRequest(query="Who?", at_time="nonsense"), "TimeError", "at_time 'nonsense'"),
    (DocumentRagRequest(query="Who?", mode="semantic"), "BadRequest", "unknown retrieval mode 'semantic'"),
    (DocumentRagRequest(query="Who?", doc_limit=21), "BadRequest", "over max_doc_limit=20"),
    (DocumentRagRequest(query="Who?", doc_limit=0), "ValidationError", "`$.doc_limit`"),
]


@pytest.mark.parametrize(("request_", "error_type", "says"), RAG_CASES, ids=[c[1] + ":" + c[2] for c in RAG_CASES])
async def test_document_rag_answers_a_bad_request_and_counts_it_as_bad_not_as_an_error(
    open_bus, topic, caplog, request_, error_type, says
):
    caplog.set_level(logging.INFO)
    bus = await open_bus()
    bad_before = counter(metrics.bad_requests, "document-rag", error_type)
    errors_before = counter(metrics.errors, "document-rag", error_type)
    async with serving(bus, document_rag(topic)), client_on(bus) as client:
        response = await client.request(topic, request_, DocumentRagResponse, timeout=30)
    assert response.error is not None and response.error.type == error_type and says in response.error.message
    assert response.error.caller  # the caller's mistake, so said on the wire
    assert counter(metrics.bad_requests, "document-rag", error_type) == bad_before + 1
    assert counter(metrics.errors, "document-rag", error_type) == errors_before
    assert problems(caplog) == []


async def test_a_failure_that_is_not_the_callers_mistake_is_still_an_error_with_its_stack(open_bus, topic, caplog):
    """The other side of the line: a handler's own failure stays an ERROR with a traceback."""
    from ..helpers.serving import echo
    from ..helpers.echo import EchoRequest, EchoResponse

    bus = await open_bus()
    errors_before = counter(metrics.errors, "echo", "RuntimeError")
    async with serving(bus, echo(topic)), client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="x", fail="disk on fire"), EchoResponse, timeout=30)
    assert response.error is not None and response.error.type == "RuntimeError"
    assert not response.error.caller  # the processor's failure, not the request's
    assert counter(metrics.errors, "echo", "RuntimeError") == errors_before + 1
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)
