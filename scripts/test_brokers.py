#!/usr/bin/env python3
"""Start the Kafka (Tansu) and Pulsar (Pulsar Lite) test brokers on free loopback ports.

    python scripts/test_brokers.py            # both, until Ctrl-C
    python scripts/test_brokers.py pulsar     # just one

The same launcher the test session uses (processors/testing/brokers.py).
"""

import sys

from processors.testing.serve import serve_brokers

if __name__ == "__main__":
    sys.exit(serve_brokers(sys.argv[1:] or ["kafka", "pulsar"]))
