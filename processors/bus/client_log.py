"""A client library's own log lines, sorted: the broker's outage is said by ``outage.py``, not by every retry.

A backend puts ``ClientLines`` on its library's loggers with a ``classify`` of its own, which names
what a line is:

- ``FAILURE``: the client could not reach the broker (connection refused or closed, node not ready, a
  lookup without a broker): the broker's ``Outage`` hears of it and the line is dropped;
- ``FOLLOW_ON``: a line that follows from an outage and repeats for every consumer (a coordinator
  marked dead, a heartbeat that failed): dropped while the broker is unreachable, else passed at most
  once per report interval for each of its templates;
- ``ROUTINE``: a step of normal work the library logs too loudly (a heartbeat answered "rebalancing"
  while a member joins the group): logged at INFO;
- anything else (None) passes untouched.

A line of a broker no bus of this process uses passes untouched too.
"""

from __future__ import annotations

import enum
import logging
import re
import threading
import time
from collections.abc import Callable

from . import outage


class Kind(enum.Enum):
    FAILURE = "failure"
    FOLLOW_ON = "follow-on"
    ROUTINE = "routine"


_NUMBERS = re.compile(r"\d+")


class ClientLines(logging.Filter):
    """Sorts the lines of one backend's client library (``scheme``) by ``classify``."""

    def __init__(self, scheme: str, classify: Callable[[logging.LogRecord], Kind | None]) -> None:
        super().__init__()
        self.scheme = scheme
        self.classify = classify
        self._lock = threading.Lock()
        self._passed: dict[tuple[str, str], float] = {}  # (logger, template) -> when a FOLLOW_ON last passed

    def filter(self, record: logging.LogRecord) -> bool:
        kind = self.classify(record)
        if kind is None:
            return True
        if kind is Kind.ROUTINE:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        text = record.getMessage()
        broker = outage.find(self.scheme, text)
        if broker is None:
            return True
        if kind is Kind.FAILURE:
            broker.failed(text)
            return False
        if broker.down:
            broker.held()
            return False
        return self._first_in_interval(record, broker.report_interval_s)

    def _first_in_interval(self, record: logging.LogRecord, interval_s: float) -> bool:
        # One template, whichever group or node it names: "Marking the coordinator dead (node %s)for group %s."
        template = str(record.msg) if record.args else _NUMBERS.sub("#", record.getMessage())
        key, now = (record.name, template), time.monotonic()
        with self._lock:
            last = self._passed.get(key)
            if last is not None and now - last < interval_s:
                return False
            self._passed[key] = now
        return True


def install(scheme: str, loggers: list[logging.Logger], classify: Callable[[logging.LogRecord], Kind | None]) -> None:
    """Put one ``ClientLines`` for ``scheme`` on each of ``loggers`` (once: a second call adds nothing).

    On each logger, not a parent: a logger's filters see only the lines logged on it."""
    lines = ClientLines(scheme, classify)
    for logger in loggers:
        if not any(isinstance(f, ClientLines) and f.scheme == scheme for f in logger.filters):
            logger.addFilter(lines)
