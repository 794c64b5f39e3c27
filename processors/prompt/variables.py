"""What a request must send for its template, and how each value is written into the prompt.

The built-in variables, which the orchestrator sends:

- ``query`` (text): the question;
- ``documents`` (list): chunk texts, written one a line after their
  citation: ``[doc#3] text`` with ``document_ids``, else ``[1]``, ``[2]``...;
- ``document_ids`` (list, optional): the citation of each document, parallel to ``documents``;
- ``facts`` (list, optional): citable fact fragments, written ``[fact: ...]``
  one a line, after the snapshot header line when ``at_time`` is given;
- ``at_time`` (text, optional): the time the graph's facts are valid at;
- ``snapshot_header`` (text, optional): that header line ready-made; used only with ``at_time``;
- ``history`` (list): the conversation before ``query``, one ``user: ...`` or ``assistant: ...``
  line each, oldest first (``condense-question``).

``extract-concepts`` may use only ``query``; ``condense-question`` ``query`` and
``history``, and needs both; ``document-prompt`` any of the others and needs
``query`` and ``documents``. A template of your own may use
these names and those listed in the ``template_variables`` setting; every
placeholder of it that is not optional above is required. A variable the
template does not use is ignored, so one caller can serve several templates.

List items are written one a line, so a line break inside an item becomes a
space: a prompt reader (person or model) can tell where each item ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .templates import Template

EXTRACT_CONCEPTS = "extract-concepts"
DOCUMENT_PROMPT = "document-prompt"
CONDENSE_QUESTION = "condense-question"

TEXT_VARIABLES = frozenset({"query", "at_time", "snapshot_header"})
LIST_VARIABLES = frozenset({"documents", "document_ids", "facts", "history"})
BUILTIN_VARIABLES = TEXT_VARIABLES | LIST_VARIABLES - {"history"}
OPTIONAL = frozenset({"document_ids", "facts", "at_time", "snapshot_header"})

# The built-in templates: the names each may use, and those a request must send even
# when the template text does not use them (the extractive backend reads them).
ALLOWED: dict[str, frozenset[str]] = {EXTRACT_CONCEPTS: frozenset({"query"}), DOCUMENT_PROMPT: BUILTIN_VARIABLES,
                                      CONDENSE_QUESTION: frozenset({"query", "history"})}
REQUIRED: dict[str, frozenset[str]] = {
    EXTRACT_CONCEPTS: frozenset({"query"}),
    DOCUMENT_PROMPT: frozenset({"query", "documents"}),
    CONDENSE_QUESTION: frozenset({"query", "history"}),
}

NONE_LINE = "(none)"


class VariablesError(ValueError):
    """The variables do not fit the template: the caller's mistake, answered and never retried."""


def snapshot_header_line(at_time: str) -> str:
    return f"Graph context valid as of {at_time} (KnowledgeGraph snapshot)"


def one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class PromptInput:
    """A request's variables, checked: what the backends read besides the rendered prompt."""

    query: str
    documents: tuple[str, ...]
    citations: tuple[str, ...]  # of each document: "[doc#3]" or "[1]"
    facts: tuple[str, ...]
    header: str | None  # the line before the facts; None without at_time
    raw: Mapping[str, str | list[str]]

    def values(self, names: Iterable[str]) -> dict[str, str]:
        """The text each placeholder of ``names`` is replaced by."""
        return {name: self._value(name) for name in names}

    def _value(self, name: str) -> str:
        if name == "documents":
            lines = [f"{c} {one_line(d)}" for c, d in zip(self.citations, self.documents, strict=True)]
            return "\n".join(lines) or NONE_LINE
        if name == "facts":
            lines = [f"[fact: {one_line(f)}]" for f in self.facts] or [NONE_LINE]
            return "\n".join(([self.header] if self.header else []) + lines)
        if name == "snapshot_header":
            return self.header or ""
        value = self.raw.get(name, "")
        if isinstance(value, list):
            return "\n".join(one_line(item) for item in value)
        return value


def check(template: Template, variables: Mapping[str, str | list[str]]) -> PromptInput:
    """The request's variables as a ``PromptInput``; ``VariablesError`` says what is missing or wrong."""
    tid = template.template_id
    required = REQUIRED.get(tid, frozenset()) | (template.placeholders - OPTIONAL)
    missing = sorted(required - variables.keys())
    if missing:
        given = ", ".join(sorted(variables)) or "none"
        raise VariablesError(f"template {tid!r} needs variable(s) {', '.join(missing)}; the request sent: {given}")
    for name, value in variables.items():
        if name in TEXT_VARIABLES and not isinstance(value, str):
            raise VariablesError(f"variable {name!r} must be a text, not a list")
        if name in LIST_VARIABLES and not isinstance(value, list):
            raise VariablesError(f"variable {name!r} must be a list of texts, not a text")
    if "query" in required and not str(variables["query"]).strip():
        raise VariablesError("variable 'query' is blank; send the question")
    documents = tuple(variables.get("documents", ()))
    ids = variables.get("document_ids")
    if ids is None:
        citations = tuple(f"[{i}]" for i in range(1, len(documents) + 1))
    elif len(ids) != len(documents):
        raise VariablesError(f"{len(ids)} document_ids for {len(documents)} documents; send one id per document")
    else:
        citations = tuple(f"[{one_line(i)}]" for i in ids)
    at_time = variables.get("at_time")
    header = None
    if at_time is not None:
        header = one_line(str(variables.get("snapshot_header") or "")) or snapshot_header_line(one_line(str(at_time)))
    return PromptInput(
        query=str(variables.get("query", "")),
        documents=documents,
        citations=citations,
        facts=tuple(variables.get("facts", ())),
        header=header,
        raw=variables,
    )


def allowed_names(extra: Iterable[str]) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """The placeholder names of each built-in template, and those any other template may use."""
    return ALLOWED, BUILTIN_VARIABLES | frozenset(extra)
