"""Bodies are msgpack, encoded and decoded by msgspec.

Why msgpack rather than JSON: the heaviest messages carry embedding vectors
(384 floats each), which msgpack stores as 9 bytes per float against 18-20
characters of JSON text, and decodes faster; bytes and exact floats survive a
round trip. Recordings stay reviewable because ``ragbus`` can print any body
as JSON (``to_json``).

Schema evolution follows msgspec's rules: unknown fields are ignored (an
older reader accepts a newer writer's extra fields), missing fields with a
default take it, a missing required field or a wrong type is a
``ValidationError`` naming the field. No pickle, no eval, anywhere.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

CONTENT_TYPE = "application/msgpack"

_encoder = msgspec.msgpack.Encoder()


class DecodeError(ValueError):
    """A body that is not a valid message of the expected type; says which field and why."""


def encode(message: object) -> bytes:
    """A message as its body; any other value msgspec can encode too, as size estimates need."""
    return _encoder.encode(message)


@cache
def _decoder(message_type: type) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(message_type)


def decode(body: bytes, message_type: type[T]) -> T:
    try:
        # Every class is hashable, but mypy does not treat a type[T] as Hashable.
        return _decoder(message_type).decode(body)  # type: ignore[arg-type]
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"invalid {message_type.__name__}: {exc}") from None
    except RecursionError:  # a kilobyte of nested arrays is enough to get here
        raise DecodeError(f"invalid {message_type.__name__}: nested too deeply") from None


def to_json(body: bytes) -> str:
    """Show any msgpack body as JSON, for people reading recordings."""
    value: Any = msgspec.msgpack.decode(body)
    return msgspec.json.encode(value).decode()
