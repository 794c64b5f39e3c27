"""A broker that went away, said in a few lines: once when it goes, now and then while away, once when back.

The client libraries say so on every retry instead (aiokafka a thousand ERROR lines a second for a
``worker --all``). Their lines about the broker come here (``client_log.py``): the first failure is
logged once, an ERROR naming the broker; while it stays away a WARNING every ``[bus]
outage_report_interval_s`` says for how long and how many failures were held back; a probe (one real
request to the broker, the backend's), retried with backoff up to ``outage_probe_max_s``, finds it
back, which is said once. One ``Outage`` per broker and process, shared by every bus on it.

A broker that comes and goes faster than the report interval (one node of a cluster restarting, say)
is not said again each time: an outage that starts within the interval after the last "back" is first
said by the periodic line, if it lasts that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from ragbus.config.bus import BusSettings

log = logging.getLogger(__name__)

# Returns once the broker answered one request; raises (or times out) otherwise.
Probe = Callable[[], Awaitable[None]]
FIRST_PROBE_S = 0.5  # the first probe's wait (at most outage_probe_max_s); each failure doubles it, up to that


def _took(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"


class Outage:
    """Whether one broker is reachable from this process, and the lines that say when that changes.

    ``failed`` may be called from any thread (pulsar-client logs from its own); the watching
    (periodic line, probes) runs as a task on the event loop of a bus that uses the broker.
    """

    def __init__(self, scheme: str, hosts: list[str], settings: BusSettings) -> None:
        self.scheme = scheme
        self.hosts = hosts
        self.name = f"{scheme} broker at {scheme}://{','.join(hosts)}"
        self.report_interval_s = settings.outage_report_interval_s
        self.probe_max_s = settings.outage_probe_max_s
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current outage began (monotonic); None: reachable
        self._said = False  # whether a line has said the current outage
        self._back_at: float | None = None
        self._held = 0  # client lines held back during the current outage
        self._last = ""
        self._probes: list[tuple[asyncio.AbstractEventLoop, Probe]] = []
        self._watcher: asyncio.Future[None] | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, detail: str) -> None:
        """A client could not reach the broker: the first failure of an outage is said, the rest counted."""
        now = time.monotonic()
        with self._lock:
            self._held += 1
            self._last = detail
            if self._since is not None:
                return
            self._since, self._held = now, 0
            self._said = self._back_at is None or now - self._back_at >= self.report_interval_s
        if self._said:
            log.error("%s is unreachable: %s (the clients keep retrying; said again every %gs while it lasts, "
                      "and once it is back)", self.name, detail[:500], self.report_interval_s)
        self._watch()

    def held(self) -> None:
        """A client line that follows from the outage (a coordinator marked dead...) was held back."""
        with self._lock:
            self._held += 1

    def describe(self) -> str | None:
        """Why nothing gets through, naming the broker and for how long; None while it is reachable."""
        since, last = self._since, self._last
        if since is None:
            return None
        return f"the {self.name} has been unreachable for {_took(time.monotonic() - since)} (last error: {last[:300]})"

    def _recovered(self) -> None:
        with self._lock:
            since, said, held = self._since, self._said, self._held
            self._since, self._back_at = None, time.monotonic()
        if since is not None and said:
            log.warning("%s is reachable again after %s (%d client error lines held back)",
                        self.name, _took(self._back_at - since), held)

    def _report(self) -> None:
        with self._lock:
            since, held, last = self._since, self._held, self._last
            self._said = True
        if since is not None:
            log.warning("%s still unreachable after %s (%d client error lines held back; last: %s)",
                        self.name, _took(time.monotonic() - since), held, last[:300])

    def _watch(self) -> None:
        """Start the watcher on the loop of the first bus attached whose loop still runs, unless it runs already."""
        with self._lock:
            loop = next((loop for loop, _ in self._probes if not loop.is_closed()), None)
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # that loop closed meanwhile: its bus is gone
            loop.call_soon_threadsafe(self._start_watcher)

    def _start_watcher(self) -> None:
        watcher = self._watcher  # one of a loop that closed under it never finishes: not this loop's
        if watcher is None or watcher.done() or watcher.get_loop() is not asyncio.get_running_loop():
            self._watcher = asyncio.ensure_future(self._watching())

    async def _watching(self) -> None:
        """Say the outage every report interval until a probe finds the broker back (a probe may take
        as long as the connect time-out: the lines keep their pace meanwhile)."""
        reporting = asyncio.ensure_future(self._reporting())
        try:
            await self._probing()
        finally:
            reporting.cancel()

    async def _reporting(self) -> None:
        while True:
            await asyncio.sleep(self.report_interval_s)
            self._report()

    async def _probing(self) -> None:
        wait = min(FIRST_PROBE_S, self.probe_max_s)
        while self._since is not None:
            await asyncio.sleep(wait)
            running = asyncio.get_running_loop()
            with self._lock:
                probe = next((p for loop, p in self._probes if loop is running), None)
            if probe is None:
                return
            try:
                await probe()
            except Exception as exc:  # still away: ask again later
                log.debug("%s: probe failed: %r", self.name, exc)
                wait = min(wait * 2, self.probe_max_s)
            else:
                self._recovered()

    def _attach(self, probe: Probe) -> None:
        with self._lock:
            self._probes.append((asyncio.get_running_loop(), probe))

    def _detach(self, probe: Probe) -> bool:
        """Forget a bus's probe; True when no bus uses the broker any more."""
        with self._lock:
            self._probes = [(loop, p) for loop, p in self._probes if p != probe]  # a bound method: equal, not identical
            last = not self._probes
        if last and self._watcher is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed already: nothing runs it any more
                self._watcher.cancel()
        return last


_OUTAGES: dict[str, Outage] = {}
_lock = threading.Lock()


def attach(scheme: str, hosts: list[str], probe: Probe, settings: BusSettings) -> Outage:
    """The outage record of a broker, for a bus about to use it; ``probe`` is the bus's way of asking it."""
    key = f"{scheme}://{','.join(hosts)}"
    with _lock:
        outage = _OUTAGES.get(key)
        if outage is None:
            outage = _OUTAGES[key] = Outage(scheme, hosts, settings)
    outage._attach(probe)
    return outage


def detach(outage: Outage, probe: Probe) -> None:
    """A bus closes: its probe goes, and the record with the last bus on the broker."""
    with _lock:
        if outage._detach(probe):
            key = f"{outage.scheme}://{','.join(outage.hosts)}"
            if _OUTAGES.get(key) is outage:
                del _OUTAGES[key]


def find(scheme: str, text: str) -> Outage | None:
    """The outage record a client's line speaks of: the broker its text names, else the first of ``scheme``."""
    with _lock:
        candidates = [o for o in _OUTAGES.values() if o.scheme == scheme]
    for outage in candidates:
        if any(host in text for host in outage.hosts):
            return outage
    return candidates[0] if candidates else None
