"""Whether a collection holds anything: the one check behind every face's "this collection is empty".

documents-query lists the collections that hold documents or a graph (as ``ragbus collections`` shows).
document-rag asks it when an answer drew on no chunk and no fact, kg-query when a graph question found
nothing in a collection whose graph is empty: a collection that holds nothing is then refused with an
``EmptyCollection`` error answer, which every caller gets alike (``ragbus ask`` on any bus, REST and chat,
MCP, the page, a user's own client) and each face words by its type. A check that cannot be made
(documents-query not served, failing, or slow) leaves the answer as it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ragbus.bus.base import Bus, BusError
from ragbus.schema import BadRequest, DocumentList, ListDocuments
from ragbus.schema import topics as t

from .request_client import RequestClient, RequestTimeout

log = logging.getLogger(__name__)

# At most this long for one check; unanswered after SERVED_CHECK_S, it asks the bus whether anyone serves
# documents-query (a query host that runs none), so that a check nobody can answer costs that long, no more.
CHECK_TIMEOUT_S = 10.0
SERVED_CHECK_S = 0.5


class EmptyCollection(BadRequest):
    """A question to a collection that holds neither documents nor a graph: the caller's to fill."""


def empty_collection(collection: str, *, upload: str | None = None) -> str:
    """What to say of a question to ``collection`` when it holds nothing: how to fill it, in every face's words
    alike (``upload``: the face's own way, e.g. ``POST /v1/documents``, named first)."""
    ways = f"{upload} or " if upload else ""
    return (f"collection {collection!r} has no documents: ingest some with {ways}"
            f"`ragbus ingest PATH... --collection {collection}` (or load a graph with "
            f"`ragbus kg load FILE --collection {collection}`)")


class CollectionCheck:
    """Asks documents-query on ``topic`` which collections hold anything; its client starts at the first check,
    so a processor that never needs one opens no reply inbox for it."""

    def __init__(self, bus: Bus, *, name: str, topic: str = t.DOCUMENTS_QUERY,
                 timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.bus = bus
        self.name = name
        self.topic = topic
        self.timeout_s = timeout_s
        self._client: RequestClient | None = None
        self._starting = asyncio.Lock()

    async def holds(self, collection: str, must_see: Sequence[str] = ()) -> bool | None:
        """Whether ``collection`` holds documents or a graph; None when documents-query cannot say."""
        request = ListDocuments(collection=collection, collections=True, must_see=list(must_see))
        try:
            found = await (await self._started()).request(self.topic, request, DocumentList)
        except (RequestTimeout, BusError) as exc:
            log.warning("%s: documents-query cannot say whether %r holds anything: %s", self.name, collection, exc)
            return None
        if found.error is not None:
            log.warning("%s: documents-query failed to list the collections: %s", self.name, found.error)
            return None
        return collection in found.collections

    async def require(self, collection: str, must_see: Sequence[str] = ()) -> None:
        """``EmptyCollection`` if ``collection`` holds nothing; nothing if it holds something or none can say."""
        if await self.holds(collection, must_see) is False:
            raise EmptyCollection(empty_collection(collection))

    async def _started(self) -> RequestClient:
        async with self._starting:
            if self._client is None:
                self._client = await RequestClient(self.bus, name=self.name, timeout_s=self.timeout_s,
                                                   served_check_s=SERVED_CHECK_S).start()
            return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
