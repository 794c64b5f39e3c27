"""The code layout holds: layers import only downwards, no module imports one that imports it back,
every pipeline names configured processors, and every processor speaks its topic's schema."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from config import pipelines
from config.settings import load_settings, processor_settings
from processors.runtime.worker import processor_class
from schema.topics import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processors", "schema", "config")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file, function bodies included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from pkg import mod` imports the module; `from pkg import name` the package.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


GRAPH = {name: imports(name, path, modules()) for name, path in modules().items()}


def layer(name: str) -> float:
    """config and schema < bus < runtime < ingestion < a processor package < replica < testing < cli.

    The replica (a host's document stores made from the log) applies each record with the stores'
    own writers, so it sits above the store packages, as the CLI sits above what it runs.
    """
    parts = name.split(".")
    if parts[0] in ("config", "schema"):
        return 0
    if len(parts) == 1:
        return 0  # processors/__init__.py
    return {"bus": 1, "runtime": 2, "ingestion": 2.5, "replica": 3.5, "testing": 4, "cli": 5}.get(parts[1], 3)


def test_every_module_imports():
    """A moved module leaves no import behind pointing at its old place (function-level ones included)."""
    known = modules()
    missing = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                if base not in known:
                    missing.append(f"{name}: from {'.' * node.level}{node.module or ''} import ...")
    assert missing == []


def test_processors_top_level_holds_packages_only():
    loose = [p.name for p in (ROOT / "processors").iterdir() if p.is_file() and p.name != "__init__.py"]
    assert loose == []


def test_no_module_imports_one_that_imports_it_back():
    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(GRAPH[current])
        return False

    cycles = sorted({tuple(sorted((a, b))) for a, targets in GRAPH.items() for b in targets if reaches(b, a)})
    assert cycles == []


def test_layers_import_only_downwards():
    upwards = [
        f"{a} imports {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if layer(b) > layer(a) or (layer(a) == layer(b) == 3 and a.split(".")[1] != b.split(".")[1])
    ]
    assert upwards == []


def test_the_bus_reads_no_settings_of_its_own():
    bus_imports = {b for a, targets in GRAPH.items() if a.startswith("processors.bus") for b in targets}
    assert "config.settings" not in bus_imports


def test_every_pipeline_names_configured_processors():
    configured = set(load_settings(environ={}).processors)
    lists = {name: value for name, value in vars(pipelines).items() if name.isupper() and name != "ROLES"}
    lists |= {f"role({role!r}, log={log})": pipelines.role(role, log=log) for role in pipelines.ROLES
              for log in (False, True)}
    assert lists, "config/pipelines.py defines no pipelines"
    for name, names in lists.items():
        assert set(names) <= configured, f"pipelines.{name} names unconfigured {set(names) - configured}"
    assert set(pipelines.EVERYTHING) == configured - set(pipelines.LOG_ONLY)
    assert not set(pipelines.EVERYTHING) & set(pipelines.LOG_ONLY)


@pytest.mark.parametrize("name", sorted(load_settings(environ={}).processors))
def test_each_processor_speaks_its_topics_schema(name):
    settings = load_settings(environ={})
    cls = processor_class(settings.processors[name]["class"])
    topic = processor_settings(settings, name, cls.Settings).topic
    assert topic in SCHEMAS, f"{name} consumes {topic!r}, which schema/topics.py does not list"
    assert (cls.request_type, cls.response_type) == tuple(SCHEMAS[topic])


@pytest.mark.parametrize("client, package", [("aiokafka", "processors.bus.kafka"), ("pulsar", "processors.bus.pulsar"),
                                             ("_pulsar", "processors.bus.pulsar")])
def test_a_broker_client_is_imported_only_in_its_backend(client, package):
    """The memory bus and everything above the bus load no broker client; each backend keeps its own."""
    outside = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            if client in roots and not name.startswith(f"{package}."):
                outside.append(name)
    assert outside == []


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers/; a test module or conftest imported for a helper would run
    or register its tests and fixtures a second time, under another name."""
    tests = ROOT / "tests"
    found = []
    for path in tests.rglob("*.py"):
        package = list(path.relative_to(ROOT).parent.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("tests")):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = [*base, *(node.module or "").split(".")] if node.module else base
                names = [[*target, alias.name] for alias in node.names] if not node.module else [target]
                for parts in names:
                    if parts[-1].startswith("test_") or parts[-1] == "conftest":
                        found.append(f"{path.relative_to(ROOT)}: {'.'.join(parts)}")
    assert found == []
