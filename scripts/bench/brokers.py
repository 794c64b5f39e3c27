"""The broker behind a backend in a benchmark: Apache Kafka and Apache Pulsar unless told otherwise.

The same launchers and the same choice as the test session (processors/testing/selection.py:
``RAGBUS_TEST_KAFKA=light`` or ``RAGBUS_TEST_PULSAR=light`` for Tansu or Pulsar Lite), so a
benchmark measures the brokers the tests run against, with their data under a directory of the caller's.
"""

from __future__ import annotations

from pathlib import Path

from ragbus.testing import brokers, selection


def broker_for(backend: str, workdir: Path) -> brokers.BrokerProcess:
    """The broker for ``backend`` (kafka or pulsar), not started."""
    if backend not in selection.APACHE:
        raise ValueError(f"no test broker for {backend!r}: one of {', '.join(selection.APACHE)}")
    workdir.mkdir(parents=True, exist_ok=True)
    return selection.factory(backend)(workdir)


def broker_env(broker: brokers.BrokerProcess | None = None) -> dict[str, str]:
    """The settings the chosen brokers need beyond ragbus's defaults: a light broker's quirks, and where
    ``broker`` (an Apache Pulsar on ports of its own) serves its admin API."""
    return {**selection.broker_env(), **(broker.client_env if broker is not None else {})}
