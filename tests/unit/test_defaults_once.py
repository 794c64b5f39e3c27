"""Every default is written once: as its settings Struct field's default (config/settings.py says so).

The walk covers every field of every section: ``[bus]``, ``[client]``, ``[metrics]``, ``[gateway]``
and each ``[processors.NAME]`` of config/defaults.toml, nested tables included. What a user gets
(``load_settings`` with no file and no environment) is compared with config/defaults.toml, with the
Struct defaults, with the keyword defaults of the code that takes those settings one by one, and
with the ``ragbus`` options that stand for a setting (their argparse defaults and the defaults
their help quotes). A second default that differs, anywhere of these, fails here.
"""

from __future__ import annotations

import argparse
import inspect
import re
import tomllib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from ragbus.config.bus import BusSettings
from ragbus.config.settings import (
    DEFAULTS,
    WIRING,
    ClientSettings,
    ConvertSettings,
    GatewaySettings,
    MetricsSettings,
    ProcessorSettings,
    Settings,
    StoresSettings,
    WorkerSettings,
    load_settings,
    processor_settings,
)
from ragbus.cli.main import build_parser
from ragbus.stores.vectors.store import VectorStore
from ragbus.document_rag import DocumentRag
from ragbus.gateway.pipeline import BusPipeline
from ragbus.prompt.extractive.lexical import bm25
from ragbus.runtime.metrics import serve_metrics
from ragbus.runtime.worker import processor_class

TOML = tomllib.loads(DEFAULTS.read_text())
SHIPPED = load_settings(environ={})  # what a user gets: no file of their own, no RAGBUS_ variables
TOP = {"bus": BusSettings, "client": ClientSettings, "metrics": MetricsSettings, "gateway": GatewaySettings,
       "stores": StoresSettings, "worker": WorkerSettings, "convert": ConvertSettings}


def settings_type(section: str) -> type[msgspec.Struct]:
    return TOP[section] if section in TOP else processor_class(TOML["processors"][section]["class"]).Settings


def effective(section: str) -> msgspec.Struct:
    """A section's settings as shipped."""
    if section in TOP:
        return getattr(SHIPPED, section)
    return processor_settings(SHIPPED, section, settings_type(section))


def toml_table(section: str) -> dict[str, Any]:
    return TOML.get(section, {}) if section in TOP else TOML["processors"][section]


SECTIONS = [*TOP, *TOML["processors"]]


def fields(shipped: msgspec.Struct, default: msgspec.Struct, table: dict, path: str = "") -> Iterator[tuple]:
    """(key path, shipped value, Struct default, defaults.toml's value or NODEFAULT) of every leaf field.

    A nested Struct's defaults are those of its parent's default instance (``_layout(partitions=8)``
    is reply_topics' default, not TopicLayout's own).
    """
    for f in msgspec.structs.fields(type(shipped)):
        value, struct_default = getattr(shipped, f.name), getattr(default, f.name)
        if isinstance(value, msgspec.Struct):
            yield from fields(value, struct_default, table.get(f.name, {}), f"{path}{f.name}.")
        else:
            yield f"{path}{f.name}", value, struct_default, table.get(f.name, msgspec.NODEFAULT)


def every_field() -> Iterator[tuple]:
    for section in SECTIONS:
        for key, value, struct_default, in_toml in fields(effective(section), settings_type(section)(),
                                                          toml_table(section)):
            yield section, key, value, struct_default, in_toml


def lookup(section: str, key: str) -> Any:
    value: Any = effective(section)
    for part in key.split("."):
        value = getattr(value, part)
    return value


def test_the_walk_covers_every_section_and_field():
    assert set(TOP) == {f.name for f in msgspec.structs.fields(Settings)} - {"processors"}
    walked = {(section, key) for section, key, *_ in every_field()}
    assert ("document-rag", "retrieval_mode") in walked and ("bus", "kafka.reply_topics.partitions") in walked
    assert ("embed", "onnx.batch_tokens") in walked and ("prompt", "extractive.k1") in walked
    assert len(walked) > 200


def test_defaults_toml_sets_no_setting_only_the_wiring():
    def settings_in(table: dict, path: str = "") -> Iterator[str]:
        for key, value in table.items():
            if isinstance(value, dict):
                yield from settings_in(value, f"{path}{key}.")
            elif path or key not in WIRING:
                yield f"{path}{key} = {value!r}"

    written = {s: list(settings_in(TOML[s])) for s in TOP if s in TOML}
    written |= {s: list(settings_in(t)) for s, t in TOML["processors"].items()}
    assert {s: keys for s, keys in written.items() if keys} == {}, (
        "config/defaults.toml sets these, a second place beside the Struct field's default"
    )


def test_every_shipped_default_is_the_struct_fields_default():
    differing = [
        f"[{section}] {key}: shipped {value!r}, Struct default {struct_default!r}"
        + ("" if in_toml is msgspec.NODEFAULT else f", defaults.toml {in_toml!r}")
        for section, key, value, struct_default, in_toml in every_field()
        if key not in WIRING and value != struct_default
    ]
    assert differing == []


def test_the_wiring_is_written_in_defaults_toml_alone():
    """A section's topics are its name's unless defaults.toml says: the Struct stands for "not set"."""
    wiring = {f.name: f.default for f in msgspec.structs.fields(ProcessorSettings) if f.name in WIRING}
    assert wiring == {"topic": "", "group": "", "bulk_topic": ""}
    for name, table in TOML["processors"].items():
        assert {k: v for k, v in msgspec.structs.asdict(settings_type(name)()).items() if k in WIRING} == wiring
        shipped = effective(name)
        assert (shipped.topic, shipped.group) == (table.get("topic", name), table.get("group", name))
        assert shipped.bulk_topic == table.get("bulk_topic", "")


