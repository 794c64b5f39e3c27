"""What every subcommand shares: its bus and config options, the types of its arguments, and the
processors it starts on memory://.

The argument types refuse a value out of range where it is read, with a message saying what
was expected: a mistake costs the user one line (``ragbus: error: ...``, exit status 2), not a
started pipeline that fails, or waits forever, later. Their bounds are those of the request
fields the values become (``schema/``), so the command line and the processors agree.

Every argument is text first: Python hands a byte that is not UTF-8 over as a lone surrogate
(``surrogateescape``), which no message can carry, so ``text`` refuses it, naming the byte;
the command's parser checks every argument with it (``utf8``), typed or not.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
from collections.abc import Callable, Iterable

import msgspec

from ragbus.config.settings import ClientSettings, Settings
from ragbus.bus import Bus
from ragbus.runtime.request_client import NotServed, RequestClient, RequestTimeout
from ragbus.runtime.worker import processors_running
from ragbus.schema import check_collection
from ragbus.schema.times import TimeError, parse_instant

BUS_HELP = "bus URL (default: RAGBUS_BUS__URL or memory://)"
CONFIG_HELP = "settings file laid over config/defaults.toml (default: RAGBUS_CONFIG)"


def add_bus_options(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    """``--bus`` and, for commands that read processor settings, ``--config``."""
    parser.add_argument("--bus", help=BUS_HELP)
    if config:
        parser.add_argument("--config", help=CONFIG_HELP)


def embedded_processors(settings: Settings, names: Iterable[str], url: str):
    """On ``memory://`` the bus lives in this process, so must the processors a command needs.

    They stop without draining (``drain_timeout_s`` 0): the bus goes with the command, so an answer
    finished after it left the block reaches nobody. A command leaves it once it has every answer
    it waits for, or on Ctrl-C, which then ends at once, not after a handler's last embedding.
    """
    if not url.startswith("memory"):
        return contextlib.nullcontext()
    names = list(names)
    sections = {name: {**settings.processors.get(name, {}), "drain_timeout_s": 0} for name in names}
    undrained = msgspec.structs.replace(settings, processors={**settings.processors, **sections})
    return processors_running(undrained, names, url)


def warn_if_private(command: str, url: str) -> None:
    """One line on stderr when ``url`` is memory://: it lives inside this one process, so what other
    processes publish, consume or hold is not there. The default bus is memory://, so a user who forgot
    --bus would otherwise read an empty table (or "0 message(s)") with no hint why."""
    if url.startswith("memory:"):
        print(
            f"ragbus {command}: warning: {url} is a bus private to this process, so nothing another process "
            "published, consumed or holds is seen here; name the shared bus with --bus (kafka://HOST:PORT, "
            "pulsar://HOST:PORT) or RAGBUS_BUS__URL",
            file=sys.stderr,
            flush=True,
        )


def text(value: str) -> str:
    """``value`` if it is text that UTF-8 can carry, else ``ArgumentTypeError`` naming its first byte that is not."""
    bad = next((i for i, c in enumerate(value) if "\udc80" <= c <= "\udcff"), None)
    if bad is None:
        return value
    raw = os.fsencode(value)
    shown = raw if len(raw) <= 60 else raw[:57] + b"..."
    raise argparse.ArgumentTypeError(
        f"is not UTF-8 text: byte 0x{ord(value[bad]) - 0xDC00:02x} at character {bad + 1} of {shown!r}"
    )


def utf8(kind: Callable[[str], object]) -> Callable[[str], object]:
    """``kind`` of an argument that ``text`` has checked first (the name argparse shows stays ``kind``'s)."""
    if getattr(kind, "checks_text", False):
        return kind

    @functools.wraps(kind)
    def convert(value: str):
        return kind(text(value))

    convert.checks_text = True  # type: ignore[attr-defined]
    return convert


def _bounded(kind: type, least: float, *, strict: bool, what: str) -> Callable[[str], int | float]:
    """An argparse type: ``kind`` of ``text``, refused below ``least`` (or at it, when ``strict``)."""
    relation = "above" if strict else "of at least"
    expected = f"must be {what} {relation} {least:g}"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or (isinstance(value, float) and not math.isfinite(value)) or \
                value < least or (strict and value == least):
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
        return value

    convert.__name__ = f"{what} {relation} {least:g}"
    return convert


positive_int = _bounded(int, 1, strict=False, what="an integer")
non_negative_int = _bounded(int, 0, strict=False, what="an integer")
positive_seconds = _bounded(float, 0, strict=True, what="a number of seconds")
positive_float = _bounded(float, 0, strict=True, what="a number")


def instant(text: str) -> str:
    """A time as ``ragbus.schema.times`` reads it (ISO 8601); the text goes on unchanged, the processor
    normalises it."""
    try:
        parse_instant(text)
    except TimeError:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise argparse.ArgumentTypeError(f"{shown!r} is not an ISO 8601 date or datetime (e.g. 2020-01-01)") from None
    return text


def question(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the question is empty")
    return text


def collection(text: str) -> str:
    try:
        return check_collection(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_collection_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--collection", type=collection, default="default", help="collection (default: default)")


def add_timeout_option(parser: argparse.ArgumentParser, waits_for: str, setting: str) -> None:
    """``--timeout S``: how long the command waits for ``waits_for``; by default the ``[client]`` ``setting``."""
    default = getattr(ClientSettings(), setting)
    parser.add_argument("--timeout", type=positive_seconds, metavar="S",
                        help=f"seconds to wait for {waits_for} (default: [client] {setting}, {default:g})")
    parser.set_defaults(timeout_setting=setting)


def command_client(bus: Bus, settings: Settings, name: str, **options) -> RequestClient:
    """A command's request client: it asks the bus whether anyone serves a topic it waits on.

    So ``ragbus ask --bus kafka://...`` with no worker running ends in seconds, naming
    the topic, instead of after its whole time-out (``[client] served_check_s``).
    """
    return RequestClient(bus, name=name, served_check_s=settings.client.served_check_s, **options)


def call_timeout(args: argparse.Namespace, settings: Settings) -> float:
    """``--timeout`` if given, else the setting its command named in ``add_timeout_option``."""
    return args.timeout or getattr(settings.client, args.timeout_setting)


def describe(exc: BaseException, args: argparse.Namespace, url: str) -> str:
    """What the user reads of ``exc``: a time-out on ``memory://`` says the wait was too short.

    The request client asks whether a worker serves the topic, which is the question on a
    broker; on the embedded bus every processor runs in this very process, so a time-out means
    the work needed longer than it was given: the text names the option (or setting) and its value.
    """
    if not isinstance(exc, RequestTimeout) or isinstance(exc, NotServed) or not url.startswith("memory"):
        return str(exc)
    setting = getattr(args, "timeout_setting", None)
    if getattr(args, "timeout", None):
        given = f"--timeout {args.timeout:g}"
    elif setting:
        given = f"[client] {setting} = {exc.timeout:g} (RAGBUS_CLIENT__{setting.upper()})"
    else:
        given = f"the time-out of {exc.timeout:g}s"
    more = " (raise --timeout)" if setting else ""
    return (f"no response on {exc.topic!r} within {exc.timeout:g}s: {given} was too short for the work; "
            f"on {url} every processor runs in this process, so none is missing{more}")
