"""What the Helm chart must know of the processors, written from the code so that it cannot drift.

    python -m scripts.chart_wiring [--check]

The chart (config/deploy/chart) names the consumer groups and topics each role's workers join: its
ScaledObjects scale a role on them. It reads them from ``files/wiring.json``, which this writes from
``config/pipelines.py`` ``ROLES`` (each role with its stores on the log, as the chart runs every role,
and the query role of a sharded deployment), the wiring of ``config/defaults.toml`` (each
``[processors.NAME]`` section's topic, group and bulk topic), and from ``config/bus.py`` Pulsar's
tenant and namespace and the partitions Kafka's log topics are made with. The chart lays the deployment's settings
over that wiring as ``config/settings.py`` ``lanes`` does. ``--check`` exits 1 when the file is not
what this would write (tests/deploy runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.bus import KafkaOptions, PulsarOptions
from ragbus.config.settings import DEFAULTS, WIRING

WIRING_FILE = Path(__file__).resolve().parents[1] / "config" / "deploy" / "chart" / "files" / "wiring.json"


def wiring() -> dict:
    """The roles' processors (stores on the log; the query role's also sharded), each processor's wiring,
    Pulsar's tenant and namespace, and the log topics' partitions on Kafka."""
    sections = tomllib.loads(DEFAULTS.read_text())["processors"]
    pulsar = PulsarOptions()
    return {
        "generated": "by python -m scripts.chart_wiring from config/pipelines.py ROLES (stores on the log), "
                     "config/defaults.toml and config/bus.py; do not edit",
        "roles": {name: list(pipelines.role(name, log=True)) for name in sorted(pipelines.ROLES)},
        # The query role with [stores] shards (query.shards): the same list whatever the number.
        "sharded_roles": {"query": list(pipelines.role("query", log=True, shards=1))},
        "processors": {
            name: {key: value for key, value in section.items() if key in WIRING and key != "class"}
            for name, section in sorted(sections.items())
        },
        "pulsar": {"tenant": pulsar.tenant, "namespace": pulsar.namespace},
        # [bus.kafka] changelog_topics.partitions: with query.shards the chart makes it a multiple of the shards.
        "kafka": {"changelog_partitions": KafkaOptions().changelog_topics.partitions},
    }


def text() -> str:
    return json.dumps(wiring(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    args = parser.parse_args(argv)
    if args.check:
        if not WIRING_FILE.exists() or WIRING_FILE.read_text() != text():
            print(f"{WIRING_FILE} is not current: run python -m scripts.chart_wiring", file=sys.stderr)
            return 1
        return 0
    WIRING_FILE.write_text(text())
    print(f"wrote {WIRING_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
