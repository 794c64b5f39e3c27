"""Bus URLs and settings: every mistake is named, promptly."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from ragbus.config.bus import BusSettings
from ragbus.config.settings import bus_settings
from ragbus.bus import BusConfigError, BusUnavailable, connect, parse_bus_url


@pytest.mark.parametrize(
    ("url", "scheme", "hosts", "name"),
    [
        ("memory://", "memory", (), ""),
        ("memory://tests", "memory", (), "tests"),
        ("kafka://127.0.0.1:9093", "kafka", (("127.0.0.1", 9093),), ""),
        ("kafka://a:1,b:2", "kafka", (("a", 1), ("b", 2)), ""),
        ("kafka://broker", "kafka", (("broker", 9092),), ""),
        ("pulsar://localhost", "pulsar", (("localhost", 6650),), ""),
        ("PULSAR://h:6651/", "pulsar", (("h", 6651),), ""),
    ],
)
def test_valid_urls(url, scheme, hosts, name):
    address = parse_bus_url(url)
    assert (address.scheme, address.hosts, address.name) == (scheme, hosts, name)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("localhost:9092", "malformed"),
        ("", "malformed"),
        ("amqp://h:5672", "unknown scheme 'amqp'"),
        ("kafka://", "names no broker host"),
        ("kafka://h:notaport", "bad host:port"),
        ("kafka://h:99999", "bad host:port"),
        ("kafka://:9092", "empty host"),
        ("pulsar://a:1,b:2", "exactly one"),
        ("memory://a/b", "one word"),
    ],
)
def test_bad_urls_are_named(url, says):
    with pytest.raises(BusConfigError, match=says):
        parse_bus_url(url)


async def test_connect_rejects_bad_url_before_touching_the_network():
    with pytest.raises(BusConfigError, match="unknown scheme"):
        await connect("redis://localhost")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scheme", ["kafka", "pulsar"])
async def test_unreachable_broker_fails_fast_with_a_clear_error(scheme):
    port = _closed_port()
    started = time.monotonic()
    with pytest.raises(BusUnavailable, match=f"127.0.0.1:{port}"):
        await asyncio.wait_for(connect(f"{scheme}://127.0.0.1:{port}", BusSettings(connect_timeout_s=3)), 30)
    assert time.monotonic() - started < 30


def test_settings_from_environment_reach_nested_broker_options():
    env = {
        "RAGBUS_BUS__URL": "kafka://k:9092",
        "RAGBUS_BUS__MAX_ATTEMPTS": "7",
        "RAGBUS_BUS__KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "RAGBUS_BUS__KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "RAGBUS_BUS__PULSAR__AUTH_TOKEN": "secret",
        "UNRELATED": "x",
    }
    s = bus_settings(env)
    assert s.url == "kafka://k:9092" and s.max_attempts == 7
    assert s.kafka.sasl_mechanism == "SCRAM-SHA-512" and s.kafka.security_protocol == "SASL_SSL"
    assert s.pulsar.auth_token == "secret"
    assert s.connect_timeout_s == BusSettings().connect_timeout_s  # untouched defaults stay


def test_overrides_beat_environment():
    s = bus_settings({"RAGBUS_BUS__URL": "kafka://k:1"}, url="memory://x")
    assert s.url == "memory://x"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"RAGBUS_BUS__MAX_ATTEMPTS": "many"}, "max_attempts"),
        ({"RAGBUS_BUS__NO_SUCH_THING": "1"}, "no_such_thing"),
        ({"RAGBUS_BUS__KAFKA__SASL_MECHANSIM": "PLAIN"}, "sasl_mechansim"),
    ],
)
def test_bad_settings_are_named(env, says):
    with pytest.raises(ValueError, match=says):
        bus_settings(env)


async def test_kafka_security_options_reach_the_client():
    from ragbus.bus.kafka.bus import KafkaBus

    settings = bus_settings(
        {
            "RAGBUS_BUS__KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "RAGBUS_BUS__KAFKA__SASL_MECHANISM": "SCRAM-SHA-256",
            "RAGBUS_BUS__KAFKA__SASL_PLAIN_USERNAME": "u",
            "RAGBUS_BUS__KAFKA__SASL_PLAIN_PASSWORD": "p",
        }
    )
    bus = KafkaBus("kafka://h:1", parse_bus_url("kafka://h:1"), settings)
    client = bus._producer.client
    assert client._security_protocol == "SASL_PLAINTEXT"
    assert client._sasl_mechanism == "SCRAM-SHA-256"
    assert (client._sasl_plain_username, client._sasl_plain_password) == ("u", "p")
