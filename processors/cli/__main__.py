"""`python -m ragbus.cli`: the same as the `ragbus` command."""

from .main import run

run()
