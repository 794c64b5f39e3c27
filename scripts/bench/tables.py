"""The before/after table: one row per figure, one column per tree, and after/before when there are two."""

from __future__ import annotations


def print_comparison(results: dict[str, dict[str, float]], *, digits: int = 2, ratio: bool = False) -> None:
    """``results`` maps a column's name to its figures; every column has the first column's rows."""
    names = list(results)
    with_ratio = ratio and len(names) == 2
    print(f"{'':38s}" + "".join(f"{n:>24s}" for n in names) + ("   after/before" if with_ratio else ""))
    for row in next(iter(results.values())):
        values = [results[n][row] for n in names]
        share = f"   {values[1] / values[0]:.2f}x" if with_ratio and values[0] else ""
        print(f"{row:38s}" + "".join(f"{v:>24.{digits}f}" for v in values) + share)
