"""Where the repository is, for the scripts that run a tree's files or write beside them."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
