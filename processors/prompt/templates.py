"""Prompt templates: plain text files with ``{name}`` placeholders, filled by plain substitution.

A template is ``<templates_dir>/<template-id>.txt`` (UTF-8). It is parsed
once, when the processor starts, into literal text and placeholders, so:

- a value is pasted in as it is and never looked at again: a question
  containing ``{query}`` or ``{0.__class__}`` stays those characters
  (``str.format`` on user data would expand or evaluate them);
- a placeholder that no caller fills (a typo such as ``{qeury}``) stops the
  processor from starting, instead of failing every request;
- ``{{`` and ``}}`` are a literal brace; any other lone brace is an error,
  so a JSON example pasted into a template is noticed rather than half-filled.

Which names a template may use, and which of them a request must send:
``variables.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ragbus import config

DEFAULT_DIR = Path(config.__file__).with_name("templates")
SUFFIX = ".txt"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}\n]*)\}|[{}]")


class TemplateError(ValueError):
    """A template file that cannot be used: unreadable, malformed, or naming an unknown placeholder."""


class UnknownTemplate(LookupError):
    """A request for a template id that is not loaded."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: ``parts`` alternate literal text (even indexes) and placeholder names (odd)."""

    template_id: str
    parts: tuple[str, ...]

    @property
    def placeholders(self) -> frozenset[str]:
        return frozenset(self.parts[1::2])

    def render(self, values: Mapping[str, str]) -> str:
        """The text with every placeholder replaced by its value; KeyError names a missing one."""
        out = list(self.parts)
        for i in range(1, len(out), 2):
            out[i] = values[out[i]]
        return "".join(out)


def parse(template_id: str, text: str, allowed: Iterable[str] | None = None) -> Template:
    """Split ``text`` into literals and placeholders; ``allowed`` (None = any name) bounds the names."""
    allowed = None if allowed is None else frozenset(allowed)
    parts: list[str] = []
    literal: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        literal.append(text[pos : m.start()])
        pos = m.end()
        token = m.group()
        if token in ("{{", "}}"):
            literal.append(token[0])
            continue
        name = m.group(1)
        where = f"template {template_id!r}, line {text.count(chr(10), 0, m.start()) + 1}"
        if name is None:
            raise TemplateError(f"{where}: a lone {token!r}; write {token * 2!r} for a literal brace")
        if not _NAME.fullmatch(name):
            raise TemplateError(f"{where}: {token!r} is not a placeholder (a name of letters, digits and _)")
        if allowed is not None and name not in allowed:
            raise TemplateError(f"{where}: unknown placeholder {token!r}; known: {', '.join(sorted(allowed))}")
        parts.append("".join(literal))
        parts.append(name)
        literal = []
    literal.append(text[pos:])
    parts.append("".join(literal))
    return Template(template_id, tuple(parts))


def load_dir(
    directory: Path, allowed_for: Mapping[str, Iterable[str]], default_allowed: Iterable[str]
) -> dict[str, Template]:
    """Every ``*.txt`` template of ``directory``, by id (the file name without ``.txt``).

    ``allowed_for[template_id]`` bounds the placeholders of that template;
    any other template may use ``default_allowed``.
    """
    if not directory.is_dir():
        raise TemplateError(f"templates directory {directory} does not exist")
    templates: dict[str, Template] = {}
    for path in sorted(directory.glob("*" + SUFFIX)):
        template_id = path.name[: -len(SUFFIX)]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TemplateError(f"cannot read template {path}: {exc}") from None
        templates[template_id] = parse(template_id, text, allowed_for.get(template_id, default_allowed))
    if not templates:
        raise TemplateError(f"templates directory {directory} has no *{SUFFIX} file")
    return templates


def lookup(templates: Mapping[str, Template], template_id: str) -> Template:
    try:
        return templates[template_id]
    except KeyError:
        shown = template_id if len(template_id) <= 100 else template_id[:100] + "…"
        raise UnknownTemplate(f"unknown template {shown!r}; known: {', '.join(sorted(templates))}") from None
