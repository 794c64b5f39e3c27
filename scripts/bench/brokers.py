"""The test broker that stands in for a backend in a benchmark: Tansu for kafka, Pulsar Lite for pulsar.

The same launchers the test session uses (processors.testing.brokers), so a benchmark measures
the brokers the tests run against, with their data under a directory of the caller's.
"""

from __future__ import annotations

from pathlib import Path

from processors.testing import brokers

TEST_BROKER_ENV = brokers.TEST_BROKER_ENV


def broker_for(backend: str, workdir: Path) -> brokers.BrokerProcess:
    """The broker for ``backend`` (kafka or pulsar), not started."""
    factories = {"kafka": brokers.tansu, "pulsar": brokers.pulsar_lite}
    if backend not in factories:
        raise ValueError(f"no test broker for {backend!r}: one of {', '.join(factories)}")
    return factories[backend](workdir)
