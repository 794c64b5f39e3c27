"""The ways ingestion fails, as types: each face words or maps them (an HTTP status, a line of the command)
from the type, never from the text.

``UnreadableDocument`` and ``UnsupportedFormat`` subclass ``ValueError``, so code that caught the
converters' ``ValueError`` still does; ``DocumentRejected`` is a ``RemoteError`` of document-load,
so whatever maps a processor's error answer maps it too, by its ``error.type``.
"""

from __future__ import annotations

from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import Error
from ragbus.schema import topics as t


class UnreadableDocument(ValueError):
    """The input is not what its type says (corrupt, empty, binary, in no text encoding): nothing was sent."""


class UnsupportedFormat(UnreadableDocument):
    """No converter reads this type of file (by its suffix, or an upload's media type)."""


class DocumentRejected(RemoteError):
    """document-load answered a part with an error (it has cleaned up after itself)."""

    def __init__(self, part: int, error: Error) -> None:
        super().__init__(t.DOCUMENT_LOAD, error)
        self.part = part
        self.args = (f"{f'part {part}: ' if part else ''}{error.type}: {error.message}",)

    def __str__(self) -> str:
        return self.args[0]
