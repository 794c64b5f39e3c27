"""FastStream's request/reply over Kafka, as a setup ``pingpong.run`` measures beside ragbus's processor path.

FastStream 0.7.8's ``KafkaBroker.request`` works only under its test client: on a real broker it
raises ``FeatureNotSupportedException`` ("Kafka doesn't support `request` method without test
client"). Its documented way to ask and be answered over Kafka is the one measured here: publish
with ``reply_to`` and ``correlation_id``; a subscriber that returns a value has FastStream publish
it to ``reply_to`` with the same ``correlation_id``; a subscriber on the reply topic resolves the
caller's future by that id. The resolving subscriber and its table of futures are written here
because FastStream leaves them to the user (its maintainers' own Kafka RPC recipe does the same).

Kept as close to ragbus's setup as FastStream allows: a server broker and a client broker on
connections of their own, the echo subscriber in a consumer group with 64 concurrent handlers
(``max_workers``), the request topic with ragbus's partition count, the reply topic one partition
(what one ragbus caller reads of the shared reply topic). FastStream's defaults otherwise, except
its per-message INFO log: ragbus logs nothing per message, and two log lines per delivery to a
terminal would measure the terminal rather than the transport.

The handlers take FastStream's cheapest path, so the peer is measured at its best: the echo takes
the body alone, and the reply's correlation id comes with its body from a custom decoder. Asking
for the message or a ``Context`` field in a handler's signature instead (as FastStream's own
recipe does) makes fast-depends 3.0 resolve it by a synchronous call in a worker thread: a thread
hop per delivery, which would be FastStream's cost in that style but not its best.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from faststream.kafka import KafkaBroker, KafkaMessage

from scripts.bench.pingpong import BODY, CONCURRENCY, Call, Helpers, Setup

CALL_TIMEOUT_S = 30.0  # the first calls also wait for the echo subscriber's group to form


async def correlated(message: KafkaMessage) -> tuple[str, bytes]:
    """A reply as its correlation id and body, handed to the handler as its one argument."""
    return message.correlation_id, message.body


async def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()])
    finally:
        await admin.close()


def faststream_setup(bootstrap: str, request_partitions: int) -> Setup:
    """Calls through FastStream to an echo subscriber on a real Kafka at ``bootstrap``."""

    @contextlib.asynccontextmanager
    async def setup(tag: str) -> AsyncIterator[tuple[Call, Helpers]]:
        requests, replies = f"bench-fs-req-{tag}", f"bench-fs-rep-{tag}"
        await create_topics(bootstrap, {requests: request_partitions, replies: 1})
        server, client = (KafkaBroker(bootstrap, logger=None) for _ in range(2))
        pending: dict[str, asyncio.Future[bytes]] = {}
        ids = itertools.count()

        @server.subscriber(requests, group_id="server", auto_offset_reset="earliest", max_workers=CONCURRENCY)
        async def echo(body: bytes) -> bytes:
            return body

        @client.subscriber(replies, auto_offset_reset="earliest", decoder=correlated)
        async def on_reply(reply: tuple[str, bytes]) -> None:
            correlation_id, body = reply
            future = pending.pop(correlation_id, None)
            if future is not None and not future.done():
                future.set_result(body)

        async def call() -> bytes:
            correlation_id = str(next(ids))
            pending[correlation_id] = future = asyncio.get_running_loop().create_future()
            try:
                await client.publish(BODY, requests, reply_to=replies, correlation_id=correlation_id)
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    body = await future
            finally:
                pending.pop(correlation_id, None)
            if body != BODY:
                raise RuntimeError(f"the echo answered {len(body)} bytes that are not the {len(BODY)} it was sent")
            return body

        async with contextlib.AsyncExitStack() as stack:
            for broker in (server, client):
                await broker.start()
                stack.push_async_callback(broker.stop)
            yield call, []

    return setup
