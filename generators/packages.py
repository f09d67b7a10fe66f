"""Writing environment packages (docs/authoring.md): the one writer behind EnvGen and the importer.

An environment package is a folder ``<Name>/`` with ``environment.toml`` (written by
:meth:`~gym_envfactory.environment.manifest.Manifest.to_toml`, so it loads back unchanged), Python
modules, ``initial_states/<name>.json`` and optional ``scenarios.jsonl`` / ``tasks.jsonl``.  The
helpers here also forget a package's loaded modules, put an output folder on the catalog path, and
turn raw names into CamelCase environment names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gym_envfactory.environment.manifest import Manifest

__all__ = [
    "add_catalog_dir",
    "camel_name",
    "jsonl_text",
    "purge_modules",
    "write_environment_package",
]


def jsonl_text(objects: Iterable[Mapping[str, Any]]) -> str:
    """JSON Lines text: one ``json.dumps(obj, ensure_ascii=False)`` per line, each ending in ``\\n``."""
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects)


def write_environment_package(
    folder: str | Path,
    manifest: Manifest,
    *,
    files: Mapping[str, str | bytes],
    initial_states: Mapping[str, Any],
    scenarios: Iterable[Mapping[str, Any]] | None = None,
    tasks: Iterable[Mapping[str, Any]] | None = None,
    sort_state_keys: bool = False,
    replace: bool = False,
) -> Path:
    """Write an environment package into ``folder`` (created with its parents) and return it.

    Args:
        folder: the package folder (``<catalog>/<Name>``).
        manifest: written as ``environment.toml`` with :meth:`Manifest.to_toml`.
        files: package files by path relative to ``folder`` (``"__init__.py"``, ``"state.py"``,
            ``"tools.py"`` ...): text is written as UTF-8, bytes byte for byte.
        initial_states: ``{state name: JSON data}``, written to ``initial_states/<name>.json``
            (indent 1, UTF-8, keys sorted with ``sort_state_keys``).
        scenarios, tasks: written to ``scenarios.jsonl`` / ``tasks.jsonl`` when not ``None`` (an
            empty sequence writes an empty file).
        replace: remove an existing ``folder`` first.

    Raises:
        FileExistsError: ``folder`` exists and ``replace`` is false.
        OSError: the files cannot be written.
    """
    folder = Path(folder)
    if folder.exists():
        if not replace:
            raise FileExistsError(f"{folder} exists")
        shutil.rmtree(folder)
    (folder / "initial_states").mkdir(parents=True)
    (folder / "environment.toml").write_text(manifest.to_toml(), encoding="utf-8")
    for rel, content in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    for name, state in initial_states.items():
        (folder / "initial_states" / f"{name}.json").write_text(
            json.dumps(state, indent=1, ensure_ascii=False, sort_keys=sort_state_keys) + "\n", encoding="utf-8")
    if scenarios is not None:
        (folder / "scenarios.jsonl").write_text(jsonl_text(scenarios), encoding="utf-8")
    if tasks is not None:
        (folder / "tasks.jsonl").write_text(jsonl_text(tasks), encoding="utf-8")
    return folder


def purge_modules(env_name: str) -> None:
    """Forget the loaded modules of environment ``env_name`` (``gym_envfactory._envs.<env_name>`` and
    its submodules), so the next load executes the files on disk again."""
    prefix = f"gym_envfactory._envs.{env_name}"
    for mod in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[mod]


def add_catalog_dir(folder: str | Path) -> None:
    """Put ``folder`` first on ``$ENVFACTORY_CATALOG`` (``os.pathsep``-separated), once."""
    folder = str(Path(folder).resolve())
    current = [p for p in os.environ.get("ENVFACTORY_CATALOG", "").split(os.pathsep) if p]
    if folder not in current:
        os.environ["ENVFACTORY_CATALOG"] = os.pathsep.join([folder, *current])


def camel_name(raw: str, *, prefix: str) -> str:
    """A CamelCase name from ``raw`` (``plant_nursery_api`` -> ``PlantNurseryApi``): runs of letters and
    digits, each capitalised; ``prefix`` goes in front when the result is empty or starts with a digit."""
    parts = re.split(r"[^A-Za-z0-9]+", raw.strip())
    name = "".join(p[:1].upper() + p[1:] for p in parts if p)
    if not name or not name[0].isalpha():
        name = prefix + name
    return name
