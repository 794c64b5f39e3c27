"""A Pulsar broker's view of its subscriptions, read from its Prometheus endpoint.

The binary protocol a client speaks has no call that lists a topic's
subscriptions or their backlog, and Pulsar Lite has no admin REST API. Both
Pulsar Lite (``[metrics] enabled``, its ``addr``) and a Pulsar broker (the web
service's ``/metrics/``, topic-level metrics on by default) publish the same
per-subscription gauges, which is what ``ragbus status`` needs:
``pulsar_subscription_back_log`` (messages not yet acknowledged) and
``pulsar_subscription_consumers_count`` (connected consumers). The URL is
``[bus.pulsar] metrics_url``.

The broker refreshes these gauges on its own schedule (Pulsar Lite: every few
seconds; Pulsar: ``statsUpdateFrequencyInSecs``, 60 by default), so a status
is as old as the broker's last refresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..base import BusError

BACKLOG = "pulsar_subscription_back_log"
CONSUMERS = "pulsar_subscription_consumers_count"
# Per-topic series that name every topic the broker has (and nothing else is read): Pulsar Lite's
# page runs to megabytes (a series per metric and topic), which the parser takes a second to read whole.
TOPIC_SERIES = ("pulsar_in_messages_total", "pulsar_subscriptions_count")
_READ = (BACKLOG, CONSUMERS, *TOPIC_SERIES)


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    backlog: int | None
    consumers: int | None


def _short_name(label: str, namespace: str) -> str | None:
    """A topic label as ragbus names topics; None for another namespace's topic.

    Pulsar Lite labels ``topic="embed"`` beside ``namespace="public/default"``; Pulsar labels the whole
    ``persistent://public/default/embed``.
    """
    if "://" in label:
        label = label.split("://", 1)[1]
        tenant_ns, _, short = label.rpartition("/")
        return short if tenant_ns == namespace else None
    return label


@dataclass(slots=True)
class BrokerStats:
    """Per (topic, subscription): backlog and consumers; and every topic the broker reported."""

    subscriptions: dict[tuple[str, str], SubscriptionStats]
    topics: set[str]

    def of(self, topic: str, subscription: str) -> SubscriptionStats | None:
        return self.subscriptions.get((topic, subscription))


def parse(text: str, namespace: str) -> BrokerStats:
    """The gauges of the Prometheus text ``text`` for topics in ``namespace`` (``tenant/namespace``)."""
    values: dict[tuple[str, str], dict[str, float]] = {}
    topics: set[str] = set()
    wanted = "".join(line + "\n" for line in text.splitlines() if line.startswith(_READ))
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            labels = sample.labels
            if "topic" not in labels or labels.get("namespace", namespace) != namespace:
                continue
            topic = _short_name(labels["topic"], namespace)
            if topic is None:
                continue
            topics.add(topic)
            if sample.name in (BACKLOG, CONSUMERS) and "subscription" in labels:
                values.setdefault((topic, labels["subscription"]), {})[sample.name] = sample.value

    def count(found: dict[str, float], name: str) -> int | None:
        return int(found[name]) if name in found else None

    return BrokerStats(
        {key: SubscriptionStats(count(v, BACKLOG), count(v, CONSUMERS)) for key, v in values.items()},
        topics,
    )


async def scrape(url: str, namespace: str, timeout: float) -> BrokerStats:
    """Fetch and parse the broker's metrics; a broker that does not answer is a ``BusError`` naming the URL."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.get(url)
            response.raise_for_status()
    except httpx.HTTPError as exc:
        raise BusError(f"pulsar metrics at {url} ([bus.pulsar] metrics_url) did not answer: {exc!r}") from None
    return parse(response.text, namespace)
