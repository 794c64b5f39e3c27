"""Bus URLs: ``memory://[NAME]``, ``kafka://host:port[,host:port...]``, ``pulsar://host:port``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from .base import BusConfigError

SCHEMES = ("memory", "kafka", "pulsar", "pulsar+ssl")
DEFAULT_PORTS = {"kafka": 9092, "pulsar": 6650, "pulsar+ssl": 6651}


@dataclass(frozen=True, slots=True)
class BusAddress:
    scheme: str
    # For memory: [] and ``name`` set; for brokers: one or more (host, port).
    hosts: tuple[tuple[str, int], ...]
    name: str = ""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)


def parse_bus_url(url: str) -> BusAddress:
    """Validate ``url`` and split it; every mistake names what was wrong."""
    if not isinstance(url, str) or "://" not in url:
        raise BusConfigError(
            f"bus URL {url!r} is malformed: expected SCHEME://..., one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise BusConfigError(
            f"bus URL {url!r} has unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}"
        )
    if scheme == "memory":
        name = rest.strip("/")
        if "/" in name or "?" in name:
            raise BusConfigError(f"bus URL {url!r}: a memory bus name is one word, e.g. memory://tests")
        return BusAddress(scheme, (), name)
    netloc = rest.split("/", 1)[0]
    if not netloc:
        raise BusConfigError(f"bus URL {url!r} names no broker host; expected {scheme}://host:port")
    hosts = []
    for part in netloc.split(","):
        try:
            parsed = urlsplit(f"//{part}")
            port = parsed.port
        except ValueError as exc:
            raise BusConfigError(f"bus URL {url!r}: bad host:port {part!r} ({exc})") from None
        if not parsed.hostname:
            raise BusConfigError(f"bus URL {url!r}: empty host in {part!r}")
        hosts.append((parsed.hostname, port or DEFAULT_PORTS[scheme]))
    if scheme.startswith("pulsar") and len(hosts) != 1:
        raise BusConfigError(f"bus URL {url!r}: a Pulsar URL names exactly one service host")
    return BusAddress(scheme, tuple(hosts))
