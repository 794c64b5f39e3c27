"""A real headless Chromium (Debian's ``chromium``) driven by Playwright, and where its screenshots go.

Playwright's own browser download is never used: the launch names the machine's executable. The
flags keep Chromium off the network (no component updates, sync or background fetches) so that the
only connections a page makes are its own, to the loopback gateway under test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ragbus.testing.brokers import in_ci

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions"]


def chromium() -> str:
    """The path of the machine's Chromium; fails in CI when it is missing, else skips."""
    path = os.environ.get("RAGBUS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium is not installed (Debian's chromium package; .ci/run installs it)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def screenshots(name: str) -> Path:
    """The directory of one test module's screenshots: ``$RAGBUS_ARTIFACTS/<name>`` (CI keeps it), by default
    ``artifacts/<name>`` in the checkout."""
    directory = Path(os.environ.get("RAGBUS_ARTIFACTS") or ROOT / "artifacts") / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory
