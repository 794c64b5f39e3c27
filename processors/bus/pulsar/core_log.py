"""Where pulsar-client's C++ core writes its log lines: Python's ``pulsar.client`` logger, at no cost per DEBUG line.

The client's own bridge to a Python logger has no level: the core formats every DEBUG line and calls
Python for it, taking the GIL from its network thread (about 200 lines a hybrid query on the bus,
measured; the network thread then waits for the event loop to let go of the GIL). So unless
``pulsar.client`` wants DEBUG, the core gets a file logger at the level ``pulsar.client`` is enabled for,
writing into a pipe; a daemon thread reads what passes (WARN and up by default: rare) and logs it to
``pulsar.client``, so handlers, format and filters stay Python's. A pipe and not stderr itself: a
second writer with its own file offset would overwrite a log that stderr is redirected to.

The core keeps the logger of the first client a process makes: set the level before connecting.

Its lines about a broker it cannot reach (a refused connection, a lookup no broker answers; one per
consumer and producer at each reconnect) go to the broker's ``Outage`` instead (``bus/client_log.py``).
"""

from __future__ import annotations

import logging
import os
import threading

import pulsar

from ..client_log import Kind, install

CLIENT_LOG = logging.getLogger("pulsar.client")


class _EmptyTopicAnswer(logging.Filter):
    """Drops pulsar-client's log lines about Pulsar Lite's answer to a reader of an empty topic
    ("Topic has no messages", then "Failed to getLastMessageId"): ``_more`` reads it as empty, and
    ``ragbus dlq list`` or ``status`` on empty dead-letter topics would otherwise print two lines each."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "(Topic has no messages)" not in text and "Failed to getLastMessageId: UnknownError" not in text


CLIENT_LOG.addFilter(_EmptyTopicAnswer())

# What the core says of a connection that failed or a broker that does not serve (yet): the broker is away.
_UNREACHABLE = ("Failed to establish connection", "Connection refused", "Connection already disconnected",
                "Connection closed", "ResultDisconnected", "ConnectError", "No available broker",
                "service is not ready", "Connection reset", "Broken pipe", "Could not get connection",
                "Connection not ready", "no connection")


# What follows from it: a lookup (the outage's own probe's, too) that timed out waiting for a connection.
_FOLLOWING = ("Error getting topic partitions metadata",)


def classify(record: logging.LogRecord) -> Kind | None:
    text = record.getMessage()
    if any(mark in text for mark in _UNREACHABLE):
        return Kind.FAILURE
    return Kind.FOLLOW_ON if any(mark in text for mark in _FOLLOWING) else None


install("pulsar", [CLIENT_LOG], classify)

# The core's level names in a line ("2026-11-30 22:34:31.604 WARN  [tid] File:line | message").
_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING, "ERROR": logging.ERROR}
_pipe: str | None = None
_lock = threading.Lock()


def client_logger():
    """What to pass as pulsar-client's ``logger``: ``CLIENT_LOG`` itself at DEBUG, else a level-filtered pipe to it."""
    if CLIENT_LOG.isEnabledFor(logging.DEBUG):
        return CLIENT_LOG
    if CLIENT_LOG.isEnabledFor(logging.INFO):
        level = pulsar.LoggerLevel.Info
    elif CLIENT_LOG.isEnabledFor(logging.WARNING):
        level = pulsar.LoggerLevel.Warn
    else:
        level = pulsar.LoggerLevel.Error
    return pulsar.FileLogger(level, _forwarding_pipe())


def _forwarding_pipe() -> str:
    global _pipe
    with _lock:
        if _pipe is None:
            read_end, write_end = os.pipe()
            threading.Thread(target=_forward, args=(read_end,), name="pulsar-client-log", daemon=True).start()
            _pipe = f"/dev/fd/{write_end}"
        return _pipe


def _forward(read_end: int) -> None:
    with open(read_end, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            head, _, message = line.rstrip("\n").partition(" | ")
            words = head.split()
            level = _LEVELS.get(words[2], logging.WARNING) if len(words) > 2 else logging.WARNING
            where = words[4] if len(words) > 4 else ""
            CLIENT_LOG.log(level, "%s (%s)", message or head, where)
