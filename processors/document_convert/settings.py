"""Every default of document-convert (how the files are converted: the deployment's ``[convert]``)."""

from __future__ import annotations

from ragbus.config.bounds import PositiveInt, PositiveSeconds
from ragbus.config.settings import ProcessorSettings


class DocumentConvertSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    # A file larger than this is refused (at its first part when the client says its size, else at the
    # part that passes it), and what it had sent is removed.
    max_file_bytes: PositiveInt = 200_000_000
    # An upload with no part for this long is abandoned (its client died, or its parts went to another
    # worker): its file is removed.
    expire_s: PositiveSeconds = 600.0
    # Where the uploads' files are kept while they arrive and are converted, in a folder of this worker's
    # own, removed when it stops; "" = the system's temporary folder.
    scratch_dir: str = ""
    # Files converted at once, each on a thread of its own (OCR runs Tesseract, a process, per page);
    # more replicas convert more.
    conversions: PositiveInt = 2
    # A conversion answers a page at a time, but a whole document of OCR pages takes long: about a second
    # a page, up to [convert] max_pages.
    handler_timeout_s: PositiveSeconds = 3600.0
