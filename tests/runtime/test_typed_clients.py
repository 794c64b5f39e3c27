"""Typed clients send the right request Struct to the right topic and unwrap the response."""

from __future__ import annotations

import msgspec
import pytest

from ragbus.bus import connect
from ragbus.runtime.processor import Processor
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import (
    DocEmbeddingsClient,
    EmbedClient,
    FetchChunkClient,
    KeywordClient,
    KgClient,
    PromptClient,
    RemoteError,
)
from ragbus.schema import SCHEMAS, ChunkMatch, Error, Fact, KgQueryResponse, PromptResult
from ragbus.schema import topics as t

from ..helpers.serving import serving


class Inspector(Processor):
    """Answers any topic from SCHEMAS with a response derived from the request it got."""

    def __init__(self, topic: str) -> None:
        from ragbus.config.settings import ProcessorSettings

        super().__init__(topic, ProcessorSettings(topic=topic, group=topic))
        self.request_type, self.response_type = SCHEMAS[topic]

    async def handle(self, request, context):
        seen = msgspec.to_builtins(request)
        if self.settings.topic == t.EMBED:
            if "fail" in request.texts:
                raise ValueError("cannot embed 'fail'")
            return self.response_type(vectors=[[float(len(x))] for x in request.texts])
        if self.settings.topic in (t.DOC_EMBEDDINGS_QUERY, t.KEYWORD_QUERY):
            return self.response_type(matches=[ChunkMatch(msgspec.json.encode(seen).decode(), 1.0)])
        if self.settings.topic == t.FETCH_CHUNK:
            found = [ChunkMatch(c, text=f"text of {c}") for c in request.chunk_ids if c != "gone"]
            return self.response_type(chunks=found)
        if self.settings.topic == t.KG_QUERY:
            return KgQueryResponse(entities=[request.question], facts=[Fact("a", "r", "b")], at_time=request.at_time)
        return PromptResult("text", msgspec.json.encode(seen).decode(), template_id=request.template_id)


@pytest.fixture
async def client(topic):
    bus = await connect(f"memory://{topic}")
    topics = [t.EMBED, t.DOC_EMBEDDINGS_QUERY, t.KEYWORD_QUERY, t.FETCH_CHUNK, t.KG_QUERY, t.PROMPT]
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        for name in topics:
            await stack.enter_async_context(serving(bus, Inspector(name)))
        yield await stack.enter_async_context(RequestClient(bus))
    await bus.close()


async def test_embed_returns_vectors_and_raises_remote_errors(client):
    embed = EmbedClient(client)
    assert await embed.embed(["ab", "abc"]) == [[2.0], [3.0]]
    with pytest.raises(RemoteError, match="ValueError: cannot embed 'fail'") as info:
        await embed.embed(["fail"])
    assert info.value.error == Error("ValueError", "cannot embed 'fail'")


async def test_query_clients_send_their_arguments(client):
    (m,) = await DocEmbeddingsClient(client).query([[0.5, 1.0]], limit=3, collection="c")
    assert msgspec.json.decode(m.chunk_id) == {"vectors": [[0.5, 1.0]], "limit": 3, "collection": "c", "must_see": []}
    token = "ragbus.changelog.documents.default@0:7"
    (m,) = await KeywordClient(client).query(query="C++ 7.3.2 (", limit=4, must_see=[token])
    assert msgspec.json.decode(m.chunk_id) == {
        "query": "C++ 7.3.2 (", "limit": 4, "collection": "default", "must_see": [token], "statistics_only": False,
        "statistics": None,
    }


async def test_fetch_chunk_client_is_the_orchestrators_fetch_callable(client):
    fetch = FetchChunkClient(client)
    assert await fetch("c7") == "text of c7"
    with pytest.raises(RemoteError, match="NotFound"):
        await fetch("gone")


async def test_kg_and_prompt_clients(client):
    kg = await KgClient(client).query("who?", at_time="2020-01-01")
    assert kg.entities == ["who?"] and kg.at_time == "2020-01-01"
    result = await PromptClient(client).document_prompt(query="q", documents=["d1", "d2"], at_time="2020")
    assert result.template_id == "document-prompt"
    assert msgspec.json.decode(result.text)["variables"] == {
        "query": "q", "documents": ["d1", "d2"], "facts": [], "at_time": "2020"
    }
