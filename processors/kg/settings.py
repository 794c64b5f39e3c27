"""Every default of the knowledge-graph processors, in one place.

kg-query and kg-store share this Settings class; a ``[processors.NAME]``
section of either may set any key, e.g.::

    [processors.kg-query]
    class = "ragbus.kg:KgQueryProcessor"
    data_dir = "/var/lib/ragbus"

and environment variables override them: ``RAGBUS_PROCESSORS__KG_QUERY__MAX_LIMIT=50``.
The writer (kg-store) and every query replica must name the same ``data_dir``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.settings import StoreSettings
from ragbus.schema import topics as t


class KgSettings(StoreSettings, kw_only=True, forbid_unknown_fields=True):
    # A request asking for more facts gets this many (clamped, not refused); a negative limit is refused.
    max_limit: Annotated[int, msgspec.Meta(ge=1)] = 100
    # Questions longer than this many characters are refused: linking is linear in the question,
    # and no question is a page long.
    max_question_chars: Annotated[int, msgspec.Meta(ge=1)] = 20_000
    # How long kg-store waits for its own copy of the graph to apply a batch it appended, before the
    # request fails (the batch is in the log all the same, and is applied when the replica catches up).
    apply_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    # kg-query: a graph question that found nothing in a collection whose graph is empty asks documents-query
    # here whether the collection holds anything: one that holds nothing is refused (EmptyCollection).
    documents_topic: str = t.DOCUMENTS_QUERY
