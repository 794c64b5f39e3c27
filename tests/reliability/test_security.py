"""Security: no code execution from data, size limits in processors, broker credentials passed through.

Covered elsewhere, on every backend (memory, Kafka, Pulsar), and not repeated here:

- publish refuses a body over ``max_message_bytes``:
  ``tests/conformance/test_delivery.py::test_publish_refuses_oversized_body_before_it_reaches_the_broker``;
- the consume loop dead-letters an oversized body unread (a processor answers it instead when it can):
  ``tests/conformance/test_consume.py::test_oversized_message_is_dead_lettered_without_running_the_handler``;
- a forged ``reply-to`` outside ``ragbus.reply.`` is dead-lettered with the
  reason and nothing reaches the forged topic:
  ``tests/runtime/test_processor.py::test_forged_reply_to_outside_the_prefix_is_never_published_to``;
- an answer over ``max_message_bytes`` (memory bus):
  ``tests/reliability/test_poison.py::test_an_answer_over_max_message_bytes_becomes_an_error_response_at_once``.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbus.config.bus import BusSettings, KafkaOptions, PulsarOptions
from ragbus.config.settings import load_settings
from ragbus.bus import connect, dead_letter_topic
from ragbus.bus.consume import H_ERROR, H_REASON
from ragbus.bus.memory import drop_memory_broker
from ragbus.runtime.envelope import REQUEST_ID, request_headers
from ragbus.schema import REPLY_PREFIX, decode, encode

from ..helpers.brokers import settings_for_tests
from ..helpers.receiving import receive
from ..helpers.serving import client_on, echo, serving
from ..helpers.echo import EchoRequest, EchoResponse

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("processors", "schema", "config")

# --- no pickle / eval / templates from data --------------------------------------------------

BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"}
CODE_BUILTINS = {"eval", "exec", "compile"}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
YAML_LOADS = {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all"}
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("asyncio", "create_subprocess_shell")}
# ``a % b`` is arithmetic, not formatting, when an operand is plainly a number.
NUMERIC_CALLS = {"len", "int", "abs", "round", "hash", "ord", "sum", "min", "max", "getpid", "crc32", "monotonic"}


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)


def _is_numeric(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in NUMERIC_CALLS
    if isinstance(node, ast.UnaryOp):
        return _is_numeric(node.operand)
    if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Mod):
        return _is_numeric(node.left) or _is_numeric(node.right)
    return False


def _dotted(node: ast.AST) -> tuple[str, ...]:
    """``a.b.c`` as ("a", "b", "c"); () for anything that is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ()
    return (node.id, *reversed(parts))


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.findings: list[tuple[int, str]] = []
        self.aliases: dict[str, str] = {}  # local name -> "module" or "module.attr"

    def flag(self, node: ast.AST, what: str) -> None:
        self.findings.append((node.lineno, what))

    def resolve(self, node: ast.AST) -> tuple[str, ...]:
        parts = _dotted(node)
        if parts and parts[0] in self.aliases:
            parts = (*self.aliases[parts[0]].split("."), *parts[1:])
        return parts

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            self.aliases[alias.asname or top] = alias.name if alias.asname else top
            if alias.name.split(".")[0] in BANNED_MODULES:
                self.flag(node, f"import {alias.name}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] in BANNED_MODULES:
            self.flag(node, f"from {module} import ...")
        for alias in node.names:
            if module and not node.level:
                self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(node.func)
        func = node.func
        if name in {(b,) for b in CODE_BUILTINS} or name in {("builtins", b) for b in CODE_BUILTINS}:
            self.flag(node, f"{'.'.join(name)}() runs code")
        if len(name) == 2 and name[0] == "yaml" and name[1] in YAML_LOADS:
            loader = next((k.value for k in node.keywords if k.arg == "Loader"), None)
            if loader is None and len(node.args) > 1:
                loader = node.args[1]
            safe = loader is not None and self.resolve(loader)[-1:] in {(n,) for n in SAFE_YAML_LOADERS}
            if name[1] not in ("load", "load_all") or not safe:
                self.flag(node, f"yaml.{name[1]} without SafeLoader")
        if isinstance(func, ast.Attribute) and func.attr in ("format", "format_map"):
            if name in {("str", "format"), ("str", "format_map")}:
                if not (node.args and _is_str(node.args[0])):
                    self.flag(node, f"str.{func.attr}() of a template that is not a literal")
            elif not _is_str(func.value):
                self.flag(node, f".{func.attr}() on a template that is not a literal")
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "shell" and not (isinstance(value, ast.Constant) and value.value is False):
                self.flag(node, "subprocess with shell=True")
            if keyword.arg == "allow_pickle" and not (isinstance(value, ast.Constant) and value.value is False):
                self.flag(node, "allow_pickle=True")
        if name[-2:] in SHELL_CALLS or name in SHELL_CALLS:
            self.flag(node, f"{'.'.join(name)}() runs a shell")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        arithmetic = _is_numeric(node.left) or _is_numeric(node.right)
        if isinstance(node.op, ast.Mod) and not _is_str(node.left) and not arithmetic:
            self.flag(node, "%-formatting with a template that is not a literal (or an ambiguous %: use divmod)")
        self.generic_visit(node)


def scan_source(source: str) -> list[tuple[int, str]]:
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    return sorted(scanner.findings)


def python_files() -> Iterator[Path]:
    for top in SCANNED:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_code_execution_or_templates_from_data_in_the_packages():
    files = list(python_files())
    assert len(files) > 30, f"found only {len(files)} files under {SCANNED}: is ROOT {ROOT} right?"
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in scan_source(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "unsafe constructs:\n" + "\n".join(offenders)


# Each line ending in "# !" must be reported, and no other.
BAD = '''
import pickle  # !
import marshal as m  # !
from shelve import open as shelf  # !
from dill import loads  # !
import yaml
import subprocess, os
eval(text)  # !
exec(code)  # !
compile(src, "x", "exec")  # !
yaml.load(stream)  # !
yaml.load(stream, Loader=yaml.Loader)  # !
yaml.unsafe_load(stream)  # !
template.format(name=value)  # !
settings.prompt.format_map(values)  # !
str.format(template, value)  # !
template % values  # !
subprocess.run(cmd, shell=True)  # !
os.system(cmd)  # !
numpy.load(path, allow_pickle=True)  # !
'''

GOOD = '''
"""Mentions of pickle, eval(x) and template.format(x) in a docstring do not count."""
# import pickle; eval(x); template.format(x)
import re
import yaml
pattern = re.compile(r"\\w+")
data = yaml.safe_load(stream)
more = yaml.load(stream, Loader=yaml.SafeLoader)
text = "{} of {}".format(a, b)
also = str.format("{}", b)
line = "%s: %d" % (name, count)
raw = b"%s" % payload
member = turn % len(members)
spread = (os.getpid() % 128) * n
shard = zlib.crc32(key) % 16
log.info("%s took %.3f s", name, seconds)
subprocess.run(["tansu", "broker"], shell=False)
numpy.load(path, allow_pickle=False)
message = f"{value!r} is not allowed"
'''


def test_the_scanner_finds_what_it_should_and_nothing_else():
    """The scan above passing means something only if the scanner does catch each construct."""
    found = sorted({line for line, _ in scan_source(BAD)})
    expected = [i for i, text in enumerate(BAD.splitlines(), 1) if text.endswith("# !")]
    assert found == expected, scan_source(BAD)
    assert scan_source(GOOD) == []


# --- message size limits in processors -------------------------------------------------------


def counting(processor):
    """Count the calls of ``processor.handle``."""
    calls = []
    handle = processor.handle

    async def wrapped(request, context):
        calls.append(request)
        return await handle(request, context)

    processor.handle = wrapped
    return calls


async def test_an_oversized_request_no_one_can_be_told_about_is_dead_lettered_unread(open_bus, topic):
    big_publisher = await open_bus(max_message_bytes=100_000)
    bus = await open_bus(max_message_bytes=2000)
    reply_topic = f"{REPLY_PREFIX}{topic}"
    replies = await big_publisher.listen(reply_topic)
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    processor = echo(topic)
    calls = counting(processor)
    async with serving(bus, processor):
        big = encode(EchoRequest(text="x" * 5000))
        await big_publisher.publish(topic, big, request_headers(request_id="big", reply_to=None, timeout_s=60))
        dead = await receive(dlq)
        small = encode(EchoRequest(text="small"))
        await big_publisher.publish(
            topic, small, request_headers(request_id="small", reply_to=reply_topic, timeout_s=60)
        )
        answered = await receive(replies)
    assert dead.headers[H_ERROR] == "MessageTooLarge"
    assert f"{len(big)} bytes" in dead.headers[H_REASON] and "max_message_bytes=2000" in dead.headers[H_REASON]
    assert dead.headers[REQUEST_ID] == "big"
    assert dead.body == b""  # too big for the dead-letter topic as well; the headers say what it was
    assert answered.headers[REQUEST_ID] == "small", "the oversized request was answered"
    assert decode(answered.body, EchoResponse).text == "small"
    assert [r.text for r in calls] == ["small"], "the handler saw the oversized request"


async def test_an_oversized_request_with_a_reply_to_gets_an_error_naming_the_bus_limit(open_bus, topic):
    """An oversized request was once dead-lettered without an answer, and the caller waited out its timeout:
    now the caller gets a MessageTooLarge error naming the limit and the setting that raises it."""
    big_publisher = await open_bus(max_message_bytes=100_000)
    bus = await open_bus(max_message_bytes=2000)
    processor = echo(topic)
    calls = counting(processor)
    async with serving(bus, processor), client_on(big_publisher) as client:
        # Answered with an error rather than left to wait out the call's timeout; the handler never sees it.
        response = await client.request(topic, EchoRequest(text="x" * 5000), EchoResponse, timeout=30)
        small = await client.request(topic, EchoRequest(text="small"), EchoResponse, timeout=30)
    assert response.error is not None, response
    assert response.error.type == "MessageTooLarge"
    assert "max_message_bytes=2000" in response.error.message
    assert "RAGBUS_BUS__MAX_MESSAGE_BYTES" in response.error.message
    assert small.text == "small" and [r.text for r in calls] == ["small"], "the handler saw the oversized request"


async def test_a_processor_limit_of_its_own_is_enforced_and_named_in_the_error(open_bus, topic):
    """``[processors.NAME] max_message_bytes`` (config/settings.py) lowers the bus's limit for that processor."""
    bus = await open_bus()  # the bus itself allows 1 MB
    processor = echo(topic, max_message_bytes=2000)
    calls = counting(processor)
    async with serving(bus, processor), client_on(bus) as client:
        response = await client.request(topic, EchoRequest(text="x" * 5000), EchoResponse, timeout=30)
    assert response.error is not None and response.error.type == "MessageTooLarge", (
        f"a request over a processor's max_message_bytes=2000 was answered with {response!r} "
        f"(handler calls: {len(calls)}): ProcessorSettings.max_message_bytes is not enforced"
    )
    assert "max_message_bytes=2000" in response.error.message
    assert "RAGBUS_PROCESSORS__ECHO__MAX_MESSAGE_BYTES" in response.error.message
    assert calls == []


@pytest.mark.parametrize("backend", ["memory", "kafka", "pulsar"])
async def test_a_processor_follows_the_bus_limit_unless_set_on_its_own(backend, request, topic):
    """With RAGBUS_BUS__MAX_MESSAGE_BYTES raised, each processor once kept its own 1 MB limit: now a processor
    without a limit of its own takes the bus's. On Kafka the topics this bus creates take 3 MB batches
    (max.message.bytes; a broker's own default is about 1 MB): a Kafka of the test's own, since topics
    that exist already (the session's shared reply topic) keep the limit they were made with."""
    url = {"memory": f"memory://{topic}", "kafka": lambda: request.getfixturevalue("own_kafka_broker").url,
           "pulsar": lambda: request.getfixturevalue("pulsar_broker").url}[backend]
    url = url if isinstance(url, str) else url()
    text = "y" * 1_500_000
    try:
        async with await connect(url, settings_for_tests(max_message_bytes=3_000_000)) as bus, \
                serving(bus, echo(topic)), client_on(bus) as client:
            response = await client.request(topic, EchoRequest(text=text), EchoResponse, timeout=30)
    finally:
        drop_memory_broker(topic)
    assert response.error is None, response.error
    assert response.text == text


# --- broker credentials reach the client libraries -------------------------------------------

SECURITY_ENV = {
    "RAGBUS_BUS__KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    "RAGBUS_BUS__KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "RAGBUS_BUS__KAFKA__SASL_PLAIN_USERNAME": "svc-ragbus",
    "RAGBUS_BUS__KAFKA__SASL_PLAIN_PASSWORD": "s3cret with spaces",
    "RAGBUS_BUS__KAFKA__SSL_CAFILE": "/etc/ragbus/ca.pem",
    "RAGBUS_BUS__PULSAR__AUTH_TOKEN": "eyJhbGciOiJIUzI1NiJ9.token",
    "RAGBUS_BUS__PULSAR__TLS_TRUST_CERTS_FILE_PATH": "/etc/ragbus/pulsar-ca.pem",
}


def test_the_settings_page_names_every_security_setting_and_each_is_a_real_setting():
    settings_page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for name in SECURITY_ENV:
        assert name in settings_page, f"docs/settings.md does not name {name}"
    bus = load_settings(environ=SECURITY_ENV).bus
    for name, value in SECURITY_ENV.items():
        section, field = name.removeprefix("RAGBUS_BUS__").lower().split("__")
        assert getattr(getattr(bus, section), field) == value, name


def recording(calls: list) -> type:
    """A stand-in for a client class: records its constructor's arguments, does nothing else."""

    class Recorded:
        def __init__(self, *args, **kwargs) -> None:
            calls.append((args, kwargs))

        async def start(self) -> None:
            pass

        async def stop(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def list_topics(self) -> list[str]:
            return []

        async def describe_cluster(self) -> dict:
            return {"brokers": [{"node_id": 1}]}

        async def create_topics(self, topics) -> None:
            pass

        async def describe_topics(self, names) -> list[dict]:
            return [{"topic": name, "error_code": 0, "partitions": [{"partition": 0, "leader": 1}]} for name in names]

    return Recorded


@pytest.fixture
def kafka_clients(monkeypatch):
    import aiokafka.helpers

    from ragbus.bus.kafka import bus as kafka
    from ragbus.bus.kafka import records

    calls = {"producer": [], "consumer": [], "admin": [], "ssl": []}
    ssl_context = object()

    def create_ssl_context(**kwargs):
        calls["ssl"].append(kwargs)
        return ssl_context

    monkeypatch.setattr(kafka, "AIOKafkaProducer", recording(calls["producer"]))
    monkeypatch.setattr(kafka, "AIOKafkaConsumer", recording(calls["consumer"]))
    monkeypatch.setattr(records, "AIOKafkaConsumer", recording(calls["consumer"]))  # group-less readers
    monkeypatch.setattr(kafka, "AIOKafkaAdminClient", recording(calls["admin"]))
    monkeypatch.setattr(aiokafka.helpers, "create_ssl_context", create_ssl_context)
    return calls, ssl_context


async def test_kafka_security_settings_reach_every_aiokafka_client(kafka_clients):
    from ragbus.bus.kafka.bus import KafkaListener, KafkaSubscription

    calls, ssl_context = kafka_clients
    settings = load_settings(environ={**SECURITY_ENV, "RAGBUS_BUS__KAFKA__SSL_CERTFILE": "/etc/ragbus/client.pem",
                                      "RAGBUS_BUS__KAFKA__SSL_KEYFILE": "/etc/ragbus/client.key"}).bus
    bus = await connect("kafka://broker-1:9093,broker-2:9093", settings)
    try:
        KafkaSubscription(bus, "t", "g")
        KafkaListener(bus, "t")
        await bus.ensure_topics(["t"])
    finally:
        await bus.close()
    assert calls["ssl"] == [
        {"cafile": "/etc/ragbus/ca.pem", "certfile": "/etc/ragbus/client.pem", "keyfile": "/etc/ragbus/client.key"}
    ]
    expected = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc-ragbus",
        "sasl_plain_password": "s3cret with spaces",
        "ssl_context": ssl_context,
    }
    for kind in ("producer", "consumer", "admin"):
        assert calls[kind], f"no aiokafka {kind} was made"
        for _, kwargs in calls[kind]:
            assert kwargs["bootstrap_servers"] == "broker-1:9093,broker-2:9093"
            got = {k: kwargs.get(k) for k in expected}
            assert got == expected, f"aiokafka {kind} got {got}"
    assert len(calls["consumer"]) == 2  # the group subscription and the reply listener


async def test_kafka_plaintext_makes_no_ssl_context(kafka_clients):
    calls, _ = kafka_clients
    bus = await connect("kafka://127.0.0.1:9092", BusSettings(kafka=KafkaOptions(security_protocol="SASL_PLAINTEXT",
                                                                                 sasl_mechanism="PLAIN",
                                                                                 sasl_plain_username="u",
                                                                                 sasl_plain_password="p")))
    await bus.close()
    (_, kwargs), = calls["producer"]
    assert calls["ssl"] == [] and "ssl_context" not in kwargs
    assert (kwargs["security_protocol"], kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "SASL_PLAINTEXT", "u", "p"
    )


@pytest.fixture
async def pulsar_port():
    """A loopback port that accepts connections (PulsarBus.open probes the address first)."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.fixture
def pulsar_clients(monkeypatch):
    import pulsar
    import pulsar.asyncio

    clients, tokens = [], []

    class Token:
        def __init__(self, token):
            tokens.append(token)
            self.token = token

    monkeypatch.setattr(pulsar.asyncio, "Client", recording(clients))
    monkeypatch.setattr(pulsar, "AuthenticationToken", Token)
    return clients, tokens


async def test_pulsar_token_and_tls_settings_reach_the_client(pulsar_clients, pulsar_port):
    clients, tokens = pulsar_clients
    settings = load_settings(environ={**SECURITY_ENV, "RAGBUS_BUS__PULSAR__TLS_ALLOW_INSECURE_CONNECTION": "true"}).bus
    bus = await connect(f"pulsar+ssl://127.0.0.1:{pulsar_port}", settings)
    await bus.close()
    assert tokens == ["eyJhbGciOiJIUzI1NiJ9.token"]
    (args, kwargs), = clients
    assert args == (f"pulsar+ssl://127.0.0.1:{pulsar_port}",)
    assert kwargs["authentication"].token == "eyJhbGciOiJIUzI1NiJ9.token"
    assert kwargs["tls_trust_certs_file_path"] == "/etc/ragbus/pulsar-ca.pem"
    assert kwargs["tls_allow_insecure_connection"] is True


async def test_pulsar_without_credentials_passes_none(pulsar_clients, pulsar_port):
    clients, tokens = pulsar_clients
    bus = await connect(f"pulsar://127.0.0.1:{pulsar_port}", BusSettings(pulsar=PulsarOptions()))
    await bus.close()
    (_, kwargs), = clients
    assert tokens == [] and "authentication" not in kwargs
    assert not kwargs.get("tls_allow_insecure_connection")
