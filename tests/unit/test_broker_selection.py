"""Which broker the tests and benchmarks use, from one variable per bus, and what a light broker adds."""

from __future__ import annotations

import pytest

from ragbus.testing import apache, brokers, selection


@pytest.mark.parametrize("bus", ["kafka", "pulsar"])
def test_unset_means_the_apache_broker_with_no_settings_of_its_own(bus, monkeypatch):
    monkeypatch.delenv(selection.VARIABLE[bus], raising=False)
    assert selection.choice(bus) == "apache" and selection.external_url(bus) is None
    assert selection.factory(bus) is {"kafka": apache.apache_kafka, "pulsar": apache.apache_pulsar}[bus]
    assert selection.broker_env([bus]) == {}


@pytest.mark.parametrize("bus", ["kafka", "pulsar"])
def test_light_means_the_pypi_broker_and_only_its_own_settings(bus, monkeypatch):
    monkeypatch.setenv(selection.VARIABLE[bus], "light")
    assert selection.factory(bus) is {"kafka": brokers.tansu, "pulsar": brokers.pulsar_lite}[bus]
    assert selection.broker_env([bus]) == brokers.LIGHT_BROKER_ENV[bus]


@pytest.mark.parametrize(("value", "url"), [
    ("broker-1:9092,broker-2:9092", "kafka://broker-1:9092,broker-2:9092"),
    ("kafka://10.0.0.5:9092", "kafka://10.0.0.5:9092"),
])
def test_an_address_means_that_running_broker(value, url, monkeypatch):
    monkeypatch.setenv("RAGBUS_TEST_KAFKA", value)
    assert selection.choice("kafka") == "external" and selection.external_url("kafka") == url
    assert selection.broker_env(["kafka"]) == {}
    assert selection.describe("kafka") == f"kafka: the broker at {url} (RAGBUS_TEST_KAFKA)"


def test_kafka_test_cluster_settings_are_a_one_node_clusters(tmp_path):
    props = apache.kafka_properties("127.0.0.1", 9092, 9093, tmp_path)
    assert props["process.roles"] == "broker,controller"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert all(props[k] == 1 for k in props if k.endswith("replication.factor"))
