"""One switch per role: ``ragbus worker --role`` (or ``[worker] role``) and ``[stores] log``.

A host's processors come from its role alone, and one setting puts every store of a deployment on
the log, where before a query host needed ``changelog = true`` in a dozen sections and a list of
names copied out of config/pipelines.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragbus.config import pipelines
from ragbus.config.settings import StoreSettings, load_settings, processor_settings
from ragbus.runtime.worker import processor_class


def changelog_of(environ: dict[str, str]) -> dict[str, bool]:
    settings = load_settings(environ=environ)
    found = {}
    for name, section in settings.processors.items():
        cls = processor_class(section["class"])
        if issubclass(cls.Settings, StoreSettings):
            found[name] = processor_settings(settings, name, cls.Settings).changelog
    return found


def test_stores_log_puts_every_store_processor_on_the_log_unless_its_own_section_says():
    assert set(changelog_of({}).values()) == {False}
    on = changelog_of({"RAGBUS_STORES__LOG": "true"})
    assert set(on) >= {"doc-embeddings-store", "doc-embeddings-delete", "keyword-store", "keyword-delete",
                       "document-record", "kg-store", "kg-query", "keyword-query", "doc-embeddings-query",
                       "fetch-chunk", "documents-query", "documents-replica"}
    assert set(on.values()) == {True}
    own = changelog_of({"RAGBUS_STORES__LOG": "true", "RAGBUS_PROCESSORS__KG_QUERY__CHANGELOG": "false"})
    assert own["kg-query"] is False and own["kg-store"] is True


def test_a_role_is_the_pipeline_of_its_host_with_the_stores_in_files_or_on_the_log():
    assert pipelines.role("query", log=True) == pipelines.LOG_REPLICA
    assert set(pipelines.role("ingest", log=True)) == {*pipelines.INGEST, "documents-replica"}
    assert "documents-replica" not in pipelines.role("ingest", log=False) + pipelines.role("all", log=False)
    assert set(pipelines.role("all", log=False)) == set(pipelines.EVERYTHING)
    with pytest.raises(ValueError, match="unknown role 'gateway'"):
        pipelines.role("gateway", log=False)


def worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "ragbus.cli", "worker", *args, "--bus", "memory://roles"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_the_worker_refuses_a_role_beside_names_or_an_unknown_role():
    both = worker("--role", "query", "embed")
    assert both.returncode != 0 and "one of them" in both.stderr
    unknown = worker("--role", "gateway")
    assert unknown.returncode == 2 and "invalid choice: 'gateway'" in unknown.stderr
    bad = worker(env={"RAGBUS_WORKER__ROLE": "gateway"})
    assert bad.returncode != 0 and "role" in bad.stderr
