"""A log topic just made may not be known to Pulsar's admin API yet: its retention is asked again, not refused.

Beside stress-ng, a worker's start failed: the reader had made ``ragbus.changelog.graph``, and the admin
API answered 404 "Topic ... not found" for its retention a moment later. The admin API is stood in for
by httpx's mock transport (the real broker's behaviour is timing, which a test cannot make happen).
"""

from __future__ import annotations

import httpx
import pytest

from ragbus.config.bus import PulsarOptions
from ragbus.bus.base import BusError
from ragbus.bus.pulsar import retention
from ragbus.bus.url import BusAddress

INFINITE = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}


def admin(monkeypatch, answers: list[httpx.Response]) -> list[str]:
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.method)
        if request.method == "PUT":  # making the topic: there already, as far as this admin knows
            return httpx.Response(409, json={"reason": "This topic already exists"})
        return answers.pop(0) if len(answers) > 1 else answers[0]

    real = httpx.AsyncClient
    monkeypatch.setattr(retention.httpx, "AsyncClient",
                        lambda **kw: real(transport=httpx.MockTransport(handle), **kw))
    return asked


async def test_a_topic_the_admin_api_does_not_know_yet_is_asked_again_until_it_does(monkeypatch):
    missing = httpx.Response(404, json={"reason": "Topic persistent://public/default/x not found"})
    asked = admin(monkeypatch, [missing, missing, httpx.Response(200, json=INFINITE)])
    await retention.keep_whole(PulsarOptions(admin_url="http://admin"), BusAddress("pulsar", (("h", 6650),)),
                               "ragbus.changelog.graph", timeout_s=30)
    assert asked == ["GET", "PUT", "GET", "PUT", "GET"]  # the topic made through the admin API between


async def test_a_topic_still_unknown_at_the_deadline_is_refused_with_the_command(monkeypatch):
    admin(monkeypatch, [httpx.Response(404, json={"reason": "not found"})])
    with pytest.raises(BusError, match="set-retention"):
        await retention.keep_whole(PulsarOptions(admin_url="http://admin"), BusAddress("pulsar", (("h", 6650),)),
                                   "ragbus.changelog.graph", timeout_s=0.5)
