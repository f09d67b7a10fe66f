"""The docs match the code: every file, test and module path that README.md and docs/*.md name exists.

A path in backticks that starts with a folder of the repository (``tests/test_reward.py``,
``gym_envfactory/session.py``, ``generators/envgen/gate.py``), or with one of the runtime's rooms
(``envs/parsing.py``, ``server/app.py``: read under ``gym_envfactory/``), must name a file or folder that
exists; ``tests/x.py::test_name`` must name a test defined in that file; a dotted
``gym_envfactory.x.y`` module name must be importable as a module or a module attribute.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("tests/", "gym_envfactory/", "generators/", "training/", "ui/", "env_images/", "bench/", "scripts/",
       "docs/", "recipes/", ".ci/")
ROOMS = ("envs/", "server/", "backends/", "containers/", "environment/", "rollout/", "cli/", "llm/", "users/")
PATH = re.compile(r"`([A-Za-z0-9_./-]+\.(?:py|md|toml|jsonl|json|yaml|sh)(?:::[A-Za-z0-9_]+)?|[A-Za-z0-9_./-]+/)`")
MODULE = re.compile(r"`(gym_envfactory(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            out.extend((doc.name, n, m.group(1)) for m in pattern.finditer(line))
    return out


def _defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_path_the_docs_name_exists():
    missing = []
    for doc, line, ref in _mentions(PATH):
        path, _, name = ref.partition("::")
        if path.startswith("bench/results/"):  # written by the benchmarks, not committed
            continue
        if path.startswith(TOP):
            where = ROOT / path
        elif path.startswith(ROOMS):
            where = ROOT / "gym_envfactory" / path
        else:
            continue
        if not where.exists():
            missing.append(f"{doc}:{line}: {ref} (no such file)")
        elif name and name not in _defined_names(where):
            missing.append(f"{doc}:{line}: {ref} (no test or class {name} in {path})")
    assert not missing, "\n".join(missing)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(head) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            obj = importlib.import_module(head)
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


@pytest.mark.parametrize("optional", [("generators", "training", "ui")])
def test_every_module_the_docs_name_imports(optional):
    bad = []
    for doc, line, ref in _mentions(MODULE):
        try:
            ok = _resolves(ref)
        except ImportError as exc:  # an optional extra that this environment does not have (torch, trl, verl)
            ok = any(f"gym_envfactory.{o}" in ref for o in optional) and exc.name not in (None, ref)
        if not ok:
            bad.append(f"{doc}:{line}: {ref}")
    assert not bad, "\n".join(bad)
