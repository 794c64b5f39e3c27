"""Which of aiokafka's log lines say its broker is unreachable, follow from that, or are routine (``client_log``).

aiokafka logs every failed retry, each consumer on its own, about every 100 ms (its
``retry_backoff_ms``): a ``worker --all`` whose broker stopped logged about 1,300 ERROR lines a
second, mostly "Unable connect to node", "Unable to update metadata" and "Failed fetch messages
... NodeNotReadyError". A line is told by its template (``record.msg``, stable where the
formatted text is not) and by the error it carries.

Routine: "Heartbeat failed for group X because it is rebalancing" is how every member of a group
learns that another one joins; a worker starting beside another made the first log it for each of
its groups. Other heartbeat failures (a member the coordinator no longer knows, say) stay warnings.
"""

from __future__ import annotations

import logging

from aiokafka import errors

from ..client_log import Kind, install

# The connection itself failed or the broker did not answer: the broker cannot be reached.
_CONNECTION_ERRORS = (errors.NodeNotReadyError, errors.KafkaConnectionError, errors.RequestTimedOutError,
                      errors.KafkaTimeoutError, OSError, TimeoutError)
_UNREACHABLE = frozenset({
    'Unable connect to "%s:%s": %s',
    "Unable connect to node with id %s: %s",
    "Unable to update metadata from %s",
    'Unable to request metadata from "%s:%s": %s',
    "Unable to request metadata from node with id %s: %r",
})
# What every consumer (or producer) logs once its broker is away, or while it comes back.
_FOLLOWING = frozenset({
    "Marking the coordinator dead (node %s)for group %s.",
    "Heartbeat failed for group %s: coordinator (node %s) is either not started or not valid",
    "Heartbeat session expired - marking coordinator dead",
    "Heartbeat send request failed: %s. Will retry.",
    "Error sending %s to node %s [%s] -- marking coordinator dead",
    "Group Coordinator Request failed: %s",
    "FindCoordinator Request failed: %s",
    "Failed fetch messages from %s: %s",
    "Failed fetch offsets from %s: %s",
    "Cannot send %r to %s: %r",
    "Could not send %r: %r",
    "Got error produce response: %s",
    "OffsetCommit failed before join, ignoring: %s",
    "Failed to commit on finallization: %s",
})
_ROUTINE = frozenset({"Heartbeat failed for group %s because it is rebalancing"})


def classify(record: logging.LogRecord) -> Kind | None:
    template = record.msg
    if template in _ROUTINE:
        return Kind.ROUTINE
    if template in _UNREACHABLE:
        return Kind.FAILURE
    if template in _FOLLOWING:
        args = record.args if isinstance(record.args, tuple) else ()
        return Kind.FAILURE if any(isinstance(a, _CONNECTION_ERRORS) for a in args) else Kind.FOLLOW_ON
    return None


def install_filters() -> None:
    """On every aiokafka logger (each module logs on its own); all of them exist once aiokafka is imported."""
    import aiokafka.admin  # noqa: F401  (its logger, too)

    names = [n for n in logging.Logger.manager.loggerDict if n == "aiokafka" or n.startswith("aiokafka.")]
    install("kafka", [logging.getLogger(n) for n in sorted(names)], classify)
