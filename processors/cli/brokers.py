"""``ragbus brokers [kafka] [pulsar]``: the test brokers on loopback until Ctrl-C."""

from __future__ import annotations

import argparse

from processors.testing.serve import serve_brokers


def _brokers(args: argparse.Namespace) -> int:
    return serve_brokers(args.which)


def add_parsers(sub) -> None:
    p = sub.add_parser("brokers", help="run the Kafka (Tansu) and Pulsar (Pulsar Lite) test brokers until Ctrl-C")
    p.add_argument("which", nargs="*", choices=["kafka", "pulsar"], default=["kafka", "pulsar"])
    p.set_defaults(run=_brokers, sync=True)
