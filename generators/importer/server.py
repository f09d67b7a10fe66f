"""``import_tool_server``: a single-file tool server becomes an environment package, unedited.

The entry point the CLI (``envfactory import``) calls: analyse the server (:mod:`.analysis`), write
the package (:func:`gym_envfactory.generators.packages.write_environment_package`: the manifest, the
copied source, the bridge (:mod:`.bridge`), ``tools.py`` from :mod:`.codegen`, initial states,
scenarios and tasks), record probe scenarios (:mod:`.probe`), check session isolation
(:mod:`.isolation`) and validation, and register it.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import logging
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gym_envfactory.environment.manifest import Manifest, Provenance
from gym_envfactory.environment.package import load_environment
from gym_envfactory.environment.spec import EnvironmentSpec

from ..checks import split_coverage_gaps
from ..packages import camel_name, jsonl_text, purge_modules, write_environment_package
from .analysis import ImporterError, ServerAnalysis, analyze_tool_server
from .codegen import generate_tools_py
from .isolation import check_session_isolation
from .probe import probe_scenarios

__all__ = ["DEFAULT_OUT_DIR", "bridge_source", "import_tool_server"]

log = logging.getLogger(__name__)


def _default_out_dir() -> Path:
    import gym_envfactory.environment.spec as _spec

    checkout = Path(_spec.__file__).resolve().parent.parent / "env_images"
    return checkout if checkout.is_dir() else Path.cwd() / "env_images"


#: Where imported environments go by default: the checkout's catalog folder (``./env_images`` when
#: the runtime is installed from a wheel; add it to ``ENVFACTORY_CATALOG`` to find it later).
DEFAULT_OUT_DIR = _default_out_dir()


def bridge_source() -> str:
    """The text of :mod:`.bridge` (``generators/importer/bridge.py``), written into every imported
    package as ``_bridge.py``.  Raises ``OSError`` when the file cannot be read."""
    return importlib.resources.files(__package__).joinpath("bridge.py").read_text(encoding="utf-8")


def _default_env_name(a: ServerAnalysis) -> str:
    base = re.sub(r"(API|Api|Service|Server|Client)$", "", a.api_class.__name__) or a.path.stem
    return camel_name(base, prefix="Imported")


def _jsonl_objects(src: str | Path | Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if src is None:
        return []
    if isinstance(src, (str, Path)):
        out = []
        for line in Path(src).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out
    return [dict(o) for o in src]


def _state_json(src: Any) -> Any:
    if isinstance(src, (str, Path)):
        return json.loads(Path(src).read_text(encoding="utf-8"))
    if isinstance(src, BaseModel):
        return src.model_dump(mode="json")
    return src



def import_tool_server(
    path: str | Path,
    *,
    name: str | None = None,
    out_dir: str | Path | None = None,
    domain: str = "utilities",
    register: bool = True,
    initial_state: str | Path | Mapping[str, Any] | BaseModel | None = None,
    initial_states: Mapping[str, str | Path | Mapping[str, Any] | BaseModel] | None = None,
    tasks: str | Path | Iterable[Mapping[str, Any]] | None = None,
    scenarios: str | Path | Iterable[Mapping[str, Any]] | None = None,
    probe: bool = True,
    validate: bool = True,
    state_model: str | None = None,
    api_class: str | None = None,
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    version: str = "0.1.0",
    description: str | None = None,
    bookkeeping_fields: Sequence[str] = (),
    free_text_fields: Sequence[str] = (),
    set_fields: Sequence[str] = (),
    overwrite: bool = False,
    check_isolation: bool = True,
) -> EnvironmentSpec:
    """Turn a single-file tool server (module docstring layout) into ``out_dir/<name>/`` and load it.

    Args:
        path: the server file; it is copied, never edited.
        name: environment name (CamelCase); default from the API class (``BookStoreAPI`` → ``BookStore``).
        out_dir: parent folder (default: the checkout's ``env_images/``).
        domain: one of :data:`gym_envfactory.environment.manifest.DOMAINS`.
        register: make ``gym.make("envfactory/<name>-v0")`` and ``get_environment(name)`` find it.
        initial_state: the ``small`` state: a scenario JSON file, a dict or a model; default the API's
            empty ``save_scenario()``.  ``initial_states`` adds more by name.
        tasks, scenarios: JSON Lines files or objects copied into ``tasks.jsonl``/``scenarios.jsonl``.
        probe: add scenarios recorded by calling every tool once (see :func:`.probe.probe_scenarios`).
        validate: run :func:`~gym_envfactory.validation.validate_environment` (scenarios, tasks,
            determinism lint; per-tool coverage gaps are logged, not fatal) and refuse (removing the
            folder) when it fails.
        state_model, api_class: names in the server module, when detection is ambiguous.
        read_only, destructive: per-tool overrides of the annotations guessed from names and code.
        overwrite: replace an existing folder of the same name.
        check_isolation: run the scenarios twice in fresh sessions and once interleaved with another
            session and refuse the import when they differ (module-level counters, lists or caches the
            API mutates leak between sessions); see :func:`check_session_isolation`.

    Raises:
        ImporterError: the file does not fit the layout, or the result failed validation.
        SpecError: a bad name, domain, state or task.
    """
    a = analyze_tool_server(path, api_class=api_class, state_model=state_model,
                            read_only=read_only, destructive=destructive)
    env_name = name or _default_env_name(a)
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
    folder = out / env_name
    if folder.exists():
        if not overwrite:
            raise ImporterError(f"{folder} exists; pass overwrite=True to replace it", file=folder)
        shutil.rmtree(folder)
    states: dict[str, Any] = {"small": _state_json(initial_state) if initial_state is not None else a.empty_scenario}
    for k, v in (initial_states or {}).items():
        states[k] = _state_json(v)
    for k, v in states.items():
        try:
            a.state_model.model_validate(v)
        except ValidationError as exc:
            raise ImporterError(f"initial state {k!r} does not validate with {a.state_model.__name__}: "
                                f"{exc.error_count()} error(s): {exc.errors()[0]['msg']}") from None
    desc = description or (a.module_doc.splitlines()[0] if a.module_doc else f"Imported from {a.path.name}")
    manifest = Manifest(
        name=env_name, version=version, domain=domain, description=desc, state_model=f"state:{a.state_model.__name__}",
        tools_module="tools", default_initial_state="small", bookkeeping_fields=list(bookkeeping_fields),
        free_text_fields=list(free_text_fields), set_fields=list(set_fields),
        provenance=Provenance(kind="imported", source=str(a.path), sha256=hashlib.sha256(a.source.encode()).hexdigest(),
                              api_class=a.api_class.__name__, importer="gym_envfactory.generators.importer"))
    files = {
        "_source.py": a.path.read_bytes(),  # the server, byte for byte
        "_bridge.py": bridge_source(),
        "__init__.py": (f'"""{env_name}: imported from {a.path.name} (see _bridge.py); _source.py is the original, '
                        'unedited."""\n\nfrom ._bridge import load_package_source\n\nload_package_source(__name__, __file__)\n'),
        "state.py": (f'"""State model of {env_name}: the root scenario model of the imported server."""\n\n'
                     f"from ._source import {a.state_model.__name__}\n\n__all__ = [{a.state_model.__name__!r}]\n"),
        "tools.py": generate_tools_py(a, env_name),
    }
    user_scenarios = _jsonl_objects(scenarios)
    task_objs = _jsonl_objects(tasks)
    folder.mkdir(parents=True)  # claims the folder: FileExistsError if it appeared meanwhile (nothing removed then)
    try:
        write_environment_package(folder, manifest, files=files, initial_states=states, scenarios=user_scenarios or None,
                                  tasks=task_objs or None, sort_state_keys=True, replace=True)
        purge_modules(env_name)
        spec = load_environment(folder)
        if probe:
            recorded = probe_scenarios(spec, {s.get("scenario_id", "") for s in user_scenarios})
            (folder / "scenarios.jsonl").write_text(jsonl_text(user_scenarios + recorded), encoding="utf-8")
            purge_modules(env_name)
            spec = load_environment(folder)
        if check_isolation:
            check_session_isolation(a, spec)
        if validate:
            from gym_envfactory.validation import validate_environment

            hard, gaps = split_coverage_gaps(validate_environment(spec))
            if hard:
                raise ImporterError("the imported environment failed validation:\n  "
                                    + "\n  ".join(hard[:20]), file=folder)
            for gap in gaps:
                log.warning("%s: %s (pass scenarios= to cover it)", env_name, gap)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        purge_modules(env_name)
        raise
    if register:
        from gym_envfactory.environment.catalog import add_environment

        add_environment(spec)  # get_environment and gym.make find it under its name, wherever its folder is
    return spec
