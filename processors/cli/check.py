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

from ragbus.config.bus import BusSettings
from ragbus.config.settings import load_settings
from ragbus.bus import Bus, Undecodable, connect, consume, dead_letter_topic
from ragbus.bus.consume import H_ATTEMPTS, H_REASON

from .common import BUS_HELP, add_timeout_option, call_timeout


async def run_selfcheck(url: str | None, settings: BusSettings, *, timeout_s: float, out=print) -> int:
    async with await connect(url, settings) as bus:
        return await check_bus(bus, settings, timeout_s=timeout_s, out=out)


async def check_bus(bus: Bus, settings: BusSettings, *, timeout_s: float, out=print) -> int:
    """0 when every message came back as it should within ``timeout_s``, else 1.

    One deadline for the whole wait: a message the bus loses is what this command
    exists to find, so waiting for it without one would hang instead of saying FAILED.
    """
    topic = f"ragbus-check-{uuid.uuid4().hex[:8]}"
    good = [f"good-{i}".encode() for i in range(5)]
    expected_dlq = {b"poison": str(settings.max_attempts), b"garbage": "1"}
    handled: list[bytes] = []
    attempts: dict[bytes, int] = {}
    all_handled = asyncio.Event()
    started = time.perf_counter()

    async def handler(d) -> None:
        attempts[d.body] = d.attempt
        if d.body == b"garbage":
            raise Undecodable("not a message this processor understands")
        if d.body == b"poison" or (d.body == b"flaky" and d.attempt == 1):
            raise RuntimeError(f"handler failed on {d.body!r}")
        handled.append(d.body)
        if len(handled) >= len(good) + 1:
            all_handled.set()

    # The dead letters are the point of this check: report them here, not as warnings.
    logging.getLogger("ragbus.bus.consume").setLevel(logging.ERROR)
    out(f"bus {bus.url}: topic {topic}, max_attempts={settings.max_attempts}")
    sub = await bus.subscribe(topic, "ragbus-check")
    dlq = await bus.subscribe(dead_letter_topic(topic, settings.dead_letter_suffix), "ragbus-check")
    for body in [*good, b"flaky", b"poison", b"garbage"]:
        await bus.publish(topic, body)
    stop = asyncio.Event()
    worker = asyncio.ensure_future(consume(bus, sub, handler, max_attempts=settings.max_attempts, stop=stop))
    dead: dict[bytes, str] = {}
    try:
        async with asyncio.timeout(timeout_s):
            while len(dead) < len(expected_dlq):
                d = await dlq.receive()
                dead[d.body] = d.headers.get(H_ATTEMPTS, "?")
                out(f"  dead-lettered {d.body!r} after {dead[d.body]} attempt(s): {d.headers.get(H_REASON)}")
                await d.ack()
            await all_handled.wait()
    except TimeoutError:
        missing = [b for b in [*good, b"flaky"] if b not in handled] + [b for b in expected_dlq if b not in dead]
        out(f"  timed out after {timeout_s:g}s still waiting for {b', '.join(missing).decode()}")
    finally:
        stop.set()
        stats = await worker
    ok = sorted(handled) == sorted([*good, b"flaky"]) and dead == expected_dlq and attempts.get(b"flaky") == 2
    out(f"  handled {len(handled)} (flaky on attempt {attempts.get(b'flaky')}), "
        f"dead-lettered {stats.dead_lettered}, nacked {stats.nacked}, "
        f"in {time.perf_counter() - started:.2f}s: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


async def _check(args: argparse.Namespace) -> int:
    settings = load_settings()
    return await run_selfcheck(args.bus, settings.bus, timeout_s=call_timeout(args, settings))


def add_parsers(sub) -> None:
    p = sub.add_parser("check", help="prove delivery, retry and dead-lettering work on a bus")
    p.add_argument("--bus", help=BUS_HELP)
    add_timeout_option(p, "every message to come back (a lost one then reports FAILED)", "request_timeout_s")
    p.set_defaults(run=_check)
