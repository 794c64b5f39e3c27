"""A question load from a process of its own (on a test host of ``netns.py``), reporting as it goes.

    python -m ragbus.testing.remote_load --bus kafka://10.213.7.1:9092 --collection C --total 200

Runs ``chaos.QueryLoad`` and prints ``finished N`` on stdout each time
``--every`` more calls have ended, so a test can act at a point of the run,
then the ``LoadReport`` as one JSON line. The questions are ``QUESTIONS``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient

from .chaos import QueryLoad

QUESTIONS = [
    "How does a context manager wrap a block of code?", "__slots__", "What does the else clause of a for loop do?",
    "Who was head of government of the United Kingdom?", "What saves memory per instance?",
    "When is __exit__ called?", "How do I iterate over a list?", "Who was chancellor of Germany?",
]


async def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    async with await connect(args.bus, settings.bus) as bus, \
            RequestClient(bus, name="remote-load", timeout_s=args.timeout, resend_after_s=args.resend_after) as client:
        load = QueryLoad(client, QUESTIONS, total=args.total, concurrency=args.concurrency, timeout=args.timeout,
                         collection=args.collection)
        running = asyncio.ensure_future(load.run())
        for mark in range(args.every, args.total, args.every):
            await load.reached(mark)
            print(f"finished {mark}", flush=True)
        report = await running
    fields = {k: v for k, v in vars(report).items() if k != "latencies"}
    print(json.dumps({**fields, "errors": dict(report.errors), "line": report.line()}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragbus.testing.remote_load", description=__doc__)
    p.add_argument("--bus", required=True)
    p.add_argument("--collection", default="default")
    p.add_argument("--total", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=60.0, help="each call's deadline, seconds")
    p.add_argument("--resend-after", type=float, default=10.0, help="resend an unanswered call after this long")
    p.add_argument("--every", type=int, default=10, help="print progress each time this many more calls ended")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
