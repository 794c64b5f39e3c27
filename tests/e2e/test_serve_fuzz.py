"""schemathesis against the OpenAPI document a running ``ragbus serve`` serves: no input it generates,
valid or not, gets a 5xx (or a traceback). The server is the real command, on the memory bus."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from ragbus.testing.gateway import GatewayProcess

from ..helpers.serve_stores import stores


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_API_KEYS": ""}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("fuzz") / "serve.log") as g:
        yield g


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_gets_a_server_error(served, mode):
    # The cases are drawn with hypothesis directly: schemathesis' own pytest plugin does not run under
    # this pytest (9), so its loader and strategies are used without it.
    api = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 12  # every route but /openapi.json itself (and the page, which is no API)
    checked: list[str] = []
    for operation in operations:
        try:
            _fuzz(operation, mode, served.url, checked)
        except Unsatisfiable:  # negative mode, an operation with no input to make invalid (GET /health)
            assert mode == GenerationMode.NEGATIVE and operation.method.upper() == "GET"
    no_input = {"GET /v1/collections", "GET /v1/status", "GET /v1/key"}  # nothing to make invalid in negative mode
    fuzzed = {"POST /v1/ask", "POST /v1/chat/completions", "POST /v1/documents", "GET /v1/kg/query",
              "GET /v1/documents"} | (no_input if mode == GenerationMode.POSITIVE else set())
    assert fuzzed <= set(checked)


def _fuzz(operation, mode, url: str, checked: list[str]) -> None:
    """Sends the generated cases of one operation; each operation gets its own hypothesis test."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case):
        response = case.call(base_url=url, timeout=60)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
        assert "Traceback" not in response.text
        if response.status_code >= 400:
            assert response.json()["error"]["message"]  # every refusal is the JSON error body
        checked.append(operation.label)

    check()
