"""Bus settings: every default of the transport layer lives here.

Broker-specific security options are passed through untouched to the client
library, so an operator can use whatever their cluster requires without a
code change (``RAGBUS_BUS__KAFKA__SASL_MECHANISM=PLAIN`` and friends; see
config/settings.py for how files and environment variables are layered).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .bounds import NonNegativeInt, NonNegativeMillis, PositiveInt, PositiveMillis, PositiveSeconds

DEFAULT_BUS_URL = "memory://"


class TopicLayout(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How ragbus creates one class of Kafka topics; topics that exist already are left as they are."""

    # Members of a consumer group split a topic's partitions: at most this many replicas of a
    # processor get work from it.
    partitions: PositiveInt = 4
    # None: min(3, brokers in the cluster), so one broker works and a real cluster keeps copies.
    replication_factor: PositiveInt | None = None
    # How long the broker keeps messages (retention.ms); None: the broker's default.
    retention_ms: PositiveMillis | None = None
    # cleanup.policy: "compact" keeps the latest message of each key (and none of a key whose latest
    # is a tombstone) for ever; None: the broker's default ("delete", by age).
    cleanup_policy: Literal["compact", "delete"] | None = None


def _layout(**fields):
    return msgspec.field(default_factory=lambda: TopicLayout(**fields))


class KafkaOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Passed to aiokafka's producer and consumer constructors."""

    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # The longest the broker holds a fetch while it has no data. Kafka answers a waiting fetch as
    # soon as data arrives (fetch_min_bytes = 1), so this costs no latency there; what it sets is
    # how often an idle consumer asks again. Twice Kafka's own default (500): a `worker --all` has
    # 17 consumers, and at 500 ms their empty polls alone kept an idle worker and its broker above
    # 3% of a core (scripts/bench_idle.py: worker 3.2% -> 2.4%, Tansu 4.2% -> 2.7%).
    # Tansu (a light Kafka the tests can run instead of Apache Kafka, RAGBUS_TEST_KAFKA=light) wakes a
    # waiting fetch of one partition but not one spanning several: with Tansu, set 5
    # (processors/testing/brokers.py LIGHT_BROKER_ENV sets it for them).
    fetch_max_wait_ms: NonNegativeMillis = 1000
    session_timeout_ms: PositiveMillis = 6000
    heartbeat_interval_ms: PositiveMillis = 1000
    # How often finished offsets are committed (also on every rebalance and close).
    commit_interval_ms: PositiveMillis = 200
    linger_ms: NonNegativeMillis = 0
    # The topics ragbus creates, by class. Request topics carry the work; a retry topic
    # (<topic>.retry.<group>) only a group's failed attempts; a dead-letter topic
    # (<topic><dead_letter_suffix>) what failed for good, kept a week for inspection. Replies share
    # one topic (ragbus.reply.shared): each caller reads one of its partitions, picked at random,
    # and skips the others' replies; more partitions, fewer to skip. Answers are useless an hour later.
    request_topics: TopicLayout = _layout(partitions=4)
    retry_topics: TopicLayout = _layout(partitions=1)
    dead_letter_topics: TopicLayout = _layout(partitions=1, retention_ms=7 * 24 * 3_600_000)
    reply_topics: TopicLayout = _layout(partitions=8, retention_ms=3_600_000)
    # The logs of the stores' changes (ragbus.changelog.*): what every query replica's stores are
    # made from, so kept for ever, compacted to each key's latest record. Partitions bound how
    # many writers append side by side, not how many replicas read (each reads them all).
    changelog_topics: TopicLayout = _layout(partitions=4, cleanup_policy="compact")

    def layout_of(self, kind: str) -> TopicLayout:
        """The layout of a topic class: ``request``, ``retry``, ``dead-letter``, ``reply`` or ``changelog``."""
        return {
            "changelog": self.changelog_topics,
            "reply": self.reply_topics,
            "dead-letter": self.dead_letter_topics,
            "retry": self.retry_topics,
            "request": self.request_topics,
        }[kind]


class PulsarOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Passed to pulsar-client's ``Client`` and ``subscribe``."""

    auth_token: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tenant: str = "public"
    namespace: str = "default"
    # Redelivery after a nack; pulsar-client's own default is a full minute.
    negative_ack_redelivery_delay_ms: NonNegativeMillis = 100
    # Shared (round robin) or KeyShared (per-key ordering across members; Pulsar
    # Lite 0.2 refuses KeyShared consumers with equal ids from two clients).
    subscription_type: str = "Shared"
    # Messages a consumer holds beyond those its handlers run: half prefetched by the client, half
    # handed to the event loop, waiting for a free handler slot (processors/bus/pulsar/inbox.py).
    receiver_queue_size: PositiveInt = 100
    # Pulsar Lite 0.2 refuses a second consumer in one subscription whose
    # client-assigned consumer id (a per-client counter from 0) is already
    # taken, so replicas in two processes clash. When this is > 0, each
    # process first uses up (pid % 128) * this many ids (about 1 ms each) so
    # its consumers get ids other processes are unlikely to hold. Real Pulsar
    # needs 0; the test settings and scripts set it for Pulsar Lite.
    consumer_id_spread: NonNegativeInt = 0
    # How long the client waits for the broker to answer a lookup, a subscribe, a producer's creation or a
    # reader's seek (publishes have publish_timeout_s), and ragbus for its admin API (a log topic's
    # retention, keep_logs) and its metrics (metrics_url). Pulsar's own default in every client (Java's
    # operationTimeoutMs, the C++/Python operation_timeout_seconds): 30. A subscribe that creates its
    # topic waits for the broker to create the topic's ledger; on a machine loaded by other work (load
    # average 8-14) one took over 10 s, the default here once, and failed with "Timeout". A broker that
    # is not listening is told at once all the same: connect() probes it first.
    operation_timeout_seconds: PositiveInt = 30
    # The broker's Prometheus endpoint, where `ragbus status` reads each subscription's backlog and
    # consumers (processors/bus/pulsar/stats.py): a Pulsar broker's http://HOST:8080/metrics/, or
    # Pulsar Lite's [metrics] addr. None: status cannot tell them.
    metrics_url: str | None = None
    # The broker's admin (REST) API, its (or its proxy's) web service. None: the bus URL's first
    # host on Pulsar's default port, http://HOST:8080 (https://HOST:8443 for pulsar+ssl://).
    admin_url: str | None = None
    # Before a log topic (ragbus.changelog.*) is first appended to or read, make sure Pulsar keeps
    # it whole: unless its applied retention is already infinite, set the topic's own to infinite
    # through admin_url, and fail if neither (processors/bus/pulsar/retention.py). With Pulsar's
    # default retention a log no subscription holds is deleted once idle a minute and trimmed as its
    # ledgers roll. False: the operator has made it infinite (Pulsar Lite has no admin API).
    keep_logs: bool = True


class BusSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str = DEFAULT_BUS_URL
    # Bodies above this size are refused by publish(), and on receipt answered with an error (when
    # the sender can be told) or dead-lettered; every processor's limit unless it sets its own.
    max_message_bytes: PositiveInt = 1_000_000
    # connect() fails with BusUnavailable after this long instead of hanging.
    connect_timeout_s: PositiveSeconds = 10.0
    # How long a publish waits for the broker to take the message before it fails (Kafka: aiokafka's
    # request_timeout_ms, how long a batch may wait for its partition's leader; Pulsar: the producer's
    # send timeout): long enough to ride out a broker restart or a leader moving to another broker,
    # as Kafka's request.timeout.ms and Pulsar's send timeout (30 s both).
    publish_timeout_s: PositiveSeconds = 30.0
    # A broker that goes away is said once, as an ERROR naming it; then, while it stays away, once
    # every this many seconds with how long it has been; then once when it is back. The client
    # libraries' own retry lines (aiokafka's were a thousand a second) are held back meanwhile
    # (processors/bus/outage.py).
    outage_report_interval_s: PositiveSeconds = 60.0
    # While it is away, a probe asks the broker again half a second after the first failure, then
    # twice as long each time, up to this: how soon after its return the "back" line comes.
    outage_probe_max_s: PositiveSeconds = 5.0
    # A message whose handler failed this many times goes to the dead-letter topic: the
    # default of every consumer on this bus (a processor's own max_attempts overrides it).
    max_attempts: PositiveInt = 3
    dead_letter_suffix: str = ".dlq"
    # The memory bus keeps at most this many messages, and this many bytes of them, per topic for
    # groups that join later (reply topics keep none: their one reader joined before asking). It
    # lives as long as the process: 100,000 messages of up to max_message_bytes each could hold
    # gigabytes; first use publishes about 80 messages, 3 MB, on its busiest topic.
    memory_retention: PositiveInt = 1_000
    memory_retention_bytes: PositiveInt = 8_000_000
    # The partitions of each memory:// log topic: a record goes to one by a hash of its order key, and a
    # reader may read some of them alone (a shard's), as on Kafka's log topics (changelog_topics).
    memory_log_partitions: PositiveInt = 4
    kafka: KafkaOptions = msgspec.field(default_factory=KafkaOptions)
    pulsar: PulsarOptions = msgspec.field(default_factory=PulsarOptions)
