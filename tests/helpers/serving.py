"""A processor served on a bus for the length of a test, and a request client on it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.prompt import PromptProcessor
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import PromptClient

from .echo import EchoProcessor, EchoSettings


def echo(topic: str, **settings) -> EchoProcessor:
    return EchoProcessor("echo", EchoSettings(topic=topic, group=f"echo-{topic}", **settings))


@contextlib.asynccontextmanager
async def serving(bus, processor):
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.ensure_future(processor.run(bus, stop, ready))
    await asyncio.wait([task, asyncio.ensure_future(ready.wait())], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # failed to start: show why
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


@contextlib.asynccontextmanager
async def client_on(bus, **kwargs):
    client = await RequestClient(bus, **kwargs).start()
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def serve_prompt(processor: PromptProcessor, timeout: float = 10):
    """A PromptClient talking to ``processor`` on a private memory bus."""
    name = f"prompt-{uuid.uuid4().hex[:12]}"
    bus = await connect(f"memory://{name}")
    try:
        async with serving(bus, processor), RequestClient(bus) as client:
            yield PromptClient(client, topic=processor.settings.topic, timeout=timeout)
    finally:
        await bus.close()
        drop_memory_broker(name)
