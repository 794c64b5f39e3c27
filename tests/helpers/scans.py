"""Tesseract for the tests that read scans: Debian's tesseract-ocr (with its English data), which ``.ci/run``
installs; missing, a test fails in CI and is skipped elsewhere, as LibreOffice is (``documents_made.soffice``)."""

from __future__ import annotations

import os
import shutil

import pytest


def tesseract() -> str:
    found = shutil.which("tesseract")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("Tesseract is missing: .ci/run installs tesseract-ocr and tesseract-ocr-eng")
        pytest.skip("Tesseract is not installed: apt-get install tesseract-ocr tesseract-ocr-eng")
    return found
