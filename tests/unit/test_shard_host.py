"""What shard-host runs for each shard it serves: the processors ``serve`` names, on the shard's topics and dir."""

from __future__ import annotations

import msgspec
import pytest

from ragbus.config.settings import load_settings, processor_settings
from ragbus.replica import ShardHostProcessor, ShardHostSettings
from ragbus.schema.topics import DOCUMENTS_LOG


def host(**processors):
    settings = load_settings(environ={"RAGBUS_STORES__SHARDS": "2", "RAGBUS_STORES__LOG": "true"})
    for name, values in processors.items():
        settings.processors[name].update(values)
    typed = processor_settings(settings, "shard-host", ShardHostSettings)
    return ShardHostProcessor.build("shard-host", typed, settings)


def test_each_served_processor_is_the_shards_own_on_its_topics_dir_and_log(tmp_path):
    shard_host = host(**{"keyword-query": {"bulk_topic": "kw-bulk"}})
    assert shard_host.settings.shards == 2  # [stores] shards, handed over
    built = shard_host.shard_processors(1, tmp_path / "shard-1")
    assert [p.name for p in built] == ["doc-embeddings-query.shard-1", "fetch-chunk.shard-1", "keyword-query.shard-1"]
    for processor, served in zip(built, ("doc-embeddings-query", "fetch-chunk", "keyword-query"), strict=True):
        s = processor.settings
        assert (s.topic, s.group) == (f"{served}.shard-1", f"{served}.shard-1")
        assert (s.data_dir, s.changelog, s.log_topic) == (str(tmp_path / "shard-1"), True, DOCUMENTS_LOG)
    assert built[2].settings.bulk_topic == "kw-bulk.shard-1" and built[0].settings.bulk_topic == ""


def test_a_host_without_shards_or_serving_what_is_not_configured_is_refused():
    settings = load_settings(environ={})
    with pytest.raises(ValueError, match="shards must be at least 1"):
        ShardHostProcessor.build("shard-host", processor_settings(settings, "shard-host", ShardHostSettings), settings)
    typed = msgspec.structs.replace(processor_settings(settings, "shard-host", ShardHostSettings), shards=2,
                                    serve=["no-such-processor"])
    with pytest.raises(ValueError, match="no-such-processor"):
        ShardHostProcessor.build("shard-host", typed, settings)
