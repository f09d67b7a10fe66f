"""Where the imported file's code runs: every execution of it goes through the shared sandbox.

:func:`import_tool_server` never executes the server in its own process (unless asked to with
``sandbox="inline"``).  Each stage that runs the file's code is a child (:func:`child_main`) that
reads a request and writes a JSON result:

* ``build``: :func:`~.analysis.analyze_tool_server` (executing the module top level, building the API,
  ``save_scenario()``), the initial states checked against the state model, ``tools.py``
  (:func:`~.codegen.generate_tools_py`);
* ``probe``: the written package loaded and every tool called once (:func:`~.probe.probe_scenarios`);
* ``check``: session isolation and determinism (:func:`~.isolation.check_session_isolation`) and
  :func:`~gym_envfactory.validation.validate_environment`.

Sandboxes (:data:`SANDBOX_MODES`, EnvGen's plus ``"inline"``), all run by
:func:`gym_envfactory.generators.sandbox.run_sandboxed`: ``"docker"``, the product's runtime image with
no network, an empty environment, the stage mounted read-only and memory/CPU/pids limits (the image's
copy of this module runs, so rebuild the image after changing it); ``"process"``, a child process with
an empty environment, resource limits and fresh namespaces where the host allows (*not* a sandbox, a
warning is logged); ``"auto"``, docker when the engine and the runtime image are there, else process;
``"inline"``, this process (for tests and trusted files only).

What stays in this process never executes the file: reading its bytes once (the package's
``_source.py`` and the provenance hash come from them, not from the child), writing the package from
those bytes and the children's JSON answers, and the package digests
(:func:`gym_envfactory.generators.sandbox.package_digest`) that make the published package
byte-identical to the one probed and validated.  A child can still lie in its answer (a forged
report): the sandbox keeps secrets and the host out of its reach, it does not make its answers true.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import SandboxError
from ..sandbox import ANSWER, ChildLimits, ChildRun, ReadOnly, run_sandboxed
from ..sandbox import SANDBOX_MODES as SHARED_MODES
from ..sandbox import resolve_sandbox as resolve_shared
from .analysis import ImporterError, ServerAnalysis
from .options import STAGE_TIMEOUT_S

__all__ = ["SANDBOX_MODES", "child_main", "resolve_sandbox", "run_stage", "run_stage_here"]

log = logging.getLogger(__name__)

#: Where the imported code may run: as EnvGen's ``sandbox`` plus ``"inline"`` (this process, on request only).
SANDBOX_MODES = (*SHARED_MODES, "inline")


def resolve_sandbox(sandbox: str, image: str | None = None) -> str:
    """``"docker"``, ``"process"`` or ``"inline"`` for ``sandbox`` (``"auto"``: docker when an engine
    holds the runtime image, else process).  Raises :class:`ImporterError` for an unknown mode."""
    if sandbox not in SANDBOX_MODES:
        raise ImporterError(f"sandbox must be one of {', '.join(map(repr, SANDBOX_MODES))}, not {sandbox!r}")
    if sandbox == "inline":
        return sandbox
    try:
        return resolve_shared(sandbox, image)
    except SandboxError as exc:
        raise ImporterError(str(exc)) from None


# ------------------------------------------------------------------------------------ the stages (child side)


def _default_env_name(a: ServerAnalysis) -> str:
    from ..packages import camel_name

    base = re.sub(r"(API|Api|Service|Server|Client)$", "", a.api_class.__name__) or a.path.stem
    return camel_name(base, prefix="Imported")


def _analyze(root: Path, req: Mapping[str, Any], file: str) -> ServerAnalysis:
    from .analysis import analyze_tool_server

    return analyze_tool_server(root / file, api_class=req.get("api_class"), state_model=req.get("state_model"),
                               read_only=req.get("read_only"), destructive=req.get("destructive"),
                               sample_state=(req.get("states") or {}).get("small"))


def _build(root: Path, req: Mapping[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    from .analysis import reads_by_name
    from .codegen import generate_tools_py
    from .determinism import network_imports
    from .isolation import shared_module_globals, static_refusals

    display = str(req.get("display") or Path(req["source"]).name)
    network = network_imports((root / req["source"]).read_text(encoding="utf-8"), display)
    if network:
        raise ImporterError("refused: " + "\n  ".join(network))
    a = _analyze(root, req, req["source"])
    problems = static_refusals(a.source, str(req.get("display") or a.path.name)) if req.get("check_isolation", True) else []
    if problems:
        shared = "; ".join(f"{n} (used by {', '.join(users)})" for n, users in shared_module_globals(a).items())
        raise ImporterError("sessions of the imported environment are not isolated or not deterministic:\n  "
                            + "\n  ".join(problems)
                            + (f"\n  module-level state used by the API or its tools: {shared}" if shared else ""))
    states = dict(req["states"])
    states = {"small": states.pop("small", a.empty_scenario), **states}
    for k, v in states.items():
        try:
            a.state_model.model_validate(v)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "(root)"
            hint = (" (the empty state of the API; pass a scenario with --initial-state FILE)" if k == "small"
                    and "small" not in req["states"] else "")
            raise ImporterError(f"initial state {k!r}{hint} does not validate with {a.state_model.__name__}: "
                                f"{exc.error_count()} error(s), first at {where}: {first['msg']}") from None
        unknown = _unknown_keys(a.state_model, v)
        if unknown:
            raise ImporterError(
                f"initial state {k!r} has key(s) {', '.join(map(repr, unknown[:8]))} that {a.state_model.__name__} "
                f"(fields: {', '.join(a.state_model.model_fields) or 'none'}) does not know: its data would be "
                "dropped" + (" (the state model chosen with --state-model)" if req.get("state_model") else "")
                + "; choose the root scenario model whose fields are the scenario's keys with --state-model NAME")
        if k in req["states"]:  # a given state: what the server itself keeps of it, in its order (issue 26)
            states[k] = _through_server(a, k, v)
    env_name = req.get("name") or _default_env_name(a)
    return {"env_name": env_name, "state_model": a.state_model.__name__, "api_class": a.api_class.__name__,
            "module_doc": a.module_doc, "states": states, "tools_py": generate_tools_py(a, env_name),
            "tools": {t.name: t.read_only for t in a.tools},
            "annotated": sorted(t.name for t in a.tools if t.annotated),
            "reads_by_name": sorted(t.name for t in a.tools if reads_by_name(t.name)),
            "writes_state": _writes_state(a), "writes_nothing": _writes_nothing(a)}


def _writes_nothing(a: ServerAnalysis) -> list[str]:
    """Tools none of whose API methods visibly writes any attribute (a read whatever its name: the probe
    may import it read-only when it changed nothing, instead of reporting a silent no-op write)."""
    from .analysis import written_attributes

    return sorted(t.name for t in a.tools if t.methods and all(written_attributes(a.api_class, m) == set()
                                                                 for m in t.methods))


def _writes_state(a: ServerAnalysis) -> list[str]:
    """Tools whose API methods visibly write a field of the state model, or might (unknown source):
    never reclassified read-only by the probe (issue 26: a write on a branch the probe did not reach)."""
    from .analysis import written_attributes

    fields = set(a.state_model.model_fields)
    out = []
    for t in a.tools:
        for m in t.methods:
            attrs = written_attributes(a.api_class, m)
            if attrs is None or attrs & fields:
                out.append(t.name)
                break
    return sorted(out)


def _through_server(a: ServerAnalysis, name: str, data: Any) -> Any:
    """Initial state ``name`` as the server keeps it: a new API instance loads it (``load_scenario``, with
    a seeded stand-in entropy) and saves it (``save_scenario``), as JSON data in the server's own key
    order, checked again by the state model.  What the server does on load (normalising, filling
    defaults) is kept, and nothing is sorted."""
    import copy

    import pydantic_core
    from pydantic import ValidationError

    from . import bridge

    api_name = a.api_class.__name__
    try:
        with bridge.drawing_from(bridge.Entropy(bridge.state_seed(data))):
            api = a.api_class()
            api.load_scenario(copy.deepcopy(data))
            saved = pydantic_core.to_jsonable_python(api.save_scenario())
    except Exception as exc:  # noqa: BLE001 - the server's own code refused the state
        raise ImporterError(f"initial state {name!r}: {api_name}.load_scenario then save_scenario failed: "
                            f"{type(exc).__name__}: {exc}") from None
    try:
        a.state_model.model_validate(saved)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(root)"
        raise ImporterError(f"initial state {name!r} as {api_name}.save_scenario() gives it back does not validate "
                            f"with {a.state_model.__name__}: first at {where}: {first['msg']}") from None
    return saved


def _unknown_keys(model: Any, data: Any) -> list[str]:
    """Top-level keys of scenario ``data`` that ``model`` neither has as a field (or alias) nor keeps as
    an extra: data a scenario holds that the state would silently drop (issue 26)."""
    if not isinstance(data, dict) or model.model_config.get("extra") == "allow":
        return []
    known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    return sorted(str(k) for k in data if k not in known)


def _load(root: Path, req: Mapping[str, Any]) -> Any:
    from gym_envfactory.environment.package import load_environment

    from ..packages import purge_modules

    purge_modules(req["env_name"])
    return load_environment(root / "pkg" / req["env_name"])


def _probe(root: Path, req: Mapping[str, Any]) -> dict[str, Any]:
    from ..packages import purge_modules
    from .probe import probe_scenarios

    try:
        observed: dict[str, dict[str, Any]] = {}
        scenarios = probe_scenarios(_load(root, req), set(req["taken"]), observed)
        return {"scenarios": scenarios, "observed": observed}
    finally:
        purge_modules(req["env_name"])


def validation_summary(report: Any) -> dict[str, Any]:
    return {"scenarios": len(report.scenarios), "scenarios_passed": sum(s.passed for s in report.scenarios),
            "tools": len(report.coverage), "tools_covered": sum(len(v) == 2 for v in report.coverage.values()),
            "tasks": report.n_tasks, "task_failures": len(report.task_failures),
            "lint_failures": len(report.lint_failures),
            "failures": list(report.failures()) + list(report.coverage_warnings),
            "coverage_failures": list(report.coverage_failures) + list(report.coverage_warnings)}


def _check(root: Path, req: Mapping[str, Any]) -> dict[str, Any]:
    from ..checks import split_coverage_gaps
    from ..packages import purge_modules
    from .isolation import check_session_isolation

    try:
        spec = _load(root, req)
        if req["check_isolation"]:
            check_session_isolation(_analyze(root, req, f"pkg/{req['env_name']}/_source.py"), spec)
        if not req["validate"]:
            return {"hard": [], "gaps": [], "summary": None}
        from gym_envfactory.validation import validate_environment

        report = validate_environment(spec, hash_seeds=None)  # no processes in the sandbox (docs/authoring.md)
        # one rule with `envfactory validate`: refused exactly when the report fails; an imported
        # environment's coverage gaps are warnings there too (ValidationReport.coverage_warnings)
        hard, gaps = split_coverage_gaps(report)
        return {"hard": hard, "gaps": gaps + list(report.coverage_warnings), "summary": validation_summary(report)}
    finally:
        purge_modules(req["env_name"])


_STAGES = {"build": _build, "probe": _probe, "check": _check}


class _TracebacksAtDebug(logging.Filter):
    """Keeps a record's one-line message and moves its traceback to a DEBUG record of the same logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno > logging.DEBUG:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("traceback of: %s", record.getMessage(), exc_info=record.exc_info)
            record.exc_info, record.exc_text = None, None
        return True


