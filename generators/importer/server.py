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
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from pydantic import BaseModel

from gym_envfactory.environment.manifest import NAME_RE, Manifest, Provenance
from gym_envfactory.environment.package import load_environment
from gym_envfactory.environment.spec import EnvironmentSpec

from ..domains import environment_texts, infer_domain
from ..errors import PackageExistsError
from ..packages import jsonl_text, purge_modules, write_environment_package
from ..sandbox import package_digest, warn_process_mode
from .analysis import ImporterError
from .options import ImportKeywords, ImportOptions
from .sandbox import resolve_sandbox, run_stage

__all__ = ["DEFAULT_OUT_DIR", "ImportedPackage", "bridge_source", "import_server_package", "import_tool_server"]

log = logging.getLogger(__name__)


#: Where imported environments go by default: ``./envfactory_envs``, a folder of the user's beside the
#: shipped catalog, never inside it (``envfactory import`` prints the ``ENVFACTORY_CATALOG`` line that
#: makes later processes find it; README, "Growing the catalog").
DEFAULT_OUT_DIR = Path("envfactory_envs")


def bridge_source() -> str:
    """The text of :mod:`.bridge` (``generators/importer/bridge.py``), written into every imported
    package as ``_bridge.py``.  Raises ``OSError`` when the file cannot be read."""
    return importlib.resources.files(__package__).joinpath("bridge.py").read_text(encoding="utf-8")


def undo_source() -> str:
    """The text of :mod:`.undo`, written into every imported package as ``_undo.py`` (beside
    ``_bridge.py``, which uses it).  Raises ``OSError`` when the file cannot be read."""
    return importlib.resources.files(__package__).joinpath("undo.py").read_text(encoding="utf-8")


def env_name_refusal(name: str, *, given: bool = True) -> str:
    """The message refusing environment name ``name`` (not :data:`~gym_envfactory.environment.manifest.NAME_RE`):
    ``given``: it came from ``--name``/``name=``, else from the file (its class)."""
    where = "" if given else " (taken from the class; try passing --name NAME)"
    return f"environment name {name!r} is not CamelCase ASCII ([A-Z][A-Za-z0-9]*){where}"


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



@dataclass(frozen=True)
class ImportedPackage:
    """A published import (:func:`import_server_package`), described without loading its code here.

    Attributes:
        name: the environment name.
        path: the published package folder.
        tools: tool name → read-only, in the order of the wrappers.
        initial_states: the initial state names (``small`` first).
        sandbox: where the imported code ran (``"docker"``, ``"process"`` or ``"inline"``).
        digest: :func:`~gym_envfactory.generators.sandbox.package_digest` of the validated package.
        validation: counts and failures of the validation run (``None`` without ``validate``): keys
            ``scenarios``, ``scenarios_passed``, ``tools``, ``tools_covered``, ``tasks``,
            ``task_failures``, ``lint_failures``, ``failures``, ``coverage_failures``.
        noop_writes: write tools the probe saw report success without changing the state (silent
            no-op writes), as ``"name(arguments)"``; reported, not fatal, and not pinned by a scenario.
        reclassified: tools guessed as writes whose names read (service prefix skipped) and whose
            probe calls changed nothing: imported read-only.
    """

    name: str
    path: Path
    tools: dict[str, bool]
    initial_states: list[str]
    sandbox: str
    digest: str
    validation: dict[str, Any] | None = None
    noop_writes: tuple[str, ...] = ()
    reclassified: tuple[str, ...] = ()


def _shipped_dirs() -> list[Path]:
    from gym_envfactory.environment import catalog

    here = Path(catalog.__file__).resolve().parent.parent  # the gym_envfactory package folder
    return [(here / "_catalog").resolve(), (here.parent / "env_images").resolve()]


def _previous_import(folder: Path) -> bool:
    """True when ``folder`` holds an imported package (provenance kind ``imported``) outside the
    shipped catalog: the only kind of folder ``overwrite`` may replace."""
    if folder.resolve().parent in _shipped_dirs():
        return False
    try:
        raw = tomllib.loads((folder / "environment.toml").read_text(encoding="utf-8"))
        return str(dict(raw.get("provenance") or {}).get("kind")) == "imported"
    except Exception:  # noqa: BLE001 - unreadable or not a package: not ours to replace
        return False


