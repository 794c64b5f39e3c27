"""Every default of the knowledge-graph processors, in one place.

kg-query and kg-store share this Settings class; a ``[processors.NAME]``
section of either may set any key, e.g.::

    [processors.kg-query]
    class = "processors.kg:KgQueryProcessor"
    data_dir = "/var/lib/ragbus"

and environment variables override them: ``RAGBUS_PROCESSORS__KG_QUERY__MAX_LIMIT=50``.
The writer (kg-store) and every query replica must name the same ``data_dir``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from config.settings import ProcessorSettings
from schema.topics import GRAPH_LOG


class KgSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    # Where graphs live: <data_dir>/<collection>/graph/log. "" = config.settings.default_data_dir()
    # (RAGBUS_DATA_DIR, else $XDG_DATA_HOME/ragbus, else ~/.local/share/ragbus).
    data_dir: str = ""
    # A request asking for more facts gets this many (clamped, not refused); a negative limit is refused.
    max_limit: Annotated[int, msgspec.Meta(ge=1)] = 100
    # Questions longer than this many characters are refused: linking is linear in the question,
    # and no question is a page long.
    max_question_chars: Annotated[int, msgspec.Meta(ge=1)] = 20_000
    # Make the graphs from the bus's graph log (schema.topics.GRAPH_LOG) instead of the data dir's files:
    # kg-store appends to it (any number of writers, no writer lock), every kg-query replica keeps
    # graphs of its own made from it, with a local copy in its own data_dir (processors/kg/from_log.py).
    # Needs a bus with log topics (Kafka, Pulsar; memory:// only within one process).
    changelog: bool = False
    # The log topic the graphs are made from (one per deployment: every collection's history is in it).
    log_topic: str = GRAPH_LOG
    # How long kg-store waits for its own copy of the graph to apply a batch it appended, before the
    # request fails (the batch is in the log all the same, and is applied when the replica catches up).
    apply_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
