"""Run the test brokers in the foreground for manual use (``ragbus brokers``).

Everything the brokers wrote (logs, Pulsar Lite's data) lives in one
temporary directory that goes when they do: on Ctrl-C, SIGTERM or SIGHUP,
also when one arrives while a broker is still starting. Each broker is
stopped before the directory is removed.
"""

from __future__ import annotations

import signal
import threading

from . import brokers

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def serve_brokers(which: list[str]) -> int:
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in STOP_SIGNALS}
    try:
        with brokers.temporary_workdir() as workdir:
            started: list[brokers.BrokerProcess] = []
            try:  # a Ctrl-C anywhere in here (starting, printing, waiting) is a normal stop
                for name in which:
                    if done.is_set():
                        break
                    factory = brokers.tansu if name == "kafka" else brokers.pulsar_lite
                    broker = factory(workdir)
                    started.append(broker)  # before start: a Ctrl-C while it starts still stops it
                    broker.start()
                    print(f"{broker.name}: {broker.url}  (log: {broker.log_path}, removed on exit)", flush=True)
                if started and not done.is_set():
                    # What these brokers need and a real cluster does not (brokers.TEST_BROKER_ENV).
                    settings = " ".join(f"{k}={v}" for k, v in brokers.TEST_BROKER_ENV.items())
                    print(f"Test-broker settings for ragbus processes: export {settings}", flush=True)
                    print("Ctrl-C to stop. Example: RAGBUS_BUS__URL=" + started[0].url + " ragbus check", flush=True)
                done.wait()
            except KeyboardInterrupt:
                pass
            finally:
                for broker in started:
                    broker.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
