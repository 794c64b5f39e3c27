"""API keys and what each may do: a role (read, ingest, admin) over some collections or all.

Where keys come from, all added together:

- ``[gateway] api_keys`` and ``RAGBUS_API_KEYS`` (comma-separated): each entry ``KEY`` (admin,
  every collection, as before roles existed) or ``KEY=ROLE@COLLECTION+COLLECTION`` (``@*``:
  every collection), e.g. ``RAGBUS_API_KEYS="sk-ops, sk-team=read@handbook+faq"``;
- ``[gateway] keys_file``: a TOML file of ``[[keys]]`` tables with ``key``, ``role`` and
  ``collections``, for keys an operator keeps apart from the settings.

Roles, each including the one before: ``read`` asks, searches, reads the graph and lists
documents; ``ingest`` also adds and deletes documents; ``admin`` is every role, and an admin of
every collection (``*``) also sees the pipeline's status (``GET /v1/status``). A key for
collection A never reads, writes or lists B: a route or tool that names B answers 403, and
the list of collections shows only those the key may read. ``GET /v1/key`` tells a key its
role and collections, so a client (the page) offers only what the key may do.

Checked the same way by REST, chat and MCP: the gateway's guard finds the request's key and
puts it on the ASGI scope (``scope["state"][KEY_STATE]``); each route and tool asks
``allows(scope, role, collection)``. With no key configured there is nothing to check: every
request may do everything (and ``ragbus serve`` binds loopback only, unless ``--insecure``).
"""

from __future__ import annotations

import hmac
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, cast

import msgspec

ROLES = ("read", "ingest", "admin")
Role = Literal["read", "ingest", "admin"]
EVERY = "*"
KEY_STATE = "ragbus.key"


class ApiKey(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    key: str
    role: Role = "admin"
    collections: tuple[str, ...] = (EVERY,)

    def may(self, role: Role, collection: str | None = None) -> bool:
        """Whether this key has ``role`` (or a higher one) on ``collection`` (None: on some collection)."""
        if ROLES.index(self.role) < ROLES.index(role):
            return False
        return collection is None or EVERY in self.collections or collection in self.collections

    def shown(self, collections: Iterable[str]) -> list[str]:
        return [c for c in collections if self.may("read", c)]


class BadKey(ValueError):
    """A key entry that does not parse: the message says which and why."""


def parse_entry(entry: str) -> ApiKey:
    """``KEY`` or ``KEY=ROLE@C1+C2`` (``@*`` every collection)."""
    key, mark, scope = entry.strip().partition("=")
    key = key.strip()
    if not key:
        raise BadKey(f"an API key entry {entry[:40]!r} has no key")
    if not mark:
        return ApiKey(key=key)
    role, at, names = scope.partition("@")
    role = role.strip()
    if role not in ROLES or not at or not names.strip():
        raise BadKey(f"API key entry for {key[:4]}...: {scope[:80]!r} is not ROLE@COLLECTION[+COLLECTION...] "
                        f"with ROLE one of {', '.join(ROLES)}")
    return ApiKey(key=key, role=cast(Role, role), collections=tuple(n.strip() for n in names.split("+") if n.strip()))


def from_file(path: str | Path) -> list[ApiKey]:
    """The ``[[keys]]`` of a TOML file; a clear error for a file that is not one."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadKey(f"keys file {path}: {exc}") from None
    try:
        return msgspec.convert(data.get("keys", []), list[ApiKey])
    except msgspec.ValidationError as exc:
        raise BadKey(f"keys file {path}: {exc} (each [[keys]] has key, role and collections)") from None


def gather(entries: Iterable[str], keys_file: str = "") -> list[ApiKey]:
    """Every configured key: the entries (settings and environment), then the file's; a key named twice
    keeps its first scope."""
    found = [parse_entry(e) for e in entries if e.strip()]
    if keys_file:
        found += from_file(keys_file)
    unique: dict[str, ApiKey] = {}
    for k in found:
        unique.setdefault(k.key, k)
    return list(unique.values())


def match(keys: list[ApiKey], given: bytes) -> ApiKey | None:
    """The key ``given`` is, compared in constant time against each."""
    found = None
    for k in keys:
        if hmac.compare_digest(given, k.key.encode()):
            found = k
    return found


def key_of(scope: Mapping[str, Any]) -> ApiKey | None:
    """The request's key, as the guard found it; None when no keys are configured."""
    state = scope.get("state") or {}
    return state.get(KEY_STATE)


def allows(scope: Mapping[str, Any], role: Role, collection: str | None = None) -> bool:
    key = key_of(scope)
    return key is None or key.may(role, collection)
