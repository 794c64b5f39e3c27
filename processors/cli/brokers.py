"""``ragbus brokers [kafka] [pulsar] [--light] [--install]``: test brokers on loopback until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from ragbus.testing import jars
from ragbus.testing.errors import BrokerStartError
from ragbus.testing.serve import PACKAGES, missing_jars, missing_packages, serve_brokers


def _broker(name: str) -> str:
    """A bus name of ``PACKAGES``. Not argparse's ``choices``: with ``nargs="*"`` Python 3.11 checks the
    default list itself against them, so a bare ``ragbus brokers`` was refused."""
    if name not in PACKAGES:
        raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(map(repr, PACKAGES))})")
    return name


def _install(which: list[str]) -> int:
    try:
        for name in dict.fromkeys(which):
            jars.install(name, log=lambda line: print(line, flush=True))
    except BrokerStartError as exc:
        print(f"ragbus: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _brokers(args: argparse.Namespace) -> int:
    if args.install:
        return _install(args.which)
    if args.light:
        missing = missing_packages(args.which)
        if missing:
            for problem in missing:
                print(f"ragbus: error: {problem}", file=sys.stderr)
            packages = " ".join(PACKAGES[name][1] for name in dict.fromkeys(args.which)
                                if any(PACKAGES[name][1] in m for m in missing))
            print(f"ragbus: to install: pip install {packages}", file=sys.stderr)
            return 2
    else:
        missing = missing_jars(args.which)
        if missing:
            for problem in missing:
                print(f"ragbus: error: {problem}", file=sys.stderr)
            return 2
    try:
        return serve_brokers(args.which, light=args.light)
    except BrokerStartError as exc:  # installed, but it would not start: its log says why
        print(f"ragbus: error: {exc}", file=sys.stderr)
        return 2


def add_parsers(sub) -> None:
    light = ", ".join(f"{broker} for {name} (pip install {package})" for name, (broker, package) in PACKAGES.items())
    p = sub.add_parser(
        "brokers", help="run Apache Kafka and Apache Pulsar test brokers on loopback until Ctrl-C",
        description="Run one-node Apache Kafka (KRaft) and Apache Pulsar (standalone) brokers on free loopback "
                    "ports until Ctrl-C, everything they write in a temporary directory. Their jars come from "
                    f"Maven Central once, with --install. --light runs the light brokers instead: {light}.")
    p.add_argument("which", nargs="*", type=_broker, default=list(PACKAGES),
                   help="kafka, pulsar, or both (the default)")
    p.add_argument("--install", action="store_true",
                   help="fetch the Apache brokers' jars with Maven (needs mvn and Java 17+) into ragbus's cache, "
                        "then exit; quick when they are there already")
    p.add_argument("--light", action="store_true",
                   help="run Tansu and Pulsar Lite from their PyPI packages (no Java); they need the settings "
                        "printed at start")
    p.set_defaults(run=_brokers, sync=True)
