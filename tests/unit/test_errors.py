"""What a caller catches has one root, RagbusError, and each error says whether trying again may help."""

from __future__ import annotations

import pytest

import ragbus
from ragbus.bus import BusConfigError, BusError, BusUnavailable, MessageTooLarge, SubscriptionClosed, Unsupported
from ragbus.stores.seen import NotYetApplied, ReplicaMissing
from ragbus.runtime.processor import Unavailable
from ragbus.runtime.request_client import BrokerUnreachable, ClientClosed, NotServed, NotStreamed, RequestTimeout
from ragbus.runtime.typed_clients import RemoteError
from ragbus.schema import Error
from ragbus.schema.errors import RETRIABLE_TYPES, RagbusError

RETRIABLE = [
    RequestTimeout("t", "r1", 5.0),
    BrokerUnreachable("t", "r1", 5.0, "the broker at 127.0.0.1:9 has not answered for 6 s"),
    NotServed("t", "r1", 2.0, "kafka://127.0.0.1:9"),
    BusUnavailable("no broker"),
    RemoteError("t", Error("Timeout", "embed did not finish within 30s")),
    RemoteError("t", Error("NotYetApplied", "the replica is behind")),
]
FINAL = [
    BusConfigError("bad url"), MessageTooLarge("too big"), SubscriptionClosed("closed"), Unsupported("no logs"),
    ClientClosed("closed"), NotStreamed("whole"),
    RemoteError("t", Error("BadRequest", "invalid collection name")),
    RemoteError("t", Error("ValidationError", "missing field `query`")),
]


@pytest.mark.parametrize("error", RETRIABLE + FINAL, ids=lambda e: type(e).__name__)
def test_every_error_a_caller_catches_is_a_ragbus_error_that_says_whether_to_retry(error):
    assert isinstance(error, RagbusError)
    assert error.retriable is (error in RETRIABLE)


def test_the_old_bases_still_catch_them():
    """A caller written against TimeoutError, ConnectionError, ValueError or RuntimeError still catches them."""
    assert all(isinstance(e, TimeoutError) for e in RETRIABLE[:3])
    assert isinstance(BusUnavailable("x"), ConnectionError) and isinstance(MessageTooLarge("x"), ValueError)
    assert isinstance(ClientClosed("x"), RuntimeError) and isinstance(BusError("x"), RagbusError)


def test_a_time_out_says_what_it_waited_for():
    plain, unreachable, unserved = RETRIABLE[:3]
    assert str(plain) == "no response on 't' to request r1 within 5s: is a worker serving 't' running on the bus?"
    assert str(unreachable).endswith("within 5s: the broker at 127.0.0.1:9 has not answered for 6 s")
    assert str(unserved).startswith("no worker consumes 't' on kafka://127.0.0.1:9")
    assert (unserved.topic, unserved.request_id, unserved.timeout) == ("t", "r1", 2.0)


def test_every_kind_of_unavailable_is_as_retriable_on_the_wire():
    """A processor answers an Unavailable by its class's name: the wire's retriable types are the retriable
    kinds."""
    kinds, todo = set(), [Unavailable]
    while todo:  # every subclass defined in what is imported here (the replica's kinds among them)
        kind = todo.pop()
        kinds.add(kind)
        todo.extend(kind.__subclasses__())
    assert {NotYetApplied, ReplicaMissing} <= kinds
    assert {k.__name__ for k in kinds if k.retriable} <= RETRIABLE_TYPES
    assert not {k.__name__ for k in kinds if not k.retriable} & RETRIABLE_TYPES
    assert not ReplicaMissing.retriable  # a process that follows no log: its settings, not its lateness


def test_the_root_is_in_the_public_api():
    assert ragbus.RagbusError is RagbusError and "RagbusError" in ragbus.__all__
