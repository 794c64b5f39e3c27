"""Test hosts on one machine: network namespaces on a bridge, each with its own address, and links to cut.

    with Network(["broker", "w1", "w2", "caller"]) as net:
        broker = selection.factory("kafka")(workdir, net["broker"].address, net["broker"].wrap)
        ...
        net.cut(net["w1"])      # its cable pulled: packets to and from it vanish, no reset
        net.throttle(net["q3"], kbit=800)   # a slow cable to it (iproute2's ``tc``)

Each host is a namespace ``ip netns exec`` runs a command in, joined by a veth
pair to a bridge in the caller's namespace; the bridge has an address too, so
the test itself can reach every host (to see a broker is ready, say). Needs
root and iproute2 (``ip``); ``unavailable()`` says why not. Everything made
is removed on exit, however the block ends.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass


def unavailable() -> str | None:
    """Why network namespaces cannot be made here; None when they can."""
    for command in ("ip", "tc"):
        if shutil.which(command) is None:
            return f"no `{command}` command (Debian package iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    return None


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {run.stderr.strip()}")


def _tc(*args: str) -> None:
    run = subprocess.run(["tc", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise OSError(f"tc {' '.join(args)}: {run.stderr.strip()}")


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str
    link: str  # its veth end on the bridge: down = cable pulled

    @property
    def wrap(self) -> list[str]:
        """The prefix that runs a command on this host."""
        return ["ip", "netns", "exec", self.namespace]


class Network:
    """Hosts ``names`` on one bridge, at 10.213.<random>.1, .2, ...; the test's own side at .254."""

    def __init__(self, names: list[str]) -> None:
        self.tag = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"  # interface names: 15 chars at most
        self.subnet = f"10.213.{random.randrange(1, 255)}"
        self.bridge = f"rbb{self.tag}"
        self.gateway = f"{self.subnet}.254"
        self.hosts = {
            name: Host(name, f"ragbus-{self.tag}-{name}", f"{self.subnet}.{i}", f"rbv{self.tag}{i}")
            for i, name in enumerate(names, start=1)
        }
        self._made: list[tuple[str, ...]] = []  # undo commands, in reverse order of making

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> Network:
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", "del", self.bridge))
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts.values():
            inner = f"rbi{self.tag}{host.address.rsplit('.', 1)[1]}"
            _ip("netns", "add", host.namespace)
            self._made.append(("netns", "del", host.namespace))
            _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
            self._made.append(("link", "del", host.link))
            _ip("link", "set", inner, "netns", host.namespace)
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", inner)
            _ip("-n", host.namespace, "link", "set", inner, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            _ip("link", "set", host.link, "master", self.bridge)
            _ip("link", "set", host.link, "up")

    def cut(self, host: Host) -> None:
        """Pull the host's cable: nothing reaches it or leaves it, and no one is told."""
        _ip("link", "set", host.link, "down")

    def mend(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def throttle(self, host: Host, kbit: int) -> None:
        """A slow cable: what reaches the host comes at ``kbit`` kilobits a second at most (a token bucket
        on its end of the bridge); ``unthrottle`` lifts it."""
        _tc("qdisc", "replace", "dev", host.link, "root", "tbf", "rate", f"{kbit}kbit", "burst", "16kb",
            "latency", "1s")

    def unthrottle(self, host: Host) -> None:
        _tc("qdisc", "del", "dev", host.link, "root")

    def __exit__(self, *exc: object) -> None:
        while self._made:
            undo = self._made.pop()
            subprocess.run(["ip", *undo], capture_output=True)  # gone with its namespace already is fine
