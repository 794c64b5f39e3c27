"""The bounds of numeric settings, named once so every settings module says them the same way.

msgspec checks an ``Annotated`` constraint when settings are read (``load_settings``,
``processor_settings``), so an out-of-range value is an error naming its key rather than a
worker that hangs or spins (``concurrency = 0`` once waited forever). ``tests/unit/test_bounds.py``
walks every settings field and fails on a number without a lower bound.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

# A count of things that must happen at least once: concurrency, attempts, sizes, limits.
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
# A count where 0 is meaningful: "none", "off" or "no extra".
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
# A duration that must pass before something can happen: a time-out, an interval.
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
# A duration where 0 means "at once" or "never wait".
NonNegativeSeconds = Annotated[float, msgspec.Meta(ge=0)]
# Milliseconds, the unit Kafka's and Pulsar's own options use.
PositiveMillis = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeMillis = Annotated[int, msgspec.Meta(ge=0)]
# A TCP port to listen on; 0 = off (MetricsSettings.port).
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
# Tesseract's language codes, several joined by "+" ("eng+deu"): one pattern for ``[convert] language`` and the
# language a document-convert request carries, since it reaches Tesseract's command line.
LANGUAGE_PATTERN = r"[a-z][a-z_]{1,15}(\+[a-z][a-z_]{1,15}){0,7}"
