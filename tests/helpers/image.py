"""The container image (config/deploy) for tests: built by config/deploy/build-image, run by podman with
the project's settings (config/deploy/podman), and read file by file from ``podman export``."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragbus.testing.brokers import in_ci

DEPLOY = Path(__file__).resolve().parents[2] / "config" / "deploy"
# The image's data dir (RAGBUS_DATA_DIR in config/deploy/Containerfile), where a test mounts a volume.
DATA_DIR = "/var/lib/ragbus/data"
# The README's question, asked of the image's embedded default.
QUESTION = "What does the with statement do?"
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.S)


def need_podman() -> None:
    """Fails in CI when podman is missing (.ci/run installs it), else skips."""
    if shutil.which("podman") is None:
        message = "podman is not installed (Debian's podman and runc; .ci/run installs them)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``podman ARGS`` with the project's containers.conf; a failure shows podman's own words."""
    done = subprocess.run([str(DEPLOY / "podman"), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def build_image(timeout: float) -> str:
    """The image of this checkout, as config/deploy/build-image names it on its last line (warm: seconds)."""
    done = subprocess.run([str(DEPLOY / "build-image")], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"config/deploy/build-image exited with {done.returncode}:\n{done.stderr[-5000:]}")
    return done.stdout.strip().splitlines()[-1]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def state(name: str) -> dict[str, str]:
    """A container's ``Running`` and ``ExitCode``, as podman inspect prints them."""
    out = podman("inspect", name, "--format", "{{.State.Running}} {{.State.ExitCode}}").stdout.split()
    return {"Running": out[0], "ExitCode": out[1]}


def wait_ready(url: str, name: str, timeout: float) -> None:
    """Until ``url``/ready says 200; a container that stopped meanwhile fails at once, with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state(name)["Running"] != "true":
            raise AssertionError(f"container {name} stopped: {podman('logs', name, check=False).stderr[-3000:]}")
        try:
            if httpx.get(f"{url}/ready", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # the gateway offers no readiness event but its HTTP answer
    raise AssertionError(f"{name} not ready within {timeout:g}s: {podman('logs', name, check=False).stderr[-3000:]}")


def exported_files(image: str) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """Every entry of the image's file system (``podman export`` of a container made from it, never
    started), with the contents of regular files."""
    name = unique("ragbus-test-export")
    podman("create", "--name", name, image, "true")
    try:
        proc = subprocess.Popen([str(DEPLOY / "podman"), "export", name], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        with proc.stdout, tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                reader = tar.extractfile(member) if member.isreg() else None
                yield member, reader.read() if reader is not None else None
        assert proc.wait(timeout=60) == 0
    finally:
        podman("rm", "--force", name, check=False)


def certificates(pem: bytes) -> dict[bytes, bytes]:
    """The certificates in a PEM text, DER by PEM body (its base64 lines, as written)."""
    return {base64.b64decode(b"".join(body.split())): body for body in PEM.findall(pem)}


def host_ca_bundle(tmp_path: Path) -> Path:
    """The CA bundle build-image gives the build as a secret (config/deploy/host_pip.py says which)."""
    done = subprocess.run([sys.executable, str(DEPLOY / "host_pip.py"), str(tmp_path / "pip.conf")],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def debian_certificates(root: Path = Path("/usr/share/ca-certificates")) -> set[bytes]:
    """The certificates Debian's ca-certificates ships on this host (none elsewhere), DER."""
    found: set[bytes] = set()
    if root.is_dir():
        for path in root.rglob("*.crt"):
            found.update(certificates(path.read_bytes()))
    return found
