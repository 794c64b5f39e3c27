"""A data directory with the end-to-end documents and the sample graph, for the gateway tests."""

from __future__ import annotations

import asyncio

from ragbus.testing.stores import build_stores

from .rag_pipeline import DOCS


def stores(tmp_path_factory):
    """A data dir holding DOCS and the sample graph: the default collection is not empty, so no first use."""
    directory = tmp_path_factory.mktemp("serve-data")
    asyncio.run(build_stores(directory, "default", DOCS))
    return directory
