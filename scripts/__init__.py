"""Benchmarks, the retrieval evaluation and the chaos run, each run from the repository root as
``python -m scripts.<name>``.

A package so that every script imports the shared helpers (``scripts.bench``) and the evaluation
set (``scripts.eval``) by name, with no edits to ``sys.path`` and no script importing another.
"""
