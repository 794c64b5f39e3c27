"""Run the test brokers in the foreground for manual use (``ragbus brokers``)."""

from __future__ import annotations

import signal
import threading

from . import brokers


def serve_brokers(which: list[str]) -> int:
    workdir = brokers.make_workdir()
    started = []
    try:
        for name in which:
            factory = brokers.tansu if name == "kafka" else brokers.pulsar_lite
            broker = factory(workdir).start()
            started.append(broker)
            print(f"{broker.name}: {broker.url}  (log: {broker.log_path})", flush=True)
        print("Ctrl-C to stop. Example: RAGBUS_BUS__URL=" + started[0].url + " ragbus check", flush=True)
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
    finally:
        for broker in started:
            broker.stop()
    return 0
