"""The wheel installs one import package, ragbus, which an application's own config/ and schema/ never shadow.

The wheel is built from this checkout and installed, without its dependencies, into a fresh venv that
reads them from the test session's site-packages (a path, so the session's editable install of ragbus,
an import hook its .pth file starts, is not seen). An application directory with packages of its own
named config and schema then imports ragbus's client, its own packages, and runs ``ragbus --help``.
"""

from __future__ import annotations

import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel of this checkout installed: its python."""
    work = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--wheel-dir", str(work / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    venv.create(work / "venv", with_pip=False)
    python = work / "venv" / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies, from this session's site-packages: a path line (its .pth files are not read).
    Path(target, "session-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next((work / "dist").glob("ragbus-*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return python


@pytest.fixture
def application(tmp_path) -> Path:
    """A directory with an application's own config and schema packages."""
    for name in ("config", "schema"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"WHOSE = 'the application {name}'\n")
    return tmp_path


def test_an_application_with_its_own_config_and_schema_imports_ragbus(installed, application):
    code = ("import config, schema, ragbus\n"
            "from ragbus import DocumentRagClient, connect\n"
            "from ragbus.config.settings import load_settings\n"
            "from ragbus.schema import DocumentRagRequest\n"
            "print(config.WHOSE, '|', schema.WHOSE, '|', ragbus.__file__, '|', load_settings(environ={}).bus.url)\n")
    done = subprocess.run([str(installed), "-c", code], cwd=application, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    own_config, own_schema, where, bus = (part.strip() for part in done.stdout.split("|"))
    assert (own_config, own_schema) == ("the application config", "the application schema")
    assert "site-packages" in where and str(ROOT) not in where  # the wheel's, not the checkout's
    assert bus == "memory://"


def test_the_command_runs_from_the_application_directory(installed, application):
    ragbus = installed.parent / "ragbus"
    done = subprocess.run([str(ragbus), "--help"], cwd=application, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: ragbus" in done.stdout


def test_the_wheel_holds_no_top_level_package_but_ragbus(installed, application):
    found = subprocess.run([str(installed), "-c", "import importlib.metadata as m; "
                            "print(sorted({f.parts[0] for f in m.files('ragbus') if f.suffix == '.py'}))"],
                           cwd=application, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "['ragbus']"