def name_collision(env_name: str, folder: Path) -> str | None:
    """Why ``env_name`` may not be imported to ``folder``, or ``None``: a registered environment of that
    name (the shipped catalog, a catalog folder on ``$ENVFACTORY_CATALOG``, one defined in code) that
    is not a previous import at ``folder`` itself (nor an earlier import registered in this process)."""
    from gym_envfactory.environment import catalog

    target = folder.resolve()
    where: Path | None = None
    folders = catalog.catalog_folders()
    if env_name in folders:
        where = folders[env_name]
    elif env_name in catalog.programmatic_environments():
        path = catalog.get_environment(env_name).path
        if path is None:
            return (f"{env_name} is the name of an environment defined in code; importing it would shadow that "
                    "environment: choose another name with --name NAME (name=)")
        if _previous_import(Path(path)):
            return None  # an earlier import registered in this process: the new one replaces it
        where = Path(path)
    if where is None:
        return None
    if where.resolve() == target and _previous_import(target):
        return None
    kind = "the shipped catalog" if where.resolve().parent in _shipped_dirs() else str(where)
    return (f"{env_name} is the name of a registered environment ({kind}: {where}); importing it would shadow "
            "that environment: choose another name with --name NAME (name=)")


def _publish(pkg: Path, dest: Path, digest: str, *, overwrite: bool) -> None:
    """Copy ``pkg`` to ``dest`` (replacing it with ``overwrite``) unless its files no longer have ``digest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(pkg, tmp / dest.name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
        got = package_digest(tmp / dest.name)
        if got != digest:
            raise ImporterError(f"refused to publish {dest.name}: its files changed while the imported code ran "
                                f"(sha256 {got[:12]} now, {digest[:12]} when validated); the imported code rewrote "
                                "its own package", file=dest)
        if dest.exists():
            if not overwrite:
                raise PackageExistsError(f"{dest.name} exists; pass overwrite=True to replace it", file=dest)
            if not _previous_import(dest):
                raise ImporterError(f"refused to replace {dest}: overwrite replaces only a previous import in the "
                                    "output folder, never a shipped or hand-written package", file=dest)
            os.replace(dest, tmp / "old")
        os.replace(tmp / dest.name, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_digest(pkg: Path, digest: str, stage: str) -> None:
    got = package_digest(pkg)
    if got != digest:
        raise ImporterError(f"refused to publish {pkg.name}: its files changed during the {stage} stage (sha256 "
                            f"{got[:12]} now, {digest[:12]} before); the imported code rewrote its own package")


def import_server_package(path: str | Path, options: ImportOptions | None = None,
                          **keywords: Unpack[ImportKeywords]) -> ImportedPackage:
    """:func:`import_tool_server` without loading the result in this process: every execution of
    the file's code (analysis, probe, isolation checks, validation) happens in the sandbox
    (``options.sandbox``; see :mod:`.sandbox`), and the package published to ``out_dir/<name>/`` is
    byte-identical to the one probed and validated (digests taken before each stage and checked after
    it and at publication).  Nothing is registered.

    ``options`` (:class:`~.options.ImportOptions`, default ``ImportOptions()``) groups every option;
    the flat keywords (``name=``, ``sandbox=``, ``validate=``...; :class:`~.options.ImportKeywords`)
    are applied over it (:meth:`~.options.ImportOptions.with_keywords`).

    Raises:
        ImporterError: the file does not fit the layout, failed a check or validation, timed out or
            hit a limit in the sandbox, or changed its own package.
        SpecError: a bad name, domain, state or task.
        TypeError: an unknown keyword.
    """
    opts = (options if options is not None else ImportOptions()).with_keywords(**keywords)
    man, data, hints, checks, sb = opts.manifest, opts.data, opts.analysis, opts.checks, opts.sandbox
    image, timeout_s = sb.image, sb.timeout_s
    mode = resolve_sandbox(sb.sandbox, image)
    if mode == "process":
        warn_process_mode(log, f"importing {path}")
    src = Path(path).resolve()
    if man.name is not None and not NAME_RE.match(man.name):  # before the file runs: never a folder outside out_dir
        raise ImporterError(env_name_refusal(man.name), file=src)
    if not src.is_file():
        raise ImporterError("no such file", file=src)
    src_bytes = src.read_bytes()  # the one read: the package and the provenance hash come from these bytes
    src_text = src_bytes.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    states_in: dict[str, Any] = {} if data.initial_state is None else {"small": _state_json(data.initial_state)}
    for k, v in (data.initial_states or {}).items():
        states_in[k] = _state_json(v)
    analysis: dict[str, Any] = {"api_class": hints.api_class, "state_model": hints.state_model,
                                "read_only": dict(hints.read_only or {}) or None,
                                "destructive": dict(hints.destructive or {}) or None}
    out = Path(opts.output.out_dir) if opts.output.out_dir is not None else DEFAULT_OUT_DIR
    overwrite = opts.output.overwrite
    user_scenarios = _jsonl_objects(data.scenarios)
    task_objs = _jsonl_objects(data.tasks)
    work = Path(tempfile.mkdtemp(prefix="envfactory-import-"))
    try:
        (work / "src").mkdir()
        (work / "src" / src.name).write_bytes(src_bytes)
        try:
            build_req = {"source": f"src/{src.name}", "display": str(src), "name": man.name, "states": states_in,
                         "check_isolation": checks.check_isolation, **analysis}
            built = run_stage("build", work, build_req, sandbox=mode, timeout_s=timeout_s, image=image)
        except ImporterError as exc:
            raise ImporterError(str(exc.args[0]) if exc.args else str(exc), file=src) from None
        env_name = str(built["env_name"])
        if not NAME_RE.match(env_name):  # the sandbox's answer is checked too: never a folder outside out_dir
            raise ImporterError(env_name_refusal(env_name, given=man.name is not None), file=src)
        folder = out / env_name
        if env_name in opts.output.taken:
            raise ImporterError(f"{env_name} is also the name of {opts.output.taken[env_name]}, imported before it in "
                                "this run; give this file its own name (--name NAME, or name = \"...\" in its "
                                "--map table)", file=src)
        clash = name_collision(env_name, folder)
        if clash:
            raise ImporterError(clash, file=src)
        if folder.exists() and not overwrite:
            raise PackageExistsError(f"{folder.name} exists; pass overwrite=True to replace it", file=folder)
        if folder.exists() and not _previous_import(folder):
            raise ImporterError(f"refused to replace {folder}: overwrite replaces only a previous import in the "
                                "output folder, never a shipped or hand-written package", file=src)
        model = str(built["state_model"])
        desc = man.description or (str(built["module_doc"]).splitlines()[0] if built["module_doc"]
                               else f"Imported from {src.name}")
        domain = man.domain or infer_domain(environment_texts(env_name, desc, built["tools"], built["states"]), name=env_name)
        manifest = Manifest(
            name=env_name, version=man.version, domain=domain, description=desc, state_model=f"state:{model}",
            tools_module="tools", default_initial_state="small", bookkeeping_fields=list(man.bookkeeping_fields),
            free_text_fields=list(man.free_text_fields), set_fields=list(man.set_fields),
            provenance=Provenance.model_validate(  # extra keys are kept (Provenance allows them)
                {"kind": "imported", "source": str(src), "sha256": hashlib.sha256(src_text.encode()).hexdigest(),
                 "api_class": str(built["api_class"]), "importer": "gym_envfactory.generators.importer",
                 **({} if man.domain else {"domain": "inferred from its names (generators.domains)"})}))
        files: dict[str, str | bytes] = {
            "_source.py": src_bytes,  # the server, byte for byte
            "_bridge.py": bridge_source(),
            "_undo.py": undo_source(),
            "__init__.py": (f'"""{env_name}: imported from {src.name} (see _bridge.py); _source.py is the original, '
                            'unedited."""\n\nfrom ._bridge import load_package_source\n\nload_package_source(__name__, __file__)\n'),
            "state.py": (f'"""State model of {env_name}: the root scenario model of the imported server."""\n\n'
                         f"from ._source import {model}\n\n__all__ = [{model!r}]\n"),
            "tools.py": str(built["tools_py"]),
        }
        pkg = work / "pkg" / env_name
        pkg.mkdir(parents=True)
        states = dict(built["states"])
        write_environment_package(pkg, manifest, files=files, initial_states=states, scenarios=user_scenarios or None,
                                  tasks=task_objs or None, sort_state_keys=False, replace=True)
        digest = package_digest(pkg)
        analysis = {**analysis, "api_class": str(built["api_class"]), "state_model": model}
        stage_req = {"env_name": env_name, "source": str(src), **analysis}
        noop_writes: list[str] = []
        reclassified: list[str] = []
        if checks.probe:
            probed = run_stage("probe", work, {**stage_req, "taken": [s.get("scenario_id", "") for s in user_scenarios]},
                               sandbox=mode, timeout_s=timeout_s, image=image)
            recorded = list(probed["scenarios"])
            _check_digest(pkg, digest, "probe")
            reclassified, noop_writes = _read_after_probe(built, dict(probed.get("observed") or {}))
            if reclassified:  # regenerate tools.py with those tools read-only, and probe them again
                overrides = {**dict(hints.read_only or {}), **{t: True for t in reclassified}}
                analysis = {**analysis, "read_only": overrides}
                stage_req = {**stage_req, "read_only": overrides}
                built = run_stage("build", work, {**build_req, **analysis, "name": env_name},
                                  sandbox=mode, timeout_s=timeout_s, image=image)
                (pkg / "tools.py").write_text(str(built["tools_py"]), encoding="utf-8")
                digest = package_digest(pkg)
                probed = run_stage("probe", work, {**stage_req, "taken": [s.get("scenario_id", "") for s in user_scenarios]},
                                   sandbox=mode, timeout_s=timeout_s, image=image)
                recorded = list(probed["scenarios"])
                _check_digest(pkg, digest, "probe")
            for t in noop_writes:
                log.warning("%s: %s reported success without changing the state (a silent no-op write) when the "
                            "probe called it; no scenario pins it", env_name, t)
            (pkg / "scenarios.jsonl").write_text(jsonl_text(user_scenarios + recorded), encoding="utf-8")
            digest = package_digest(pkg)
        summary = None
        if checks.check_isolation or checks.validate:
            try:
                checked = run_stage("check", work, {**stage_req, "check_isolation": checks.check_isolation,
                                                    "validate": checks.validate},
                                    sandbox=mode, timeout_s=timeout_s, image=image)
            except ImporterError as exc:
                raise ImporterError(str(exc.args[0]) if exc.args else str(exc), file=src) from None
            _check_digest(pkg, digest, "validation")
            if checked["hard"]:
                places = {str(work / "pkg" / env_name / "_source.py"): str(src),
                          str(work / "pkg" / env_name / "tasks.jsonl"): str(data.tasks) if isinstance(
                              data.tasks, (str, Path)) else f"{env_name}/tasks.jsonl (the tasks given)",
                          str(work / "pkg" / env_name / "scenarios.jsonl"): f"{env_name}/scenarios.jsonl",
                          str(work / "pkg" / env_name): env_name}
                raise ImporterError(validation_refusal(checked["summary"], checked["hard"], places), file=src)
            for gap in checked["gaps"]:
                log.warning("%s: %s (pass scenarios= to cover it)", env_name, gap)
            summary = checked["summary"]
        _publish(pkg, folder, digest, overwrite=overwrite)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ImportedPackage(name=env_name, path=folder, tools={str(k): bool(v) for k, v in built["tools"].items()},
                           initial_states=list(states), sandbox=mode, digest=digest, validation=summary,
                           noop_writes=tuple(noop_writes), reclassified=tuple(reclassified))


