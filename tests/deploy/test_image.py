"""The container image (config/deploy): it answers as the README's ``ragbus ask`` does, serves the gateway,
runs as a user of its own under an init that passes SIGTERM on, and holds no build tools, tests, llama.cpp
or the build's secrets."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from ..helpers.image import (
    QUESTION,
    certificates,
    debian_certificates,
    exported_files,
    host_ca_bundle,
    podman,
    state,
    unique,
)

# The first test waits for the image (cached in CI: seconds) and for the first use's ingestion (a minute).
pytestmark = pytest.mark.timeout(900)

# What each extra the image was built with (its io.ragbus.extras label) lets it import.
EXTRA_MODULES = {
    "serve": ["uvicorn", "starlette", "httptools", "multipart", "mcp"],
    "documents": ["docx", "pptx", "trafilatura"],
    "otel": ["opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"],
}


def run(image: str, *command: str) -> str:
    """A command's output in a container of the image with no network."""
    return podman("run", "--rm", "--network", "none", image, *command).stdout


def test_ask_answers_from_the_default_corpus_with_citations(first_ask):
    assert first_ask.returncode == 0, first_ask.stderr[-3000:]
    answer, _, sources = first_ask.stdout.partition("Sources:")
    assert re.search(r"\[pydoc:with#\d+\]", answer), first_ask.stdout
    assert "[pydoc:with#" in sources
    # Filled in the container, from what the image holds (it had no network): the corpus and the model.
    assert "first use: ingesting the Python language reference" in first_ask.stderr


def test_gateway_is_ready_and_answers(gateway):
    assert httpx.get(f"{gateway.url}/ready", timeout=30).status_code == 200
    response = httpx.post(f"{gateway.url}/v1/ask", json={"question": QUESTION, "mode": "hybrid"}, timeout=120)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["error"] is None
    assert any(cited.startswith("pydoc:with#") for cited in body["cited"]), body["cited"]
    assert f"[{body['cited'][0]}]" in body["answer"]


def test_sigterm_stops_the_gateway_at_once(gateway):
    # podman stop sends SIGTERM and, 60 s later, SIGKILL (exit code 137): ended by the first, the gateway
    # stopped serving and exited on its own (0, or 143 when uvicorn re-raises the signal it caught).
    podman("stop", "--time", "60", gateway.name, timeout=180)
    assert state(gateway.name)["ExitCode"] in {"0", "143"}, podman("logs", gateway.name).stderr[-3000:]


def test_the_init_passes_sigterm_on(image):
    # A process with no SIGTERM handler of its own: as PID 1 it would never see the signal (the kernel drops
    # it), and podman would kill it after 60 s (137). Under the image's init it ends by the signal (143).
    name = unique("ragbus-test-sleeper")
    podman("run", "--detach", "--name", name, "--network", "none", image,
           "python", "-c", "import time; print('up', flush=True); time.sleep(600)")
    try:
        deadline = time.monotonic() + 120
        while "up" not in podman("logs", name).stdout:
            assert time.monotonic() < deadline, "the sleeper never started"
            time.sleep(0.1)  # podman logs offers no event for a first line
        podman("stop", "--time", "60", name, timeout=180)
        assert state(name)["ExitCode"] == "143"
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def test_runs_as_a_user_of_its_own_under_an_init(image):
    uid, gid, pid1 = run(image, "sh", "-c", "id -u; id -g; tr '\\0' ' ' </proc/1/cmdline").splitlines()
    assert uid != "0" and gid != "0"
    assert pid1.split()[0] == "/usr/bin/tini"
    # By number in the image's config too, as a pod's runAsNonRoot wants it.
    assert podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "10001:10001"


def test_no_compiler_pytest_llama_cpp_or_pip(image):
    assert run(image, "sh", "-c", "for t in gcc cc c++ g++ clang make ld; do command -v $t; done; true") == ""
    found = run(image, "python", "-c", "import importlib.util as u; "
                "print([m for m in ('pytest', '_pytest', 'llama_cpp', 'pip', 'tests') if u.find_spec(m)])")
    assert found.strip() == "[]"


def test_it_installs_one_import_package_ragbus(image):
    """No top-level config, schema or processors beside it, which an application's own would clash with."""
    found = run(image, "python", "-c", "import importlib.util as u; "
                "print([m for m in ('config', 'schema', 'processors') if u.find_spec(m)], "
                "[m for m in ('ragbus', 'ragbus.config', 'ragbus.schema', 'ragbus.cli') if u.find_spec(m)])")
    assert found.strip() == "[] ['ragbus', 'ragbus.config', 'ragbus.schema', 'ragbus.cli']"


def test_the_extras_it_was_built_with_import(image):
    extras = podman("image", "inspect", "--format", '{{index .Labels "io.ragbus.extras"}}', image).stdout.strip()
    modules = [m for extra in extras.split(",") for m in EXTRA_MODULES.get(extra, [])]
    assert "uvicorn" in modules  # the gateway's, at least
    assert run(image, "python", "-c", f"import {', '.join(modules)}") == ""


def test_it_reads_a_scanned_page_with_debians_tesseract(image, tmp_path):
    from PIL import Image, ImageDraw

    lines = ["The Heron flies for twenty-two minutes", "on one charge in calm weather, and",
             "never above one hundred and twenty metres.", "Charge its battery for ninety minutes"]
    page = Image.new("L", (1700, 1000), 255)
    for i, line in enumerate(lines):  # lines enough for Tesseract to find which way up the page is
        ImageDraw.Draw(page).text((80, 120 + i * 150), line, fill=0, font_size=60)
    page.rotate(90, expand=True, fillcolor=255).save(tmp_path / "scan.png", dpi=(200, 200))
    tmp_path.chmod(0o755)
    (tmp_path / "scan.png").chmod(0o644)
    text = podman("run", "--rm", "--network", "none", "-v", f"{tmp_path}:/scans:ro,Z", image, "python", "-c",
                  "from pathlib import Path; from ragbus.ingestion.convert import convert; "
                  "print(''.join(p for p in convert(Path('/scans/scan.png')).read() if isinstance(p, str)))").stdout
    assert "The Heron flies for twenty-two minutes on one charge" in " ".join(text.split())


def test_no_file_holds_the_build_secrets_or_tests(image, tmp_path):
    """The CA bundle and pip.conf the build mounted: no file at their mount points, and no certificate this
    host added to its bundle (the one pip needed, not Debian's) anywhere in the image."""
    debian = debian_certificates()
    added = {der: body for der, body in certificates(host_ca_bundle(tmp_path).read_bytes()).items()
             if der not in debian}
    needles = [der for der in added] + [body.split()[len(body.split()) // 2] for body in added.values()]
    leaks, secrets, tests = [], [], []
    for member, data in exported_files(image):
        path = member.name.lstrip("./")
        if path.startswith("run/secrets/") and not member.isdir():
            secrets.append(path)
        if "/tests/" in f"/{path}" or path.endswith("conftest.py"):
            tests.append(path)
        if data is not None and any(needle in data for needle in needles):
            leaks.append(path)
    assert secrets == [] and leaks == [], (secrets, leaks)
    assert tests == [], tests[:20]
