"""The ragbus command: questions answered from documents and a knowledge graph, over a message bus."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from ragbus.config.settings import load_settings
from ragbus.bus import BusError
from ragbus.runtime.typed_clients import RemoteError

from . import (
    ask,
    brokers,
    check,
    dlq,
    ingest,
    kg,
    library,
    mcp_stdio,
    publish_log,
    records,
    serve,
    status,
    topics,
    worker,
)
from .common import describe, text, utf8

# In the order `ragbus --help` lists them.
COMMANDS = (check, worker, ingest, library, ask, serve, mcp_stdio, kg, records, status, dlq, topics, publish_log,
            brokers)


class _Parser(argparse.ArgumentParser):
    """Refuses a bad argument in one line, as the command refuses a bad request: ``ragbus: error: ...``.

    argparse's own error prints the whole usage first; a user who typed ``--at yesterday``
    needs the line that says what is wrong, and where to read more. Subcommand parsers are
    made by ``add_subparsers`` with the class of their parent, so they all answer this way.

    Every argument goes through ``common.text`` before its own type: one that is not UTF-8
    is refused naming the argument, whichever subcommand declared it.
    """

    def add_argument(self, *args, **kwargs):
        if callable(kwargs.get("type")):
            kwargs["type"] = utf8(kwargs["type"])
        action = super().add_argument(*args, **kwargs)
        if action.type is None and action.nargs != 0:  # it takes a value, kept as the text given
            action.type = text
        return action

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"ragbus: error: {message} (see '{self.prog} --help')\n")


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (it reads metadata)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("ragbus")
        except PackageNotFoundError:  # run from a checkout that was never installed
            shown = "unknown (not installed)"
        print(f"ragbus {shown}")  # on stdout, as argparse's own version action prints
        parser.exit(0)


class _Completion(argparse.Action):
    """``--print-completion SHELL``: a completion script made by shtab from this very parser (imported only then).

    Static, so completing costs the shell nothing: ``ragbus --print-completion bash > ~/.local/share/
    bash-completion/completions/ragbus`` (zsh: a ``_ragbus`` file in a directory on ``$fpath``).
    """

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        import shtab

        print(shtab.complete(parser, values))  # values: the shell
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ragbus", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    parser.add_argument("--print-completion", action=_Completion, choices=("bash", "zsh", "tcsh"), metavar="SHELL",
                        help="print a shell completion script (bash, zsh or tcsh) and exit")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parsers(sub)
    return parser


LONG_RUNNING = ("worker", "serve", "mcp")  # commands that run until stopped: their logs are an operator's


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose and args.command not in LONG_RUNNING:
        # A one-shot command's Kafka clients log each request they retry (a new topic's partition
        # whose leader is not in place yet, a broker restarting), some at ERROR; a retry either
        # succeeds or ends in an error the command reports itself. Workers and the gateway keep them.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if not getattr(args, "run", None):  # bare `ragbus`: what it can do, not a bus self-check
        parser.print_help()
        return 0
    try:
        load_settings()  # fail early on a bad RAGBUS_* variable or config file
        if getattr(args, "sync", False):
            return args.run(args)
        return asyncio.run(args.run(args))
    except BrokenPipeError:
        raise  # the reader went away: ``run`` ends quietly
    except (BusError, RemoteError, ValueError, OSError) as exc:  # SettingsError is a ValueError
        print(f"ragbus: error: {describe(exc, args, _bus_url(args))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _bus_url(args: argparse.Namespace) -> str:
    """The bus the command used, for its error text; "" if the settings cannot say (their error is shown)."""
    try:
        return getattr(args, "bus", None) or load_settings(getattr(args, "config", None)).bus.url
    except (ValueError, OSError):
        return ""


def run() -> None:
    """Console entry point.

    Ends the process with ``os._exit`` once the command is done and its
    output flushed: pulsar-client's C++ threads can abort the interpreter's
    own shutdown ("terminate called without an active exception") after all
    work is done. The bus's own close no longer leaves them a Python callback
    (``PulsarBus._close``, tests/conformance/test_pulsar_exit.py); a Python
    logger in the core at DEBUG still would (pulsar-client-python #256).

    A reader that closed the pipe (``ragbus ask ... | head``) ends the command quietly, with
    exit status 1, as Python's documentation recommends for SIGPIPE (its note on SIGPIPE):
    what is left to print goes to ``/dev/null``, so no flush fails again on the way out.
    """
    try:
        try:
            code = main()
        except SystemExit as exc:  # argparse: --help, --version, a refused argument; a command's refusal
            if isinstance(exc.code, str):  # as the interpreter would have said it, had it ended the process
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            os.dup2(devnull, stream.fileno())
        code = 1
    logging.shutdown()
    try:
        sys.stderr.flush()
    except BrokenPipeError:  # stderr went to the closed pipe too (``2>&1 | head``)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    os._exit(code)

