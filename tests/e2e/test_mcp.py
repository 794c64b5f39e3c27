"""The MCP face for real: the official SDK's own client talks to ``ragbus mcp`` (stdio, its own
process) and to ``/mcp`` of ``ragbus serve`` (streamable HTTP), on the memory bus and in front of
Kafka and Pulsar workers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
import uuid
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ragbus.testing.gateway import GatewayProcess
from ragbus.testing.selection import broker_env

from ..helpers.documents_made import write_pdf
from ..helpers.rag_pipeline import pipeline
from ..helpers.scans_made import need_tesseract, scan_png, scan_tiff
from ..helpers.serve_stores import stores

QUESTION = "How does a context manager wrap a block of code?"
UK = "Who was head of government of the United Kingdom?"
HERON = "Charge the Heron battery for ninety minutes before the first flight."


def ragbus_mcp(env: dict[str, str], *args: str) -> StdioServerParameters:
    """``ragbus mcp`` as the SDK's client starts it: this interpreter's module, its own process."""
    return StdioServerParameters(command=sys.executable, args=["-m", "ragbus.cli", "mcp", *args],
                                 env={**os.environ, **broker_env(), **env}, cwd=str(Path(__file__).parents[2]))


@contextlib.asynccontextmanager
async def connected(server):
    async with Client(server, read_timeout_seconds=120) as client:
        yield client


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return stores(tmp_path_factory)


def heads(facts) -> set[str]:
    return {f["head"] for f in facts}


async def check_tools(client) -> None:
    """Every tool answers as documented, on whatever transport ``client`` speaks."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"ask", "search", "graph", "documents", "ingest"}
    assert {"question", "mode", "at", "as_of", "collection"} <= set(tools["ask"].input_schema["properties"])

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    asked = await client.call_tool("ask", {"question": QUESTION}, progress_callback=on_progress)
    assert not asked.is_error, asked.content
    answer = asked.structured_content
    cited = answer["citations"]
    assert cited and cited[0]["document_id"] == "with" and "context manager" in cited[0]["text"]
    assert f"[{cited[0]['chunk_id']}]" in answer["answer"]
    assert [p[0] for p in progress] == [0, 1, 2, 3] and progress[-1][2] == "answered"
    assert "history" in tools["ask"].input_schema["properties"]
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": answer["answer"]}]
    follow_up = "Which method runs before its block?"
    follow = await client.call_tool("ask", {"question": follow_up, "history": history})
    assert follow.structured_content["standalone"] == f"{follow_up} (context manager wrap block of code)"
    assert follow.structured_content["citations"][0]["document_id"] == "with"
    wrong = await client.call_tool("ask", {"question": "And then?", "history": [{"role": "robot", "content": "x"}]})
    assert wrong.is_error and "history" in wrong.content[0].text

    found = (await client.call_tool("search", {"query": QUESTION, "limit": 3})).structured_content
    assert [c["rank"] for c in found["chunks"]] == [1, 2, 3]
    assert found["chunks"][0]["document_id"] == "with" and "answer" not in found
    assert all(isinstance(c["score"], float) and c["text"] for c in found["chunks"])

    now = (await client.call_tool("graph", {"question": UK, "at": "2012-01-01"})).structured_content
    believed = (await client.call_tool("graph", {"question": UK, "at": "2012-01-01", "as_of": "2008-01-01"}))
    assert "David Cameron" in heads(now["facts"]) and "Gordon Brown" not in heads(now["facts"])
    assert "Gordon Brown" in heads(believed.structured_content["facts"])  # not yet known to have left
    then = await client.call_tool("ask", {"question": UK, "at": "2012-01-01", "as_of": "2008-01-01"})
    assert "Gordon Brown" in heads(then.structured_content["facts"])

    listed = (await client.call_tool("documents", {})).structured_content
    assert "default" in listed["collections"]
    page = (await client.call_tool("documents", {"collection": "default", "limit": 2})).structured_content
    assert [d["document_id"] for d in page["documents"]] == ["loops", "slots"] and page["after"] == "slots"
    rest = await client.call_tool("documents", {"collection": "default", "after": page["after"]})
    assert [d["document_id"] for d in rest.structured_content["documents"]] == ["with"]
    assert rest.structured_content["more"] is False

    note = b"# Kettles\n\nDescale the Acme kettle with citric acid every month.\n"
    ingested = await client.call_tool("ingest", {"filename": "kettle.md", "collection": "ingested",
                                                 "content_base64": base64.b64encode(note).decode()})
    assert not ingested.is_error, ingested.content
    assert ingested.structured_content["document_id"].startswith("upload:")
    assert ingested.structured_content["collection"] == "ingested" and ingested.structured_content["chunks"] == 1
    kettle = await client.call_tool("search", {"query": "How is the kettle descaled?", "collection": "ingested",
                                               "mode": "keyword"})
    assert "citric acid" in kettle.structured_content["chunks"][0]["text"]


