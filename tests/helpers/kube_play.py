"""The chart's rendered objects as ``podman kube play`` (podman 4.3) can run them, and the pods it made.

podman 4.3 plays Pods, Deployments, PersistentVolumeClaims and ConfigMaps, and no StatefulSet, Service,
PodDisruptionBudget or autoscaler. The copy made here changes only what it must. A StatefulSet becomes
what its controller would make, a claim and a Pod per ordinal (``<name>-<ordinal>``, its claim
``data-<name>-<ordinal>-<the test's suffix>``). The objects podman cannot play are left out. Each
container loses its ``ports`` (podman publishes every containerPort on the host, so two replicas would
collide; the pods are reached on their own addresses on a podman network) and its probes (podman has no
readiness gate: the test asks ``/ready`` itself). An annotation longer than podman 4.3 allows (the
settings checksum) goes. Everything else, the commands, the settings files from the ConfigMap, the
security contexts, the volumes, is the chart's.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import httpx

from .image import podman

PLAYABLE = ("ConfigMap", "Deployment", "Pod", "PersistentVolumeClaim")


def _annotations(metadata: dict) -> dict:
    """The annotations podman 4.3 takes: it holds their values to a label's 63 characters, which Kubernetes
    does not (the chart's settings checksum is 64)."""
    return {k: v for k, v in metadata.get("annotations", {}).items() if len(str(v)) <= 63}


def _bare(pod_spec: dict) -> dict:
    spec = copy.deepcopy(pod_spec)
    for container in spec["containers"]:
        for key in ("ports", "startupProbe", "livenessProbe", "readinessProbe"):
            container.pop(key, None)
    return spec


def playable(objects: list[dict], claim_suffix: str) -> tuple[list[dict], list[str]]:
    """The objects podman plays, and the names of the claims (podman volumes) they make."""
    out, claims = [], []
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "Deployment":
            deployment = copy.deepcopy(obj)
            deployment["spec"]["template"]["spec"] = _bare(obj["spec"]["template"]["spec"])
            template = deployment["spec"]["template"]["metadata"]
            template["annotations"] = _annotations(template)
            out.append(deployment)
        elif kind == "StatefulSet":
            template = obj["spec"]["template"]
            templates = {t["metadata"]["name"]: t for t in obj["spec"].get("volumeClaimTemplates", [])}
            for ordinal in range(obj["spec"]["replicas"]):
                spec = _bare(template["spec"])
                for name, claim in templates.items():
                    claim_name = f"{name}-{meta['name']}-{ordinal}-{claim_suffix}"
                    claims.append(claim_name)
                    out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "metadata": {"name": claim_name}, "spec": claim["spec"]})
                    spec.setdefault("volumes", []).append({"name": name,
                                                           "persistentVolumeClaim": {"claimName": claim_name}})
                out.append({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": f"{meta['name']}-{ordinal}", "labels": template["metadata"]["labels"],
                                         "annotations": _annotations(template["metadata"])},
                            "spec": spec})
        elif kind in PLAYABLE:
            out.append(obj)
    return out, claims


def write(objects: list[dict], path: Path) -> Path:
    """A multi-document YAML file of ``objects`` (each written as JSON, which YAML reads)."""
    path.write_text("".join(f"---\n{json.dumps(o)}\n" for o in objects))
    return path


def pod_names(objects: list[dict]) -> dict[str, list[str]]:
    """The pods podman makes of each workload: a Deployment's ``<name>-pod-<i>``, a Pod's own name."""
    found: dict[str, list[str]] = {}
    for obj in objects:
        name, role = obj["metadata"]["name"], None
        if obj["kind"] == "Deployment":
            role = obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            found.setdefault(role, []).extend(f"{name}-pod-{i}" for i in range(obj["spec"]["replicas"]))
        elif obj["kind"] == "Pod":
            role = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            found.setdefault(role, []).append(name)
    return found


def address(pod: str, network: str) -> str:
    """A pod's address on ``network``, as its infra container holds it."""
    infra = podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    return podman("inspect", infra, "--format",
                  f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}').stdout.strip()


def logs(pod: str, lines: int = 40) -> str:
    done = podman("logs", "--tail", str(lines), f"{pod}-ragbus", check=False)
    return (done.stdout + done.stderr)[-4000:]


def wait_ready(pod: str, network: str, port: int, timeout: float) -> str:
    """Until the pod's ``/ready`` on ``port`` says 200 (its address read again: a restart may change it);
    the base URL. A pod whose container stopped fails at once, with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = podman("inspect", f"{pod}-ragbus", "--format", "{{.State.Running}}", check=False).stdout.strip()
        if running == "false":
            raise AssertionError(f"{pod} stopped:\n{logs(pod)}")
        ip = address(pod, network) if running == "true" else ""
        if ip:
            try:
                if httpx.get(f"http://{ip}:{port}/ready", timeout=10).status_code == 200:
                    return f"http://{ip}:{port}"
            except httpx.HTTPError:
                pass
        time.sleep(0.2)  # a pod offers no readiness event but its HTTP answer
    raise AssertionError(f"{pod} not ready within {timeout:g}s:\n{logs(pod)}")
