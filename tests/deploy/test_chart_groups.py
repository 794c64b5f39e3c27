"""The consumer groups and topics the chart's ScaledObjects scale on are the ones the workers join.

The chart reads the roles' processors and their wiring from files/wiring.json, which
scripts/chart_wiring.py writes from config/pipelines.py ROLES and config/defaults.toml: the file must be
current. Then for each bus and for settings that move groups and topics, each ScaledObject's triggers
must be the lanes ragbus itself derives (config/settings.py lanes) from the settings file the chart
gives that role. tests/deploy/test_chart_brokers.py compares them with live brokers' groups.
"""

from __future__ import annotations

import pytest

from scripts import chart_wiring

from ..helpers import chart

MOVED = {"settings": {"processors": {
    "document-rag": {"group": "answers"},  # a group of its own
    "kg-store": {"topic": "graph-in"},  # a topic other than its default (triples-load)
    "keyword-query": {"bulk_topic": "keyword-bulk"},  # a second lane, group keyword-query-bulk
}}, "query": {"settings": {"processors": {"embed": {"bulk_topic": "embed-bulk"}}}}}  # query hosts embed ingestion too


@pytest.fixture(scope="module")
def tools():
    return chart.tools()


def test_the_chart_wiring_file_is_what_the_code_says():
    assert chart_wiring.WIRING_FILE.read_text() == chart_wiring.text(), \
        "config/deploy/chart/files/wiring.json is stale: run python -m scripts.chart_wiring"
    assert chart_wiring.main(["--check"]) == 0


@pytest.mark.parametrize("variant", ["kafka", "pulsar", "moved"])
def test_each_role_scales_on_the_lanes_its_settings_give_its_workers(tools, variant, tmp_path):
    values = chart.with_keys({"kafka": {}, "moved": MOVED,
                              "pulsar": {"bus": {"kind": "pulsar"}}}[variant])
    objects = chart.render(tools, values)
    served = {role: chart.served_lanes(chart.role_settings(objects, role, tmp_path), role)
              for role in chart.WORKER_ROLES}
    query = chart.trigger_lanes(objects, "query")
    ingest = chart.trigger_lanes(objects, "ingest")
    assert set(query) == served["query"]
    # A lane both roles serve is scaled by the query role's trigger; every other lane by its role's.
    assert set(ingest) == served["ingest"] - served["query"]
    assert ("document-load", "document-load") in ingest
    # Questions' embedding is the query hosts' alone: an ingestion pod never joins a group a question waits on.
    assert ("embed", "embed") in served["query"] and ("embed", "embed") not in served["ingest"]
    if variant == "moved":
        assert ("document-rag", "answers") in query and ("keyword-query-bulk", "keyword-query-bulk") not in query
        assert ("keyword-bulk", "keyword-query-bulk") in query and ("graph-in", "kg-store") in ingest
        assert ("embed-bulk", "embed-bulk") in query and ("embed-bulk", "embed-bulk") not in ingest
    else:
        assert ("document-rag", "document-rag") in query
        assert ("embed-bulk", "embed-bulk") in ingest and ("triples-load", "kg-store") in ingest
    if variant == "pulsar":
        for trigger in query.values():
            assert trigger["metadata"]["topic"].startswith("persistent://public/default/")


@pytest.mark.parametrize("moved", [False, True], ids=["default", "moved"])
def test_sharded_query_hosts_scale_on_the_groups_every_host_joins(tools, moved, tmp_path):
    """A shard's group (<group>.shard-<k>) has one member, its owner, however many query hosts there are: no
    trigger on it. The query role scales on the rest of its lanes; ingestion now alone serves the library."""
    values = chart.with_keys({**(MOVED if moved else {}), "query": {
        **(MOVED["query"] if moved else {}), "shards": 3, "standbys": 1}})
    objects = chart.render(tools, values)
    query_settings = chart.role_settings(objects, "query", tmp_path)
    served = {role: chart.served_lanes(chart.role_settings(objects, role, tmp_path), role)
              for role in chart.WORKER_ROLES}
    shards = chart.shard_lanes(query_settings)
    assert {(f"{name}.shard-{k}", f"{name}.shard-{k}") for name in ("doc-embeddings-query", "fetch-chunk",
                                                                  "keyword-query") for k in range(3)} <= shards
    assert shards <= served["query"]
    query = chart.trigger_lanes(objects, "query")
    assert set(query) == served["query"] - shards
    assert {"shard-host", "embed", "kg-query", "prompt"} <= {group for _, group in query}
    assert ("document-rag", "answers" if moved else "document-rag") in query
    assert not {"doc-embeddings-query", "fetch-chunk", "keyword-query", "documents-replica"} & {g for _, g in query}
    ingest = chart.trigger_lanes(objects, "ingest")
    assert set(ingest) == served["ingest"] - served["query"]
    assert ("documents-query", "documents-query") in ingest and ("documents-replica", "documents-replica") in ingest


def test_thresholds_and_bounds_come_from_the_values(tools):
    objects = chart.render(tools, chart.with_keys({"autoscaling": {
        "query": {"minReplicas": 2, "maxReplicas": 6, "threshold": 40, "thresholds": {"document-rag": 25},
                  "cpuUtilization": 70}}}))
    query = objects_named(objects, "ScaledObject", "query")
    assert (query["spec"]["minReplicaCount"], query["spec"]["maxReplicaCount"]) == (2, 6)
    thresholds = {lane[1]: t["metadata"]["lagThreshold"] for lane, t in chart.trigger_lanes(objects, "query").items()}
    assert thresholds.pop("document-rag") == "25" and set(thresholds.values()) == {"40"}
    pulsar = chart.render(tools, chart.with_keys({"bus": {"kind": "pulsar"}}))
    backlog = {lane[1]: t["metadata"]["msgBacklogThreshold"]
               for lane, t in chart.trigger_lanes(pulsar, "ingest").items()}
    # document-convert's own, from values.yaml: a file's parts, each a second a page with OCR.
    assert backlog.pop("document-convert") == "8" and set(backlog.values()) == {"32"}


def objects_named(objects, kind, role):
    return chart.objects_of(objects, kind)[f"{chart.FULLNAME}-{role}"]