@contextlib.contextmanager
def tracebacks_at_debug() -> Iterator[None]:
    """While it runs, a tool's exception logged by the session during an import's checks (validation
    replays hundreds of calls) is one line; its traceback is logged at DEBUG (``--verbose``/``-v``)."""
    filt = _TracebacksAtDebug()
    logger = logging.getLogger("gym_envfactory.session")
    logger.addFilter(filt)
    try:
        yield
    finally:
        logger.removeFilter(filt)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[list[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append([record.name, record.getMessage()])


def run_stage_here(stage: str, root: str | Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run one stage in this process: ``{"result": ...}`` or ``{"error": message}`` (an
    :class:`ImporterError` or any exception the imported code raised), plus ``"warnings"``: the
    ``[logger, message]`` warnings logged meanwhile.  Only a fault of this code itself propagates."""
    handler = _Collect()
    logger = logging.getLogger("gym_envfactory")
    logger.addHandler(handler)
    try:
        try:
            with tracebacks_at_debug():
                out: dict[str, Any] = {"result": _STAGES[stage](Path(root), request)}
        except ImporterError as exc:  # the parent names the original file: drop this side's (temporary) path
            out = {"error": str(getattr(exc, "message", None) or (exc.args[0] if exc.args else exc))}
        except Exception as exc:  # noqa: BLE001 - whatever the imported code raised is its answer
            out = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        logger.removeHandler(handler)
    out["warnings"] = handler.records
    return out


def child_main() -> None:
    """The entry point of a stage child: ``sys.argv[1:5]`` are ``STAGE ROOT REQUEST_JSON OUT_JSON``."""
    stage, root, req, out = sys.argv[1:5]
    answer = run_stage_here(stage, root, json.loads(Path(req).read_text(encoding="utf-8")))
    Path(out).write_text(json.dumps(answer, default=str), encoding="utf-8")


# ------------------------------------------------------------------------------------ the runner (parent side)


def _ended(mode: str, stage: str, run: ChildRun, out: Path, timeout_s: float) -> dict[str, Any]:
    """The answer a stage child wrote to ``out``; :class:`ImporterError` when it timed out, hit the memory
    limit, failed or wrote no JSON object."""
    if run.timed_out:
        raise ImporterError(f"the imported code did not finish the {stage} stage in {timeout_s:.0f} s "
                            "(an endless loop at import or in a tool?)")
    if run.memory_exceeded:
        raise ImporterError(f"the imported code hit the sandbox memory limit in the {stage} stage")
    code, tail = run.returncode, run.stderr_tail
    if code != 0 or not out.is_file() or out.is_symlink():
        stale = mode == "docker" and ("ModuleNotFoundError" in tail or "ImportError" in tail)
        hint = " (a stale runtime image? rebuild it: `envfactory image runtime`)" if stale else ""
        raise ImporterError(f"the {stage} stage's {mode} sandbox exited with {code}{hint}: {tail[-800:]}")
    try:
        answer = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImporterError(f"the {stage} stage wrote no readable answer: {exc}") from None
    if not isinstance(answer, dict):
        raise ImporterError(f"the {stage} stage wrote {type(answer).__name__}, not an object")
    return answer


def _answer_file(root: Path, stage: str) -> Path:
    out = root / "answers" / f"{stage}.json"
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    return out


_T = TypeVar("_T")


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coro)``, in a worker thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def run_stage(stage: str, root: Path, request: Mapping[str, Any], *, sandbox: str, timeout_s: float = STAGE_TIMEOUT_S,
              limits: ChildLimits | None = None, image: str | None = None) -> dict[str, Any]:
    """Run ``stage`` on the folder ``root`` in ``sandbox`` (``"docker"``, ``"process"`` or
    ``"inline"``, as :func:`resolve_sandbox` gives), re-log its warnings here and return its result.

    The request is written to ``root/request-<stage>.json``; in docker ``root`` is a read-only copy.
    Raises :class:`ImporterError` with the imported code's error, or when the child timed out, hit a
    limit, crashed or wrote no answer."""
    req_file = root / f"request-{stage}.json"
    req_file.write_text(json.dumps(request), encoding="utf-8")
    if sandbox == "inline":
        answer = run_stage_here(stage, root, request)
    elif sandbox in ("docker", "process"):
        out = _answer_file(root, stage)
        try:
            run = _run_sync(run_sandboxed(__name__, "child_main", [stage, ReadOnly(root), ReadOnly(req_file), ANSWER],
                                          sandbox=sandbox, answer=out, timeout_s=timeout_s, limits=limits,
                                          image=image, role="import-validation"))
        except SandboxError as exc:
            raise ImporterError(str(exc)) from None
        answer = _ended(sandbox, stage, run, out, timeout_s)
    else:
        raise ImporterError(f"run_stage: sandbox must be 'docker', 'process' or 'inline', not {sandbox!r}")
    for entry in answer.get("warnings") or []:
        name, msg = (entry + ["", ""])[:2] if isinstance(entry, list) else ("", str(entry))
        logging.getLogger(str(name) or __name__).warning("%s", msg)
    if answer.get("error") is not None:
        raise ImporterError(str(answer["error"]))
    result = answer.get("result")
    if not isinstance(result, dict):
        raise ImporterError(f"the {stage} stage gave no result")
    return result
