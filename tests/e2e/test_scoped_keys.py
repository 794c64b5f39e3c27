"""Keys scoped to collections and roles, enforced alike by REST, chat and MCP of a real ``ragbus serve``:
a key for one collection never reads, writes or lists another, and a reader cannot write."""

from __future__ import annotations

import asyncio
import base64

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ragbus.testing.gateway import GatewayProcess

from ..helpers.serve_stores import stores

QUESTION = "How does a context manager wrap a block of code?"
KEYS = ("sk-admin, sk-reader=read@default, sk-other=read@other, sk-writer=ingest@default, "
        "sk-default-admin=admin@default")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_API_KEYS": KEYS}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("scoped") / "serve.log") as g:
        yield g


def rest(gateway, key: str) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.mark.parametrize("key, status", [("sk-admin", 200), ("sk-reader", 200), ("sk-writer", 200), ("sk-other", 403)])
def test_rest_ask_and_kg_need_read_on_the_collection(gateway, key, status):
    with rest(gateway, key) as c:
        asked = c.post("/v1/ask", json={"question": QUESTION})
        facts = c.get("/v1/kg/query", params={"question": "Who was chancellor of Germany?"})
    assert (asked.status_code, facts.status_code) == (status, status), asked.text
    if status == 403:
        assert asked.json()["error"] == {"type": "Forbidden", "param": "collection",
                                         "message": "this API key may not read collection 'default'"}


def test_writing_needs_ingest_on_the_collection(gateway):
    doc = {"text": "Scoped keys keep collections apart.", "document_id": "scoped", "collection": "default"}
    for key in ("sk-reader", "sk-other"):
        with rest(gateway, key) as c:
            assert c.post("/v1/documents", json=doc).status_code == 403
            assert c.delete("/v1/documents/scoped").status_code == 403
    with rest(gateway, "sk-writer") as c:
        assert c.post("/v1/documents", json=doc).status_code == 201
        assert c.post("/v1/documents", json={**doc, "collection": "other"}).status_code == 403
        assert c.delete("/v1/documents/scoped").status_code == 200


@pytest.mark.parametrize("key, scope", [
    ("sk-admin", {"role": "admin", "collections": ["*"]}),
    ("sk-reader", {"role": "read", "collections": ["default"]}),
    ("sk-writer", {"role": "ingest", "collections": ["default"]}),
])
def test_a_key_is_told_what_it_may_do(gateway, key, scope):
    """GET /v1/key: what the page asks to offer a key only what it may do."""
    with rest(gateway, key) as c:
        assert c.get("/v1/key").json() == scope
    assert httpx.get(f"{gateway.url}/v1/key").status_code == 401


def test_listings_show_only_what_the_key_may_read(gateway):
    with rest(gateway, "sk-other") as c:
        assert c.get("/v1/collections").json() == {"collections": []}
        refused = c.get("/v1/documents", params={"collection": "default"})
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "Forbidden"
    with rest(gateway, "sk-reader") as c:
        assert c.get("/v1/collections").json() == {"collections": ["default"]}
        assert c.get("/v1/documents", params={"collection": "default"}).json()["documents"]


def test_the_pipelines_status_is_for_an_admin_of_every_collection(gateway):
    for key in ("sk-reader", "sk-writer", "sk-other", "sk-default-admin"):
        with rest(gateway, key) as c:
            refused = c.get("/v1/status")
        assert refused.status_code == 403 and "role admin over every collection" in refused.json()["error"]["message"]
    with rest(gateway, "sk-admin") as c:
        found = c.get("/v1/status").json()
    assert found["bus"].startswith("memory://")
    rows = {r["processor"]: r for r in found["topics"]}
    assert {"embed", "document-rag", "prompt", "documents-query"} <= set(rows)
    # memory:// counts exactly, and the embedded processors run in the gateway's own process
    assert rows["embed"]["members"] >= 1 and rows["embed"]["waiting"] == 0 and rows["embed"]["dead_letters"] == 0


def test_chat_is_held_to_the_same_scope(gateway):
    messages = [{"role": "user", "content": QUESTION}]
    allowed = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-reader")
    assert allowed.chat.completions.create(model="ragbus", messages=messages).choices[0].message.content
    other = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-other")
    with pytest.raises(openai.PermissionDeniedError, match="may not read collection 'default'"):
        other.chat.completions.create(model="ragbus", messages=messages)


NOTE = {"filename": "scoped.txt", "document_id": "scoped-mcp",
        "content_base64": base64.b64encode(b"Scoped keys hold MCP's ingest to the ingest role.").decode()}


def mcp_as(gateway, key: str):
    transport = streamable_http_client(f"{gateway.url}/mcp", http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=60))
    return Client(transport, read_timeout_seconds=60)


def test_mcp_tools_are_held_to_the_same_scope_and_list_only_what_the_key_may_read(gateway):
    async def main():
        async with mcp_as(gateway, "sk-other") as client:
            for tool, arguments in (("ask", {"question": QUESTION}), ("search", {"query": QUESTION}),
                                    ("graph", {"question": "Who was chancellor of Germany?"}),
                                    ("documents", {"collection": "default"})):
                r = await client.call_tool(tool, arguments)
                assert r.is_error and "Forbidden (argument collection)" in r.content[0].text, (tool, r.content)
            assert (await client.call_tool("documents", {})).structured_content == {"collections": []}
        async with mcp_as(gateway, "sk-reader") as client:
            assert not (await client.call_tool("ask", {"question": QUESTION})).is_error
            assert (await client.call_tool("documents", {})).structured_content == {"collections": ["default"]}
            refused = await client.call_tool("ingest", NOTE)
            assert refused.is_error and "Forbidden (argument collection): this API key may not ingest collection " \
                                        "'default'" in refused.content[0].text, refused.content
        async with mcp_as(gateway, "sk-writer") as client:
            elsewhere = await client.call_tool("ingest", {**NOTE, "collection": "other"})
            assert elsewhere.is_error and "may not ingest collection 'other'" in elsewhere.content[0].text
            stored = await client.call_tool("ingest", NOTE)
            assert not stored.is_error and stored.structured_content["collection"] == "default", stored.content

    asyncio.run(main())
