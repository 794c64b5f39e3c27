"""The Helm chart, rendered for real: helm lint --strict and helm template (helm at its pinned version), each
object decoded strictly into the Kubernetes and KEDA types by ragbus-manifest-check, and what the chart
promises read back from the objects: probes, security, storage, settings, secrets, autoscaling.

A Kubernetes API server cannot be had here: docs/deploy.md says what these checks prove and what not.
"""

from __future__ import annotations

import pytest

from ragbus.config.bus import KafkaOptions
from ragbus.config.settings import load_settings, processor_settings
from ragbus.replica import ShardHostSettings
from ragbus.runtime.worker import processor_class

from ..helpers import chart

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

# The values variants every check runs on: the buses, KEDA on and off, a query host's data dir in an
# emptyDir, a small site, credentials from Secrets made outside the chart, sharded query hosts.
VARIANTS = {
    "kafka": chart.with_keys(),
    "pulsar": chart.with_keys({"bus": {"kind": "pulsar", "pulsar": {"tokenAuth": True}},
                               "secrets": {"apiKeys": ["sk-test"], "pulsar": {"token": "jwt"}, "tls": {"ca": PEM}}}),
    "kafka-sasl-tls": {"bus": {"kafka": {"securityProtocol": "SASL_SSL", "saslMechanism": "SCRAM-SHA-512"}},
                       "secrets": {"existingSecret": "ragbus-keys",
                                   "tls": {"existingSecret": "ragbus-tls", "clientCertificate": True}}},
    "cpu-hpa": chart.with_keys({"autoscaling": {"mode": "cpu"}}),
    "no-autoscaling": chart.with_keys({"autoscaling": {"mode": "none"}}),
    "emptydir": chart.with_keys({"query": {"storage": {"kind": "emptyDir", "size": "10Gi",
                                                       "accessModes": ["ReadWriteOnce"], "sizeLimit": "20Gi",
                                                       "whenScaled": "Retain", "whenDeleted": "Retain"}}}),
    "small-site": chart.with_keys({"ingest": {"enabled": False}, "query": {"enabled": False},
                                   "all": {"enabled": True}, "gateway": {"replicas": 1}}),
    "sharded": chart.with_keys({"query": {"shards": 2, "standbys": 1}}),
}


@pytest.fixture(scope="module")
def tools():
    return chart.tools()


@pytest.fixture(scope="module")
def rendered(tools):
    return {name: chart.render(tools, values) for name, values in VARIANTS.items()}


def workloads(objects):
    return {**chart.objects_of(objects, "Deployment"), **chart.objects_of(objects, "StatefulSet")}


