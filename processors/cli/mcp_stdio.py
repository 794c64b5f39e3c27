"""``ragbus mcp``: the MCP tools (``processors/gateway/mcp_face.py``) over standard input and output.

An MCP client starts it as its subprocess. Standard output carries the protocol only: the
first use's progress and every log line go to standard error. On ``memory://`` (the default)
the whole pipeline runs in this process, as for ``ragbus serve``; a tool called while it is
still starting (the first use ingests the default corpus) waits for it. With a Kafka or Pulsar
URL it only publishes and waits, like any gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from ragbus.config.settings import load_settings

from .common import BUS_HELP, CONFIG_HELP
from .serve import ragbus_version, run_pipeline


async def mcp(args: argparse.Namespace) -> int:
    try:
        from ragbus.gateway import GatewayState
        from ragbus.gateway.mcp_face import McpFace
    except ImportError as exc:
        print(f"ragbus: error: ragbus mcp needs the serve extra: pip install 'ragbus[serve]' ({exc})",
              file=sys.stderr)
        return 2
    settings = load_settings(args.config)
    url = args.bus or settings.bus.url
    state, stop, up = GatewayState(convert=settings.convert), asyncio.Event(), asyncio.Event()
    running = asyncio.ensure_future(run_pipeline(state, settings, url, stop, up=up))

    async def pipeline():
        """The pipeline once it is up; why not, if it stopped before."""
        if not up.is_set():
            waiting = asyncio.ensure_future(up.wait())
            await asyncio.wait([waiting, running], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if running.done() and not up.is_set():
                problem = running.exception() if not running.cancelled() else None
                raise RuntimeError(f"the pipeline over {url} did not start: {problem!r}")
        return state.need()

    try:
        await McpFace(pipeline, version=ragbus_version(), convert=state.convert,
                      max_bytes=settings.gateway.max_body_bytes).run_stdio()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await running
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("mcp", help="serve the MCP tools (ask, search, graph, documents, ingest) over stdio, "
                                   "for an MCP client to start")
    p.add_argument("--bus", help=BUS_HELP)
    p.add_argument("--config", help=CONFIG_HELP)
    p.set_defaults(run=mcp)
