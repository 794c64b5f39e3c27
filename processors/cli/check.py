"""``ragbus check``: prove on a real bus that delivery, retry and dead-lettering work.

It publishes a handful of messages to a private topic and consumes them with
the same ``consume`` loop every processor uses: good messages are acked, a
flaky one succeeds on its second attempt, a poison one is dead-lettered after
``max_attempts``, an undecodable one is dead-lettered at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid

from config.bus import BusSettings
from config.settings import load_settings
from processors.bus import Undecodable, connect, consume, dead_letter_topic
from processors.bus.consume import H_ATTEMPTS, H_REASON

from .common import BUS_HELP


async def run_selfcheck(url: str | None, settings: BusSettings, *, out=print) -> int:
    topic = f"ragbus-check-{uuid.uuid4().hex[:8]}"
    good = [f"good-{i}".encode() for i in range(5)]
    expected_dlq = {b"poison": str(settings.max_attempts), b"garbage": "1"}
    handled: list[bytes] = []
    attempts: dict[bytes, int] = {}
    started = time.perf_counter()

    async def handler(d) -> None:
        attempts[d.body] = d.attempt
        if d.body == b"garbage":
            raise Undecodable("not a message this processor understands")
        if d.body == b"poison" or (d.body == b"flaky" and d.attempt == 1):
            raise RuntimeError(f"handler failed on {d.body!r}")
        handled.append(d.body)

    # The dead letters are the point of this check: report them here, not as warnings.
    logging.getLogger("processors.bus.consume").setLevel(logging.ERROR)
    async with await connect(url, settings) as bus:
        out(f"bus {bus.url}: topic {topic}, max_attempts={settings.max_attempts}")
        sub = await bus.subscribe(topic, "ragbus-check")
        dlq = await bus.subscribe(dead_letter_topic(topic, settings.dead_letter_suffix), "ragbus-check")
        for body in [*good, b"flaky", b"poison", b"garbage"]:
            await bus.publish(topic, body)
        stop = asyncio.Event()
        worker = asyncio.ensure_future(consume(bus, sub, handler, max_attempts=settings.max_attempts, stop=stop))
        dead: dict[bytes, str] = {}
        try:
            while len(dead) < len(expected_dlq):
                d = await asyncio.wait_for(dlq.receive(), 30)
                dead[d.body] = d.headers.get(H_ATTEMPTS, "?")
                out(f"  dead-lettered {d.body!r} after {dead[d.body]} attempt(s): {d.headers.get(H_REASON)}")
                await d.ack()
            while len(handled) < len(good) + 1:
                await asyncio.sleep(0.01)
        except asyncio.TimeoutError:
            out("  timed out waiting for the dead-letter topic")
        finally:
            stop.set()
            stats = await worker
    ok = sorted(handled) == sorted([*good, b"flaky"]) and dead == expected_dlq and attempts.get(b"flaky") == 2
    out(f"  handled {len(handled)} (flaky on attempt {attempts.get(b'flaky')}), "
        f"dead-lettered {stats.dead_lettered}, nacked {stats.nacked}, "
        f"in {time.perf_counter() - started:.2f}s: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


async def _check(args: argparse.Namespace) -> int:
    return await run_selfcheck(args.bus, load_settings().bus)


def add_parsers(sub) -> None:
    p = sub.add_parser("check", help="prove delivery, retry and dead-lettering work on a bus")
    p.add_argument("--bus", help=BUS_HELP)
    p.set_defaults(run=_check)
