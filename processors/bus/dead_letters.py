"""Dead letters read back and redriven: what ``ragbus dlq list`` and ``ragbus dlq redrive`` do.

A dead-letter topic (``<topic><dead_letter_suffix>``) is read with
``Bus.read_retained``: no group, nothing acknowledged, so listing it takes
nothing from anyone, and it can be listed any number of times.

Redriving a dead letter publishes its body, key and headers again to the
topic it came from (``x-dead-letter-topic``), without the ``x-dead-letter-*``
headers and with ``x-ragbus-redrives`` counting how often it has been
redriven. A fresh publish starts a fresh delivery count on every backend, so
the consumer gives it its full ``max_attempts`` again; if it fails them all it
is dead-lettered anew, carrying its redrive count.

Then a marker goes to the dead-letter topic itself: an empty message whose
``x-ragbus-redriven`` header names the position of the dead letter redriven.
Listing and redriving skip a dead letter with a marker, so a second redrive
does not send the same message again, and a marker is never listed. The
marker lives in the topic it describes, so it needs no store of its own, is
seen by every operator on every host, and goes with the topic's retention
(after its dead letter, being younger). A redrive that stops between the
publish and the marker sends that message once more next time: at least
once, like everything else on the bus. Two redrives of one topic at the same
moment may both send a message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .base import Bus, Retained, TopicAdmin
from .consume import H_ATTEMPTS, H_ERROR, H_GROUP, H_ORIGIN, H_REASON

REDRIVEN = "x-ragbus-redriven"  # on a marker: the position of the dead letter it redrove
REDRIVES = "x-ragbus-redrives"  # on a redriven message: how many times it was redriven
DEAD_LETTER_PREFIX = "x-dead-letter-"
KAFKA_ATTEMPT = "x-ragbus-attempt"  # kafka.ATTEMPT_HEADER: a delivery count that must not travel on
REQUEST_ID = "request-id"  # the envelope's header (runtime/envelope.py), shown to tell messages apart


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message of a dead-letter topic, as the consume loop described it."""

    topic: str  # the dead-letter topic
    position: str
    origin: str  # where it came from, and where a redrive sends it
    group: str | None
    reason: str
    error: str
    attempts: int | None
    time: float | None  # when it was dead-lettered (epoch seconds)
    redrives: int
    request_id: str | None
    message: Retained

    @property
    def body_kept(self) -> bool:
        """False for a body over the size limit: it was dead-lettered without it, and a redrive cannot help."""
        return bool(self.message.body) or self.error != "MessageTooLarge"

    def summary(self) -> dict:
        """The JSON ``ragbus dlq list --json`` shows for it."""
        return {
            "topic": self.topic, "position": self.position, "origin": self.origin, "group": self.group,
            "reason": self.reason, "error": self.error, "attempts": self.attempts, "time": self.time,
            "redrives": self.redrives, "request_id": self.request_id, "bytes": len(self.message.body),
        }

    def matches(self, reason: str | None) -> bool:
        """Whether ``--reason R`` picks it: R is its error type, or a part of its reason."""
        return reason is None or reason == self.error or reason in self.reason


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _dead_letter(m: Retained, suffix: str) -> DeadLetter:
    h = m.headers
    origin = h.get(H_ORIGIN) or (m.topic[: -len(suffix)] if suffix and m.topic.endswith(suffix) else m.topic)
    return DeadLetter(
        topic=m.topic, position=m.position, origin=origin, group=h.get(H_GROUP),
        reason=h.get(H_REASON, ""), error=h.get(H_ERROR, ""), attempts=_int(h.get(H_ATTEMPTS)),
        time=m.timestamp, redrives=_int(h.get(REDRIVES)) or 0, request_id=h.get(REQUEST_ID), message=m,
    )


async def dead_letter_topics(bus: TopicAdmin, topics: Iterable[str]) -> list[str]:
    """Every dead-letter topic the broker knows; where it cannot list its topics, those of ``topics``."""
    suffix = bus.dead_letter_suffix
    known = await bus.list_topics()
    if known is None:
        return sorted({f"{t}{suffix}" for t in topics})
    return sorted(t for t in known if t.endswith(suffix))


async def pending(bus: TopicAdmin, topic: str, *, reason: str | None = None) -> list[DeadLetter]:
    """The dead letters of ``topic`` not redriven yet (those ``reason`` picks), oldest first."""
    retained = await bus.read_retained(topic)
    redriven = {m.headers[REDRIVEN] for m in retained if REDRIVEN in m.headers}
    letters = (_dead_letter(m, bus.dead_letter_suffix) for m in retained if REDRIVEN not in m.headers)
    return [d for d in letters if d.position not in redriven and d.matches(reason)]


def redriven_headers(letter: DeadLetter) -> dict[str, str]:
    """Its headers as first sent, plus the redrive count: no dead-letter headers, no delivery count."""
    headers = {
        k: v for k, v in letter.message.headers.items()
        if not k.startswith(DEAD_LETTER_PREFIX) and k != KAFKA_ATTEMPT
    }
    headers[REDRIVES] = str(letter.redrives + 1)
    return headers


async def redrive(
    bus: Bus, topic: str, *, reason: str | None = None, limit: int | None = None
) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """Send the pending dead letters of ``topic`` (those ``reason`` picks, at most ``limit``) back where they
    came from, oldest first, each marked redriven. Returns those sent and those skipped: a dead
    letter whose body was not kept (over the size limit) cannot be redriven."""
    sent: list[DeadLetter] = []
    skipped: list[DeadLetter] = []
    for letter in await pending(bus, topic, reason=reason):
        if limit is not None and len(sent) >= limit:
            break
        if not letter.body_kept:
            skipped.append(letter)
            continue
        m = letter.message
        await bus.publish(letter.origin, m.body, redriven_headers(letter), m.key)
        await bus.publish(topic, b"", {REDRIVEN: letter.position})
        sent.append(letter)
    return sent, skipped
