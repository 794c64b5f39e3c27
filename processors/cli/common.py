"""What every subcommand shares: its bus and config options, and the processors it starts on memory://."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterable

from config.settings import Settings
from processors.runtime.worker import processors_running

BUS_HELP = "bus URL (default: RAGBUS_BUS__URL or memory://)"
CONFIG_HELP = "settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)"


def add_bus_options(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    """``--bus`` and, for commands that read processor settings, ``--config``."""
    parser.add_argument("--bus", help=BUS_HELP)
    if config:
        parser.add_argument("--config", help=CONFIG_HELP)


def embedded_processors(settings: Settings, names: Iterable[str], url: str):
    """On ``memory://`` the bus lives in this process, so must the processors a command needs."""
    if url.startswith("memory"):
        return processors_running(settings, list(names), url)
    return contextlib.nullcontext()