def validation_refusal(summary: Mapping[str, Any] | None, failures: Iterable[str],
                       places: Mapping[str, str] | None = None, limit: int = 20) -> str:
    """The message of an import refused by validation: the counts first (``"3 of 25 tasks failed to
    replay; 1 of 6 scenarios failed"``), then up to ``limit`` failures, one a line, with every temporary
    path in ``places`` (path → what to say instead: the user's own file) replaced, and how many more."""
    parts = []
    if summary:
        if summary.get("task_failures"):
            parts.append(f"{summary['task_failures']} of {summary['tasks']} tasks failed to replay")
        failed = int(summary.get("scenarios", 0)) - int(summary.get("scenarios_passed", 0))
        if failed:
            parts.append(f"{failed} of {summary['scenarios']} scenarios failed")
        if summary.get("lint_failures"):
            parts.append(f"{summary['lint_failures']} determinism lint finding(s)")
    lines = list(failures)
    for i, line in enumerate(lines):
        for tmp, mine in sorted((places or {}).items(), key=lambda kv: -len(kv[0])):
            line = line.replace(tmp, mine)
        lines[i] = line
    more = f"\n  ... and {len(lines) - limit} more" if len(lines) > limit else ""
    return (f"the imported environment failed validation ({'; '.join(parts) or f'{len(lines)} failure(s)'}):\n  "
            + "\n  ".join(lines[:limit]) + more)


