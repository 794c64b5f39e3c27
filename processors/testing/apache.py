"""Apache Kafka (KRaft, one combined broker and controller) and Apache Pulsar (standalone) as test brokers.

Each runs from the jars ``jars.install`` fetched, in a JVM of its own, on free loopback ports, with its
configuration, logs and data in the broker's work directory; ``restart`` keeps all three, so what
Kafka's log or Pulsar's BookKeeper ledger held before is there after. Ready means serving clients:
Kafka once its log says the server started and its group coordinator answers (so the first group to
join does not meet the broker still creating its offsets topic), Pulsar once its admin API lists
``public/default``.

The settings written here are a one-node test cluster's (replication 1, no rebalance delay), never
ragbus's own defaults: those stay right for a real cluster (``config/bus.py``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path

from . import jars
from .brokers import BrokerProcess, accepts_clients, free_port
from .errors import BrokerStartError

KAFKA_READY_TIMEOUT_S = 60.0
PULSAR_READY_TIMEOUT_S = 90.0
KAFKA_HEAP = ["-Xms256m", "-Xmx1g"]
PULSAR_STATS_INTERVAL_S = 60  # Pulsar's own default
PULSAR_HEAP = ["-Xms512m", "-Xmx2g", "-XX:MaxDirectMemorySize=1g"]
# What Pulsar's own launcher opens to the broker on Java 17 (it reads container and GC figures).
PULSAR_OPENS = [f"--add-opens={m}=ALL-UNNAMED" for m in (
    "java.base/java.io", "java.base/java.lang", "java.base/java.nio", "java.base/java.util.zip",
    "java.base/jdk.internal.misc", "java.base/jdk.internal.platform", "java.base/sun.net",
    "java.management/sun.management", "jdk.management/com.sun.management.internal")]

def _log4j(started_logger: str) -> str:
    """Warnings and errors only, but the line each broker prints once it serves (what ``ready`` looks for)."""
    return (
        "Configuration:\n"
        "  Appenders:\n"
        "    Console:\n"
        "      name: STDOUT\n"
        "      PatternLayout:\n"
        '        pattern: "%d{ISO8601} %-5p [%t] %c{1.} - %m%n"\n'
        "  Loggers:\n"
        "    Root:\n"
        "      level: WARN\n"
        "      AppenderRef:\n"
        "        - ref: STDOUT\n"
        "    Logger:\n"
        f"      - name: {started_logger}\n"
        "        level: INFO\n"
    )


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError("the Apache brokers need Java 17+ (`java` is not on PATH)")
    return found


def _properties(path: Path, values: dict[str, object]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))


def _log_config(workdir: Path, name: str, started_logger: str) -> Path:
    path = workdir / f"{name}-log4j2.yaml"
    path.write_text(_log4j(started_logger))
    return path


def kafka_properties(host: str, port: int, controller_port: int, log_dir: Path) -> dict[str, object]:
    """A one-node KRaft cluster: broker and controller in one process, every internal topic at replication 1."""
    return {
        "process.roles": "broker,controller",
        "node.id": 1,
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
        "log.dirs": log_dir,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        # A lone test broker has no one to wait for: the first member of a group starts at once.
        "group.initial.rebalance.delay.ms": 0,
    }


def _kafka_started(broker: BrokerProcess, log_start: int) -> bool:
    try:
        with open(broker.log_path, "rb") as log:
            log.seek(log_start)
            started = b"Kafka Server started" in log.read()
    except OSError:
        return False
    return started and accepts_clients(broker, log_start) and _coordinator_answers(broker)


def _coordinator_answers(broker: BrokerProcess) -> bool:
    """Whether the broker names a group coordinator; the first ask has it create ``__consumer_offsets``."""
    from ragbus.bus.kafka.groups import coordinator_answers  # aiokafka, only once a Kafka is started

    answer: list[bool] = []
    # A thread of its own: the caller may be inside an event loop (an async fixture or script).
    asker = threading.Thread(
        target=lambda: answer.append(asyncio.run(coordinator_answers(f"{broker.host}:{broker.port}"))), daemon=True)
    asker.start()
    asker.join()
    return bool(answer and answer[0])


def apache_kafka(workdir: Path, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> BrokerProcess:
    """Apache Kafka on ``host``; ``wrap`` prefixes its command (``ip netns exec NS``: see ``netns.Host.wrap``)."""
    classpath = jars.classpath("kafka")
    port, controller_port = free_port(), free_port()
    config = workdir / "kafka-server.properties"
    _properties(config, kafka_properties(host, port, controller_port, workdir / "kafka-data"))
    log4j = _log_config(workdir, "kafka", "kafka.server.KafkaRaftServer")
    jvm = [java(), *KAFKA_HEAP, "-XX:+UseG1GC", "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
           "-cp", classpath]

    def format_log_dir() -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # One token, "--cluster-id=ID": an ID that starts with "-" (1 in 64) was taken for an option.
        done = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "--standalone", f"--cluster-id={cluster_id}",
                               "-c", str(config)], capture_output=True, text=True)
        if done.returncode != 0:
            raise BrokerStartError(f"kafka-storage format failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    return BrokerProcess("kafka", "kafka", [*wrap, *jvm, "kafka.Kafka", str(config)], port, workdir, host,
                         ready=_kafka_started, prepare=format_log_dir, ready_timeout_s=KAFKA_READY_TIMEOUT_S,
                         stop_timeout_s=30.0)


def pulsar_conf(host: str, port: int, http_port: int, stats_interval_s: int) -> dict[str, object]:
    """A standalone broker's settings: one bookie (ensemble, write and ack quorum 1), no functions worker."""
    return {
        "clusterName": "standalone",
        "bindAddress": host,
        "advertisedAddress": host,
        "brokerServicePort": port,
        "webServicePort": http_port,
        "functionsWorkerEnabled": "false",
        "managedLedgerDefaultEnsembleSize": 1,
        "managedLedgerDefaultWriteQuorum": 1,
        "managedLedgerDefaultAckQuorum": 1,
        "allowAutoTopicCreation": "true",
        "allowAutoTopicCreationType": "non-partitioned",
        "brokerShutdownTimeoutMs": 5000,
        # How often the subscriptions' gauges (what `ragbus status` reads) are refreshed.
        "statsUpdateFrequencyInSecs": stats_interval_s,
    }


