"""The Apache brokers' jars: fetched once by Maven from the poms in ``config/brokers``, kept in a cache.

Each pom pins its broker's version (``<name>.version``) and names only the broker and a logging
backend; ``install`` runs ``mvn dependency:copy-dependencies`` into a directory named for that
version under the cache (``RAGBUS_BROKER_JARS``, else ``~/.cache/ragbus/brokers``), so a second
install is a check, and a changed pin installs beside the old one. Maven keeps what it downloaded
in its own ``~/.m2``: reinstalling after the cache is gone downloads nothing.

Nothing here runs at test time: a missing install is an error that says what to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from ragbus import config

from .errors import BrokerStartError

POMS = Path(config.__file__).parent / "brokers"
BROKERS = ("kafka", "pulsar")
_COMPLETE = "complete"  # written last: a directory without it is an interrupted install
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom(name: str) -> Path:
    return POMS / name / "pom.xml"


def pinned_version(name: str) -> str:
    """The broker version ``config/brokers/<name>/pom.xml`` pins (its ``<name>.version`` property)."""
    found = ET.parse(pom(name)).getroot().find(f"m:properties/m:{name}.version", _NS)
    version = (found.text or "").strip() if found is not None else ""
    if not version:
        raise BrokerStartError(f"{pom(name)} pins no {name}.version")
    return version


def cache_root() -> Path:
    return Path(os.environ.get("RAGBUS_BROKER_JARS") or Path.home() / ".cache" / "ragbus" / "brokers")


def _home(name: str) -> Path:
    return cache_root() / f"{name}-{pinned_version(name)}"


def lib_dir(name: str) -> Path:
    """The directory of the installed broker's jars; ``BrokerStartError`` saying what to run when absent."""
    home = _home(name)
    if not (home / _COMPLETE).exists():
        raise BrokerStartError(
            f"Apache {name.capitalize()} {pinned_version(name)} is not installed in {home.parent}: run "
            f"`ragbus brokers --install {name}` (Maven fetches its jars from Maven Central, once), or use the "
            f"light test broker (`ragbus brokers --light`)")
    return home / "lib"


def classpath(name: str) -> str:
    return str(lib_dir(name) / "*")


def installed(name: str) -> bool:
    try:
        lib_dir(name)
    except BrokerStartError:
        return False
    return True


def install(name: str, *, log=print) -> Path:
    """The broker's jars in the cache, fetched by Maven unless they are there already."""
    if installed(name):
        log(f"Apache {name.capitalize()} {pinned_version(name)}: installed in {_home(name)}")
        return lib_dir(name)
    mvn = shutil.which("mvn")
    java = shutil.which("java")
    if mvn is None or java is None:
        missing = " and ".join(tool for tool, path in (("mvn", mvn), ("java", java)) if path is None)
        raise BrokerStartError(f"installing Apache {name.capitalize()} needs Maven and Java 17+ ({missing} not "
                               f"found on PATH); without them, `ragbus brokers --light` runs the light test brokers")
    home = _home(name)
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    log(f"Apache {name.capitalize()} {pinned_version(name)}: fetching its jars with Maven into {home} ...")
    done = subprocess.run(
        [mvn, "-B", "-q", "-f", str(pom(name)), "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={partial / 'lib'}"],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise BrokerStartError(f"Maven could not fetch Apache {name.capitalize()} (exit {done.returncode}):\n{tail}")
    (partial / _COMPLETE).write_text(pinned_version(name) + "\n")
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)
    jars = len(list((home / "lib").glob("*.jar")))
    log(f"Apache {name.capitalize()} {pinned_version(name)}: {jars} jars in {home / 'lib'}")
    return home / "lib"
