"""A folder of servers in one run (``envfactory import DIR [--map FILE]``, issue 26 item 11).

Each ``*.py`` of the folder (not starting with ``_``) is imported on its own, with the command line's
options overridden by its table in the mapping file (:mod:`.mapfile`): a server through
:func:`~.server.import_server_package` (sandboxed), a ``class = "Name"`` entry through
:func:`~.python_class.import_class_package` (this process; so refused, as ``--class`` is, under
``--sandbox docker`` or ``process``).  A refusal, or any failure of one file, does not stop the others:
it is a row of the summary.  Two
files that would publish one name: the second is refused, naming the first and asking for a name
(``--overwrite`` never lets one file of a run replace another's package).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym_envfactory.errors import EnvFactoryError

from ..errors import PackageExistsError
from .mapfile import ImportMap, MapEntry, map_field
from .options import ImportData, ImportOptions
from .server import ImportedPackage, import_server_package

__all__ = ["import_folder", "import_one", "scenario_for"]

log = logging.getLogger(__name__)


def scenario_for(src: Path, given: Path | None) -> Path | None:
    """The scenario JSON for server ``src`` in a folder import: ``given`` (a file, or a folder holding
    ``<stem>.json``), else ``<stem>.json`` or ``<stem>_scenario.json`` beside the server, else ``None``."""
    if given is not None and given.is_file():
        return given
    places = [given] if given is not None else []
    places.append(src.parent)
    for d in places:
        for cand in (d / f"{src.stem}.json", d / f"{src.stem}_scenario.json"):
            if cand.is_file():
                return cand
    return None


def import_one(src: Path, options: ImportOptions) -> dict[str, Any]:
    """Import one server (:func:`~.server.import_server_package`) and return a summary row:
    ``{"file", "done" (an ImportedPackage or None), "error" (the refusal, or None)}``.  A package that
    imported but failed validation (scenarios, tasks or lint; coverage gaps are warnings) has both."""
    try:
        done = import_server_package(src, options)
    except PackageExistsError as exc:
        return {"file": src, "done": None, "error": f"{exc.file} exists; pass --overwrite to replace it"}
    except (EnvFactoryError, ValueError, OSError, ImportError) as exc:
        return {"file": src, "done": None, "error": str(exc)}
    report = done.validation
    if report is not None and not (report["scenarios_passed"] == report["scenarios"] and not report["task_failures"]
                                   and not report["lint_failures"]):
        failures = "; ".join(f for f in report["failures"] if f not in report["coverage_failures"])
        return {"file": src, "done": done, "error": f"imported but failed validation: {failures}"}
    return {"file": src, "done": done, "error": None}


def _import_class(src: Path, entry: MapEntry, options: ImportOptions, taken: dict[str, str]) -> dict[str, Any]:
    """A ``class = "Name"`` entry: :func:`~.python_class.import_class_package`, as a summary row."""
    from gym_envfactory.environment.package import load_environment

    from ..packages import purge_modules
    from ..sandbox import package_digest
    from .python_class import import_class_package

    assert entry.class_name is not None
    env_name = entry.name or entry.class_name
    if env_name in taken:
        return {"file": src, "done": None,
                "error": (f"{env_name} is also the name of {taken[env_name]}, imported before it in this run; give "
                          "this file its own name (name = \"...\" in its --map table)")}
    man, out = options.manifest, options.output
    try:
        dest = import_class_package(
            src, entry.class_name, name=entry.name, out_dir=out.out_dir, domain=man.domain,
            initial_state=options.data.initial_state, tasks=options.data.tasks, scenarios=options.data.scenarios,
            description=man.description, validate=options.checks.validate, overwrite=out.overwrite,
            lenient_types=entry.lenient_types)
    except PackageExistsError as exc:
        return {"file": src, "done": None, "error": f"{exc.file} exists; pass --overwrite to replace it"}
    except (EnvFactoryError, ValueError, OSError, ImportError) as exc:
        return {"file": src, "done": None, "error": str(exc)}
    purge_modules(env_name)
    try:
        spec = load_environment(dest)
        tools = {n: bool(t.read_only) for n, t in spec.tools.items()}
        states = list(spec.initial_states) if hasattr(spec, "initial_states") else ["small"]
    except (EnvFactoryError, ValueError, OSError, ImportError) as exc:
        return {"file": src, "done": None, "error": f"written to {dest} but does not load: {exc}"}
    finally:
        purge_modules(env_name)
    done = ImportedPackage(name=env_name, path=dest, tools=tools, initial_states=states, sandbox="inline",
                           digest=package_digest(dest), validation=None)
    return {"file": src, "done": done, "error": None, "validated": options.checks.validate, "class": entry.class_name}


def _class_refusal(import_map: ImportMap | None, entry: MapEntry, sandbox: str) -> str:
    """Why a ``class = "..."`` entry is not imported under ``--sandbox sandbox`` (docker or process): a plain
    class runs in this process, as ``--class`` does, which refuses these sandboxes too."""
    where = f"{import_map.path} field {map_field(entry.key, 'class')}: " if import_map is not None else ""
    return (f"{where}class = {entry.class_name!r} runs the file in this process (no sandbox yet): --sandbox {sandbox} "
            "cannot apply; import trusted files with --sandbox inline, or drop 'class' from its table")


def import_folder(folder: Path, options: ImportOptions, import_map: ImportMap | None = None, *,
                  initial_state: Path | None = None,
                  on_file: Callable[[Path], None] | None = None) -> list[dict[str, Any]]:
    """Import every ``*.py`` of ``folder`` (sorted; names starting with ``_`` skipped) with ``options``,
    each overridden by its ``import_map`` entry; ``initial_state`` is the command line's
    ``--initial-state`` (a file, or a folder of ``<stem>.json``; :func:`scenario_for`).  Returns one
    row per file (:func:`import_one`; a skipped file has ``"skipped": True``).  ``on_file`` is called
    before each file (progress)."""
    servers = sorted(p for p in folder.glob("*.py") if p.is_file() and not p.name.startswith("_"))
    rows: list[dict[str, Any]] = []
    taken: dict[str, str] = {}
    for src in servers:
        entry = import_map.entry_for(src) if import_map is not None else None
        if entry is not None and entry.skip:
            rows.append({"file": src, "done": None, "error": None, "skipped": True})
            continue
        if on_file is not None:
            on_file(src)
        e = entry or MapEntry(key=src.name)
        state = e.initial_state or scenario_for(src, initial_state)
        opts = dataclasses.replace(
            options,
            manifest=dataclasses.replace(options.manifest, **{k: v for k, v in (
                ("name", e.name), ("domain", e.domain), ("description", e.description)) if v is not None}),
            data=ImportData(initial_state=state, tasks=e.tasks, scenarios=e.scenarios),
            analysis=dataclasses.replace(options.analysis, state_model=e.state_model or options.analysis.state_model,
                                         api_class=e.api_class or options.analysis.api_class),
            output=dataclasses.replace(options.output, taken=dict(taken)))
        row: dict[str, Any]
        try:
            if e.class_name and options.sandbox.sandbox not in ("auto", "inline"):
                row = {"file": src, "done": None, "error": _class_refusal(import_map, e, options.sandbox.sandbox)}
            elif e.class_name:
                row = _import_class(src, e, opts, taken)
            else:
                row = import_one(src, opts)
        except Exception as exc:  # one file's failure is a row of the summary, never the end of the run
            log.debug("importing %s failed", src, exc_info=True)
            row = {"file": src, "done": None, "error": f"{type(exc).__name__}: {exc}"}
        if row["done"] is not None:
            taken[row["done"].name] = src.name
        rows.append(row)
    return rows
