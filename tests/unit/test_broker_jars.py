"""The Apache brokers' jars: the version each pom pins, where they are kept, and an install that is all or nothing.

Maven itself is replaced by a script on PATH here (no network in tests): what is tested is ragbus's
side, that a failed or interrupted fetch leaves no half-installed broker and a finished one is found.
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from ragbus.testing import jars
from ragbus.testing.errors import BrokerStartError

# Stands in for `mvn ... -DoutputDirectory=DIR`: writes two jars into DIR, or fails as told.
FAKE_MVN = """#!{python}
import os, sys
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory="))
if os.environ.get("FAKE_MVN_FAIL"):
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "half.jar"), "w").close()
    print("[ERROR] Could not resolve dependencies", file=sys.stderr)
    sys.exit(1)
os.makedirs(out, exist_ok=True)
for name in ("kafka_2.13.jar", "kafka-clients.jar"):
    open(os.path.join(out, name), "w").close()
"""


@pytest.fixture
def fake_maven(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(python=sys.executable))
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "java").symlink_to(mvn)  # only looked up, never run
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RAGBUS_BROKER_JARS", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", jars.BROKERS)
def test_each_pom_pins_the_version_its_cache_directory_is_named_for(name, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBUS_BROKER_JARS", str(tmp_path))
    version = jars.pinned_version(name)
    assert version[0].isdigit() and version in jars.pom(name).read_text()
    with pytest.raises(BrokerStartError, match=rf"Apache {name.capitalize()} {version} is not installed in "):
        jars.lib_dir(name)


def test_an_install_is_found_afterwards_and_a_second_one_fetches_nothing(fake_maven, monkeypatch):
    said: list[str] = []
    lib = jars.install("kafka", log=said.append)
    assert lib == jars.lib_dir("kafka") and lib.parent == fake_maven / f"kafka-{jars.pinned_version('kafka')}"
    assert sorted(p.name for p in lib.iterdir()) == ["kafka-clients.jar", "kafka_2.13.jar"]
    assert said[-1].endswith(f"2 jars in {lib}")
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")  # Maven would fail now: it must not be run at all
    assert jars.install("kafka", log=said.append) == lib
    assert said[-1] == f"Apache Kafka {jars.pinned_version('kafka')}: installed in {lib.parent}"


def test_a_failed_fetch_leaves_nothing_installed_and_says_what_maven_said(fake_maven, monkeypatch):
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    with pytest.raises(BrokerStartError, match=r"(?s)Maven could not fetch Apache Kafka \(exit 1\).*Could not resolve"):
        jars.install("kafka", log=lambda line: None)
    assert not jars.installed("kafka")
    assert list(fake_maven.iterdir()) == []  # not even the partial directory


def test_an_interrupted_install_is_not_taken_for_an_installed_one(fake_maven):
    home = fake_maven / f"kafka-{jars.pinned_version('kafka')}"
    (home / "lib").mkdir(parents=True)  # jars copied, the marker never written
    (home / "lib" / "kafka_2.13.jar").write_text("")
    assert not jars.installed("kafka")
    jars.install("kafka", log=lambda line: None)
    assert jars.installed("kafka") and sorted(p.name for p in (home / "lib").iterdir()) == [
        "kafka-clients.jar", "kafka_2.13.jar"]
