"""Every number a user or a caller can set is bounded where it is read, and the bounds agree.

The walks below find every numeric field of the settings (``[bus]``, ``[client]``,
``[metrics]``, each configured processor's Settings and what they nest) and of every
request Struct in ``schema/topics.py``, so a field added later without a bound fails here.
"""

from __future__ import annotations

import msgspec
import msgspec.inspect as mi
import pytest

from ragbus.config.settings import Settings, SettingsError, load_settings, processor_settings
from ragbus.runtime.worker import processor_class
from ragbus.schema import DecodeError, DocumentRagRequest, decode, encode
from ragbus.schema.topics import SCHEMAS


def numeric_fields(struct: type, path: str = "", seen: set | None = None):
    """(dotted name, IntType/FloatType) of every int or float field reachable from ``struct``.

    Structs inside fields (also inside lists, dicts and optionals) are walked; numbers that are
    items of a list (a vector's components) are data, not a setting or a count, so are left out.
    """
    seen = set() if seen is None else seen
    if struct in seen:
        return
    seen.add(struct)
    for field in mi.type_info(struct).fields:
        yield from _numbers(field.type, f"{path}{field.name}", seen)


def _numbers(t, name: str, seen: set):
    if isinstance(t, mi.IntType | mi.FloatType):
        yield name, t
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            yield from _numbers(member, name, seen)
    elif isinstance(t, mi.StructType):
        yield from numeric_fields(t.cls, f"{name}.", seen)
    elif isinstance(t, mi.ListType | mi.DictType):
        item = t.item_type if isinstance(t, mi.ListType) else t.value_type
        if isinstance(item, mi.StructType):
            yield from numeric_fields(item.cls, f"{name}[].", seen)


def settings_classes() -> dict[str, type]:
    settings = load_settings(environ={})
    found = {"": Settings}
    for name, section in settings.processors.items():
        found[f"processors.{name}."] = processor_class(section["class"]).Settings
    return found


def unbounded(fields) -> list[str]:
    return [name for name, t in fields if t.ge is None and t.gt is None]


def test_every_numeric_setting_has_a_lower_bound():
    missing = [
        f"{prefix}{name}" for prefix, cls in settings_classes().items() for name in unbounded(numeric_fields(cls))
    ]
    assert missing == []


@pytest.mark.parametrize("topic", sorted(SCHEMAS))
def test_every_number_a_request_carries_has_a_lower_bound(topic):
    assert unbounded(numeric_fields(SCHEMAS[topic].request)) == []


def lower(struct: type, field: str) -> int:
    """The smallest int ``field`` of ``struct`` accepts."""
    t = dict(numeric_fields(struct))[field]
    return t.ge if t.ge is not None else t.gt + 1


def test_a_limit_passed_from_one_processor_to_another_has_the_same_lower_bound_on_both_sides():
    from ragbus.document_rag.settings import DocumentRagSettings
    from ragbus.schema import DocEmbeddingsRequest, KeywordQueryRequest, KgQueryRequest

    # document-rag's doc_limit becomes the limit of its doc-embeddings-query and keyword-query calls.
    doc_limits = {
        "DocumentRagRequest.doc_limit": lower(DocumentRagRequest, "doc_limit"),
        "DocumentRagSettings.doc_limit": lower(DocumentRagSettings, "doc_limit"),
        "DocumentRagSettings.max_doc_limit": lower(DocumentRagSettings, "max_doc_limit"),
        "DocEmbeddingsRequest.limit": lower(DocEmbeddingsRequest, "limit"),
        "KeywordQueryRequest.limit": lower(KeywordQueryRequest, "limit"),
    }
    assert set(doc_limits.values()) == {1}, doc_limits
    # Its fact_limit becomes the limit of its kg-query call.
    assert lower(DocumentRagSettings, "fact_limit") == lower(KgQueryRequest, "limit") == 0


@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("RAGBUS_PROCESSORS__DOCUMENT_RAG__DOC_LIMIT", "0", "doc_limit"),
        ("RAGBUS_PROCESSORS__DOCUMENT_LOAD__CONCURRENCY", "0", "concurrency"),
        ("RAGBUS_PROCESSORS__EMBED__HANDLER_TIMEOUT_S", "-1", "handler_timeout_s"),
        ("RAGBUS_PROCESSORS__KG_QUERY__MAX_ATTEMPTS", "0", "max_attempts"),
    ],
)
def test_an_out_of_range_processor_setting_is_an_error_naming_it(variable, value, names):
    settings = load_settings(environ={variable: value})
    name = variable.split("__")[1].lower().replace("_", "-")
    with pytest.raises(SettingsError, match=names):
        processor_settings(settings, name, processor_class(settings.processors[name]["class"]).Settings)


@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("RAGBUS_BUS__MAX_ATTEMPTS", "0", "max_attempts"),
        ("RAGBUS_BUS__MAX_MESSAGE_BYTES", "0", "max_message_bytes"),
        ("RAGBUS_BUS__CONNECT_TIMEOUT_S", "0", "connect_timeout_s"),
        ("RAGBUS_BUS__KAFKA__SESSION_TIMEOUT_MS", "0", "session_timeout_ms"),
        ("RAGBUS_BUS__PULSAR__OPERATION_TIMEOUT_SECONDS", "0", "operation_timeout_seconds"),
        ("RAGBUS_CLIENT__REQUEST_TIMEOUT_S", "0", "request_timeout_s"),
        ("RAGBUS_METRICS__PORT", "70000", "port"),
    ],
)
def test_an_out_of_range_bus_client_or_metrics_setting_is_an_error_naming_it(variable, value, names):
    with pytest.raises(SettingsError, match=names):
        load_settings(environ={variable: value})


@pytest.mark.parametrize("doc_limit", [0, -1])
def test_a_document_rag_request_for_no_chunks_is_refused_when_read_naming_the_field(doc_limit):
    body = encode(DocumentRagRequest(query="with", doc_limit=doc_limit))
    with pytest.raises(DecodeError, match="doc_limit"):
        decode(body, DocumentRagRequest)


def within(t, value) -> bool:
    return (t.ge is None or value >= t.ge) and (t.gt is None or value > t.gt) and \
        (t.le is None or value <= t.le) and (t.lt is None or value < t.lt)


def test_the_bounds_admit_every_default():
    settings = load_settings(environ={})
    for name, section in settings.processors.items():
        processor_settings(settings, name, processor_class(section["class"]).Settings)  # raises if refused
    for schema in SCHEMAS.values():
        bounds = dict(numeric_fields(schema.request))
        for field in msgspec.structs.fields(schema.request):
            if field.name in bounds and isinstance(field.default, int | float):
                assert within(bounds[field.name], field.default), (schema.request.__name__, field.name)
