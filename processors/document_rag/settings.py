"""Every default of the document-rag processor, in one place.

``[processors.document-rag]`` in the settings sets any of them, e.g.::

    [processors.document-rag]
    class = "ragbus.document_rag:DocumentRagProcessor"
    retrieval_mode = "vector"
    keyword_weight = 0.5

and environment variables override them: ``RAGBUS_PROCESSORS__DOCUMENT_RAG__DOC_LIMIT=8``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ragbus.config.settings import ProcessorSettings
from ragbus.schema import topics as t

Positive = Annotated[float, msgspec.Meta(gt=0)]
Weight = Annotated[float, msgspec.Meta(ge=0)]


class DocumentRagSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    # The mode of a request that names none (DocumentRagRequest.mode = None). Hybrid, the winner on
    # the test half of scripts/eval/questions.jsonl (nDCG@10: hybrid 0.617, vector 0.554, keyword 0.530).
    retrieval_mode: Literal["vector", "keyword", "hybrid"] = "hybrid"
    # How hybrid fuses its two lists (a request's fusion overrides it): "rrf", weighted reciprocal
    # rank fusion, score = weight / (60 + rank), summed; "minmax" / "dbsf", the weighted sum of each
    # list's scores normalised to [0, 1] (min-max, or mean +- 3 sd). processors/document_rag/fusion.py.
    # Min-max was chosen on the dev half of the questions: +0.01 nDCG@10, +0.03 R@5 over RRF.
    fusion: Literal["rrf", "minmax", "dbsf"] = "minmax"
    vector_weight: Weight = 1.0
    keyword_weight: Weight = 1.0
    # Hybrid asks each side for this many chunks (when more than the request's limit) before fusing.
    hybrid_depth: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0
    # Chunks an answer is drawn from, unless the request says; a request may ask for up to max_doc_limit.
    # At least 1, as the doc-embeddings-query and keyword-query limits it becomes.
    doc_limit: Annotated[int, msgspec.Meta(ge=1)] = 5
    max_doc_limit: Annotated[int, msgspec.Meta(ge=1)] = 50
    # The question plus at most this many concepts from extract-concepts are embedded; it counts
    # what follows the question, as the prompt processor's max_concepts does. 0 = the question
    # only, without asking extract-concepts at all: one hop less on the vector path. The default,
    # because the prompt processor extracts none by default either (the question alone measured
    # better: processors/prompt/settings.py); raise both to use concepts.
    max_concepts: Annotated[int, msgspec.Meta(ge=0)] = 0
    # Graph facts given to the answer.
    fact_limit: Annotated[int, msgspec.Meta(ge=0)] = 8
    # Longer questions are refused.
    max_query_chars: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    # Each sub-request waits this long for its answer. The keyword side of hybrid and the graph
    # path are optional: past path_timeout_s the answer goes on without them (and says so).
    # Both stay under handler_timeout_s, so a dead sub-service degrades the answer, not the reply.
    call_timeout_s: Positive = 10.0
    path_timeout_s: Positive = 5.0
    # A sub-request unanswered this long is sent again under the same id, so one held by a
    # worker that died is served by another replica within the call timeout. 0 = never.
    resend_after_s: Annotated[float, msgspec.Meta(ge=0)] = 3.0
    # Whether the graph path runs at all.
    use_graph: bool = True
    # The topics of the processors it calls.
    prompt_topic: str = t.PROMPT
    embed_topic: str = t.EMBED
    doc_embeddings_topic: str = t.DOC_EMBEDDINGS_QUERY
    fetch_chunk_topic: str = t.FETCH_CHUNK
    keyword_topic: str = t.KEYWORD_QUERY
    kg_topic: str = t.KG_QUERY
    # An answer drawn on no chunk and no fact asks documents-query here whether the collection holds
    # anything: one that holds nothing is refused (EmptyCollection), saying how to fill it.
    documents_topic: str = t.DOCUMENTS_QUERY
    # Shards of the collections (schema/shards.py), normally [stores] shards, handed here by the
    # settings. N > 0: each retrieval asks doc-embeddings-query, keyword-query and fetch-chunk of
    # every shard k on <topic>.shard-<k> (fetch-chunk: only the shard of the chunk's document) and
    # merges the hits by score (processors/document_rag/shards.py). A shard that fails or misses its
    # bound is left out and named in the answer's degraded ("shard-2"). The bound: call_timeout_s on
    # the vector side; on the keyword side 0.9 x path_timeout_s, so the other shards' hits are
    # merged before path_timeout_s cuts the whole side. Needs a bus whose log topics have
    # partitions (Kafka, memory://). 0 = unsharded: one processor of each topic holds everything.
    shards: Annotated[int, msgspec.Meta(ge=0)] = 0
    # The documents log, whose partition of a document's records says which shard holds it.
    log_topic: str = t.DOCUMENTS_LOG

    def __post_init__(self) -> None:
        if self.path_timeout_s > self.call_timeout_s:
            raise ValueError(f"path_timeout_s={self.path_timeout_s} exceeds call_timeout_s={self.call_timeout_s}")
