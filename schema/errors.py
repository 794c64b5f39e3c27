"""What a caller of ragbus catches: one root, each error saying whether trying again may help.

``RagbusError`` is the root of what ragbus raises to its callers: the bus's errors, the request
client's, a processor's error answer (``RemoteError``). ``retriable``: the same call, later, may
succeed (a broker down, no worker yet, a replica catching up); false: it fails the same way until the
call or the settings change. The tree, drawn: docs/errors.md.
"""

from __future__ import annotations


class RagbusError(Exception):
    retriable: bool = False  # set by each class; an error answer's (RemoteError) by its type


# The error types on the wire (``Error.type`` of an answer) that a later try may get past: the handler ran
# out of time, or what it needs is not there yet (``Unavailable`` and its retriable kinds: a replica
# behind a write the request must see).
RETRIABLE_TYPES = frozenset({"Timeout", "Unavailable", "NotYetApplied"})