def _pulsar_serves(broker: BrokerProcess, log_start: int) -> bool:
    """True once the admin API lists ``public/default``: the namespace ragbus's topics live in exists."""
    try:
        with urllib.request.urlopen(f"http://{broker.host}:{broker.http_port}/admin/v2/namespaces/public",
                                    timeout=1) as answer:
            return "public/default" in json.load(answer)
    except (OSError, ValueError):
        return False


def apache_pulsar(workdir: Path, host: str = "127.0.0.1", wrap: Sequence[str] = (), *,
                  stats_interval_s: int = PULSAR_STATS_INTERVAL_S,
                  conf: dict[str, object] | None = None) -> BrokerProcess:
    """Apache Pulsar standalone on ``host``; ``stats_interval_s`` short for a test that watches its gauges
    move; ``conf``: broker settings of a test's own (e.g. how soon an idle topic is deleted)."""
    classpath = jars.classpath("pulsar")
    port, http_port, bookie_port, stream_port = (free_port() for _ in range(4))
    config = workdir / "pulsar-standalone.conf"
    _properties(config, pulsar_conf(host, port, http_port, stats_interval_s) | (conf or {}))
    log4j = _log_config(workdir, "pulsar", "org.apache.pulsar.PulsarStandalone")
    data = workdir / "pulsar-data"
    argv = [*wrap, java(), *PULSAR_HEAP, *PULSAR_OPENS, "-XX:+UseG1GC", "-Djava.awt.headless=true",
            "-Dio.netty.tryReflectionSetAccessible=true", f"-Dlog4j2.configurationFile={log4j}",
            "-cp", classpath, "org.apache.pulsar.PulsarStandaloneStarter", "--config", str(config),
            "--no-functions-worker", "--no-stream-storage", "--metadata-dir", str(data / "metadata"),
            "--bookkeeper-dir", str(data / "bookkeeper"), "--bookkeeper-port", str(bookie_port),
            "--stream-storage-port", str(stream_port)]
    return BrokerProcess("pulsar", "pulsar", argv, port, workdir, host, ready=_pulsar_serves, http_port=http_port,
                         ready_timeout_s=PULSAR_READY_TIMEOUT_S, stop_timeout_s=30.0)
