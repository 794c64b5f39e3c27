"""The orchestrator: a question in, a cited answer out, from documents and the knowledge graph.

- ``DocumentRag`` (``core.py``): the pure core, with injected async clients;
- ``rrf_fuse`` and ``RRF_K`` (``fusion.py``): weighted reciprocal rank fusion;
- ``DocumentRagProcessor`` (``processor.py``): the document-rag topic's thin wrapper;
- the clients of a sharded collection's stores (``shards.py``): every shard asked, the hits merged;
- settings and their defaults: ``settings.py``.
"""

from .core import MODES, DocumentRag, RagAnswer
from .fusion import RRF_K, rrf_fuse
from .processor import DocumentRagProcessor
from .settings import DocumentRagSettings

__all__ = ["MODES", "RRF_K", "DocumentRag", "DocumentRagProcessor", "DocumentRagSettings", "RagAnswer", "rrf_fuse"]
