"""Peer retrievers on the same chunks and the same embedder: LangChain and LlamaIndex.

Optional extras of the benchmark (``pip install -e '.[eval]'``), never
runtime dependencies: every import happens inside the builder, and a
library that is missing or fails to build is reported, not fatal.

Both peers get exactly the chunks the pipeline stored (ids and texts, as
fetch-chunk returned them, without titles or other metadata in the text)
and the chunk vectors of the project's embedder (``OnnxBackend``:
all-MiniLM-L6-v2 int8), computed once and shared, and embed each question
with that same backend through a small adapter. Every retriever is asked
for ``k`` results per component and cut to ``k`` after fusion.

- ``langchain-ensemble``: ``EnsembleRetriever`` over LangChain's
  ``BM25Retriever`` (rank_bm25, its default whitespace tokeniser) and a
  ``FAISS`` vector store retriever, equal weights (RRF, c = 60);
- ``llamaindex-fusion``: ``QueryFusionRetriever`` in ``reciprocal_rerank``
  mode over a ``VectorStoreIndex`` retriever and the ``BM25Retriever`` of
  ``llama-index-retrievers-bm25`` (bm25s, English stemming and stopwords),
  one query (no LLM query generation), equal weights;
- each library's two components alone (``-bm25``, ``-vector``), to show
  where a fused result comes from.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Retriever = Callable[[str], list[str]]  # question -> chunk ids, best first


@dataclass(frozen=True, slots=True)
class Corpus:
    ids: list[str]
    texts: list[str]
    vectors: np.ndarray  # one unit row per chunk, in ``ids`` order
    embed_one: Callable[[str], list[float]]  # the same embedder, for a question
    embed_many: Callable[[list[str]], list[list[float]]]


def langchain(corpus: Corpus, k: int) -> dict[str, Retriever]:
    warnings.filterwarnings("ignore", module="langchain_community")
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    try:  # LangChain 1.x moved the classic retrievers out of the langchain package
        from langchain_classic.retrievers import EnsembleRetriever
    except ImportError:
        from langchain.retrievers import EnsembleRetriever

    class MiniLM(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return corpus.embed_many(list(texts))

        def embed_query(self, text: str) -> list[float]:
            return corpus.embed_one(text)

    docs = [Document(page_content=t, metadata={"chunk_id": i}) for i, t in zip(corpus.ids, corpus.texts, strict=True)]
    bm25 = BM25Retriever.from_documents(docs, k=k)
    store = FAISS.from_embeddings(
        list(zip(corpus.texts, corpus.vectors.tolist(), strict=True)), MiniLM(),
        metadatas=[d.metadata for d in docs], ids=list(corpus.ids),
    )
    vector = store.as_retriever(search_kwargs={"k": k})
    ensemble = EnsembleRetriever(retrievers=[bm25, vector], weights=[0.5, 0.5])

    def ids_of(retriever) -> Retriever:
        return lambda question: [d.metadata["chunk_id"] for d in retriever.invoke(question)][:k]

    return {"langchain-ensemble": ids_of(ensemble), "langchain-bm25": ids_of(bm25), "langchain-vector": ids_of(vector)}


def llamaindex(corpus: Corpus, k: int) -> dict[str, Retriever]:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    class MiniLM(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return corpus.embed_one(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return corpus.embed_one(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return corpus.embed_one(text)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return corpus.embed_many(texts)

    nodes = [
        TextNode(id_=i, text=t, embedding=v)
        for i, t, v in zip(corpus.ids, corpus.texts, corpus.vectors.tolist(), strict=True)
    ]
    index = VectorStoreIndex(nodes, embed_model=MiniLM(model_name="all-MiniLM-L6-v2-onnx-int8"))
    vector = index.as_retriever(similarity_top_k=k)
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs its index build at DEBUG
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=k)
    fusion = QueryFusionRetriever(
        [vector, bm25], mode="reciprocal_rerank", similarity_top_k=k, num_queries=1, use_async=False,
        llm=MockLLM(), verbose=False,
    )

    def ids_of(retriever) -> Retriever:
        return lambda question: [n.node.node_id for n in retriever.retrieve(question)][:k]

    return {"llamaindex-fusion": ids_of(fusion), "llamaindex-bm25": ids_of(bm25), "llamaindex-vector": ids_of(vector)}


BUILDERS: dict[str, Callable[[Corpus, int], dict[str, Retriever]]] = {"langchain": langchain, "llamaindex": llamaindex}


def build(corpus: Corpus, k: int, libraries: Sequence[str] = tuple(BUILDERS)) -> tuple[dict[str, Retriever], list[str]]:
    """The retrievers of every library that builds, and a line per library that did not (with why)."""
    retrievers: dict[str, Retriever] = {}
    problems = []
    for name in libraries:
        try:
            retrievers.update(BUILDERS[name](corpus, k))
        except Exception as exc:  # ImportError, or the library failing on its own terms
            problems.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
    return retrievers, problems
