"""The HTTP gateway of ``ragbus serve``: REST and OpenAI-compatible chat in front of the bus.

A bus client like ``ragbus ask``: it publishes and waits, so replicas scale behind a load
balancer. ``app.build_app`` makes the ASGI app (Starlette), ``pipeline.BusPipeline`` is
what it calls, ``guard`` holds the safety limits, ``http_limits`` those of HTTP itself (the
head's size and time, silent connections), ``openapi`` the document built from
``schema/``, ``uploads`` the one way a face (REST, MCP's ingest) reads and stores a file.
"""

from .app import GatewayState, build_app
from .pipeline import BusPipeline

__all__ = ["BusPipeline", "GatewayState", "build_app"]
