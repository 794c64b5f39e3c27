"""The chart's rendered objects played as pods by ``podman kube play``, against Apache Kafka: a gateway, an
ingestion pod and two query pods, each from the image, with the settings files of the ConfigMap.

The test's own Kafka listens on the bridge of a podman network of the session's own, where the pods
are (tests/helpers/kube_play.py says what the playable copy of the objects changes: only what podman
4.3 cannot play). A document goes in through the gateway and is asked about; then, with questions
coming all the while, a query pod is killed (SIGKILL, no drain) and started again on its claim: every
question is answered, with a citation, and the pod is ready again from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import httpx
import pytest

from ..helpers import chart, kube_play
from ..helpers.brokers import own_broker
from ..helpers.image import podman, unique

pytestmark = pytest.mark.brokers

PATIENCE_S = 600.0
DOC = {"document_id": "kelp-ledger", "collection": "default", "title": "The kelp ledger",
       "text": "The kelp ledger of Port Ardent records that the harbour's tide gauge was recalibrated by "
               "Imogen Vasquez in the spring, after the storm moved the pier."}
QUESTION = "Who recalibrated the tide gauge of Port Ardent?"


@pytest.fixture
def anchored(image, network):
    """The network's bridge, up for the test (podman brings it up with its first container), and its address."""
    name = unique("ragbus-test-anchor")
    podman("run", "--detach", "--name", name, "--network", network, image, "sleep", "infinity")
    try:
        yield podman("network", "inspect", network, "--format", "{{range .Subnets}}{{.Gateway}}{{end}}").stdout.strip()
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


@pytest.mark.timeout(1800)
def test_the_chart_played_as_pods_answers_and_rides_out_a_query_pod_killed_under_load(
        image, network, anchored, tmp_path):
    tools = chart.tools()
    (tmp_path / "kafka").mkdir()
    kafka = own_broker("kafka", tmp_path / "kafka", host=anchored)
    repository, _, tag = image.rpartition(":")
    objects = chart.render(tools, {
        "image": {"repository": repository, "tag": tag},
        "bus": {"kafka": {"bootstrapServers": f"{anchored}:{kafka.port}"}},
        "gateway": {"insecure": True, "replicas": 1}, "query": {"replicas": 2},
        "autoscaling": {"mode": "none"},
    })
    played, claims = kube_play.playable(objects, uuid.uuid4().hex[:8])
    manifest = kube_play.write(played, tmp_path / "pods.yaml")
    pods = kube_play.pod_names(played)
    assert {role: len(names) for role, names in pods.items()} == {"gateway": 1, "ingest": 1, "query": 2}
    try:
        podman("kube", "play", "--replace", "--network", network, str(manifest), timeout=600)
        t0 = time.monotonic()
        query = [kube_play.wait_ready(p, network, 9100, PATIENCE_S) for p in pods["query"]]
        kube_play.wait_ready(pods["ingest"][0], network, 9100, PATIENCE_S)
        gateway = kube_play.wait_ready(pods["gateway"][0], network, 8000, PATIENCE_S)
        print(f"\npods ready in {time.monotonic() - t0:.0f} s; query pods at {', '.join(query)}")

        stored = httpx.post(f"{gateway}/v1/documents", json=DOC, timeout=PATIENCE_S)
        assert stored.status_code == 201, stored.text
        seen = stored.json()["seen"]
        asked = httpx.post(f"{gateway}/v1/ask", json={"question": QUESTION, "must_see": seen}, timeout=PATIENCE_S)
        assert asked.status_code == 200 and f"{DOC['document_id']}#0" in asked.json()["cited"], asked.text

        victim = pods["query"][1]
        answers, restart_s = asyncio.run(_kill_under_load(gateway, victim, network, seen))
        failed = [a for a in answers if a != "ok"]
        print(f"{len(answers)} questions while {victim} was killed and started again; its restart on its claim "
              f"ready in {restart_s:.1f} s")
        assert failed == [], failed[:10]
        assert len(answers) >= 10
    finally:
        podman("kube", "down", str(manifest), timeout=300, check=False)
        for claim in claims:
            podman("volume", "rm", "--force", claim, check=False)
        kafka.stop()


async def _kill_under_load(gateway: str, victim: str, network: str, seen: list[str]) -> tuple[list[str], float]:
    """Questions at 4 a second while ``victim`` is killed and started again; each answer's verdict, and how
    long the pod took from its start to ready."""
    answers: list[str] = []
    stop, progress = asyncio.Event(), asyncio.Condition()

    async def reached(n: int) -> None:
        async with progress:
            await progress.wait_for(lambda: len(answers) >= n)

    async def ask(http: httpx.AsyncClient) -> None:
        try:
            r = await http.post(f"{gateway}/v1/ask", json={"question": QUESTION, "must_see": seen},
                                timeout=PATIENCE_S)
        except httpx.HTTPError as exc:
            answers.append(f"{type(exc).__name__}: {exc}")
        else:
            cited = r.json().get("cited", []) if r.status_code == 200 else []
            answers.append("ok" if f"{DOC['document_id']}#0" in cited else f"{r.status_code} {r.text[:300]}")
        async with progress:
            progress.notify_all()

    async def load(http: httpx.AsyncClient) -> None:
        tasks = set()
        while not stop.is_set():
            tasks.add(asyncio.ensure_future(ask(http)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)
        await asyncio.gather(*tasks)

    async with httpx.AsyncClient() as http:
        running = asyncio.ensure_future(load(http))
        await reached(5)  # the load flows before the kill
        await asyncio.to_thread(podman, "pod", "kill", victim)
        await reached(25)  # questions while the killed pod's groups rebalance
        started = time.monotonic()
        await asyncio.to_thread(podman, "pod", "start", victim)
        await asyncio.to_thread(kube_play.wait_ready, victim, network, 9100, PATIENCE_S)
        restart_s = time.monotonic() - started
        stop.set()
        await running
    return answers, restart_s
