"""`python -m processors.cli`: the same as the `ragbus` command."""

from .main import run

run()