@pytest.mark.parametrize("arguments, says", [
    ({"question": ""}, "question"),
    ({"question": QUESTION, "mode": "fuzzy"}, "mode"),
    ({"question": QUESTION, "at": "next tuesday"}, "at"),
    ({"question": QUESTION, "collection": "../other"}, "collection"),
    ({"question": QUESTION, "doc_limit": 0}, "doc_limit"),
    ({"question": QUESTION, "must_see": ["ragbus.documents@12"]}, "must_see"),
])
def test_bad_arguments_are_tool_errors_that_name_what_to_fix(data_dir, arguments, says):
    async def main():
        async with connected(ragbus_mcp({"RAGBUS_DATA_DIR": str(data_dir)})) as client:
            r = await client.call_tool("ask", arguments)
        assert r.is_error
        text = r.content[0].text
        assert says in text and "at_time" not in text, text

    asyncio.run(main())


def test_ingest_takes_no_file_bigger_than_an_upload(data_dir):
    """Over stdio no HTTP body limit applies: the tool holds the file to the gateway's max_body_bytes itself."""
    async def main():
        env = {"RAGBUS_DATA_DIR": str(data_dir), "RAGBUS_GATEWAY__MAX_BODY_BYTES": "3001"}
        async with connected(ragbus_mcp(env)) as client:
            fits = await client.call_tool("ingest", {"filename": "fits.txt", "collection": "sized", "content_base64":
                                                     base64.b64encode(b"Fits. " * 500 + b"!").decode()})
            over = await client.call_tool("ingest", {"filename": "over.txt", "collection": "sized",
                                                     "content_base64": base64.b64encode(b"Over. " * 501).decode()})
            # 3,002 bytes are 4,004 characters of base64, as many as 3,001 bytes: held by their own size.
            by_one = await client.call_tool("ingest", {"filename": "one.txt", "collection": "sized", "content_base64":
                                                       base64.b64encode(b"Over. " * 500 + b"!!").decode()})
        return fits, over, by_one

    fits, over, by_one = asyncio.run(main())
    assert not fits.is_error, fits.content
    assert over.is_error and "TooLarge (argument content_base64)" in over.content[0].text
    assert "max_body_bytes=3,001" in over.content[0].text
    said = by_one.content[0].text
    assert by_one.is_error and "a file of 3,002 bytes, over the gateway's max_body_bytes=3,001" in said, said


def test_ask_and_graph_pass_must_see_to_every_read(data_dir):
    """The tokens reach the query processors: a keyword-query whose stores come from the log, with no replica
    of it in the process, cannot serve a read that must see a write of it (the keyword path degrades,
    saying why), while the same ask without them is answered whole; graph takes them too."""
    token = "ragbus.changelog.documents@7"
    from_log = {"RAGBUS_DATA_DIR": str(data_dir), "RAGBUS_PROCESSORS__KEYWORD_QUERY__CHANGELOG": "true"}

    async def main():
        async with connected(ragbus_mcp(from_log)) as client:
            plain = (await client.call_tool("ask", {"question": QUESTION, "mode": "hybrid"})).structured_content
            fresh = await client.call_tool("ask", {"question": QUESTION, "mode": "hybrid", "must_see": [token]})
            graph = await client.call_tool("graph", {"question": UK, "at": "2012-01-01", "must_see": [token]})
        assert plain["degraded"] == [] and plain["citations"], plain
        assert not fresh.is_error, fresh.content
        answer = fresh.structured_content
        assert answer["degraded"] == ["keyword"] and "ReplicaMissing" in str(answer["problems"]), answer
        assert answer["citations"], "the vector path still answers"
        assert not graph.is_error and "David Cameron" in heads(graph.structured_content["facts"]), graph.content

    asyncio.run(main())


