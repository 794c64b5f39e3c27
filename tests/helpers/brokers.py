"""Starting a test broker for a test, and the bus settings the tests run with."""

from __future__ import annotations

import pytest

from config.bus import BusSettings, KafkaOptions, PulsarOptions
from processors.testing import brokers


def start_test_broker(factory, workdir):
    """A test broker started in ``workdir``; in CI one that cannot start fails the test, elsewhere skips it."""
    try:
        broker = factory(workdir).start()
    except Exception as exc:
        if brokers.in_ci():
            pytest.fail(f"test broker {factory.__name__} could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"test broker {factory.__name__} unavailable: {exc}")
    return broker


def settings_for_tests(**overrides) -> BusSettings:
    base = {
        "connect_timeout_s": 5.0,
        "max_attempts": 3,
        "kafka": KafkaOptions(commit_interval_ms=50, fetch_max_wait_ms=5),  # Tansu: brokers.TEST_BROKER_ENV
        "pulsar": PulsarOptions(negative_ack_redelivery_delay_ms=50, consumer_id_spread=8),
    }
    base.update(overrides)
    return BusSettings(**base)
