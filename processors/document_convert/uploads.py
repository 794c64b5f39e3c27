"""The files being uploaded to a worker in parts: where each goes, which part comes next, when it goes.

Bookkeeping only, no bus: a part is placed (appended, or recognised as a copy of the one before, sent
again), refused with ``RestartUpload`` when this worker does not hold the parts before it, or refused
with ``FileTooLarge``. A file is removed once converted (and no resent last part still reads it), or
once no part came for ``expire_s``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragbus.schema import BadRequest, ConvertPart


class RestartUpload(Exception):
    """This worker cannot place the part: the client sends the file again from part 0."""


class FileTooLarge(BadRequest):
    """The file is over the worker's ``max_file_bytes``."""


@dataclass(eq=False)
class Upload:
    conversion_id: str
    filename: str  # the client's name for the file: errors say it rather than the path here
    path: Path
    next_part: int = 0
    received: int = 0
    last_size: int = 0  # bytes of the part before next_part: a copy of it sent again is recognised
    complete: bool = False
    readers: int = 0  # conversions reading the file (a resent last part converts again)
    touched: float = 0.0


def _suffix(filename: str) -> str:
    """The file's suffix as a converter knows it, safe in a file name here ("" if it has none such)."""
    suffix = Path(filename.replace("\\", "/")).suffix.lower()
    return suffix if re.fullmatch(r"\.[a-z0-9]{1,10}", suffix) else ""


class Uploads:
    def __init__(self, folder: Path, *, max_file_bytes: int, expire_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = folder
        self.max_file_bytes = max_file_bytes
        self.expire_s = expire_s
        self.clock = clock
        self.open: dict[str, Upload] = {}
        self._made = 0

    def add(self, part: ConvertPart) -> Upload:
        """Place ``part``; its upload. Raises ``RestartUpload`` or ``FileTooLarge``."""
        self.sweep()
        now = self.clock()
        if part.part == 0:
            self._drop(part.conversion_id)
            if part.size > self.max_file_bytes or len(part.data) > self.max_file_bytes:
                raise FileTooLarge(self._too_large(part.filename, max(part.size, len(part.data))))
            self._made += 1
            home = self.folder / f"{part.conversion_id}-{self._made}"
            home.mkdir(mode=0o700)
            upload = Upload(part.conversion_id, part.filename, home / f"file{_suffix(part.filename)}", touched=now)
            self.open[part.conversion_id] = upload
            upload.path.write_bytes(part.data)
        else:
            found = self.open.get(part.conversion_id)
            if found is None:
                raise RestartUpload(f"part {part.part} of {part.filename}: this worker holds none of the parts "
                                    "before it (they went to another worker, or this one restarted or let them "
                                    "expire); send the file again from part 0")
            upload = found
            upload.touched = now
            if part.part == upload.next_part - 1 and len(part.data) == upload.last_size:
                return upload  # the part before, sent again (its answer was lost): placed already
            if part.part != upload.next_part or upload.complete:
                self._drop(part.conversion_id)
                raise RestartUpload(f"part {part.part} of {part.filename}: this worker expected part "
                                    f"{upload.next_part}; send the file again from part 0")
            if upload.received + len(part.data) > self.max_file_bytes:
                self._drop(part.conversion_id)
                raise FileTooLarge(self._too_large(part.filename, upload.received + len(part.data)))
            with open(upload.path, "ab") as f:
                f.write(part.data)
        upload.next_part = part.part + 1
        upload.received += len(part.data)
        upload.last_size = len(part.data)
        upload.complete = part.last
        return upload

    def _too_large(self, filename: str, size: int) -> str:
        return (f"{filename}: {size} bytes or more, over document-convert's max_file_bytes={self.max_file_bytes} "
                "([processors.document-convert] max_file_bytes)")

    def reading(self, upload: Upload) -> None:
        """A conversion of ``upload``'s file begins: it stays until ``read`` is said as often."""
        upload.readers += 1

    def read(self, upload: Upload) -> None:
        """A conversion of ``upload``'s file ended: once none reads it, a complete file goes."""
        upload.readers -= 1
        if upload.readers == 0 and (upload.complete or self.open.get(upload.conversion_id) is not upload):
            if self.open.get(upload.conversion_id) is upload:
                del self.open[upload.conversion_id]
            shutil.rmtree(upload.path.parent, ignore_errors=True)

    def sweep(self) -> None:
        """Remove the uploads no part came for in ``expire_s`` and no conversion reads."""
        now = self.clock()
        for upload in [u for u in self.open.values() if u.readers == 0 and now - u.touched > self.expire_s]:
            self._drop(upload.conversion_id)

    def _drop(self, conversion_id: str) -> None:
        upload = self.open.pop(conversion_id, None)
        if upload is not None and upload.readers == 0:  # else the last conversion reading it removes it
            shutil.rmtree(upload.path.parent, ignore_errors=True)

    def close(self) -> None:
        self.open.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
