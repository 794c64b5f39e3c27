"""The request client's time-out default is ``[client] request_timeout_s``'s, not a number of its own."""

from __future__ import annotations

from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.runtime.request_client import RequestClient


async def test_a_client_without_a_timeout_waits_as_long_as_the_client_setting_says():
    async with await connect("memory://request-client-default") as bus:
        client = RequestClient(bus)
        assert client.timeout_s == load_settings(environ={}).client.request_timeout_s
