"""Every default of the library processors (document-record and documents-query), in one place.

Both must name the same ``data_dir`` as the other stores; document-record is one of the data
dir's writers (``config/pipelines.py`` ``WRITERS``) and holds ``<data_dir>/.documents-writer.lock``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.settings import StoreSettings


class LibrarySettings(StoreSettings, kw_only=True, forbid_unknown_fields=True):
    # A listing asking for more documents a page gets this many (clamped): a page of 500 is ~150 KB,
    # well within a message.
    max_limit: Annotated[int, msgspec.Meta(ge=1)] = 500
