"""How the gateway turns what the pipeline raised into an HTTP status, and names the field at fault."""

from __future__ import annotations

import pytest

from ragbus.gateway.errors import HTTPError, decode_body, from_pipeline
from ragbus.runtime.request_client import NotServed, RequestTimeout
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import Error
from ragbus.schema.http import AskRequest

FIELDS = ["question", "mode", "at_time", "doc_limit", "collection"]


@pytest.mark.parametrize("raised, status, kind, param", [
    (RemoteError("document-rag", Error("BadRequest", "unknown retrieval mode 'x'; use one of ...", caller=True)), 400,
     "BadRequest", "$.mode"),
    (RemoteError("document-rag", Error("TimeError", "at_time 'soon' is not an ISO 8601 date", caller=True)), 400,
     "TimeError", "$.at_time"),
    (RemoteError("document-rag", Error("ValidationError", "Expected `int` - at `$.doc_limit`", caller=True)), 400,
     "ValidationError", "$.doc_limit"),
    # A refusal of a type no gateway knows is the caller's all the same: the processor said so.
    (RemoteError("kg-query", Error("OntologyTooLarge", "the ontology has 9000 classes", caller=True)), 400,
     "OntologyTooLarge", None),
    (RemoteError("document-rag", Error("Timeout", "embed did not answer")), 504, "Timeout", None),
    (RemoteError("document-rag", Error("RuntimeError", "both retrieval paths failed")), 502, "RuntimeError", None),
    (RequestTimeout("document-rag", "r1", 30.0), 504, "Timeout", None),
    (NotServed("document-rag", "r1", 2.0, "kafka://h:9092"), 503, "NotServed", None),
    (ValueError("invalid collection name 'a b'"), 400, "ValueError", "$.collection"),
    (OSError("connection reset"), 502, "OSError", None),
])
def test_each_failure_has_its_status(raised, status, kind, param):
    error = from_pipeline(raised, FIELDS)
    assert (error.status, error.type, error.param) == (status, kind, param)
    assert error.message
    if status == 503:
        assert error.headers == {"Retry-After": "5"}


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    (b'{"question": 7}', 422, "$.question"),
    (b'{"question": "q", "extra": 1}', 422, "$.extra"),
    (b'{}', 422, "$.question"),
])
def test_a_bad_body_names_its_field(body, status, param):
    with pytest.raises(HTTPError) as caught:
        decode_body(body, AskRequest)
    assert (caught.value.status, caught.value.param) == (status, param)
