"""Percentiles, computed one way for every benchmark so their p50s and p99s compare.

numpy's default (linear interpolation between the closest ranks, the same as
``statistics.quantiles(method="inclusive")``): it is defined for a single sample and for any q,
where ``statistics.quantiles`` needs two samples and a whole number of cut points.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (q from 0 to 100) of ``values``."""
    samples = np.fromiter(values, dtype=float)
    if samples.size == 0:
        raise ValueError("a percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    return float(np.percentile(samples, q))