def role_of(workload):
    return workload["metadata"]["labels"]["app.kubernetes.io/component"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_strict_passes(tools, variant):
    done = chart.lint(tools, VARIANTS[variant])
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_variant_renders_objects_the_checker_takes(rendered):
    kinds = {name: sorted({o["kind"] for o in objects}) for name, objects in rendered.items()}
    assert "ScaledObject" in kinds["kafka"] and "HorizontalPodAutoscaler" not in kinds["kafka"]
    assert "TriggerAuthentication" in kinds["pulsar"] and "TriggerAuthentication" in kinds["kafka-sasl-tls"]
    assert "HorizontalPodAutoscaler" in kinds["cpu-hpa"] and "ScaledObject" not in kinds["cpu-hpa"]
    assert not {"HorizontalPodAutoscaler", "ScaledObject"} & set(kinds["no-autoscaling"])
    assert "Secret" not in kinds["kafka-sasl-tls"]  # every credential from the Secrets named


# Misspellings the checker must refuse, one at a time: a container field, a KEDA field, a scaler's
# metadata key, a Secret key an env var names, a value KEDA cannot parse.
CORRUPTIONS = [
    ("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "readOnlyRootFileSystem"),
    ("pollingInterval:", "pollingIntervall:", "pollingIntervall"),
    ("lagThreshold:", "lagThreshhold:", "lagThreshhold"),
    ("key: api-keys", "key: api-key", "api-key"),
    ("offsetResetPolicy: earliest", "offsetResetPolicy: oldest", "oldest"),
    ("targetPort: http", "targetPort: htp", "htp"),
    ("memory: 4Gi", "memory: 4Gb", "quantities must match"),
]


@pytest.mark.parametrize(("good", "bad", "named"), CORRUPTIONS, ids=[bad for _, bad, _ in CORRUPTIONS])
def test_the_checker_refuses_a_misspelled_field(tools, good, bad, named):
    manifests = chart.template(tools, VARIANTS["kafka"])
    assert chart.check(tools, manifests).returncode == 0
    assert good in manifests
    refused = chart.check(tools, manifests.replace(good, bad, 1))
    assert refused.returncode == 1, f"{bad!r} went through:\n{refused.stderr}"
    assert named in refused.stderr, refused.stderr


def test_a_misspelled_value_is_refused_by_the_values_schema(tools):
    done = chart.lint(tools, chart.with_keys({"query": {"storge": {"kind": "emptyDir"}}}))
    assert done.returncode != 0 and "storge" in done.stdout + done.stderr


@pytest.mark.parametrize(("values", "says"), [
    ({}, "apiKeys"),  # a gateway nobody keys
    (chart.with_keys({"settings": {"stores": {"log": False}}}), "[stores] log"),
    (chart.with_keys({"bus": {"kafka": {"saslMechanism": "PLAIN"}},
                      "secrets": {"apiKeys": ["sk-test"], "kafka": {"username": "u", "password": "p"}}}),
     "SASL_PLAINTEXT"),
    (chart.with_keys({"autoscaling": {"query": {"minReplicas": 5, "maxReplicas": 2, "threshold": 10,
                                                "cpuUtilization": 70}}}), "minReplicas"),
    (chart.with_keys({"autoscaling": {"query": {"minReplicas": 0, "maxReplicas": 2, "threshold": 10,
                                                "cpuUtilization": 70}}}), "minimum"),
    # Sharding: Kafka only; each standby on a host other than its shard's owner; a host at all; a log that
    # splits evenly; the shards' settings are the chart's; no unsharded all-in-one host beside the shards.
    (chart.with_keys({"bus": {"kind": "pulsar"}, "query": {"shards": 2}}), "query.shards 2 needs bus.kind kafka"),
    (chart.with_keys({"query": {"shards": 2, "standbys": 2}}),
     "query.standbys 2 needs more query hosts than that (autoscaling.query.minReplicas is 2)"),
    (chart.with_keys({"autoscaling": {"mode": "none"}, "query": {"shards": 2, "standbys": 1, "replicas": 1}}),
     "query.standbys 1 needs more query hosts than that (query.replicas is 1)"),
    (chart.with_keys({"autoscaling": {"mode": "none"}, "query": {"shards": 2, "replicas": 0}}),
     "query.shards 2 needs at least one query host (query.replicas is 0)"),
    (chart.with_keys({"query": {"shards": 3}, "settings": {"bus": {"kafka": {"changelog_topics": {"partitions": 4}}}}}),
     "changelog_topics.partitions 4 is not a multiple of query.shards 3"),
    (chart.with_keys({"query": {"shards": 2}, "ingest": {"settings": {"bus": {"kafka": {"changelog_topics": {
        "partitions": 3}}}}}}), "settings (ingest): [bus.kafka] changelog_topics.partitions 3 is not a multiple"),
    (chart.with_keys({"query": {"standbys": 1}}), "query.standbys 1 needs query.shards"),
    (chart.with_keys({"settings": {"stores": {"shards": 2}}}), "set query.shards and query.standbys"),
    (chart.with_keys({"query": {"shards": 2, "enabled": False}}), "query.shards needs query.enabled"),
    (chart.with_keys({"query": {"shards": 2}, "all": {"enabled": True}}), "turn all.enabled off"),
])
def test_values_that_cannot_work_are_refused(tools, values, says):
    done = chart.helm(tools, "template", chart.RELEASE, chart.CHART, values=values)
    assert done.returncode != 0 and says in done.stderr, done.stderr


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pods_run_restricted(rendered, variant):
    for name, workload in workloads(rendered[variant]).items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], name
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], name


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_role_runs_its_command_with_its_settings_and_probes(rendered, variant, tmp_path):
    objects = rendered[variant]
    pdbs = chart.objects_of(objects, "PodDisruptionBudget")
    for name, workload in workloads(objects).items():
        role = role_of(workload)
        container = workload["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in container.get("env", [])}
        assert env["RAGBUS_CONFIG"]["value"] == f"/etc/ragbus/settings/{role}.toml"
        settings = chart.role_settings(objects, role, tmp_path)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        if role == "gateway":
            assert container["command"][1:2] == ["serve"]
            port = "http"
            assert ports[port] == settings.gateway.port and settings.gateway.host == "0.0.0.0"
            assert "RAGBUS_DATA_DIR" not in env
            # A stopping gateway keeps answering while the endpoints drop it, then drains, inside the grace.
            grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            assert settings.gateway.shutdown_delay_s > 0
            assert settings.gateway.shutdown_delay_s + settings.gateway.drain_timeout_s < grace
            # Uploaded PDFs and images are read by the ingest role's document-convert, not in the gateway's pods.
            assert settings.convert.on_bus is True
            assert "document-convert" in chart.pipelines.role("ingest", log=True)
        else:
            assert container["command"][1:] == ["worker", "--role", role]
            port = "metrics"
            assert ports[port] == settings.metrics.port and settings.metrics.host == "0.0.0.0"
            assert settings.stores.log is True
            data = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}[env["RAGBUS_DATA_DIR"]["value"]]
            assert data == "data"
        assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": port}
        assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": port}
        assert settings.bus.url.startswith(("kafka://", "pulsar://"))
        assert name in pdbs, f"{name} has no PodDisruptionBudget"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_setting_in_the_configmap_is_one_ragbus_takes(rendered, variant, tmp_path):
    """Each role's file loads, and every processor of the role gets typed settings from it: a misspelled
    or mistyped setting in the values fails here, as it would make the worker refuse to start."""
    objects = rendered[variant]
    for role in {role_of(w) for w in workloads(objects).values()} - {"gateway"}:
        settings = chart.role_settings(objects, role, tmp_path)
        for name in chart.pipelines.role(role, log=True, shards=settings.stores.shards):
            section = settings.processors[name]
            processor_settings(settings, name, processor_class(section["class"]).Settings)


