"""Messages of document-convert: a file's bytes in parts to one worker, its text back a page at a time.

The client sends ``ConvertPart`` requests one after the other, each once the one before is answered,
all with the bus key ``conversion_id`` so they reach one worker (a partition on Kafka, a KeyShared
consumer on Pulsar, a member on memory://). Parts before the last are answered by a ``ConvertReply``;
the last asks for a stream (the ``stream`` header) and is answered by ``ConvertPiece``s: one (or more,
for a page too long for one message) per page, then a final one with the title. A part the worker
did not expect (another worker had the parts before it) is answered ``RESTART_UPLOAD``: the client
sends the file again from part 0.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.bounds import LANGUAGE_PATTERN

from .common import Count, Error
from .ingest import Section

# The error type of a part the worker cannot place (the parts before it went to another worker, or
# this one restarted): send the file again from part 0.
RESTART_UPLOAD = "RestartUpload"
# The error type of a file over the worker's ``max_file_bytes``: sending it again cannot help.
FILE_TOO_LARGE = "FileTooLarge"

# Safe as a file name on the worker: letters, digits, "-" and "_".
ConversionId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
# One part's bytes: the bus's max_message_bytes bounds it first; this bounds what a decoder accepts.
PART_MAX_BYTES = 1 << 30
PARTS_MAX = 1 << 31


class ConvertPart(msgspec.Struct, kw_only=True):
    """One part of a file to convert (see the module's docstring)."""

    conversion_id: ConversionId
    # The file's name as the caller knows it: its suffix picks the converter, errors name it.
    filename: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    # 0 opens the conversion (again, after a restart); 1, 2, ... follow in order.
    part: Annotated[int, msgspec.Meta(ge=0, le=PARTS_MAX)] = 0
    last: bool = True
    # The whole file's size: a file over the worker's max_file_bytes is refused at part 0.
    size: Count = 0
    data: Annotated[bytes, msgspec.Meta(max_length=PART_MAX_BYTES)] = b""
    # Tesseract's languages for pages read by OCR; "" = the worker's [convert] language.
    language: Annotated[str, msgspec.Meta(pattern=f"^(?:{LANGUAGE_PATTERN})?$")] = ""


class ConvertReply(msgspec.Struct, kw_only=True):
    """A part before the last, taken: ``received`` bytes of the file so far."""

    received: Count = 0
    error: Error | None = None


class ConvertPiece(msgspec.Struct, kw_only=True):
    """A page's text (or the next piece of a long page's, ``continued``), or the final piece (``last``).

    ``page`` counts from 1 of ``pages`` (0: a kind without pages); ``ocr``: read from its image.
    ``sections`` start at offsets of this piece's ``text``. The final piece carries the ``title``
    ("" = none found) and no text.
    """

    page: Count = 0
    pages: Count = 0
    ocr: bool = False
    continued: bool = False
    text: str = ""
    sections: list[Section] = []
    title: str = ""
    last: bool = False
    error: Error | None = None