def _read_after_probe(built: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """From the probe's observations: (tools to import read-only instead, no-op writes to report).

    A tool guessed as a write (not annotated by the server or an override) whose name reads
    (``hotel_get_room``), whose API methods write no field of the state model (only private or unsaved
    attributes: :func:`~.analysis.written_attributes`; one that writes a field on a branch the probe did
    not reach stays a write), or whose methods write nothing at all whatever its name, and whose probe
    calls all changed nothing is read-only; any other write tool
    the probe saw succeed without a change is a silent no-op write, reported as ``name(arguments)``."""
    annotated = set(built.get("annotated") or ())
    reads = ((set(built.get("reads_by_name") or ()) - set(built.get("writes_state") or ()))
             | set(built.get("writes_nothing") or ()))
    to_read, noops = [], []
    for tool, ro in dict(built["tools"]).items():
        seen = observed.get(tool)
        if ro or not seen or not seen.get("noop"):
            continue
        if tool in reads and tool not in annotated and not seen.get("ok"):
            to_read.append(tool)
        else:
            args = ", ".join(f"{k}={v!r}" for k, v in dict(seen.get("arguments") or {}).items())
            noops.append(f"{tool}({args})")
    return to_read, noops


def import_tool_server(path: str | Path, options: ImportOptions | None = None, *, register: bool = True,
                       **keywords: Unpack[ImportKeywords]) -> EnvironmentSpec:
    """Turn a single-file tool server (module docstring layout) into ``out_dir/<name>/`` and load it.

    Every execution of the file's code before publication (analysis, probe, isolation checks,
    validation) runs in ``sandbox`` (:func:`import_server_package`); the returned spec is the
    published package loaded in *this* process, so from then on the code runs with this process's
    rights, as any environment you use does.

    Args:
        path: the server file; it is copied, never edited.
        options: every option of the import, grouped (:class:`~.options.ImportOptions`): the manifest
            (``name``, default from the API class, ``BookStoreAPI`` → ``BookStore``; ``domain``,
            ``version``, ``description``, state field lists), the data (``initial_state``, the ``small``
            state: a scenario JSON file, a dict or a model, default the API's empty ``save_scenario()``;
            ``initial_states`` by name; ``tasks``, ``scenarios``: JSON Lines files or objects), hints to
            the analysis (``state_model``, ``api_class``, per-tool ``read_only``/``destructive``), the
            checks (``probe``, ``validate``, ``check_isolation``: refuse an import whose sessions share
            module-level state, see :func:`check_session_isolation`), the sandbox (``sandbox``: ``"auto"``,
            ``"docker"``, ``"process"`` or ``"inline"``, this process: trusted files and tests only) and
            the output (``out_dir``, default :data:`DEFAULT_OUT_DIR`; ``overwrite``).
        register: make ``gym.make("envfactory/<name>-v0")`` and ``get_environment(name)`` find it.
        keywords: the same options as flat keywords (``name="BookStore"``, ``sandbox="process"``...),
            applied over ``options``.

    Raises:
        ImporterError: the file does not fit the layout, or the result failed validation.
        SpecError: a bad name, domain, state or task.
    """
    done = import_server_package(path, options, **keywords)
    purge_modules(done.name)
    spec = load_environment(done.path)
    if register:
        from gym_envfactory.environment.catalog import add_environment

        add_environment(spec)  # get_environment and gym.make find it under its name, wherever its folder is
    return spec
