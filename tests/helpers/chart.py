"""The Helm chart (config/deploy/chart) rendered, checked and read back, for tests/deploy.

helm and ragbus-manifest-check are built by ``config/deploy/tools/install`` (which .ci/run calls) into
``RAGBUS_TOOLS_BIN`` (default ``~/.cache/ragbus/bin``); nothing is fetched here. A test needing them
fails in CI when they are missing or stale, and skips elsewhere, saying how to build them.
Every render goes through the checker, which hands the objects back as JSON (no YAML parser needed).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragbus.config import pipelines
from ragbus.config.settings import Settings, lanes, load_settings, processor_settings
from ragbus.replica import ShardHostSettings
from ragbus.schema.shards import shard_topic
from ragbus.testing import brokers

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "config" / "deploy" / "chart"
CHECK_SOURCES = ROOT / "config" / "deploy" / "check"
HELM_VERSION = (ROOT / "config" / "deploy" / "tools" / "helm.version").read_text().strip()
RELEASE = "t"
FULLNAME = f"{RELEASE}-ragbus"
WORKER_ROLES = ("ingest", "query")


@dataclass(frozen=True)
class Tools:
    helm: Path
    check: Path


def checker_digest() -> str:
    """The digest of the checker's sources, as config/deploy/tools/install stamps the build with it."""
    files = ["go.mod", "go.sum", *sorted(p.name for p in CHECK_SOURCES.glob("*.go"))]
    return hashlib.sha256(b"".join((CHECK_SOURCES / f).read_bytes() for f in files)).hexdigest()


def tools() -> Tools:
    """helm at the pinned version and the checker built from these sources; else fail in CI, skip elsewhere."""
    where = Path(os.environ.get("RAGBUS_TOOLS_BIN") or Path.home() / ".cache" / "ragbus" / "bin")
    found = Tools(where / "helm", where / "ragbus-manifest-check")
    problems = []
    if not found.helm.exists():
        problems.append(f"no {found.helm}")
    else:
        version = subprocess.run([found.helm, "version", "--template", "{{.Version}}"], capture_output=True,
                                 text=True, check=False).stdout.strip()
        if version != HELM_VERSION:
            problems.append(f"{found.helm} is {version or 'unknown'}, not {HELM_VERSION}")
    stamp = where / "ragbus-manifest-check.sum"
    if not found.check.exists() or not stamp.exists() or stamp.read_text().strip() != checker_digest():
        problems.append(f"{found.check} is missing or not built from config/deploy/check as it is")
    if problems:
        message = "; ".join(problems) + ": run config/deploy/tools/install"
        if brokers.in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def _values_file(values: dict, directory: Path) -> Path:
    path = directory / "values.json"  # JSON is YAML: helm reads it with -f
    path.write_text(json.dumps(values))
    return path


def helm(tools: Tools, *args: str | Path, values: dict | None = None) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as directory:
        extra = ["-f", str(_values_file(values, Path(directory)))] if values is not None else []
        return subprocess.run([tools.helm, *map(str, args), *extra], capture_output=True, text=True, check=False,
                              timeout=120)


def lint(tools: Tools, values: dict) -> subprocess.CompletedProcess:
    return helm(tools, "lint", "--strict", CHART, values=values)


def template(tools: Tools, values: dict) -> str:
    done = helm(tools, "template", RELEASE, CHART, values=values)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return done.stdout


def check(tools: Tools, manifests: str, external: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The checker on ``manifests``; with -json its stdout is the objects."""
    args = [str(tools.check), "-json", *(f"-external={e}" for e in external), "-"]
    return subprocess.run(args, input=manifests, capture_output=True, text=True, check=False, timeout=120)


def external_objects(values: dict) -> tuple[str, ...]:
    """The Secrets ``values`` names that the chart does not make."""
    secrets = values.get("secrets", {})
    named = [secrets.get("existingSecret"), secrets.get("tls", {}).get("existingSecret")]
    return tuple(f"Secret/{name}" for name in named if name)


def render(tools: Tools, values: dict) -> list[dict]:
    """``helm template`` of the chart with ``values``, checked: the objects, or an AssertionError with why."""
    done = check(tools, template(tools, values), external_objects(values))
    assert done.returncode == 0, f"ragbus-manifest-check refused the rendered chart:\n{done.stderr}"
    return json.loads(done.stdout)


def objects_of(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def role_settings_text(objects: list[dict], role: str) -> str:
    return objects_of(objects, "ConfigMap")[f"{FULLNAME}-settings"]["data"][f"{role}.toml"]


def role_settings(objects: list[dict], role: str, directory: Path) -> Settings:
    """A role's settings as ragbus loads them from the ConfigMap's file, and nothing else (no environment)."""
    path = directory / f"{role}.toml"
    path.write_text(role_settings_text(objects, role))
    return load_settings(path, environ={})


def served_lanes(settings: Settings, role: str) -> set[tuple[str, str]]:
    """(topic, group) of each lane the role's workers serve with these settings: what ``ragbus worker --role``
    runs (config/pipelines.py) and what each processor subscribes to (config/settings.py lanes), with a
    sharded query host's shard lanes (``shard_lanes``)."""
    names = pipelines.role(role, log=settings.stores.log, shards=settings.stores.shards)
    served = {lane for name in names for lane in lanes(name, settings.processors[name])}
    return (served | shard_lanes(settings)) if "shard-host" in names else served


def shard_lanes(settings: Settings) -> set[tuple[str, str]]:
    """(topic, group) of each lane a sharded query host serves for the shards it owns: each processor
    shard-host's ``serve`` names, on ``<topic>.shard-<k>`` as ``<group>.shard-<k>`` (ShardHostProcessor
    .shard_processors), for every shard k."""
    host = processor_settings(settings, "shard-host", ShardHostSettings)
    found = set()
    for name in host.serve:
        section = dict(settings.processors[name])
        for shard in range(host.shards):
            moved = {**section, "topic": shard_topic(section.get("topic") or name, shard),
                     "group": shard_topic(section.get("group") or name, shard)}
            found |= set(lanes(shard_topic(name, shard), moved))
    return found


def trigger_lanes(objects: list[dict], role: str) -> dict[tuple[str, str], dict]:
    """(topic, group) of each trigger of a role's ScaledObject (Pulsar's topics without their tenant and
    namespace), with the trigger."""
    found = {}
    for trigger in objects_of(objects, "ScaledObject")[f"{FULLNAME}-{role}"]["spec"]["triggers"]:
        meta = trigger["metadata"]
        if trigger["type"] == "kafka":
            lane = (meta["topic"], meta["consumerGroup"])
        else:
            lane = (meta["topic"].rsplit("/", 1)[1], meta["subscription"])
        assert lane not in found, f"two triggers on {lane}"
        found[lane] = trigger
    return found


def with_keys(values: dict | None = None) -> dict:
    """``values`` with an API key for the gateway (the chart refuses a keyless gateway unless told)."""
    merged = {"secrets": {"apiKeys": ["sk-test"]}}
    for key, value in (values or {}).items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return merged
