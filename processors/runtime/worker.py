"""Run processors as workers: one, several, or every configured one, in this process.

Which processors exist, and their wiring, come from ``[processors.NAME]``
sections of the settings (``class = "module:Class"`` plus that class's
Settings fields). SIGTERM and SIGINT stop taking work; requests in flight get
``drain_timeout_s`` to finish, the rest are nacked, then the group is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Sequence
from pathlib import Path

from ragbus.config.settings import MetricsSettings, Settings, SettingsError, processor_settings

from ..bus import connect
from ..bus.consume import ConsumeStats
from . import metrics
from .processor import Processor

log = logging.getLogger(__name__)


def processor_class(path: str) -> type[Processor]:
    module_name, sep, class_name = path.partition(":")
    if not sep:
        raise SettingsError(f"processor class {path!r} must look like 'package.module:ClassName'")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise SettingsError(f"cannot load processor class {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Processor)):
        raise SettingsError(f"{path!r} is not a Processor subclass")
    return cls


def put_stores_in(settings: Settings, directory: str | Path) -> None:
    """Point every processor that keeps a store (its Settings has ``data_dir``) at ``directory``."""
    for section in settings.processors.values():
        if "class" in section and "data_dir" in processor_class(section["class"]).Settings.__struct_fields__:
            section["data_dir"] = str(directory)


def build_processor(settings: Settings, name: str) -> Processor:
    section = settings.processors.get(name)
    if section is None:
        known = ", ".join(sorted(settings.processors)) or "none"
        raise SettingsError(f"unknown processor {name!r}; configured: {known}")
    if "class" not in section:
        raise SettingsError(f"[processors.{name}] has no 'class'")
    cls = processor_class(section["class"])
    return cls.build(name, processor_settings(settings, name, cls.Settings), settings)


def _serve_metrics(settings: MetricsSettings, readiness: metrics.Readiness):
    """Start the metrics endpoint, or fail naming the address and the setting that chose it.

    The bare ``[Errno 98] Address already in use`` of a second worker on one
    machine said neither which port nor where it was set.
    """
    try:
        server = metrics.serve_metrics(settings.port, settings.host, readiness)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot serve metrics on {settings.host}:{settings.port}: {exc.strerror or exc}; choose another "
            "port with [metrics] port or RAGBUS_METRICS__PORT (0 turns metrics off)",
        ) from None
    log.info("metrics on http://%s:%d/metrics", settings.host, settings.port)
    return server


async def run_workers(
    settings: Settings,
    names: Sequence[str],
    *,
    bus_url: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    on_ready=None,
) -> dict[str, ConsumeStats]:
    """Serve ``names`` on one bus connection until ``stop`` (or SIGTERM/SIGINT)."""
    if not names:
        raise SettingsError("no processors to run")
    processors = [build_processor(settings, n) for n in names]
    stop = stop or asyncio.Event()
    readiness = metrics.Readiness()
    server = _serve_metrics(settings.metrics, readiness) if settings.metrics.port else None
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    bus = await connect(bus_url, settings.bus)
    try:
        joined = [asyncio.Event() for _ in processors]
        runs: dict[int, asyncio.Future] = {}

        def stop_on_failure(task: asyncio.Future) -> None:
            if not task.cancelled() and task.exception() is not None:
                stop.set()

        def launch(first: bool) -> list[asyncio.Future]:
            for i, p in enumerate(processors):
                if p.starts_first == first:
                    runs[i] = asyncio.ensure_future(p.run(bus, stop, joined[i]))
                    # One processor failing (say, its store cannot open) stops the others cleanly.
                    runs[i].add_done_callback(stop_on_failure)
            return list(runs.values())

        # A replica first: the processors reading its data dir join their groups, and are sent work,
        # only once it has caught up with the log (or never, if it fails or the worker is stopped).
        leading = launch(first=True)
        if leading:
            ahead: asyncio.Future = asyncio.ensure_future(asyncio.gather(*(joined[i].wait() for i in runs)))
            told: asyncio.Future = asyncio.ensure_future(stop.wait())
            await asyncio.wait([ahead, told, *leading], return_when=asyncio.FIRST_COMPLETED)
            for waited in (ahead, told):
                waited.cancel()
                with contextlib.suppress(asyncio.CancelledError):  # retrieved: a gather cancelled says nothing
                    await waited
        if not stop.is_set():
            launch(first=False)
        tasks: list[asyncio.Future] = [runs[i] for i in sorted(runs)]
        waiting = asyncio.ensure_future(asyncio.gather(*(joined[i].wait() for i in sorted(runs))))
        await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if waiting.done() and not stop.is_set():
            readiness.ready = True
            unready = asyncio.ensure_future(stop.wait())  # draining is not ready: probes move traffic away
            unready.add_done_callback(lambda _: setattr(readiness, "ready", False))
            tasks.append(unready)
            if on_ready is not None:
                on_ready()
        else:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiting
        started = sorted(runs)
        results = (await asyncio.gather(*tasks, return_exceptions=True))[: len(started)]
        stats: dict[str, ConsumeStats] = {}
        for i, r in zip(started, results, strict=True):
            if isinstance(r, BaseException):
                raise r  # the first processor's failure, in the order given
            stats[processors[i].name] = r
        return stats
    finally:
        await bus.close()
        for sig in signals:
            loop.remove_signal_handler(sig)
        if server is not None:
            with contextlib.suppress(Exception):
                server.shutdown()


@contextlib.asynccontextmanager
async def processors_running(settings: Settings, names: Sequence[str], bus_url: str, *,
                             ready_timeout: float = 300.0):
    """Run ``names`` as tasks of this process for the duration of a ``with`` block.

    The block starts once every processor has joined its group; a processor
    that fails to start raises here, with its own error. On exit the
    processors drain and stop. Commands on the embedded bus, tests and
    benchmarks use this rather than separate worker processes.
    """
    stop, ready = asyncio.Event(), asyncio.Event()
    workers = asyncio.ensure_future(
        run_workers(settings, names, bus_url=bus_url, stop=stop, handle_signals=False, on_ready=ready.set)
    )
    waiting = asyncio.ensure_future(ready.wait())
    await asyncio.wait([workers, waiting], timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if workers.done():
        workers.result()
        raise RuntimeError(f"processors {', '.join(names)} stopped before they were ready")
    if not ready.is_set():
        stop.set()
        await workers
        raise TimeoutError(f"processors {', '.join(names)} not ready within {ready_timeout:g}s")
    try:
        yield
    finally:
        stop.set()
        await workers
