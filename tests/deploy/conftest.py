"""The image, built once for the session, and what the tests run from it: a data volume the first ``ragbus
ask`` fills, a network of the session's own for the gateway, a gateway container per test."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest

from ragbus.testing.brokers import free_port

from ..helpers.image import DATA_DIR, QUESTION, build_image, need_podman, podman, unique, wait_ready


@pytest.fixture(scope="session")
def image() -> str:
    """This checkout's image. .ci/run builds it before the tests (the build needs the package index), so
    here build-image finds every layer cached and only names it; elsewhere it may build from nothing."""
    need_podman()
    return build_image(timeout=1800)


@pytest.fixture(scope="session")
def data_volume(image):
    name = unique("ragbus-test-data")
    podman("volume", "create", name)
    yield name
    podman("volume", "rm", "--force", name, check=False)


@pytest.fixture(scope="session")
def first_ask(image, data_volume) -> subprocess.CompletedProcess[str]:
    """``ragbus ask`` in a container with no network at all, on an empty data volume: its first use fills
    the default collection, which the gateways then find there."""
    return podman("run", "--rm", "--network", "none", "--volume", f"{data_volume}:{DATA_DIR}", image,
                  "ragbus", "ask", QUESTION, timeout=600, check=False)


@pytest.fixture(scope="session")
def network(image):
    """A bridge of the session's own for the gateway's published port (an --internal one cannot publish)."""
    name = unique("ragbus-test-net")
    podman("network", "create", name)
    yield name
    podman("network", "rm", "--force", name, check=False)


@dataclass
class Gateway:
    name: str
    url: str


@pytest.fixture
def gateway(image, first_ask, data_volume, network):
    """``ragbus serve`` in a container, on the filled volume, published on a free loopback port. One at a
    time: each test's own (two would write the same stores)."""
    assert first_ask.returncode == 0, first_ask.stderr[-3000:]
    name, port = unique("ragbus-test-gateway"), free_port()
    podman("run", "--detach", "--name", name, "--network", network, "--publish", f"127.0.0.1:{port}:8000",
           "--volume", f"{data_volume}:{DATA_DIR}", image, "ragbus", "serve", "--host", "0.0.0.0", "--insecure")
    try:
        wait_ready(f"http://127.0.0.1:{port}", name, timeout=300)
        yield Gateway(name, f"http://127.0.0.1:{port}")
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
