"""Settings files, environment overrides and processor wiring."""

from __future__ import annotations

import msgspec

import pytest

from ragbus.config.settings import ProcessorSettings, SettingsError, lanes, load_settings, processor_settings
from ragbus.runtime.worker import build_processor

from ..helpers.echo import EchoProcessor, EchoSettings

CONFIG = """
[bus]
url = "kafka://broker:9092"
max_attempts = 5

[processors.echo]
class = "tests.helpers.echo:EchoProcessor"
concurrency = 4
prefix = "> "

[processors.doc-embeddings-query]
class = "tests.helpers.echo:EchoProcessor"
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "ragbus.toml"
    path.write_text(CONFIG)
    return path


def test_defaults_need_no_file():
    s = load_settings(environ={})
    assert s.bus.url == "memory://"
    assert s.client.request_timeout_s == 30.0 and s.metrics.port == 0


def test_file_then_environment(config_file):
    env = {
        "RAGBUS_BUS__MAX_ATTEMPTS": "9",
        "RAGBUS_PROCESSORS__ECHO__CONCURRENCY": "12",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__CONCURRENCY": "2",
    }
    s = load_settings(config_file, environ=env)
    assert s.bus.url == "kafka://broker:9092" and s.bus.max_attempts == 9
    echo = processor_settings(s, "echo", EchoSettings)
    assert (echo.concurrency, echo.prefix, echo.topic, echo.group) == (12, "> ", "echo", "echo")
    assert processor_settings(s, "doc-embeddings-query", ProcessorSettings).concurrency == 2


def test_config_file_named_by_environment(config_file):
    assert load_settings(environ={"RAGBUS_CONFIG": str(config_file)}).bus.url == "kafka://broker:9092"


def test_build_processor_types_its_settings(config_file):
    processor = build_processor(load_settings(config_file, environ={}), "echo")
    assert isinstance(processor, EchoProcessor)
    assert isinstance(processor.settings, EchoSettings) and processor.settings.prefix == "> "


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("[processors.echo]\nconcurency = 3\n", "concurency"),
        ("[processors.echo]\nconcurrency = 'lots'\n", "concurrency"),
    ],
)
def test_bad_processor_settings_name_the_key(tmp_path, extra, says):
    path = tmp_path / "bad.toml"
    path.write_text('[processors.echo]\nclass = "tests.helpers.echo:EchoProcessor"\n' + extra.split("\n", 1)[1])
    with pytest.raises(SettingsError, match=says):
        build_processor(load_settings(path, environ={}), "echo")


@pytest.mark.parametrize(
    ("text", "name", "says"),
    [
        ('[processors.x]\nclass = "no.such.module:X"\n', "x", "cannot load"),
        ('[processors.x]\nclass = "json"\n', "x", "must look like"),
        ('[processors.x]\nclass = "json:JSONDecoder"\n', "x", "not a Processor"),
        ("[processors.x]\nconcurrency = 1\n", "x", "no 'class'"),
        ("", "nobody", "unknown processor 'nobody'"),
    ],
)
def test_wiring_mistakes_are_named(tmp_path, text, name, says):
    path = tmp_path / "w.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=says):
        build_processor(load_settings(path, environ={}), name)


def test_broken_toml_and_missing_file_are_named(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[bus\n")
    with pytest.raises(SettingsError, match=r"broken\.toml"):
        load_settings(path, environ={})
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", environ={})


def test_unknown_section_is_an_error():
    with pytest.raises(SettingsError, match="buss"):
        load_settings(environ={"RAGBUS_BUSS__URL": "kafka://x"})


def test_a_processor_not_interactive_serves_only_its_bulk_lane_and_needs_one():
    settings = load_settings(environ={"RAGBUS_PROCESSORS__EMBED__INTERACTIVE": "false"})
    assert lanes("embed", settings.processors["embed"]) == [("embed-bulk", "embed-bulk")]
    assert lanes("embed", load_settings(environ={}).processors["embed"]) == [("embed", "embed"),
                                                                            ("embed-bulk", "embed-bulk")]
    without = load_settings(environ={"RAGBUS_PROCESSORS__EMBED__INTERACTIVE": "false",
                                     "RAGBUS_PROCESSORS__EMBED__BULK_TOPIC": ""})
    with pytest.raises(SettingsError, match="would serve nothing"):
        build_processor(without, "embed")
    with pytest.raises(SettingsError, match="not true or false"):
        lanes("embed", {"interactive": "maybe"})


def test_arguments_for_hands_over_the_settings_a_constructor_takes_by_name():
    """What a processor builds gets each setting it takes, by name: one renamed on one side only would drop
    silently to the constructor's default, so the sets handed over are pinned here."""
    from ragbus.config.settings import arguments_for
    from ragbus.document_rag import DocumentRag
    from ragbus.document_rag.settings import DocumentRagSettings
    from ragbus.stores.vectors.settings import DocEmbeddingsSettings
    from ragbus.stores.vectors.store import VectorStore

    class Tuning(msgspec.Struct):
        a: int = 1
        limit: int = 2
        other: int = 3

    def build(a, /, *, limit=0, **rest):  # a is positional only: not taken by name
        return a

    assert arguments_for(build, Tuning()) == {"limit": 2}
    tuned = DocumentRagSettings(doc_limit=7, fusion="rrf")
    assert arguments_for(DocumentRag, tuned)["doc_limit"] == 7
    assert sorted(arguments_for(DocumentRag, tuned)) == [
        "doc_limit", "fact_limit", "fusion", "hybrid_depth", "keyword_weight", "max_concepts", "max_query_chars",
        "path_timeout_s", "retrieval_mode", "vector_weight"]
    assert sorted(arguments_for(VectorStore, DocEmbeddingsSettings(hnsw_m=8))) == [
        "hnsw_ef_construction", "hnsw_ef_search", "hnsw_m", "hnsw_threshold", "index_cache", "refresh_interval_s"]
