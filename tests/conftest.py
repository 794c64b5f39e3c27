"""Shared fixtures: real test brokers for the session, and buses on every backend."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.testing import brokers, selection

from .helpers.brokers import own_broker, session_broker, settings_for_tests

BACKENDS = ["memory", "kafka", "pulsar"]


_OWN_DATA_DIR: list[str] = []


def pytest_configure(config):
    """A light test broker's own settings (never production defaults) reach every process the tests start;
    so does a data dir of the session's own, so that nothing a test stores by default (stores, the
    embedder's optimised model) lands in the user's home."""
    for name, value in selection.broker_env().items():
        os.environ.setdefault(name, value)
    # A suite started as a background job without job control (`(pytest &)`) inherits SIGINT ignored,
    # and so would every command it starts: Ctrl-C would do nothing and the Ctrl-C tests would fail.
    # With a handler here, each child starts with SIGINT at its default, as from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if "RAGBUS_DATA_DIR" not in os.environ:
        _OWN_DATA_DIR.append(tempfile.mkdtemp(prefix="ragbus-tests-"))
        os.environ["RAGBUS_DATA_DIR"] = _OWN_DATA_DIR[0]


# The fast subset (`pytest -m fast`): what needs no broker, no model server and no document
# converter, run on the embedded bus. Chosen by place and name here, so no test can forget a mark.
FAST_DIRS = ("unit", "conformance", "runtime")


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.nodeid.split("/")
        needs_broker = item.get_closest_marker("brokers") is not None \
            or any("broker" in name for name in getattr(item, "fixturenames", ()))
        if len(parts) > 1 and parts[1] in FAST_DIRS and not needs_broker \
                and "kafka" not in item.nodeid and "pulsar" not in item.nodeid:
            item.add_marker(pytest.mark.fast)


def pytest_unconfigure(config):
    for directory in _OWN_DATA_DIR:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The session's Kafka: Apache Kafka unless ``RAGBUS_TEST_KAFKA`` says otherwise (testing/selection.py)."""
    broker = session_broker("kafka", tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture
def own_kafka_broker(tmp_path):
    """A Kafka of the test's own, that no other test's topics or groups ever touched."""
    broker = own_broker("kafka", tmp_path)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def pulsar_broker(tmp_path_factory):
    """The session's Pulsar: Apache Pulsar unless ``RAGBUS_TEST_PULSAR`` says otherwise."""
    broker = session_broker("pulsar", tmp_path_factory.mktemp("pulsar"))
    # Its admin API, for the tests' settings and every process a test starts on it (its port is not 8080).
    previous = os.environ.get(brokers.ADMIN_URL_ENV)
    os.environ.update(broker.client_env)
    yield broker
    broker.stop()
    if previous is None:
        os.environ.pop(brokers.ADMIN_URL_ENV, None)
    else:
        os.environ[brokers.ADMIN_URL_ENV] = previous


@pytest.fixture
def own_pulsar_broker(tmp_path):
    """A Pulsar of the test's own (its metrics count only this test's subscriptions)."""
    broker = own_broker("pulsar", tmp_path)
    yield broker
    broker.stop()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def bus_url(backend, request):
    """A URL of the backend under test; memory buses get a private name."""
    if backend == "memory":
        name = f"t{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}"
        drop_memory_broker(name)
    else:
        yield request.getfixturevalue(f"{backend}_broker").url


@pytest.fixture
async def open_bus(bus_url):
    """``await open_bus(**settings)`` opens a bus on the backend under test; all close at teardown."""
    opened = []

    async def factory(**overrides):
        bus = await connect(bus_url, settings_for_tests(**overrides))
        opened.append(bus)
        return bus

    yield factory
    for bus in reversed(opened):
        await bus.close()


@pytest.fixture
def topic():
    return f"t-{uuid.uuid4().hex[:10]}"
