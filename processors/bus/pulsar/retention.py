"""Keeping a Pulsar log topic whole: its retention made infinite through the broker's admin API.

A log topic (``ragbus.changelog.*``) is read by Readers only: no subscription holds its messages,
so Pulsar keeps them only as its retention says, and its defaults keep nothing. Measured on
Apache Pulsar 4.0.7 with its defaults: a log topic idle (no producer, no reader) past the
inactive-topic limit (a minute) is deleted; and once its ledgers roll (past 50,000 entries after
10 minutes, or 4 hours), the closed ones are trimmed, so a replica made from the log later finds
nothing (the compaction benchmark's new replica held 0 of 100,000 chunks). With a retention of -1
minutes and -1 MB, neither happens.

So before a bus first appends to or reads a log topic, it reads the topic's applied retention
(the topic's own policy, else its namespace's, else the broker's); unless both are infinite it
sets the topic's own and waits until the broker applies it (topic policies travel on a system
topic, so they apply a moment later). Where that cannot be done (no admin API at the URL, no
admin rights, topic policies disabled) it fails, naming the command that sets the namespace's.
The replicas' reports (``ragbus.changelog.replicas``) are not state and are left as they are.
Hand-written: pulsar-client has no admin API, and these are two REST calls.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import httpx

from ragbus.config.bus import PulsarOptions

from ..base import BusError
from ..url import BusAddress

INFINITE = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
ADMIN_PORTS = {"pulsar": ("http", 8080), "pulsar+ssl": ("https", 8443)}  # Pulsar's own webServicePort(Tls)


def admin_url(opts: PulsarOptions, address: BusAddress) -> str:
    """``[bus.pulsar] admin_url``, else the first broker host's web service on Pulsar's default port."""
    if opts.admin_url:
        return opts.admin_url.rstrip("/")
    scheme, port = ADMIN_PORTS.get(address.scheme, ADMIN_PORTS["pulsar"])
    return f"{scheme}://{address.hosts[0][0]}:{port}"


def _command(opts: PulsarOptions, topic: str) -> str:
    return (f"pulsar-admin namespaces set-retention {opts.tenant}/{opts.namespace} --size -1 --time -1 "
            f"(or pulsar-admin topics set-retention persistent://{opts.tenant}/{opts.namespace}/{topic} -s -1 -t -1), "
            "then set [bus.pulsar] keep_logs = false if ragbus may not use the admin API")


def _infinite(policy) -> bool:
    return isinstance(policy, dict) and all(policy.get(k) == v for k, v in INFINITE.items())


async def keep_whole(opts: PulsarOptions, address: BusAddress, topic: str, timeout_s: float) -> None:
    """Until Pulsar keeps ``topic`` whole (its applied retention infinite); BusError if it cannot be made to."""
    base = admin_url(opts, address)
    url = f"{base}/admin/v2/persistent/{quote(opts.tenant)}/{quote(opts.namespace)}/{quote(topic)}/retention"
    headers = {"Authorization": f"Bearer {opts.auth_token}"} if opts.auth_token else {}
    verify: bool | str = (False if opts.tls_allow_insecure_connection
                          else opts.tls_trust_certs_file_path or True)

    def failed(what: str) -> BusError:
        return BusError(f"pulsar log topic {topic!r} is not kept whole (Pulsar's default retention drops a log "
                        f"nobody subscribes to) and {what}; set its retention to infinite: {_command(opts, topic)}")

    deadline = time.monotonic() + timeout_s
    try:
        async with httpx.AsyncClient(timeout=timeout_s, headers=headers, verify=verify) as client:
            applied = await _get(client, url, failed, deadline)
            if _infinite(applied):
                return
            answer = await client.post(url, json=INFINITE)
            if answer.status_code >= 300:
                raise failed(f"setting it through {base} was refused ({answer.status_code}: "
                             f"{answer.text[:200].strip()}); its retention is {applied}")
            deadline = time.monotonic() + timeout_s
            while not _infinite(applied := await _get(client, url, failed, deadline)):
                if time.monotonic() > deadline:
                    raise failed(f"the broker had not applied the retention set at {base} after {timeout_s}s "
                                 f"(it applies {applied})")
                await asyncio.sleep(0.1)
    except httpx.HTTPError as exc:
        raise failed(f"the admin API at {base} did not answer ({exc!r}; [bus.pulsar] admin_url says where "
                     "the broker's web service is, http://HOST:8080 by default)") from None


async def _get(client: httpx.AsyncClient, url: str, failed, deadline: float) -> object:
    """The topic's applied retention. A topic just made by a producer or reader may not be known to the
    admin API yet (404 under load, seen beside stress-ng, for over 30 s once): it is made through the admin
    API too (409 when it is there already), and asked again until ``deadline``."""
    answer = await client.get(url, params={"applied": "true"})
    for _ in range(10_000):  # a broker's metadata, polled: there is no event to wait on
        if answer.status_code != 404 or time.monotonic() >= deadline:
            break
        await client.put(url.rsplit("/retention", 1)[0])  # the topic, made (or there: 409, no harm)
        await asyncio.sleep(0.2)
        answer = await client.get(url, params={"applied": "true"})
    if answer.status_code >= 300:
        raise failed(f"reading its retention at {url} was refused ({answer.status_code}: {answer.text[:200].strip()})")
    try:
        return answer.json()
    except ValueError:
        raise failed(f"{url} answered {answer.text[:100]!r}, not a retention policy") from None
