"""The code layout holds: layers import only downwards, no module imports one that imports it back,
every pipeline names configured processors, and every processor speaks its topic's schema."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from ragbus.config import pipelines
from ragbus.config.settings import load_settings, processor_settings
from ragbus.runtime.worker import processor_class
from ragbus.schema.topics import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
# Each folder's name in the installed package (pyproject.toml [tool.setuptools] package-dir).
PACKAGES = {"processors": "ragbus", "schema": "ragbus.schema", "config": "ragbus.config"}
PACKAGES_BY_NAME = {name: folder for folder, name in PACKAGES.items()}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (names for the type checker, never imported)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                todo.extend(child.orelse)
            else:
                todo.append(child)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file, function bodies included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
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
    """config and schema < bus < runtime < stores < ingestion < a processor package < testing < cli
    < the package's own ``__init__`` (the public API, naming what every layer defines).

    The stores (their files, writers and replication from the log) sit below every processor package,
    so a store processor and the documents replica are adapters over them and import no other package.
    """
    parts = name.split(".")
    if len(parts) == 1:
        return 6  # processors/__init__.py: ragbus itself
    return {"config": 0, "schema": 0, "bus": 1, "runtime": 2, "stores": 2.2, "ingestion": 2.5,
            "testing": 4, "cli": 5}.get(parts[1], 3)


def absolute_imports(path: Path) -> list[tuple[int, list[str]]]:
    """(line, the top-level names it imports) of each absolute import of a file, function bodies included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.append((node.lineno, [alias.name.split(".")[0] for alias in node.names]))
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, [(node.module or "").split(".")[0]]))
    return found


def test_every_module_imports():
    """A moved module leaves no import behind pointing at its old place (function-level ones included)."""
    known = modules()
    missing = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "ragbus"):
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
    bus_imports = {b for a, targets in GRAPH.items() if a.startswith("ragbus.bus") for b in targets}
    assert "ragbus.config.settings" not in bus_imports


def test_every_pipeline_names_configured_processors():
    configured = set(load_settings(environ={}).processors)
    lists = {name: value for name, value in vars(pipelines).items() if name.isupper() and name != "ROLES"}
    lists |= {f"role({role!r}, log={log})": pipelines.role(role, log=log) for role in pipelines.ROLES
              for log in (False, True)}
    lists["role('query', log=True, shards=4)"] = pipelines.role("query", log=True, shards=4)
    assert lists, "config/pipelines.py defines no pipelines"
    for name, names in lists.items():
        assert set(names) <= configured, f"pipelines.{name} names unconfigured {set(names) - configured}"
    assert set(pipelines.EVERYTHING) == configured - set(pipelines.FROM_THE_LOG)
    assert not set(pipelines.EVERYTHING) & set(pipelines.FROM_THE_LOG)


@pytest.mark.parametrize("name", sorted(load_settings(environ={}).processors))
def test_each_processor_speaks_its_topics_schema(name):
    settings = load_settings(environ={})
    cls = processor_class(settings.processors[name]["class"])
    topic = processor_settings(settings, name, cls.Settings).topic
    assert topic in SCHEMAS, f"{name} consumes {topic!r}, which schema/topics.py does not list"
    assert (cls.request_type, cls.response_type) == tuple(SCHEMAS[topic])


@pytest.mark.parametrize("client, package", [("aiokafka", "ragbus.bus.kafka"), ("pulsar", "ragbus.bus.pulsar"),
                                             ("_pulsar", "ragbus.bus.pulsar")])
def test_a_broker_client_is_imported_only_in_its_backend(client, package):
    """The memory bus and everything above the bus load no broker client; each backend keeps its own."""
    outside = [name for name, path in modules().items() for _, roots in absolute_imports(path)
               if client in roots and not name.startswith(f"{package}.")]
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


def test_the_build_installs_every_package_under_ragbus():
    """pyproject.toml lists each package (package discovery cannot remap folders): a new one is listed too."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert build["package-dir"] == PACKAGES_BY_NAME
    assert sorted(build["packages"]) == sorted(n for n, p in modules().items() if p.name == "__init__.py")


def test_the_code_imports_only_ragbus_names():
    """processors, schema and config are folders, not import names: an import of one would load a second
    copy of a module beside ragbus's, or fail once installed."""
    old = [f"{path.relative_to(ROOT)}:{line}" for folder in (*PACKAGES, "scripts", "tests")
           for path in (ROOT / folder).rglob("*.py") for line, roots in absolute_imports(path)
           if set(roots) & set(PACKAGES)]
    assert old == []


def test_the_public_api_names_what_its_modules_define():
    import ragbus

    assert ragbus.__all__ and all(getattr(ragbus, name) is not None for name in ragbus.__all__)
    assert "connect" in dir(ragbus)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        ragbus.nothing  # noqa: B018


def test_a_package_docstring_names_only_its_own_modules_and_runtime_and_stores_name_them_all():
    """A package's docstring that lists its modules lists ones that exist; runtime's and stores' list each one."""
    import re

    wrong, missing = [], []
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        text = ast.get_docstring(ast.parse(path.read_text())) or ""
        top = {"schema", "config", "processors", "docs", "tests", "scripts"}  # the repository's, not the package's
        named = set(re.findall(r"``([a-z_]+\.py)``", text)) | {f"{d}/" for d in re.findall(r"``([a-z_]+)/``", text)
                                                             if d not in top}
        here = {p.name for p in path.parent.glob("*.py")} | {f"{p.name}/" for p in path.parent.iterdir()
                                                              if (p / "__init__.py").exists()}
        wrong += [f"{name}: {n}" for n in sorted(named - here)]
        if name in ("ragbus.runtime", "ragbus.stores"):
            missing += [f"{name}: {n}" for n in sorted(here - named - {"__init__.py"})]
    assert wrong == [] and missing == []
