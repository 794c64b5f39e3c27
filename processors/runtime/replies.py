"""One reply inbox per bus, shared by every ``RequestClient`` on it, its replies handed out by request id.

A ``ragbus worker --all`` process holds several clients (document-rag's, the
document-load's, ...). Each used to open its own inbox (``Bus.reply_inbox``): on
Kafka a consumer that long-polls the broker for as long as the process runs,
idle or not. Now the first client on a bus opens the inbox, the others join
it, and the last one to leave closes it: one reply consumer per process and
bus, however many clients.

The router reads the inbox and hands each reply to the client whose call is
waiting for that request id (the client puts itself in ``routes`` under the
id, and takes itself out once the call needs no more). A reply for a call
that already ended goes to the client that made it, which counts it late or
duplicate (``ended`` remembers which); a reply no
client of this process asked for (another process's, on a Kafka reply
partition it shares) is counted foreign by every client reading the inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from typing import Protocol

from ..bus import Bus, Delivery, Subscription, SubscriptionClosed
from . import middleware
from .envelope import REQUEST_ID

log = logging.getLogger(__name__)

# How many ended request ids are remembered to tell late and duplicate responses from foreign ones.
REMEMBERED = 100_000


class ReplyOwner(Protocol):
    """What a router needs of a client: take a reply it waits for, count one it no longer waits for."""

    def _take_reply(self, request_id: str, delivery: Delivery) -> None: ...

    def _count_unexpected(self, answered: bool | None) -> None:
        """``answered``: True, the call was answered already (a duplicate); False, it ended unanswered
        (a late reply); None, no call of this client (a foreign reply)."""


class ReplyRouter:
    """The reply inbox of one bus in this process, and which client waits for which request id."""

    def __init__(self, bus: Bus, name: str) -> None:
        self.bus = bus
        self.name = name  # the first client's: it names the private reply topic where the bus makes one
        self.address = ""  # the reply-to address every client's requests name
        self.reader: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self._owners: set[ReplyOwner] = set()
        self.routes: dict[str, ReplyOwner] = {}  # request id -> the client waiting for replies to it
        self._ended: OrderedDict[str, tuple[ReplyOwner, bool]] = OrderedDict()
        self._opening: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def reading(self) -> bool:
        """Whether replies are being read: opened, not closed, and its reader still running."""
        return self.reader is not None and not self.reader.done() and not self._closed

    @property
    def owners(self) -> int:
        return len(self._owners)

    def _usable(self) -> bool:
        if self._closed or (self.reader is not None and self.reader.done()):
            return False
        opening = self._opening
        return opening is None or not opening.done() or (not opening.cancelled() and opening.exception() is None)

    def forget(self, request_id: str) -> None:
        self.routes.pop(request_id, None)

    def ended(self, request_id: str, owner: ReplyOwner, *, answered: bool) -> None:
        """``owner``'s call ``request_id`` is over: a reply to it from now on is late or a duplicate."""
        self._ended[request_id] = (owner, answered)
        if len(self._ended) > REMEMBERED:
            self._ended.popitem(last=False)

    async def _open(self) -> None:
        self.address, self._subscription = await self.bus.reply_inbox(self.name)
        self.reader = asyncio.ensure_future(self._read())

    async def _opened(self) -> None:
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        # Shielded: one joiner giving up must not cancel the opening the others wait for.
        await asyncio.shield(self._opening)

    async def leave(self, owner: ReplyOwner) -> None:
        """``owner`` reads no more; the last to leave closes the inbox."""
        self._owners.discard(owner)
        if self._owners or self._closed:
            return
        self._closed = True
        if _routers.get(self.bus) is self:
            del _routers[self.bus]  # a client that starts from now on opens a fresh inbox
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            with contextlib.suppress(BaseException):
                await self._opening
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        if self._subscription is not None:
            await self._subscription.close()

    async def _read(self) -> None:
        sub = self._subscription
        assert sub is not None
        failures = 0
        while True:
            try:
                d = await sub.receive()
            except SubscriptionClosed:  # the bus closed: a client that starts on it from now on fails there
                if _routers.get(self.bus) is self:
                    del _routers[self.bus]
                return
            except Exception:  # one bad read must not leave every waiting call to time out
                failures += 1
                log.exception("reading replies on %s failed (%d in a row)", self.address, failures)
                await asyncio.sleep(min(5.0, 0.05 * 2**failures))
                continue
            failures = 0
            await d.ack()  # a reply is consumed once, whatever happens to it
            self._route(d)

    def _route(self, d: Delivery) -> None:
        for hooks in middleware.installed:
            hooks.reply_routed(d)
        request_id = d.headers.get(REQUEST_ID, "")
        owner = self.routes.get(request_id)
        if owner is not None:
            owner._take_reply(request_id, d)
            return
        ended = self._ended.get(request_id)
        if ended is not None:
            ended[0]._count_unexpected(ended[1])
            log.debug("dropped response to %s (late or duplicate)", request_id)
            return
        for reader in self._owners:
            reader._count_unexpected(None)


# The router of each bus in this process that has a started client; removed as the last one leaves
# or the inbox closes with its bus.
_routers: weakref.WeakKeyDictionary[Bus, ReplyRouter] = weakref.WeakKeyDictionary()


async def join(bus: Bus, owner: ReplyOwner, name: str) -> ReplyRouter:
    """The reply router of ``bus``, with ``owner`` among its readers; opened by the first to join."""
    router = _routers.get(bus)
    if router is None or not router._usable():
        router = _routers[bus] = ReplyRouter(bus, name)
    router._owners.add(owner)  # before waiting: a concurrent last leave must not close it under us
    try:
        await router._opened()
    except BaseException:
        await router.leave(owner)
        raise
    return router


def router_of(bus: Bus) -> ReplyRouter | None:
    """The open reply router of ``bus``, if a client on it is started."""
    router = _routers.get(bus)
    return router if router is not None and not router._closed else None