def test_a_collection_that_holds_nothing_is_a_tool_error_saying_how_to_fill_it(data_dir):
    """The pipeline's answer (document-rag's, kg-query's for graph), so every tool says it alike."""
    async def main():
        async with connected(ragbus_mcp({"RAGBUS_DATA_DIR": str(data_dir)})) as client:
            for tool, arguments in (("ask", {"question": QUESTION, "collection": "nothing-here"}),
                                    ("search", {"query": QUESTION, "collection": "nothing-here"}),
                                    ("graph", {"question": UK, "collection": "nothing-here"})):
                r = await client.call_tool(tool, arguments)
                assert r.is_error, (tool, r.structured_content)
                text = r.content[0].text
                assert ("tool " + tool + ": EmptyCollection (argument collection): collection 'nothing-here' has "
                        "no documents") in text and "ragbus ingest" in text and "ToolError" not in text, text

    asyncio.run(main())


def test_the_tools_over_stdio_on_the_memory_bus(data_dir):
    async def main():
        async with connected(ragbus_mcp({"RAGBUS_DATA_DIR": str(data_dir)})) as client:
            await check_tools(client)

    asyncio.run(main())


PAGE_ORIGIN = "https://chat.example.com"  # a page elsewhere that the gateway's CORS allows


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    # A data dir of its own: a gateway on memory:// runs the writers, one process per data dir.
    config = tmp_path_factory.mktemp("mcp-config") / "ragbus.toml"
    config.write_text(f'[gateway]\ncors_origins = ["{PAGE_ORIGIN}"]\n')
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_API_KEYS": "sk-mcp", "RAGBUS_CONFIG": str(config)}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("mcp-serve") / "serve.log") as g:
        yield g


