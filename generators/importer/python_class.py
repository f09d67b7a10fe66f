"""Plain Python classes as environments (issue 12, part 4).

:func:`import_python_class` takes a live class object (runs in this process: only pass classes you
trust) and defines a programmatic environment; :func:`import_class_package` (``envfactory import FILE
--class NAME``) loads a file through the runtime bridge (FastMCP stubbed, seeded ``random``/``uuid``/
clock/``hash`` stand-ins) and writes an environment package that runs the class unedited.  Both build
on :func:`.classbridge.class_environment`: public attributes are the state, public typed methods the
tools, and each session keeps one live instance (private attributes survive between calls).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gym_envfactory.environment.catalog import add_environment, caller_module, define_environment
from gym_envfactory.environment.spec import EnvironmentSpec

from ..domains import environment_texts, infer_domain
from ..errors import PackageExistsError
from . import bridge, classbridge
from .analysis import ImporterError, classify_tool

__all__ = ["import_class_package", "import_python_class"]


def _classify(cls: type, methods: Sequence[str], read_only: Mapping[str, bool] | None,
              destructive: Mapping[str, bool] | None) -> tuple[dict[str, bool], dict[str, bool]]:
    ro: dict[str, bool] = {}
    de: dict[str, bool] = {}
    for m in methods:
        ro[m], de[m] = classify_tool(m, cls, [m], read_only, destructive)
    return ro, de


def _state_dict(initial_state: Mapping[str, Any] | BaseModel | str | Path | None) -> dict[str, Any] | None:
    if initial_state is None:
        return None
    if isinstance(initial_state, (str, Path)):
        return dict(json.loads(Path(initial_state).read_text(encoding="utf-8")))
    if isinstance(initial_state, BaseModel):
        return initial_state.model_dump(mode="json")
    return dict(initial_state)


def import_python_class(
    cls: type,
    *,
    name: str,
    init_args: Sequence[Any] = (),
    init_kwargs: Mapping[str, Any] | None = None,
    domain: str = "utilities",
    version: str = "0.1.0",
    description: str | None = None,
    initial_state: Mapping[str, Any] | BaseModel | None = None,
    loader: str | None = None,
    tasks: Iterable[Mapping[str, Any]] | str | Path | None = None,
    scenarios: Iterable[Mapping[str, Any]] | str | Path | None = None,
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    exclude: Sequence[str] = (),
    register: bool = True,
    lenient_types: bool = False,
) -> EnvironmentSpec:
    """A plain Python class as a programmatic environment (registered with Gymnasium by default).

    State: the public attributes of ``cls(*init_args, **init_kwargs)`` (after ``loader(initial_state)``
    when the class loads scenarios: ``_load_scenario``/``load_scenario`` by default) become a Pydantic
    model ``<name>State``: types from class annotations or ``self.x: T`` annotations in ``__init__``
    (attributes only annotated count too), else inferred (``set`` kept, serialised sorted; ``int`` dict
    keys kept); a class with ``to_dict``/``from_dict`` or its own ``__getstate__``/``__setstate__`` is
    read and rebuilt through them.  Tools: public methods with typed parameters (keyword-only).  Each
    session keeps one live instance: private attributes survive between calls, a call costs what the
    method costs, and the state's fields are refreshed from the instance only when read
    (:mod:`.bridge`).  An exception the method raises (other than programming errors) or an
    error-looking result is a ToolError, and the session rolls the call back.  The class's module is
    not changed: for seeded ``random``/``uuid``/clock stand-ins load the file with
    :func:`import_class_package`.

    ``lenient_types`` (opt-in): annotations are advisory; state types come from the loaded values and
    results are checked only as JSON (:func:`.classbridge.class_environment`).

    Raises:
        ImporterError: no state (naming the class and what to do), untyped or variadic method
            parameters, attributes that are not JSON data, no tools.
    """
    try:
        ro, de = _classify(cls, [m for m, _ in classbridge.public_methods(cls, exclude)], read_only, destructive)
        state_model, tools, start = classbridge.class_environment(
            cls, name=name, init_args=init_args, init_kwargs=init_kwargs, initial_state=_state_dict(initial_state),
            loader=loader, exclude=exclude, read_only=ro, destructive=de, lenient_types=lenient_types)
    except classbridge.ClassImportError as exc:
        raise ImporterError(str(exc)) from None
    spec = define_environment(
        name, state_model, list(tools.values()), initial_state=start, tasks=tasks, scenarios=scenarios,
        domain=domain, version=version, description=description or (cls.__doc__ or name).strip().splitlines()[0],
        register=False,
    )
    # where a server process can define it again: the caller's module when it called at its top level
    # (the subprocess backend, ``envfactory serve --module``), not this function
    spec.defined_in = caller_module(sys._getframe(1))
    if register:
        add_environment(spec)
    return spec


def _tools_py(env_name: str, src_name: str, class_name: str, loader: str | None, exclude: Sequence[str],
              ro: Mapping[str, bool], de: Mapping[str, bool], lenient_types: bool = False) -> str:
    scenario = ("json.loads((Path(__file__).parent / '_scenario.json').read_text(encoding='utf-8'))"
                if loader else "None")
    return (
        f'"""Tools of {env_name}: the public methods of {class_name} in {src_name} (see _classbridge.py).\n\n'
        "Each session keeps one live instance of the class.  Generated by the importer: re-run it instead of editing.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "import json\n"
        "from pathlib import Path\n\n"
        "from . import _source\n"
        "from ._classbridge import class_environment\n\n"
        f"State, _TOOLS, _ = class_environment(_source.{class_name}, name={env_name!r}, module_name=__name__,\n"
        f"                                     initial_state={scenario}, loader={loader!r},\n"
        f"                                     exclude={tuple(exclude)!r}, read_only={dict(ro)!r},\n"
        f"                                     destructive={dict(de)!r}"
        + (", lenient_types=True" if lenient_types else "") + ")\n"
        "globals().update(_TOOLS)\n"
    )


