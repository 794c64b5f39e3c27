"""Starting a test broker for a test, and the bus settings the tests run with."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from config.bus import BusSettings, KafkaOptions, PulsarOptions
from processors.testing import brokers, selection


@dataclass
class ExternalBroker:
    """A broker the session did not start (``RAGBUS_TEST_KAFKA`` / ``RAGBUS_TEST_PULSAR``): used, never stopped."""

    url: str
    metrics_url: str | None = None

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


def settings_for_tests(**overrides) -> BusSettings:
    """Quick commits and redeliveries for tests; a light broker's own settings only against it."""
    kafka: dict = {"commit_interval_ms": 50}
    pulsar: dict = {"negative_ack_redelivery_delay_ms": 50}
    if selection.choice("kafka") == "light":
        kafka["fetch_max_wait_ms"] = 5  # brokers.LIGHT_BROKER_ENV
    if selection.choice("pulsar") == "light":
        pulsar["consumer_id_spread"] = 8
    base = {"connect_timeout_s": 5.0, "max_attempts": 3,
            "kafka": KafkaOptions(**kafka), "pulsar": PulsarOptions(**pulsar)}
    base.update(overrides)
    return BusSettings(**base)
