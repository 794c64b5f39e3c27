"""Every failure the gateway answers, as a JSON ``ErrorBody`` with a 4xx or 5xx status, never a traceback.

- a body that is not JSON: 400; one that does not validate: 422, ``param`` naming the field;
- the pipeline's refusal of the caller's input (``BadRequest``, ``ValidationError``,
  ``TimeError``...): 400, ``param`` the request field its message names;
- a question to a collection that holds nothing (``EmptyCollection``, document-rag's and
  kg-query's answer): 404, ``param`` ``$.collection``, saying how to fill it;
- the pipeline's own failures: 504 when it ran out of time, 502 otherwise (the gateway is
  fine, what it fronts failed), 503 while it is not there at all (no worker consumes the
  topic, on a bus that can tell).
"""

from __future__ import annotations

import re

import msgspec
from starlette.responses import Response

from ragbus.runtime.collection_check import EmptyCollection, empty_collection
from ragbus.runtime.request_client import NotServed, RequestTimeout
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema.http import ErrorBody, ErrorDetail

_AT_FIELD = re.compile(r"at `(\$[^`]*)`")
_UNKNOWN_FIELD = re.compile(r"(?:unknown|missing required) field `([^`]*)`")


class HTTPError(Exception):
    def __init__(self, status: int, type_: str, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.param = param
        self.headers = headers


def json_response(value, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type="application/json", headers=headers)


def error_response(exc: HTTPError) -> Response:
    body = ErrorBody(error=ErrorDetail(type=exc.type, message=exc.message[:2000], param=exc.param))
    return json_response(body, exc.status, exc.headers)


def decode_body(body: bytes, kind: type):
    """``body`` as a ``kind``, or an ``HTTPError`` that says what is wrong and where."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise HTTPError(422, "ValidationError", str(exc), _field_of(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise HTTPError(400, "InvalidJSON", f"the body is not JSON: {exc}") from None


def _field_of(message: str) -> str | None:
    """Where msgspec says a validation failed: ``$.doc_limit``; an unknown or missing field is named itself."""
    at, unknown = _AT_FIELD.search(message), _UNKNOWN_FIELD.search(message)
    if unknown:
        return f"{at.group(1) if at else '$'}.{unknown.group(1)}"
    return at.group(1) if at else None


def param_named(message: str, fields) -> str | None:
    """The request field an error message speaks of, as ``$.name``."""
    found = _AT_FIELD.search(message)
    if found:
        return found.group(1)
    for name in fields:
        if re.search(rf"\b{re.escape(name)}\b", message):
            return f"$.{name}"
    return None


def from_pipeline(exc: Exception, fields=(), *, collection: str | None = None) -> HTTPError:
    """The HTTP error for what a call of the pipeline raised; ``collection``: the one the call named, so that
    an ``EmptyCollection`` answer says the HTTP way to fill it too."""
    if isinstance(exc, HTTPError):
        return exc
    if isinstance(exc, RemoteError):
        e = exc.error
        if e.type == EmptyCollection.__name__:
            told = empty_collection(collection, upload="POST /v1/documents") if collection else e.message
            return HTTPError(404, e.type, told, "$.collection")
        if exc.caller:  # the processor refused the request itself: a bad request, whatever its type
            return HTTPError(400, e.type, e.message, param_named(e.message, fields))
        if e.type == "Timeout":
            return HTTPError(504, "Timeout", e.message)
        return HTTPError(502, e.type, e.message)
    if isinstance(exc, NotServed):  # no worker consumes the topic: nothing will answer, for now
        return HTTPError(503, "NotServed", str(exc), headers={"Retry-After": "5"})
    if isinstance(exc, RequestTimeout):
        return HTTPError(504, "Timeout", str(exc))
    if isinstance(exc, ValueError):  # BadRequest raised on this side (a collection name...)
        return HTTPError(400, type(exc).__name__, str(exc), param_named(str(exc), fields))
    return HTTPError(502, type(exc).__name__, str(exc) or type(exc).__name__)
