"""``ragbus serve``: the HTTP gateway (``processors/gateway``) on a bus.

On ``memory://`` (the default) the whole pipeline runs in this process, and the first use
fills the default collection as ``ragbus ask`` does; ``/health`` answers from the start,
``/ready`` once the pipeline does. With a Kafka or Pulsar URL it only publishes and waits,
so any number of gateways can sit behind a load balancer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ragbus.config import pipelines
from ragbus.config.settings import GatewaySettings, Settings, load_settings, processor_settings
from ragbus.bus import connect
from ragbus.bus.base import BusError
from ragbus.document_rag.settings import DocumentRagSettings
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.pipeline_status import wiring
from ragbus.schema import DEFAULT_COLLECTION

from .common import BUS_HELP, CONFIG_HELP, command_client, embedded_processors
from .seed import first_use_plan

if TYPE_CHECKING:
    import uvicorn

API_KEYS_ENV = "RAGBUS_API_KEYS"  # comma-separated, added to [gateway] api_keys


def api_keys(settings: GatewaySettings, environ=os.environ):
    """Every configured key with its scope (``ragbus.gateway.keys``); a bad entry is a ValueError."""
    from ragbus.gateway.keys import gather

    extra = [k.strip() for k in environ.get(API_KEYS_ENV, "").split(",") if k.strip()]
    return gather([*settings.api_keys, *extra], settings.keys_file)


async def run_pipeline(state, settings: Settings, url: str, stop: asyncio.Event, out=sys.stderr, *,
                       reached: asyncio.Event | None = None, up: asyncio.Event | None = None) -> None:
    """Start what the gateway calls (all of it on memory://), set ``state.pipeline``, hold it until ``stop``.

    ``reached`` is set once the bus is: at once on memory://, where the processors starting meanwhile are
    what ``/ready`` waits for; ``up`` once ``state.pipeline`` is set."""
    from ragbus.gateway import BusPipeline

    reached = reached or asyncio.Event()
    if url.startswith("memory"):
        reached.set()
    seeding = await first_use_plan(settings, DEFAULT_COLLECTION, url) if url.startswith("memory") else None
    names = pipelines.EVERYTHING  # on memory://: uploads and deletes go through the pipeline too
    c = settings.client
    async with embedded_processors(settings, names, url), await connect(url, settings.bus) as bus:
        reached.set()
        if seeding is not None:
            state.problem = "first use: ingesting the default corpus"
            async with RequestClient(bus, name="ingest") as loader:
                await seeding.run(loader, out)
        # A command's client: a question to a topic no worker consumes ends at once (NotServed, 503).
        async with command_client(bus, settings, "serve", timeout_s=c.request_timeout_s,
                                  resend_after_s=c.resend_after_s or None) as client, \
                RequestClient(bus, name="serve-store") as store_client:  # no resending: loads are slow
            state.pipeline = BusPipeline(
                client, timeout_s=c.request_timeout_s, store_timeout_s=c.store_timeout_s,
                store_client=store_client,
                ready_check_s=settings.gateway.ready_check_s,
                wiring=wiring(settings),
                max_query_chars=processor_settings(settings, "document-rag", DocumentRagSettings).max_query_chars,
            )
            if up is not None:
                up.set()
            try:
                await stop.wait()
            finally:
                state.pipeline, state.problem = None, "stopping"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine's loopback: what keyless serving may bind."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # another name: it may resolve anywhere
        return False


def listen(host: str, port: int) -> socket.socket:
    """The HTTP socket, bound and listening before anything says it serves (port 0: any free one)."""
    return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)


async def serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ragbus.gateway import GatewayState, build_app
        from ragbus.gateway.http_limits import HeadLimits, protocol_with
        from ragbus.gateway.mcp_face import McpFace
    except ImportError as exc:
        print(f"ragbus: error: ragbus serve needs the serve extra: pip install 'ragbus[serve]' ({exc})",
              file=sys.stderr)
        return 2

    settings = load_settings(args.config)
    g = settings.gateway
    host, port = args.host or g.host, args.port if args.port is not None else g.port
    url = args.bus or settings.bus.url
    keys = api_keys(g)
    if not keys and not is_loopback(host) and not args.insecure:
        print(f"ragbus: error: no API key is set, so ragbus serve answers on loopback only; {host} would let "
              "anyone who reaches it ask, ingest and delete. Set keys ([gateway] api_keys or "
              f"{API_KEYS_ENV}), or say --insecure to serve {host} without any", file=sys.stderr)
        return 2
    state = GatewayState(convert=settings.convert)

    async def ready_pipeline():
        return state.need()

    face = McpFace(ready_pipeline, version=ragbus_version(), convert=state.convert, max_bytes=g.max_body_bytes)
    app = build_app(state, g, api_keys=keys, mcp_routes=face.http_routes(host, g.cors_origins))
    # No access log, no Server and Date headers: per-request work nobody here reads (a proxy adds its own).
    limits = HeadLimits(max_head_bytes=g.max_head_bytes, head_timeout_s=g.head_timeout_s,
                        idle_timeout_s=g.idle_timeout_s, body_timeout_s=g.body_timeout_s)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", access_log=False,
                            server_header=False, date_header=False, http=protocol_with(limits),
                            # typed int by uvicorn; its timers take any number of seconds
                            timeout_graceful_shutdown=g.drain_timeout_s,  # type: ignore[arg-type]
                            timeout_keep_alive=g.idle_timeout_s)  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    try:
        sock = listen(host, port)
    except OSError as exc:
        print(f"ragbus: error: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    stop, reached = asyncio.Event(), asyncio.Event()
    pipeline = asyncio.ensure_future(run_pipeline(state, settings, url, stop, reached=reached))
    try:
        reaching = asyncio.ensure_future(reached.wait())
        await asyncio.wait([pipeline, reaching], return_when=asyncio.FIRST_COMPLETED)
        if not reached.is_set():  # the pipeline ended before the bus was there: it could not be reached
            reaching.cancel()
            problem = pipeline.exception()
            if problem is not None and not isinstance(problem, (BusError, OSError)):
                raise problem
            print(f"ragbus: error: the bus at {url} cannot be reached: {problem}", file=sys.stderr)
            return 2
        http = asyncio.ensure_future(_serving(server, sock, face, state, g.shutdown_delay_s))
        print(f"serving http://{host}:{sock.getsockname()[1]} over {url}", file=sys.stderr, flush=True)
        done, _ = await asyncio.wait([pipeline, http], return_when=asyncio.FIRST_COMPLETED)
        if pipeline in done:  # it failed to start or stopped: no gateway without a pipeline
            server.should_exit = True
            await http
            pipeline.result()
            return 1
        return 0 if http.result() is None else 1
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await pipeline
        sock.close()


@contextlib.contextmanager
def stopping_like_a_pod(server: uvicorn.Server, state, delay_s: float) -> Iterator[None]:
    """Stop ``server`` the way a pod behind a Service is stopped, for the duration of the ``with``.

    SIGTERM turns ``/ready`` to 503 and keeps taking requests for ``delay_s``; then the listener
    closes and requests in flight get the config's graceful timeout. SIGINT, or a second SIGTERM,
    stops at once. The signals are the event loop's: uvicorn's own handlers would raise the signal
    again once the server is down, killing the process before the pipeline behind it is closed.
    """
    if threading.current_thread() is not threading.main_thread():  # only the main thread has signals
        yield
        return
    loop = asyncio.get_running_loop()
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    timer: asyncio.TimerHandle | None = None

    def told(sig: int) -> None:
        nonlocal timer
        state.draining = True
        if sig == signal.SIGTERM and delay_s > 0 and timer is None:
            timer = loop.call_later(delay_s, setattr, server, "should_exit", True)
        elif server.should_exit:
            server.force_exit = True
        else:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, told, sig)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if timer is not None:
            timer.cancel()


async def _serving(server, sock: socket.socket, face, state, delay_s: float) -> None:
    with stopping_like_a_pod(server, state, delay_s):
        async with face.running():  # the MCP sessions live as long as the HTTP server
            await server.serve(sockets=[sock])


def ragbus_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragbus")
    except PackageNotFoundError:
        return ""


def port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return int(text)


def add_parsers(sub) -> None:
    p = sub.add_parser("serve", help="answer over HTTP: REST, OpenAI-compatible chat (/v1/chat/completions) "
                                     "and MCP (streamable HTTP at /mcp)")
    p.add_argument("--host", help="address to listen on (default: [gateway] host, 127.0.0.1)")
    p.add_argument("--port", type=port, help="port to listen on (default: [gateway] port, 8000)")
    p.add_argument("--insecure", action="store_true",
                   help="serve an address other than loopback with no API key set (refused without it)")
    p.add_argument("--bus", help=BUS_HELP)
    p.add_argument("--config", help=CONFIG_HELP)
    p.set_defaults(run=serve)
