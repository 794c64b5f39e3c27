"""``ContextRetriever``: graph retrieval and a reasoned answer in-process, without a bus.

For library users who want the kg path as a function call: give it a graph
(anything with ``retrieve(query, **kwargs) -> list[RetrievedContext]``, by
default an empty in-memory ``GraphStore``) and ask.

Time scoping. With ``at_time``, contexts go through ``TemporalGraphRetriever``
(``temporal.py``). On top of that, as this facade's own policy, a context
that had relationships and lost all of them to the time filter is left out:
its text states a fact that was not valid then, and a stale fact must not
reach the prompt. A context that never had relationships is kept.

The prompt, built by ``build_prompt``: a short instruction, the question, then,
only when ``at_time`` is given, a header from the template (default
``Graph context valid as of {at_time} (source: {source})``, filled with the
UTC ISO time and ``KnowledgeGraph snapshot``), then ``Retrieved Context:``
with each context's content numbered, then ``Reasoning Paths:`` when there
are any. Without ``at_time`` nothing about time is in it: the prompt is the
same bytes as when ``at_time`` is never mentioned, whatever the template.
User text (question, contents, template) is inserted as it is, never
through ``str.format``.

Reasoning paths: the entities the question names (linked against the
contexts' entity names) joined, pair by pair, by a shortest chain of the kept
relationships, rendered ``A -[rel]-> B <-[rel]- C`` (an arrow follows the
relationship's direction; a path may walk one backwards). Pairs go in link
order, at most ``MAX_REASONING_PATHS`` paths of at most ``MAX_PATH_HOPS``
hops each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, Protocol

import networkx as nx

from ragbus.schema.times import Instant

from .linking import link_entities
from .temporal import (
    DEFAULT_HEADER_TEMPLATE,
    RetrievedContext,
    Retriever,
    TemporalGraphRetriever,
    render_header,
)
from .triples import check_k

__all__ = ["MAX_PATH_HOPS", "MAX_REASONING_PATHS", "ContextRetriever", "build_prompt", "reasoning_paths"]

MAX_REASONING_PATHS = 8
MAX_PATH_HOPS = 4

INSTRUCTIONS = (
    "Answer the question using the retrieved knowledge-graph context below. "
    "Follow the reasoning paths where they help; if the context does not answer the question, say so."
)


class LLM(Protocol):
    def generate(self, prompt: str) -> Any: ...


def _key(item: dict[str, Any], *names: str) -> str | None:
    for name in names:
        if item.get(name) is not None:
            return str(item[name])
    return None


def reasoning_paths(
    query: str, contexts: Iterable[RetrievedContext], *, limit: int = MAX_REASONING_PATHS, max_hops: int = MAX_PATH_HOPS
) -> list[str]:
    """Shortest relationship chains between the entities ``query`` names, rendered (module docstring)."""
    labels: dict[str, str] = {}
    hops: dict[frozenset[str], set[tuple[str, str, str]]] = {}
    for context in contexts:
        for entity in getattr(context, "related_entities", None) or ():
            key = _key(entity, "id", "name")
            if key is not None:
                labels.setdefault(key, str(entity.get("name") or key))
        for rel in getattr(context, "related_relationships", None) or ():
            source, target = _key(rel, "source", "source_id"), _key(rel, "target", "target_id")
            if source is None or target is None or source == target:
                continue
            relation = str(rel.get("type") or "related_to")
            hops.setdefault(frozenset((source, target)), set()).add((source, relation, target))
    graph = nx.Graph()
    for pair in sorted(hops, key=sorted):
        graph.add_edge(*sorted(pair), hops=hops[pair])

    keys_by_label: dict[str, list[str]] = {}
    for key in sorted(graph.nodes):
        keys_by_label.setdefault(labels.get(key, key), []).append(key)
    linked = [key for name in link_entities(query, keys_by_label) for key in keys_by_label[name]]

    paths: list[str] = []
    for i, a in enumerate(linked):
        for b in linked[i + 1 :]:
            if len(paths) >= limit:
                return paths
            if not nx.has_path(graph, a, b):
                continue
            path = nx.shortest_path(graph, a, b)
            if len(path) - 1 <= max_hops:
                paths.append(_render(graph, path, labels))
    return paths


def _render(graph: nx.Graph, path: Sequence[str], labels: dict[str, str]) -> str:
    text = labels.get(path[0], path[0])
    for u, v in pairwise(path):
        hops = graph.edges[u, v]["hops"]
        forward = sorted(rel for s, rel, t in hops if (s, t) == (u, v))
        if forward:
            text += f" -[{'|'.join(forward)}]-> "
        else:
            text += f" <-[{'|'.join(sorted(rel for _, rel, _ in hops))}]- "
        text += labels.get(v, v)
    return text


def build_prompt(
    query: str,
    contexts: Sequence[RetrievedContext],
    reasoning_paths: Sequence[str] = (),
    *,
    at_time: Instant | None = None,
    header_template: str | None = None,
) -> str:
    """The one prompt ``query_with_reasoning`` sends (module docstring)."""
    lines = [INSTRUCTIONS, "", f"Question: {query}", ""]
    if at_time is not None:
        template = DEFAULT_HEADER_TEMPLATE if header_template is None else header_template
        header = render_header(template, at_time)
        if header.strip():
            lines += [header, ""]
    lines.append("Retrieved Context:")
    lines += [f"[{n}] {getattr(c, 'content', '')}" for n, c in enumerate(contexts, 1)] or ["(none)"]
    if reasoning_paths:
        lines += ["", "Reasoning Paths:", *(f"- {path}" for path in reasoning_paths)]
    lines += ["", "Answer:"]
    return "\n".join(lines)


class ContextRetriever:
    """Graph retrieval, optionally time-scoped, and one LLM call over what was found."""

    def __init__(self, graph: Retriever | None = None, *, k: int = 8) -> None:
        self.k = check_k(k)
        if graph is None:
            # Imported here: users with a graph of their own never load the store.
            from .store import GraphStore

            graph = GraphStore()
        self.graph = graph

    def retrieve(
        self, query: str, *, at_time: Instant | None = None, k: int | None = None, **kwargs: Any
    ) -> list[RetrievedContext]:
        """The graph's contexts for ``query``, at most ``k``; scoped to ``at_time`` when given."""
        k = self.k if k is None else check_k(k)
        if at_time is None:
            return list(self.graph.retrieve(query, k=k, **kwargs))
        scoped = TemporalGraphRetriever(self.graph).retrieve_scoped(query, at_time, k=k, **kwargs)
        return [
            kept
            for kept, base in zip(scoped.contexts, scoped.base, strict=True)
            if kept.related_relationships or not getattr(base, "related_relationships", None)
        ]

    def query_with_reasoning(
        self,
        query: str,
        llm: LLM,
        *,
        at_time: Instant | None = None,
        header_template: str | None = None,
        k: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Retrieve for ``query`` (time-scoped when ``at_time`` is given) and return ``llm``'s answer."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if header_template is not None and not isinstance(header_template, str):
            raise TypeError(f"header_template must be a str, got {type(header_template).__name__}")
        contexts = self.retrieve(query, at_time=at_time, k=k, **kwargs)
        paths = reasoning_paths(query, contexts)
        return self._generate_reasoned_response(
            query, contexts, paths, llm, at_time=at_time, header_template=header_template
        )

    def _generate_reasoned_response(
        self,
        query: str,
        contexts: Sequence[RetrievedContext],
        reasoning_paths: Sequence[str],
        llm: LLM,
        *,
        at_time: Instant | None = None,
        header_template: str | None = None,
    ) -> Any:
        """Build the prompt and call ``llm.generate`` with it, exactly once."""
        prompt = build_prompt(query, contexts, reasoning_paths, at_time=at_time, header_template=header_template)
        return llm.generate(prompt)
