"""A before/after benchmark runs each tree's own code under the names that tree gives its modules."""

from __future__ import annotations

from scripts.bench.trees import environment, in_tree

PROGRAM = ("from ragbus.config.settings import load_settings\nfrom ragbus.schema import Document\n"
           "from ragbus.document_load.chunking import chunk_document\nimport ragbus.runtime.worker\n")


def tree(tmp_path, name: str, *, one_package: bool, document_load: bool):
    root = tmp_path / name
    (root / "processors" / ("document_load" if document_load else "chunker")).mkdir(parents=True)
    for folder in ("schema", "config"):
        (root / folder).mkdir()
    mapping = '[tool.setuptools]\npackage-dir = { "ragbus" = "processors" }\n' if one_package else ""
    (root / "pyproject.toml").write_text('[project]\nname = "ragbus"\n' + mapping)
    return root


def test_a_tree_before_the_one_package_runs_under_its_top_level_names(tmp_path):
    old = tree(tmp_path, "old", one_package=False, document_load=False)
    assert in_tree(PROGRAM, old) == ("from config.settings import load_settings\nfrom schema import Document\n"
                                     "from processors.chunker.chunking import chunk_document\n"
                                     "import processors.runtime.worker\n")
    assert environment(old, tmp_path / "data")["PYTHONPATH"] == str(old)


def test_a_tree_of_the_one_package_is_ragbus_first_on_its_path(tmp_path):
    middle = tree(tmp_path, "middle", one_package=True, document_load=False)
    assert in_tree(PROGRAM, middle) == PROGRAM.replace("ragbus.document_load", "ragbus.chunker")
    path = environment(middle, tmp_path / "data")["PYTHONPATH"].split(":")
    assert path[1] == str(middle) and (tmp_path / "middle-names" / "ragbus" / "config").resolve() == (
        middle / "config").resolve()
    assert in_tree(PROGRAM, tree(tmp_path, "new", one_package=True, document_load=True)) == PROGRAM