def over_http(gateway, key: str | None, origin: str | None = None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if origin:
        headers["Origin"] = origin
    return streamable_http_client(f"{gateway.url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=120))


def test_the_tools_over_streamable_http_inside_serve(gateway):
    async def main():
        async with connected(over_http(gateway, "sk-mcp")) as client:
            await check_tools(client)

    asyncio.run(main())


def test_ingest_reads_a_scan_reporting_its_pages_and_refuses_what_is_no_file(gateway, tmp_path):
    need_tesseract()
    pdf = write_pdf(tmp_path / "heron.pdf", "Heron Battery", [("Charging", [HERON])])
    tiff = scan_tiff([pdf, pdf], tmp_path / "heron.tiff")
    png = scan_png(pdf, tmp_path / "heron.png")
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async def main():
        async with connected(over_http(gateway, "sk-mcp")) as client:
            tiffed = await client.call_tool("ingest", {"filename": "heron.tiff", "collection": "scans",
                                                       "content_base64": base64.b64encode(tiff.read_bytes()).decode()},
                                            progress_callback=on_progress)
            pinged = await client.call_tool("ingest", {"filename": "heron.png", "collection": "scans",
                                                       "title": "Heron scan", "document_id": "heron-scan",
                                                       "content_base64": base64.b64encode(png.read_bytes()).decode()})
            asked = await client.call_tool("ask", {"question": "How long should the Heron battery charge?",
                                                   "collection": "scans", "mode": "keyword"})
            listed = await client.call_tool("documents", {"collection": "scans"})
            garbled = await client.call_tool("ingest", {"filename": "heron.png", "content_base64": "not base64!"})
            unknown = await client.call_tool("ingest", {"filename": "heron.xyz", "content_base64": "aGVsbG8="})
            broken = await client.call_tool("ingest", {"filename": "heron.png",
                                                       "content_base64": base64.b64encode(b"\x89PNG junk").decode()})
            return tiffed, pinged, asked, listed, garbled, unknown, broken

    tiffed, pinged, asked, listed, garbled, unknown, broken = asyncio.run(main())
    assert not tiffed.is_error, tiffed.content
    assert progress == [(1, 2, "heron.tiff page 1 of 2 (OCR)"), (2, 2, "heron.tiff page 2 of 2 (OCR)")]
    result = tiffed.structured_content
    assert result["collection"] == "scans" and result["document_id"].startswith("upload:") and result["chunks"] >= 1
    assert result["seen"] and result["superseded"] is None
    assert not pinged.is_error and pinged.structured_content["document_id"] == "heron-scan"
    assert "ninety minutes" in asked.structured_content["answer"]
    titles = {d["document_id"]: d["title"] for d in listed.structured_content["documents"]}
    assert titles == {result["document_id"]: "heron.tiff", "heron-scan": "Heron scan"}
    assert garbled.is_error and "BadRequest (argument content_base64): not base64" in garbled.content[0].text
    assert unknown.is_error and "UnsupportedFormat (argument filename): heron.xyz" in unknown.content[0].text
    assert broken.is_error and "UnreadableDocument (argument content_base64): heron.png: " in broken.content[0].text


def test_an_origin_the_gateways_cors_allows_is_allowed_by_mcp_too(gateway):
    """One allow-list: the origin whose preflight CORS answers is let through by the SDK's Origin check, which
    still refuses every other origin (the gateway serves loopback, where that check is on)."""
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version"}
    allowed = httpx2.options(f"{gateway.url}/mcp", headers={"Origin": PAGE_ORIGIN, **preflight})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == PAGE_ORIGIN

    async def main():
        async with connected(over_http(gateway, "sk-mcp", PAGE_ORIGIN)) as client:
            return await client.call_tool("graph", {"question": UK, "at": "2012-01-01"})

    graph = asyncio.run(main())
    assert not graph.is_error and "David Cameron" in heads(graph.structured_content["facts"]), graph.content
    listing = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "test", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer sk-mcp"}
    let_in = httpx2.post(f"{gateway.url}/mcp", json=listing, headers={**headers, "Origin": PAGE_ORIGIN})
    assert let_in.status_code == 200 and let_in.headers["access-control-allow-origin"] == PAGE_ORIGIN
    for elsewhere in ("https://elsewhere.example", "http://chat.example.com"):
        refused = httpx2.post(f"{gateway.url}/mcp", json=listing, headers={**headers, "Origin": elsewhere})
        assert (refused.status_code, refused.text) == (403, "Invalid Origin header")
        assert "access-control-allow-origin" not in httpx2.options(
            f"{gateway.url}/mcp", headers={"Origin": elsewhere, **preflight}).headers
    own = httpx2.post(f"{gateway.url}/mcp", json=listing, headers={**headers, "Origin": gateway.url})
    assert own.status_code == 200, own.text  # the gateway's own page, on loopback


def leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in leaves(e)]
    return [group]


def test_mcp_over_http_needs_the_gateways_key(gateway):
    listing = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "test", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    refused = httpx2.post(f"{gateway.url}/mcp", json=listing, headers=accept)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "Unauthorized"
    let_in = httpx2.post(f"{gateway.url}/mcp", json=listing, headers={**accept, "Authorization": "Bearer sk-mcp"})
    assert let_in.status_code == 200, let_in.text

    async def main():
        async with connected(over_http(gateway, "sk-wrong")) as client:
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as failed:
        asyncio.run(main())
    assert [type(e).__name__ for e in leaves(failed.value)] == ["MCPError"]


@pytest.mark.brokers
@pytest.mark.parametrize("broker", ["kafka_broker", "pulsar_broker"])
def test_ragbus_mcp_in_front_of_workers_on_a_broker(broker, request, tmp_path, monkeypatch):
    """On a broker ``ragbus mcp`` starts no processor: it publishes, the workers answer."""
    url = request.getfixturevalue(broker).url
    collection = f"mcp-{uuid.uuid4().hex[:8]}"

    async def main():
        async with pipeline(url, tmp_path / "data", monkeypatch, collection=collection):
            server = ragbus_mcp({"RAGBUS_DATA_DIR": str(tmp_path / "unused")}, "--bus", url)
            async with connected(server) as client:
                asked = await client.call_tool("ask", {"question": QUESTION, "collection": collection})
                assert not asked.is_error, asked.content
                assert asked.structured_content["citations"][0]["document_id"] == "with"
                listed = await client.call_tool("documents", {"collection": collection})
                assert {d["document_id"] for d in listed.structured_content["documents"]} == {"loops", "slots",
                                                                                               "with"}
        assert not (tmp_path / "unused").exists()  # no store opened by the MCP server

    asyncio.run(main())
