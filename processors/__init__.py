"""ragbus: question answering by processors that talk only through a message bus.

This folder is the package ``ragbus`` (schema/ is ``ragbus.schema``, config/ ``ragbus.config``). What an
application imports is named here, each loaded on first use, so importing one part (say
``ragbus.config``) does not load the bus clients or the model runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_PUBLIC = {
    # the bus: one async protocol, three backends chosen by URL
    "connect": "ragbus.bus", "Bus": "ragbus.bus.base", "Message": "ragbus.bus.base",
    "BusError": "ragbus.bus.base", "BusUnavailable": "ragbus.bus.base",
    # the root of what a caller catches, each error saying whether trying again may help (docs/errors.md)
    "RagbusError": "ragbus.schema.errors",
    # request/response over the bus, and a typed client per request topic
    "RequestClient": "ragbus.runtime.request_client", "RequestTimeout": "ragbus.runtime.request_client",
    "RemoteError": "ragbus.runtime.typed_clients", "DocumentRagClient": "ragbus.runtime.typed_clients",
    "EmbedClient": "ragbus.runtime.typed_clients", "DocEmbeddingsClient": "ragbus.runtime.typed_clients",
    "FetchChunkClient": "ragbus.runtime.typed_clients", "KeywordClient": "ragbus.runtime.typed_clients",
    "KgClient": "ragbus.runtime.typed_clients", "PromptClient": "ragbus.runtime.typed_clients",
    # a processor of one's own, and workers built from settings
    "Processor": "ragbus.runtime.processor", "run_workers": "ragbus.runtime.worker",
    "load_settings": "ragbus.config.settings",
    # what a user's own tests import: topics recorded and replayed
    "record": "ragbus.runtime.recording", "replay": "ragbus.runtime.recording",
    "read_recording": "ragbus.runtime.recording", "RecordedResponder": "ragbus.testing.replay",
    "compare_with_recording": "ragbus.testing.replay",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ragbus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the names for a type checker; `as` marks each a re-export
    from ragbus.bus import connect as connect
    from ragbus.bus.base import Bus as Bus
    from ragbus.bus.base import BusError as BusError
    from ragbus.bus.base import BusUnavailable as BusUnavailable
    from ragbus.bus.base import Message as Message
    from ragbus.config.settings import load_settings as load_settings
    from ragbus.schema.errors import RagbusError as RagbusError
    from ragbus.runtime.processor import Processor as Processor
    from ragbus.runtime.recording import read_recording as read_recording
    from ragbus.runtime.recording import record as record
    from ragbus.runtime.recording import replay as replay
    from ragbus.runtime.request_client import RequestClient as RequestClient
    from ragbus.runtime.request_client import RequestTimeout as RequestTimeout
    from ragbus.runtime.typed_clients import DocEmbeddingsClient as DocEmbeddingsClient
    from ragbus.runtime.typed_clients import DocumentRagClient as DocumentRagClient
    from ragbus.runtime.typed_clients import EmbedClient as EmbedClient
    from ragbus.runtime.typed_clients import FetchChunkClient as FetchChunkClient
    from ragbus.runtime.typed_clients import KeywordClient as KeywordClient
    from ragbus.runtime.typed_clients import KgClient as KgClient
    from ragbus.runtime.typed_clients import PromptClient as PromptClient
    from ragbus.runtime.typed_clients import RemoteError as RemoteError
    from ragbus.runtime.worker import run_workers as run_workers
    from ragbus.testing.replay import RecordedResponder as RecordedResponder
    from ragbus.testing.replay import compare_with_recording as compare_with_recording
