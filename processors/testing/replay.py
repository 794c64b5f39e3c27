"""Replay recordings in tests: stand in for processors, or check a live processor against them.

A recording (``ragbus record``, processors/runtime/recording.py) of request topics
and the callers' reply topics pairs every request with its response through
``request-id`` and ``reply-to``. Two helpers use those pairs:

- ``RecordedResponder`` answers requests on chosen topics with the recorded
  response of the request that had the same body, so an orchestrator test
  runs against recorded processors without running them;
- ``compare_with_recording`` sends the recorded requests to a live processor
  and reports every response that differs from the recorded one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ragbus.config.settings import ClientSettings, ProcessorSettings
from ragbus.bus import Bus
from ragbus.runtime.envelope import REPLY_TO, REQUEST_ID, parse_envelope, response_headers
from ragbus.runtime.processor import error_response
from ragbus.runtime.recording import Recorded, read_recording
from ragbus.runtime.request_client import RequestClient, RequestTimeout
from ragbus.schema import SCHEMAS, Error, encode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Exchange:
    topic: str
    request: bytes
    response: bytes


def recorded_exchanges(path: str | Path, topics: Iterable[str] | None = None) -> list[Exchange]:
    """Every request on ``topics`` (default: all) whose response is in the recording, in order."""
    wanted = set(topics) if topics is not None else None
    items = list(read_recording(path))
    responses: dict[tuple[str, str], Recorded] = {}
    for item in items:
        rid = item.headers.get(REQUEST_ID)
        if rid and REPLY_TO not in item.headers:
            responses.setdefault((item.topic, rid), item)
    exchanges = []
    for item in items:
        reply_to, rid = item.headers.get(REPLY_TO), item.headers.get(REQUEST_ID)
        if reply_to and rid and (wanted is None or item.topic in wanted):
            response = responses.get((reply_to, rid))
            if response is not None:
                exchanges.append(Exchange(item.topic, item.body, response.body))
    return exchanges


@dataclass
class RecordedResponder:
    """Serve ``topics`` from a recording.

    A request not in the recording is listed in ``misses`` and answered with
    an ``Error("NotRecorded", ...)`` response when its response type is known
    (``response_types``, else the topic's entry in ``schema.SCHEMAS``).
    """

    path: str | Path
    topics: Sequence[str]
    response_types: Mapping[str, type[msgspec.Struct]] = field(default_factory=dict)
    answered: int = 0
    misses: list[tuple[str, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._answers: dict[tuple[str, bytes], bytes] = {}
        for ex in recorded_exchanges(self.path, self.topics):
            self._answers.setdefault((ex.topic, ex.request), ex.response)
        missing = [t for t in self.topics if not any(k[0] == t for k in self._answers)]
        if missing:
            raise ValueError(f"{self.path} holds no answered request on {', '.join(missing)}")

    @contextlib.asynccontextmanager
    async def serving(self, bus: Bus):
        subs = [await bus.subscribe(t, f"ragbus-replay-{t}") for t in self.topics]
        tasks = [asyncio.ensure_future(self._serve(bus, s)) for s in subs]
        try:
            yield self
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for s in subs:
                await s.close()

    async def _serve(self, bus: Bus, sub) -> None:
        while True:
            d = await sub.receive()
            envelope = parse_envelope(d.headers)
            answer = self._answers.get((d.topic, d.body))
            if answer is None:
                self.misses.append((d.topic, d.body))
                log.warning("no recorded answer for a request on %s", d.topic)
                response_type = self.response_types.get(d.topic) or getattr(SCHEMAS.get(d.topic), "response", None)
                if response_type is None or envelope.reply_to is None:
                    await d.ack()
                    continue
                answer = encode(error_response(response_type, Error("NotRecorded", "request not in the recording")))
            # Counted before the reply goes: the caller may have it, and the test stop serving, while
            # this publish still waits for the broker's acknowledgement (a CI run on Kafka counted 5 of 6).
            self.answered += 1
            if envelope.reply_to is not None:
                await bus.publish(envelope.reply_to, answer, response_headers(envelope))
            await d.ack()


@dataclass(frozen=True, slots=True)
class Mismatch:
    topic: str
    request: Any
    expected: Any
    actual: Any


def _plain(body: bytes, ignore: frozenset[str]) -> Any:
    value = msgspec.msgpack.decode(body)
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in ignore}
    return value


async def compare_with_recording(
    client: RequestClient,
    path: str | Path,
    topic: str,
    *,
    ignore_fields: Iterable[str] = (),
    timeout: float = ClientSettings().request_timeout_s,
    concurrency: int = ProcessorSettings().concurrency,
) -> list[Mismatch]:
    """Replay the recorded requests on ``topic`` to whatever serves it now; list what differs.

    Responses are compared as decoded msgpack values, top-level
    ``ignore_fields`` left out (ids, timings). A timeout counts as a mismatch.
    """
    ignore = frozenset(ignore_fields)
    exchanges = recorded_exchanges(path, [topic])
    if not exchanges:
        raise ValueError(f"{path} holds no answered request on {topic}")
    slots = asyncio.Semaphore(concurrency)

    async def check(ex: Exchange) -> Mismatch | None:
        async with slots:
            try:
                actual = _plain(await client.request_bytes(topic, ex.request, timeout=timeout), ignore)
            except RequestTimeout as exc:
                actual = f"timeout: {exc}"
        expected = _plain(ex.response, ignore)
        if actual == expected:
            return None
        return Mismatch(topic, msgspec.msgpack.decode(ex.request), expected, actual)

    results = await asyncio.gather(*(check(ex) for ex in exchanges))
    return [m for m in results if m is not None]
