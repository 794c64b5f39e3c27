"""Starting a test broker for a test, and the bus settings the tests run with."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from ragbus.config.bus import BusSettings, KafkaOptions, PulsarOptions
from ragbus.testing import brokers, selection


@dataclass
class ExternalBroker:
    """A broker the session did not start (``RAGBUS_TEST_KAFKA`` / ``RAGBUS_TEST_PULSAR``): used, never stopped."""

    url: str
    metrics_url: str | None = None
    admin_url: str | None = None  # Pulsar's default, http://HOST:8080 ([bus.pulsar] admin_url)
    client_env: dict = field(default_factory=dict)

    def stop(self, **_) -> None:
        pass


def start_test_broker(factory, workdir, *args, **options):
    """A test broker started in ``workdir``; in CI one that cannot start fails the test, elsewhere skips it."""
    try:
        broker = factory(workdir, *args, **options).start()
    except Exception as exc:
        if brokers.in_ci():
            pytest.fail(f"test broker {factory.__name__} could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"test broker {factory.__name__} unavailable: {exc}")
    return broker


def session_broker(bus: str, workdir):
    """The session's broker for ``bus``: the one ``RAGBUS_TEST_<BUS>`` names, else one started here."""
    url = selection.external_url(bus)
    if url is not None:
        return ExternalBroker(url)
    return start_test_broker(selection.factory(bus), workdir)


def own_broker(bus: str, workdir, *args, **options):
    """A broker of the test's own (it restarts it, or needs topics and groups no other test touched)."""
    if selection.external_url(bus) is not None:
        if brokers.in_ci():
            pytest.fail(f"{selection.VARIABLE[bus]} is set in CI: this test must start its own broker", pytrace=False)
        pytest.skip(f"needs a {bus} broker of its own; {selection.VARIABLE[bus]} points at a running one")
    return start_test_broker(selection.factory(bus), workdir, *args, **options)


def settings_for_tests(broker=None, **overrides) -> BusSettings:
    """Quick commits and redeliveries for tests; a light broker's own settings only against it; the
    admin API of ``broker`` (a test's own Pulsar), else of the session's."""
    kafka: dict = {"commit_interval_ms": 50}
    pulsar: dict = {"negative_ack_redelivery_delay_ms": 50}
    if selection.choice("kafka") == "light":
        kafka["fetch_max_wait_ms"] = 5  # brokers.LIGHT_BROKER_ENV
    if selection.choice("pulsar") == "light":
        pulsar["consumer_id_spread"] = 8
        pulsar["keep_logs"] = False
    elif broker is not None and getattr(broker, "admin_url", None):
        pulsar["admin_url"] = broker.admin_url
    elif os.environ.get(brokers.ADMIN_URL_ENV):  # the session's Pulsar (conftest.py)
        pulsar["admin_url"] = os.environ[brokers.ADMIN_URL_ENV]
    base = {"connect_timeout_s": 5.0, "max_attempts": 3,
            "kafka": KafkaOptions(**kafka), "pulsar": PulsarOptions(**pulsar)}
    base.update(overrides)
    return BusSettings(**base)
