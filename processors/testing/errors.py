"""The error a test broker raises when it cannot be installed or started; its message says why."""

from __future__ import annotations


class BrokerStartError(RuntimeError):
    pass
