"""Loading settings: packaged defaults, then a user TOML file, then environment variables.

Each processor gets one typed settings object (its class's ``Settings``),
built from its ``[processors.NAME]`` section; an unknown or mistyped key is
an error naming the key, not a silent default.

Every default is written once: as the default of its Struct field (here, in ``config/bus.py``
and in each processor's ``settings.py``), beside the comment saying why. msgspec applies it to a
key a file leaves out, so ``config/defaults.toml`` sets no setting at all: it only wires the
processors (``class``, and ``topic`` or ``bulk_topic`` where a section's differs from its name).
Code that takes a setting as a keyword (``DocumentRag``, ``VectorStore``) reads its default from
the Struct or has none; ``tests/unit/test_defaults_once.py`` fails on a second, differing default.
"""

from __future__ import annotations

import inspect
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from .bounds import LANGUAGE_PATTERN, NonNegativeInt, NonNegativeSeconds, Port, PositiveInt, PositiveSeconds
from .bus import BusSettings

ENV_PREFIX = "RAGBUS_"
DEFAULTS = Path(__file__).with_name("defaults.toml")


class SettingsError(ValueError):
    pass


class ProcessorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What every processor has; a processor's own Settings subclass adds its fields."""

    topic: str = ""  # default: the section name
    group: str = ""  # default: the section name
    # How many requests one replica handles at once.
    concurrency: PositiveInt = 16
    # A second request topic, for bulk work (ingestion's), served by the same handler through a consumer
    # of its own (group: bulk_group(group)) with bulk_concurrency: bulk requests waiting on the bus never
    # queue in front of interactive ones, and the handler learns which lane a request came on
    # (RequestContext.bulk). "" = no bulk lane. Set in config/defaults.toml where a processor has one.
    bulk_topic: str = ""
    bulk_concurrency: PositiveInt = 4
    # Serve the request topic. False: the bulk lane alone, as the chart's ingestion hosts do with embed:
    # questions' embedding stays with the query hosts, so an ingestion host starting or stopping never
    # rebalances a group a question waits on. Needs a bulk_topic.
    interactive: bool = True
    # A handler running longer than this (or past the request's deadline) gets an error response.
    handler_timeout_s: PositiveSeconds = 30.0
    # Failures (transport, not business errors) before a request is dead-lettered.
    # None: the bus's max_attempts (RAGBUS_BUS__MAX_ATTEMPTS).
    max_attempts: PositiveInt | None = None
    # Requests above this size are refused unread: answered with an error naming the limit when
    # the sender can be answered, else dead-lettered. None: the bus's max_message_bytes
    # (RAGBUS_BUS__MAX_MESSAGE_BYTES); a number can only lower the bus's limit for this processor.
    max_message_bytes: PositiveInt | None = None
    # SIGTERM: how long requests in flight may take to finish before they are nacked.
    drain_timeout_s: NonNegativeSeconds = 10.0


S = TypeVar("S", bound=ProcessorSettings)


class StoreSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    """What every processor of a store has (doc-embeddings, keyword, kg, library): where its data lives,
    and whether it comes from the bus's log."""

    # Where the store's files live, ~ expanded: <data_dir>/<collection>/<store>/. "" = default_data_dir()
    # (RAGBUS_DATA_DIR, else $XDG_DATA_HOME/ragbus, else ~/.local/share/ragbus). Writers and query
    # replicas must name the same directory, unless the store comes from the log.
    data_dir: str = ""
    # Make the store from the bus's log instead of sharing a data dir: its writers append every change
    # to a log topic (any number of writers, no writer lock), and every query replica keeps stores of its
    # own, made from that log, in its own data_dir (processors/stores/follower.py). Needs a bus with log
    # topics: Kafka or Pulsar across hosts, memory:// within one process.
    changelog: bool = False
    # The log topic: "" = the store's own (ragbus.schema.topics: GRAPH_LOG for the graph, DOCUMENTS_LOG for
    # the document stores and the library). One per deployment: every collection is in it.
    log_topic: str = ""
    # A read whose request must see a write (``must_see``) waits this long at most for the replica to apply
    # it, then fails, saying the replica is behind.
    fresh_wait_s: PositiveSeconds = 10.0
    # With changelog, a replica of the log (documents-replica, kg-query) says how far it has applied it
    # this often, on the bus (processors/stores/reports.py): what ``ragbus status`` shows.
    report_interval_s: PositiveSeconds = 5.0