def import_class_package(
    path: str | Path,
    class_name: str,
    *,
    name: str | None = None,
    out_dir: str | Path | None = None,
    domain: str | None = None,
    initial_state: Mapping[str, Any] | BaseModel | str | Path | None = None,
    loader: str | None = None,
    tasks: str | Path | Iterable[Mapping[str, Any]] | None = None,
    scenarios: str | Path | Iterable[Mapping[str, Any]] | None = None,
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    exclude: Sequence[str] = (),
    version: str = "0.1.0",
    description: str | None = None,
    validate: bool = True,
    overwrite: bool = False,
    lenient_types: bool = False,
) -> Path:
    """Write ``out_dir/<name>/``, an environment package running class ``class_name`` of the file
    ``path`` unedited (``envfactory import FILE --class NAME``), and return its folder.

    The file is loaded here (it runs in this process: import files you trust) through the runtime bridge
    (:func:`.bridge.load_source`: FastMCP stubbed, seeded ``random``/``uuid``/clock/``hash``).  The
    package holds ``_source.py`` (the file, byte for byte), ``_bridge.py`` and ``_classbridge.py`` (the
    runtime, copied), ``tools.py``/``state.py`` (calling :func:`.classbridge.class_environment`) and
    ``initial_states/small.json`` (the state after ``loader(initial_state)``, or ``initial_state``, or the
    new instance's).  ``validate``: load it and run :func:`gym_envfactory.validation.validate_environment`
    on the scenarios given (a failure removes nothing published: it raises before publication).

    Raises:
        ImporterError: the environment name (``name``, else ``class_name``) is not CamelCase ASCII
            (:data:`~gym_envfactory.environment.manifest.NAME_RE`; checked before the file runs), no
            such file or class, or the class cannot become an environment (see
            :func:`import_python_class`), or validation failed.
        PackageExistsError: the folder exists and ``overwrite`` is false.
    """
    from gym_envfactory.environment.manifest import NAME_RE, Manifest, Provenance
    from gym_envfactory.environment.package import load_environment
    from gym_envfactory.validation import validate_environment

    from ..packages import purge_modules, write_environment_package
    from .sandbox import tracebacks_at_debug, validation_summary
    from .server import DEFAULT_OUT_DIR, bridge_source, env_name_refusal, undo_source, validation_refusal

    src = Path(path).resolve()
    env_name = name or class_name
    if not NAME_RE.match(env_name):  # before anything runs or is written: never a folder outside out_dir
        raise ImporterError(env_name_refusal(env_name, given=name is not None), file=src)
    if not src.is_file():
        raise ImporterError("no such file", file=src)
    src_bytes = src.read_bytes()
    from .determinism import network_imports

    network = network_imports(src_bytes.decode("utf-8", errors="replace"), str(src))
    if network:
        raise ImporterError("refused: " + "\n  ".join(network), file=src)
    module_name = f"envfactory_class_import_{hashlib.sha256(src_bytes).hexdigest()[:12]}"
    try:
        module = bridge.load_source(module_name, src)
    except Exception as exc:
        raise ImporterError(f"loading the file failed: {type(exc).__name__}: {exc}", file=src) from exc
    try:
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            raise ImporterError(f"no class {class_name!r} in the file", file=src)
        methods = [m for m, _ in classbridge.public_methods(cls, exclude)]
        ro, de = _classify(cls, methods, read_only, destructive)
        try:
            scenario = _state_dict(initial_state)
            _, _, start = classbridge.class_environment(
                cls, name=env_name, initial_state=scenario, loader=loader, exclude=exclude,
                read_only=ro, destructive=de, lenient_types=lenient_types)
        except classbridge.ClassImportError as exc:
            raise ImporterError(str(exc), file=src) from None
    finally:
        import sys

        sys.modules.pop(module_name, None)
    eff_loader = loader or next((m for m in ("_load_scenario", "load_scenario") if callable(getattr(cls, m, None))),
                                None)
    desc = description or (cls.__doc__ or f"Imported from {src.name}").strip().splitlines()[0]
    inferred = domain is None  # no --domain and no map entry: inferred from its names, as a server's is
    if domain is None:
        domain = infer_domain(environment_texts(env_name, desc, methods, {"small": scenario or {}}), name=env_name)
    manifest = Manifest(
        name=env_name, version=version, domain=domain, state_model="state:State", tools_module="tools",
        description=desc, default_initial_state="small",
        provenance=Provenance.model_validate(  # extra keys are kept (Provenance allows them)
            {"kind": "imported", "source": str(src), "sha256": hashlib.sha256(src_bytes).hexdigest(),
             "api_class": class_name, "importer": "gym_envfactory.generators.importer",
             **({"domain": "inferred from its names (generators.domains)"} if inferred else {})}))
    files: dict[str, str | bytes] = {
        "_source.py": src_bytes,
        "_bridge.py": bridge_source(),
        "_undo.py": undo_source(),
        "_classbridge.py": Path(classbridge.__file__).read_text(encoding="utf-8"),
        "__init__.py": (f'"""{env_name}: class {class_name} imported from {src.name} (see _classbridge.py); '
                        '_source.py is the original, unedited."""\n\nfrom ._bridge import load_package_source\n\n'
                        "load_package_source(__name__, __file__)\n"),
        "state.py": f'"""State model of {env_name}: the state of {class_name}."""\n\nfrom .tools import State\n\n'
                    '__all__ = ["State"]\n',
        "tools.py": _tools_py(env_name, src.name, class_name, eff_loader if scenario is not None else None,
                              exclude, ro, de, lenient_types),
    }
    if eff_loader and scenario is not None:  # the scenario the first instance loads, as given
        files["_scenario.json"] = json.dumps(scenario, indent=1)  # in its own order (issue 26)
    scenario_objs = _objects(scenarios)
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
    dest = out / env_name
    if dest.exists() and not overwrite:
        raise PackageExistsError(f"{dest.name} exists; pass --overwrite to replace it", file=dest)
    work = Path(tempfile.mkdtemp(prefix="envfactory-class-import-"))
    try:
        pkg = work / env_name
        write_environment_package(pkg, manifest, files=files, initial_states={"small": start},
                                  scenarios=scenario_objs or None, tasks=_objects(tasks) or None,
                                  sort_state_keys=False, replace=True)
        if validate:
            purge_modules(env_name)
            try:
                spec = load_environment(pkg)
                with tracebacks_at_debug():
                    report = validate_environment(spec, require_coverage=False, hash_seeds=None)  # as the server import
            finally:
                purge_modules(env_name)
            if not report.passed:
                places = {str(pkg / "_source.py"): str(src), str(pkg / "tasks.jsonl"): str(tasks) if isinstance(
                    tasks, (str, Path)) else f"{env_name}/tasks.jsonl (the tasks given)", str(pkg): env_name}
                raise ImporterError(validation_refusal(validation_summary(report), [str(f) for f in report.failures()], places),
                                    file=src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            if "imported" not in (dest / "environment.toml").read_text(encoding="utf-8", errors="replace"):
                raise ImporterError(f"refused to replace {dest}: overwrite replaces only a previous import", file=dest)
            os.replace(dest, work / ".old")
        shutil.copytree(pkg, dest, ignore=shutil.ignore_patterns("__pycache__"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def _objects(src: str | Path | Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if src is None:
        return []
    if isinstance(src, (str, Path)):
        return [json.loads(line) for line in Path(src).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [dict(o) for o in src]