def test_sharded_query_hosts_get_their_shards_standbys_and_pod_names_as_host_ids(rendered, tmp_path):
    objects = rendered["sharded"]
    query = chart.role_settings(objects, "query", tmp_path)
    assert (query.stores.log, query.stores.shards) == (True, 2)
    assert chart.pipelines.role("query", log=True, shards=query.stores.shards) == chart.pipelines.SHARDED_QUERY
    host = processor_settings(query, "shard-host", ShardHostSettings)
    assert (host.shards, host.standbys, host.host_id) == (2, 1, "")  # the id comes from the environment
    rag = processor_settings(query, "document-rag", processor_class(query.processors["document-rag"]["class"]).Settings)
    assert rag.shards == 2  # it scatters to the shards the hosts serve
    # Whoever appends first makes the documents log: every role's file makes it of a multiple of the shards.
    for role in ("gateway", "ingest", "query"):
        settings = chart.role_settings(objects, role, tmp_path)
        assert settings.bus.kafka.changelog_topics.partitions == 4, role
        assert settings.stores.shards == (2 if role == "query" else 0), role
    pod = chart.objects_of(objects, "StatefulSet")[f"{chart.FULLNAME}-query"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["RAGBUS_PROCESSORS__SHARD_HOST__HOST_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # ragbus reads it as the host's id among the owners (what a pod named t-ragbus-query-1 would get).
    path = tmp_path / "query.toml"
    named = load_settings(path, environ={"RAGBUS_PROCESSORS__SHARD_HOST__HOST_ID": f"{chart.FULLNAME}-query-1"})
    assert processor_settings(named, "shard-host", ShardHostSettings).host_id == f"{chart.FULLNAME}-query-1"


def test_an_unsharded_chart_says_nothing_of_shards(rendered, tmp_path):
    objects = rendered["kafka"]
    for role in ("gateway", "ingest", "query"):
        text = chart.role_settings_text(objects, role)
        assert "shard" not in text and "changelog_topics" not in text, role
    pod = chart.objects_of(objects, "StatefulSet")[f"{chart.FULLNAME}-query"]["spec"]["template"]["spec"]
    assert "RAGBUS_PROCESSORS__SHARD_HOST__HOST_ID" not in {e["name"] for e in pod["containers"][0]["env"]}


@pytest.mark.parametrize(("shards", "given", "made"), [
    (1, None, 4), (2, None, 4), (3, None, 6), (5, None, 5), (2, 8, 8), (3, 3, 3)])
def test_the_documents_log_splits_evenly_into_the_shards(tools, tmp_path, shards, given, made):
    """Unless the settings say a multiple of the shards, every role's log partitions are the least multiple
    of them that is at least ragbus's own (4), so that sharding takes none of the writers' partitions away."""
    values = chart.with_keys({"query": {"shards": shards}})
    if given is not None:
        values["settings"] = {"bus": {"kafka": {"changelog_topics": {"partitions": given}}}}
    objects = chart.render(tools, values)
    for role in ("gateway", "ingest", "query"):
        assert chart.role_settings(objects, role, tmp_path).bus.kafka.changelog_topics.partitions == made, role
    assert KafkaOptions().changelog_topics.partitions == 4  # ragbus's own, as files/wiring.json says


def test_a_misspelled_setting_is_caught_when_its_file_is_loaded(tools, tmp_path):
    objects = chart.render(tools, chart.with_keys({"settings": {"processors": {"document-rag": {"mod": "hybrid"}}}}))
    settings = chart.role_settings(objects, "query", tmp_path)
    cls = processor_class(settings.processors["document-rag"]["class"])
    with pytest.raises(ValueError, match="mod"):
        processor_settings(settings, "document-rag", cls.Settings)


def test_query_hosts_keep_their_data_dir_in_a_claim_or_an_emptydir(rendered):
    claimed = chart.objects_of(rendered["kafka"], "StatefulSet")[f"{chart.FULLNAME}-query"]
    assert [c["metadata"]["name"] for c in claimed["spec"]["volumeClaimTemplates"]] == ["data"]
    assert "data" not in {v["name"] for v in claimed["spec"]["template"]["spec"]["volumes"]}
    assert claimed["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    empty = chart.objects_of(rendered["emptydir"], "StatefulSet")[f"{chart.FULLNAME}-query"]
    assert "volumeClaimTemplates" not in empty["spec"]
    volumes = {v["name"]: v for v in empty["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["emptyDir"] == {"sizeLimit": "20Gi"}
    ingest = chart.objects_of(rendered["kafka"], "Deployment")[f"{chart.FULLNAME}-ingest"]
    assert "emptyDir" in {v["name"]: v for v in ingest["spec"]["template"]["spec"]["volumes"]}["data"]


def test_keys_and_credentials_come_from_secrets_never_the_configmap(rendered, tmp_path):
    objects = rendered["kafka-sasl-tls"]
    gateway = chart.objects_of(objects, "Deployment")[f"{chart.FULLNAME}-gateway"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in gateway["containers"][0]["env"]}
    assert env["RAGBUS_API_KEYS"]["valueFrom"]["secretKeyRef"] == {"name": "ragbus-keys", "key": "api-keys"}
    assert env["RAGBUS_BUS__KAFKA__SASL_PLAIN_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "ragbus-keys"
    settings = chart.role_settings(objects, "query", tmp_path)
    kafka = settings.bus.kafka
    assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert kafka.sasl_plain_password is None and kafka.ssl_cafile == "/etc/ragbus/tls/ca.crt"
    mounts = {m["name"]: m["mountPath"] for m in gateway["containers"][0]["volumeMounts"]}
    assert mounts["tls"] == "/etc/ragbus/tls"
    assert {v["name"]: v for v in gateway["volumes"]}["tls"]["secret"]["secretName"] == "ragbus-tls"
    for text in chart.objects_of(objects, "ConfigMap")[f"{chart.FULLNAME}-settings"]["data"].values():
        assert "sk-test" not in text and "password" not in text
    auth = chart.objects_of(objects, "TriggerAuthentication")[f"{chart.FULLNAME}-bus"]["spec"]["secretTargetRef"]
    assert {(r["parameter"], r["name"], r["key"]) for r in auth} == {
        ("username", "ragbus-keys", "kafka-username"), ("password", "ragbus-keys", "kafka-password"),
        ("ca", "ragbus-tls", "ca.crt"), ("cert", "ragbus-tls", "tls.crt"), ("key", "ragbus-tls", "tls.key")}
    for trigger in chart.trigger_lanes(objects, "query").values():
        assert trigger["metadata"]["sasl"] == "scram_sha512" and trigger["metadata"]["tls"] == "enable"


@pytest.mark.parametrize("variant", ["kafka", "cpu-hpa", "no-autoscaling"])
def test_an_autoscaled_role_leaves_its_replicas_to_the_autoscaler(rendered, variant):
    objects = rendered[variant]
    scalers = {**chart.objects_of(objects, "ScaledObject"), **chart.objects_of(objects, "HorizontalPodAutoscaler")}
    for name, workload in workloads(objects).items():
        role = role_of(workload)
        if role in chart.WORKER_ROLES and variant != "no-autoscaling":
            assert "replicas" not in workload["spec"], name
            assert scalers[name]["spec"]["scaleTargetRef"] == {
                "apiVersion": "apps/v1", "kind": workload["kind"], "name": name}
        else:
            assert isinstance(workload["spec"]["replicas"], int), name
            assert name not in scalers
