"""Which Kafka and which Pulsar the tests and benchmarks run on: one variable each.

``RAGBUS_TEST_KAFKA`` and ``RAGBUS_TEST_PULSAR``:

- unset or ``apache``: Apache Kafka / Apache Pulsar, started by the session from the installed jars
  (``ragbus brokers --install``); the brokers of record, and CI's;
- ``light``: Tansu / Pulsar Lite from their PyPI packages, for a machine without Java or Maven,
  with the settings only they need (``brokers.LIGHT_BROKER_ENV``);
- anything else: a running broker's address (``host:9092,host2:9092`` or ``kafka://host:9092``;
  ``pulsar://host:6650``). Tests that must own their broker (restart it, read its metrics, put it
  on a host of its own) skip against such a broker, since they would stop or share someone else's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from . import apache, brokers

VARIABLE = {"kafka": "RAGBUS_TEST_KAFKA", "pulsar": "RAGBUS_TEST_PULSAR"}
APACHE = {"kafka": apache.apache_kafka, "pulsar": apache.apache_pulsar}
LIGHT = {"kafka": brokers.tansu, "pulsar": brokers.pulsar_lite}
NAMES = {"kafka": ("Apache Kafka", "Tansu"), "pulsar": ("Apache Pulsar", "Pulsar Lite")}


def choice(bus: str) -> str:
    """``apache``, ``light`` or ``external`` for ``bus`` (``kafka`` or ``pulsar``)."""
    value = os.environ.get(VARIABLE[bus], "").strip()
    if value in ("", "apache"):
        return "apache"
    return "light" if value == "light" else "external"


def external_url(bus: str) -> str | None:
    """The running broker ``RAGBUS_TEST_<BUS>`` names, as a bus URL; None when the session starts its own."""
    if choice(bus) != "external":
        return None
    value = os.environ[VARIABLE[bus]].strip()
    return value if "://" in value else f"{bus}://{value}"


def factory(bus: str):
    """The broker the session starts for ``bus``: ``(workdir, host=..., wrap=...) -> BrokerProcess``."""
    return (LIGHT if choice(bus) == "light" else APACHE)[bus]


def start(bus: str, workdir: Path, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> brokers.BrokerProcess:
    return factory(bus)(workdir, host, wrap).start()


def broker_env(buses: Sequence[str] = ("kafka", "pulsar")) -> dict[str, str]:
    """The settings the chosen brokers of ``buses`` need beyond the defaults: only a light broker has any."""
    env: dict[str, str] = {}
    for bus in buses:
        if choice(bus) == "light":
            env.update(brokers.LIGHT_BROKER_ENV[bus])
    return env


def describe(bus: str) -> str:
    kind = choice(bus)
    if kind == "external":
        return f"{bus}: the broker at {external_url(bus)} ({VARIABLE[bus]})"
    return f"{bus}: {NAMES[bus][0 if kind == 'apache' else 1]}"
