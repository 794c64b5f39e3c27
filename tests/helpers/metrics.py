"""Reading a Prometheus metric's current value in a test."""

from __future__ import annotations


def counter(c, *labels) -> float:
    return c.labels(*labels)._value.get()