# The keys of a [processors.NAME] section that wire it rather than set it: which class runs and on
# which topics. They are the only keys config/defaults.toml writes.
WIRING = ("class", "topic", "group", "bulk_topic")


def bulk_group(group: str) -> str:
    """The consumer group of a processor's bulk lane (``ProcessorSettings.bulk_topic``)."""
    return f"{group}-bulk"


def lanes(name: str, section: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(topic, group) of each lane a ``[processors.NAME]`` section serves: its topic (unless ``interactive``
    is false), then its bulk topic."""
    group = section.get("group") or name
    # A raw section: a value from the environment is still a string ("false", "0").
    try:
        interactive = msgspec.convert(section.get("interactive", True), bool, strict=False)
    except msgspec.ValidationError:
        raise SettingsError(f"[processors.{name}] interactive: {section['interactive']!r} "
                            "is not true or false") from None
    found = [(section.get("topic") or name, group)] if interactive else []
    if section.get("bulk_topic"):
        found.append((section["bulk_topic"], bulk_group(group)))
    return found


class ClientSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # How long a caller waits for a response unless the call says otherwise (ragbus ask, kg query).
    request_timeout_s: PositiveSeconds = 30.0
    # How long ragbus ingest, kg load and delete wait for one document, graph batch or deletion.
    store_timeout_s: PositiveSeconds = 600.0
    # A command's call unanswered this long asks the bus whether any worker consumes its topic,
    # and asks again as often while it waits. Where the bus can tell (memory, Kafka; not Pulsar), a topic
    # nobody consumes ends the call at once with an error naming it. 0 = never ask.
    served_check_s: NonNegativeSeconds = 2.0
    # An unanswered request is published again (same request id) this often until it times
    # out, so one lost with a dead worker is served by another replica. 0 = never.
    resend_after_s: NonNegativeSeconds = 10.0
    # When stderr is not a terminal (a log, CI), ingest, kg load and first use write a line of
    # progress at most this often (and the first and last step); 0 = every step.
    progress_interval_s: NonNegativeSeconds = 10.0
    # Ctrl-C during ragbus ingest on a broker: how long the command waits for the workers to discard
    # what it had staged of the document it was sending (on memory:// the files go at once).
    interrupt_timeout_s: PositiveSeconds = 2.0


class RetrySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How a backend retries an HTTP endpoint (embed's and prompt's ``openai``): one set of names and
    defaults for both. Here, not beside the retry code in ``processors/runtime/http.py``, so reading
    settings does not import httpx: a backend's dependencies load only when it is chosen."""

    # Further attempts after a 429, a 5xx or a failed connection; 0 = try once. Other 4xx never retry.
    max_retries: NonNegativeInt = 3
    # Attempt n (from 1) waits backoff_base_s * 2**(n-1), at most backoff_max_s, times a random
    # factor in [0.5, 1] so replicas that failed together do not retry together.
    backoff_base_s: NonNegativeSeconds = 0.5
    backoff_max_s: NonNegativeSeconds = 8.0
    # A Retry-After header replaces the backoff, up to this long; a longer one fails the request.
    max_retry_after_s: NonNegativeSeconds = 30.0


class MetricsSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Prometheus text format on http://HOST:PORT/metrics; 0 = off.
    port: Port = 0
    host: str = "127.0.0.1"


class GatewaySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``ragbus serve``: the HTTP gateway (``processors/gateway``)."""

    host: str = "127.0.0.1"
    port: Port = 8000
    # Bearer keys a request must carry (Authorization: Bearer KEY); none = no authentication (and
    # loopback only). Also from RAGBUS_API_KEYS (comma-separated), added to these. An entry is KEY
    # (admin of every collection) or KEY=ROLE@COLLECTION+COLLECTION, ROLE read, ingest or admin,
    # "@*" every collection (processors/gateway/keys.py).
    api_keys: list[str] = []
    # A TOML file of [[keys]] tables (key, role, collections), added to api_keys; "" = none.
    keys_file: str = ""
    # A request body over this is refused with 413 before it is read whole (uploads included).
    max_body_bytes: PositiveInt = 8 * 1024 * 1024
    # Requests answered at once, each counted once its body is read (a body still arriving holds no
    # place); past this a request gets 503 with Retry-After at once, not a queue.
    max_in_flight: PositiveInt = 64
    # Of those, the most one key may have: past it that key gets 429 with Retry-After, so a key that
    # fills its share leaves the rest (16 of the 64) to the others, the admin's among them; a deployment
    # with one key still takes most of the gateway's load. Not applied with no keys set (one caller).
    max_in_flight_per_key: PositiveInt = 48
    retry_after_s: PositiveInt = 1
    # Origins allowed by CORS (e.g. ["https://chat.example.com"], or ["*"]); none = CORS off. MCP at /mcp
    # takes the same list: on loopback its check of a browser's Origin allows these besides loopback's own.
    cors_origins: list[str] = []
    # /ready asks the pipeline at most this often; an answer counts for that long.
    ready_check_s: PositiveSeconds = 5.0
    # A request's line and headers together over this get 431 and the connection closed.
    max_head_bytes: PositiveInt = 64 * 1024
    # From a request's first byte to the end of its headers; past it, 408 and the connection closed.
    head_timeout_s: PositiveSeconds = 10.0
    # A connection silent this long is closed: before its first request, between requests
    # (uvicorn's keep-alive timeout), or in the middle of a request's body.
    idle_timeout_s: PositiveSeconds = 5.0
    # From the end of a request's headers to the end of its body (8 MiB in 60 s is 140 KB/s); past it,
    # 408 and the connection closed, however steadily the bytes come.
    body_timeout_s: PositiveSeconds = 60.0
    # On SIGTERM, /ready answers 503 at once while requests are still taken this long, so a load
    # balancer (a Kubernetes Service's endpoints) stops sending here before the listener closes; the
    # chart sets 5 s. SIGINT (Ctrl-C) closes at once.
    shutdown_delay_s: NonNegativeSeconds = 0.0
    # Then requests in flight get this long to be answered before they are cut.
    drain_timeout_s: NonNegativeSeconds = 10.0


class StoresSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[stores]``: where a deployment's stores come from, for every store processor at once."""

    # Every store made from the bus's log (docs/stores-from-the-log.md): each store processor's
    # ``changelog`` is true unless its own section says otherwise. RAGBUS_STORES__LOG=true.
    log: bool = False
    # Split each collection's document stores over query hosts (with ``log``): shard k holds the documents
    # log's partitions p with p % shards == k (schema/shards.py), a query host keeps only the shards the
    # broker assigns it, and document-rag asks every shard and merges. Fixed when the log is made: its
    # partitions must be a multiple. 0 = unsharded (every query host holds everything). Every processor
    # whose settings have ``shards`` takes this unless its section says otherwise.
    shards: Annotated[int, msgspec.Meta(ge=0)] = 0


class ConvertSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[convert]``: how files become text (docs/ingestion.md, "Scans and images")."""

    # Read pages that have no text layer (or too little for their area), and images, with Tesseract
    # (Debian's tesseract-ocr). false: such a page gives no text, an image file is refused.
    ocr: bool = True
    # Tesseract's language codes, several joined by "+" ("eng+deu"); each is a Debian package of its own
    # (tesseract-ocr-deu). RAGBUS_CONVERT__LANGUAGE=deu; ``ragbus ingest --language`` says it too.
    language: Annotated[str, msgspec.Meta(pattern=f"^{LANGUAGE_PATTERN}$")] = "eng"
    # A PDF page without text is rendered at this resolution to be read (less if its pixels would pass
    # ``max_page_pixels``).
    dpi: Annotated[int, msgspec.Meta(ge=72, le=1200)] = 300
    # A document of more pages (or an image of more frames) is refused before any is read.
    max_pages: PositiveInt = 2000
    # An image page of more pixels is refused before it is decoded (a decompression bomb is small on disk).
    max_page_pixels: PositiveInt = 100_000_000
    # Tesseract is stopped after this long on one page, which then fails the document, saying which page.
    page_timeout_s: PositiveSeconds = 120.0
    # Send PDFs and images to the document-convert processors on the bus (processors/document_convert) rather
    # than read them in this process: OCR takes about a second a page, so conversion scales with its workers as
    # embedding does. The other kinds are read here either way. RAGBUS_CONVERT__ON_BUS=true.
    on_bus: bool = False


class WorkerSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[worker]``: what ``ragbus worker`` runs when it is named no processor."""

    # A host's role, one switch (config/pipelines.py ROLES): "ingest" (the writers, and the library
    # document-load asks), "query" (the query processors and the orchestrator), "all" (both in one
    # process, a small site); with [stores] log, each with the replica that makes its stores from the
    # log. "" = none: name processors or pass --all. RAGBUS_WORKER__ROLE=query; ``--role`` says it too.
    role: Literal["", "ingest", "query", "all"] = ""


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    bus: BusSettings = msgspec.field(default_factory=BusSettings)
    client: ClientSettings = msgspec.field(default_factory=ClientSettings)
    metrics: MetricsSettings = msgspec.field(default_factory=MetricsSettings)
    gateway: GatewaySettings = msgspec.field(default_factory=GatewaySettings)
    stores: StoresSettings = msgspec.field(default_factory=StoresSettings)
    worker: WorkerSettings = msgspec.field(default_factory=WorkerSettings)
    convert: ConvertSettings = msgspec.field(default_factory=ConvertSettings)
    # Raw sections (config/defaults.toml wires them); ``processor_settings`` types them with
    # the processor's own class.
    processors: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


def _merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_overrides(environ: Mapping[str, str], known_processors: set[str]) -> dict:
    tree: dict = {}
    by_env_name = {p.upper().replace("-", "_"): p for p in known_processors}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        if path[0] == "processors" and len(path) > 1:
            path[1] = by_env_name.get(path[1].upper(), path[1].replace("_", "-"))
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def load_settings(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    raw = tomllib.loads(DEFAULTS.read_text())
    path = path or environ.get("RAGBUS_CONFIG")
    if path:
        try:
            user = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise SettingsError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {path}: {exc}") from None
        raw = _merge(raw, user)
    raw = _merge(raw, _env_overrides(environ, set(raw.get("processors", {}))))
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid settings: {exc}") from None


def processor_settings(settings: Settings, name: str, settings_type: type[S]) -> S:
    """The typed settings of processor ``name`` (its section minus ``class``)."""
    section = dict(settings.processors.get(name, {}))
    section.pop("class", None)
    section.setdefault("topic", name)
    section.setdefault("group", name)
    if settings.stores.log and issubclass(settings_type, StoreSettings):
        section.setdefault("changelog", True)  # [stores] log: every store from the log, unless its section says
    if "shards" in settings_type.__struct_fields__:
        section.setdefault("shards", settings.stores.shards)
    try:
        typed = msgspec.convert(section, settings_type, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid settings for processor {name!r}: {exc}") from None
    if not typed.interactive and not typed.bulk_topic:
        raise SettingsError(f"processor {name!r}: interactive = false leaves it only its bulk lane, and it has "
                            "no bulk_topic: it would serve nothing")
    return typed


def arguments_for(target: Any, settings: msgspec.Struct) -> dict[str, Any]:
    """The fields of ``settings`` that ``target`` (a class or function) takes as keyword arguments of the
    same name: a processor hands its settings to what it builds without copying them one by one."""
    taken = inspect.signature(target).parameters
    return {name: getattr(settings, name) for name in settings.__struct_fields__
            if name in taken and taken[name].kind in (inspect.Parameter.KEYWORD_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD)}


def bus_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> BusSettings:
    """The bus settings from files and environment, with ``overrides`` (None = keep) on top."""
    base = load_settings(environ=environ).bus
    changes = {k: v for k, v in overrides.items() if v is not None}
    if not changes:
        return base
    try:
        return msgspec.convert(_merge(msgspec.to_builtins(base), changes), BusSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid bus settings: {exc}") from None


def default_data_dir() -> Path:
    """Where stores live unless a processor's ``data_dir`` says otherwise.

    ``RAGBUS_DATA_DIR`` if set, else ``$XDG_DATA_HOME/ragbus``, else
    ``~/.local/share/ragbus``: one directory per user, surviving restarts.
    """
    explicit = os.environ.get("RAGBUS_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "ragbus"


def data_dir(configured: str = "") -> Path:
    """A store's directory: its processor's ``data_dir`` setting (``~`` expanded), else ``default_data_dir()``."""
    return Path(configured).expanduser() if configured else default_data_dir()
