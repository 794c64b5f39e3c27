"""What this host's pip trusts and where it looks, for the image build's pip (config/deploy/build-image).

``python host_pip.py PIP_CONF`` writes the host pip's settings for reaching its index (index URLs,
trusted hosts, proxy, timeouts; nothing naming a path of this host) as a pip.conf, and prints the path
of the CA bundle it trusts. Both go to the build as secrets; tests/deploy looks for that bundle's
certificates in the image. Run with the python whose pip is meant (``PYTHON`` in build-image).
"""

from __future__ import annotations

import ast
import os
import ssl
import subprocess
import sys

# How to reach the index. Anything else (this host's paths, where to install) stays on the host.
KEEP = {"index-url", "extra-index-url", "trusted-host", "find-links", "no-index", "proxy", "timeout",
        "default-timeout", "retries"}


def pip_settings() -> tuple[dict[tuple[str, str], str], str | None]:
    """``(settings by (section, key), cert)`` from ``pip config list``; the environment wins, as in pip."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if done.returncode != 0:  # no pip here: pip's own defaults in the build
        print(f"host_pip: {sys.executable} -m pip config list failed: {done.stderr.strip()}", file=sys.stderr)
    listed = done.stdout.splitlines() if done.returncode == 0 else []
    settings: dict[tuple[str, str], str] = {}
    cert = None
    for line in sorted(listed, key=lambda line: line.startswith(":env:")):  # files first, then PIP_*
        name, _, quoted = line.partition("=")
        section, _, key = name.partition(".")
        section = "global" if section == ":env:" else section
        value = str(ast.literal_eval(quoted))
        if key == "cert":
            cert = value
        elif key == "find-links":  # a folder of this host's is not there in the build
            urls = [link for link in value.split() if "://" in link and not link.startswith("file:")]
            if len(urls) < len(value.split()):
                print(f"host_pip: the image build does not see this host's find-links {value!r}", file=sys.stderr)
            if urls:
                settings[section, key] = " ".join(urls)
        elif key in KEEP:
            settings[section, key] = value
    return settings, cert


def ca_bundle(cert: str | None) -> str:
    """The file pip verifies the index with: its ``cert``, else what requests and OpenSSL are told to use."""
    paths = ssl.get_default_verify_paths()
    found = (cert or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
             or paths.cafile or paths.openssl_cafile)
    if not found or not os.path.isfile(found):
        raise SystemExit(f"host_pip: no CA bundle found for the image build's pip (looked for {found!r}); set PIP_CERT")
    return os.path.realpath(found)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} PIP_CONF", file=sys.stderr)
        return 2
    settings, cert = pip_settings()
    with open(argv[1], "w") as out:
        for section in sorted({section for section, _ in settings}):
            out.write(f"[{section}]\n")
            out.writelines(f"{key} = {value}\n" for (s, key), value in settings.items() if s == section)
    print(ca_bundle(cert))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