# Code that takes settings one keyword at a time: (callable, its section, the prefix of its keys there).
KEYWORD_TAKERS: list[tuple[Callable, str, str]] = [
    (DocumentRag, "document-rag", ""),
    (VectorStore, "doc-embeddings-query", ""),
    (bm25, "prompt", "extractive."),
    (serve_metrics, "metrics", ""),
    (BusPipeline, "gateway", ""),
]


@pytest.mark.parametrize(("taker", "section", "prefix"), KEYWORD_TAKERS, ids=lambda x: getattr(x, "__name__", x))
def test_keyword_defaults_are_the_shipped_settings(taker, section, prefix):
    keys = {key for s, key, *_ in every_field() if s == section}
    taken = {
        name: p.default for name, p in inspect.signature(taker).parameters.items()
        if f"{prefix}{name}" in keys and p.default is not inspect.Parameter.empty
    }
    assert taken, f"{taker.__name__} takes no [{section}] setting with a default: drop it from the list"
    seeded = SEEDED.get(taker, {})
    assert {k: v for k, v in taken.items() if v != seeded.get(k, lookup(section, prefix + k))} == {}


# Keyword defaults the user's seeds fix for a class built by hand (the deployment passes its settings):
# seed 000, DocumentRag runs vector unless asked and fuses hybrid by weighted RRF.
SEEDED: dict[Callable, dict[str, Any]] = {DocumentRag: {"retrieval_mode": "vector", "fusion": "rrf"}}


def test_document_rag_takes_every_setting_it_shares_a_name_with_from_the_settings():
    """The class a deployment and a script both build answers alike with no keywords at all, but for
    the two the user's seed fixes for the class built by hand: vector mode (the keyword path opt-in)
    and RRF fusion. The deployed processor passes its configured ones."""
    shared = {name for name in inspect.signature(DocumentRag).parameters} & {
        f.name for f in msgspec.structs.fields(settings_type("document-rag"))}
    assert shared >= {"retrieval_mode", "fusion", "doc_limit", "path_timeout_s", "vector_weight", "max_concepts"}
    rag = DocumentRag(None, None, None, None, kw_index_client=object())
    seeded = {"retrieval_mode": "vector", "fusion": "rrf"}
    assert {n: getattr(rag, n) for n in shared} == {n: seeded.get(n, lookup("document-rag", n)) for n in shared}


async def test_the_document_rag_processor_runs_its_configured_mode_and_fusion_not_the_class_defaults():
    from ragbus.bus import connect
    from ragbus.document_rag import DocumentRagProcessor

    processor = DocumentRagProcessor("document-rag", settings_type("document-rag")())
    processor.bus = await connect("memory://document-rag-configured-mode")
    await processor.start()
    try:
        rag = processor._rag
        assert rag is not None
        assert (rag.retrieval_mode, rag.fusion) == (lookup("document-rag", "retrieval_mode"),
                                                    lookup("document-rag", "fusion")) == ("hybrid", "minmax")
    finally:
        await processor.close()
        await processor.bus.close()


# ragbus options that stand for a setting: they default to None, so the command reads the setting.
OPTION_SETTINGS = {
    "--bus": ("bus", "url"),
    "--host": ("gateway", "host"),
    "--port": ("gateway", "port"),
    "--mode": ("document-rag", "retrieval_mode"),
    "--doc-limit": ("document-rag", "doc_limit"),
}
# How a help text quotes the default of a setting.
QUOTED = [
    re.compile(r"\(default: \[(?P<section>[\w-]+)\] (?P<key>[\w.]+), (?P<value>[^)]+)\)"),
    re.compile(r"\(default: (?P<section>[\w-]+)'s (?P<key>[\w.]+), (?P<value>\S+) as shipped\)"),
    re.compile(r"\(default: RAGBUS_(?P<section>[A-Z]+)__(?P<key>[A-Z_]+) or (?P<value>[^)]+)\)"),
]


def cli_options() -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    def walk(parser: argparse.ArgumentParser, command: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{command} {name}")
            elif action.option_strings:
                yield command, parser, action

    yield from walk(build_parser(), "ragbus")


def same(quoted: str, value: Any) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(quoted) == value
    return quoted == str(value)


def test_cli_options_standing_for_settings_default_to_them():
    checked, wrong = set(), []
    for command, parser, action in cli_options():
        option = action.option_strings[-1]
        setting = OPTION_SETTINGS.get(option)
        if option == "--timeout":
            setting = ("client", parser.get_default("timeout_setting"))
        if setting is not None:
            checked.add(option)
            if action.default is not None and action.default != lookup(*setting):
                wrong.append(f"{command} {option} defaults to {action.default!r}, [{setting[0]}] {setting[1]} "
                             f"to {lookup(*setting)!r}")
        for pattern in QUOTED:
            if match := pattern.search(action.help or ""):
                section, key = match["section"].lower(), match["key"].lower()
                checked.add(f"{option} help")
                if not same(match["value"].strip(), lookup(section, key)):
                    wrong.append(f"{command} {option}'s help quotes {match['value']!r} for [{section}] {key}, "
                                 f"shipped {lookup(section, key)!r}")
    assert checked >= {*OPTION_SETTINGS, "--timeout", "--timeout help", "--mode help", "--bus help", "--port help"}
    assert wrong == []
