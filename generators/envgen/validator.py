"""The Validator: import a generated package afresh and check it by execution (no LLM).

:func:`validate_package` runs the static gate, loads the package under a unique module name
(:func:`load_package`), compares its tools with the metadata, and executes its scenarios, tasks, the
determinism lint and a replay-twice check (docs/authoring.md), turning every failure into a
:class:`~.report.Finding`.  This is the code that runs *inside* the sandbox (:func:`child_main`);
:func:`~.sandbox.validate_in_child` starts it there and reads its report.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gym_envfactory.environment.manifest import Manifest
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import SpecError

from ..checks import run_differences
from .gate import check_imports
from .interface import check_interface
from .report import LEVELS, MEMORY_LIMIT_MESSAGE, Finding, ScenarioOutcome, ValidationOutcome, hash_seed_finding

__all__ = ["child_main", "load_package", "validate_package"]

log = logging.getLogger(__name__)

_tags = itertools.count()


def load_package(folder: str | Path, tag: str | None = None) -> EnvironmentSpec:
    """Load an environment package under a unique module name (``gym_envfactory._envs.<Name>__envgen_<tag>``).

    :func:`gym_envfactory.environment.package.load_environment` caches modules by environment name, so a revised
    package of the same name would silently reuse the first attempt's code; this loader always
    executes the files on disk.  Raises :class:`SpecError`.
    """
    from pydantic import ValidationError

    from gym_envfactory.environment.arguments import format_validation_error
    from gym_envfactory.environment.package import (
        collect_tools,
        import_member,
        import_package,
    )

    folder = Path(folder).resolve()
    man_file = folder / "environment.toml"
    try:
        manifest = Manifest.model_validate(tomllib.loads(man_file.read_text()))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"unreadable manifest: {exc}", file=man_file) from None
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        raise SpecError(d["message"], file=man_file, field=d["field"]) from None
    manifest.check(man_file)
    tag = tag or f"{os.getpid()}_{next(_tags)}"
    pkg = import_package(f"{manifest.name}{_tag_suffix(tag)}", folder)
    mod_name, _, cls_name = manifest.state_model.partition(":")
    state_mod = import_member(pkg, folder, mod_name, field="state_model")
    state_model = getattr(state_mod, cls_name or "State", None)
    if not (isinstance(state_model, type) and issubclass(state_model, BaseModel)):
        raise SpecError(f"{manifest.state_model!r} is not a Pydantic model", file=man_file, field="state_model")
    tools_mod = import_member(pkg, folder, manifest.tools_module, field="tools_module")
    return EnvironmentSpec(manifest, state_model, collect_tools(tools_mod, manifest.name), path=folder)


def _tag_suffix(tag: str) -> str:
    return "__envgen_" + re.sub(r"[^A-Za-z0-9_]", "_", tag)


def _unload(tag: str) -> None:
    """Forget the modules of one validation attempt (``gym_envfactory._envs.<Name>__envgen_<tag>...``)."""
    head = "gym_envfactory._envs."
    suffix = _tag_suffix(tag)
    for mod in [m for m in sys.modules if m.startswith(head) and m[len(head):].split(".", 1)[0].endswith(suffix)]:
        del sys.modules[mod]


_STEP_RE = re.compile(r"^step (\d+) \((.*?)\): (.*)$", re.S)


def _classify_step(sid: str, text: str) -> Finding:
    m = _STEP_RE.match(text)
    tool, body = (m.group(2), m.group(3)) if m else (None, text)
    kw = {"tool": tool, "scenario": sid}
    msg = f"scenario {sid}: {text}"
    if body.startswith("expected ") and ", got internal_error" in body:
        if "silent no-op write" in body:
            return Finding.of("state", "silent_write", msg, **kw)
        if "read-only tool changed the state" in body:
            return Finding.of("state", "read_only_write", msg, **kw)
        if "after partially changing the state" in body:
            return Finding.of("state", "partial_write", msg, **kw)
        return Finding.of("execution", "tool_crash", msg, **kw)
    if body.startswith("expected error code"):
        return Finding.of("results", "error_code", msg, **kw)
    if body.startswith("expected "):
        return Finding.of("results", "outcome_mismatch", msg, **kw)
    if body.startswith("result "):
        return Finding.of("results", "result_mismatch", msg, **kw)
    if body.startswith("state changed but"):
        return Finding.of("state", "unexpected_change", msg, **kw)
    if body.startswith("state unchanged but"):
        return Finding.of("state", "missing_change", msg, **kw)
    if body.startswith("state "):
        return Finding.of("state", "state_mismatch", msg, **kw)
    if text.startswith("initial state"):
        return Finding.of("execution", "initial_state", msg, **kw)
    return Finding.of("results", "scenario", msg, **kw)


def _replay_twice(spec: EnvironmentSpec, limit: int = 50) -> list[Finding]:
    """Run each scenario's calls twice from the same initial state: results and final states must be
    byte-identical (docs/authoring.md); one finding per scenario whose runs differ."""
    return [Finding.of("execution", "nondeterministic_replay",
                       f"scenario {d.scenario_id}: two replays from the same state gave different "
                       f"{'states' if d.states else 'results'}", scenario=d.scenario_id)
            for d in run_differences(spec, limit=limit)]


def validate_package(folder: str | Path, metadata: Mapping[str, Any], *, attempt: int = 0,
                     tag: str | None = None, unload: bool = True,
                     hash_seeds: Sequence[int] | None = None) -> ValidationOutcome:
    """The Validator: import ``folder`` afresh, check the four dimensions by execution, return the report.

    ``hash_seeds``: also replay the package in one child process per ``PYTHONHASHSEED`` and report any
    difference as a ``hash_seed_dependence`` finding (:func:`gym_envfactory.validation.hash_seed_differences`);
    ``None`` (the default, and what the sandbox child uses: it may start no process) leaves that to
    :func:`~.sandbox.validate_in_child`, which runs the probe children from outside.

    Never raises for faults of the package; they become findings.
    """
    from gym_envfactory.validation import validate_environment

    folder = Path(folder)
    name = folder.name
    outcome = ValidationOutcome(env=name, attempt=attempt)
    tag = tag or f"a{attempt}_{os.getpid()}_{next(_tags)}"
    spec: EnvironmentSpec | None = None
    outcome.findings += check_imports(folder)
    if outcome.findings:  # never execute code that fails the static gate
        return outcome.finish()
    try:
        spec = load_package(folder, tag)
        outcome.env = spec.name
    except SpecError as exc:
        if isinstance(exc.__cause__, MemoryError):
            outcome.findings.append(Finding.of("execution", "resource_limit", MEMORY_LIMIT_MESSAGE))
        else:
            outcome.findings.append(Finding.of("execution", "import", f"the package does not load: {exc}"))
    except MemoryError:
        outcome.findings.append(Finding.of("execution", "resource_limit", MEMORY_LIMIT_MESSAGE))
    except Exception as exc:  # noqa: BLE001 - any import-time fault of generated code is a finding
        outcome.findings.append(Finding.of("execution", "import", f"the package does not load: {type(exc).__name__}: {exc}"))
    if spec is None:
        if unload:
            _unload(tag)
        return outcome.finish()
    try:
        outcome.tools = list(spec.tools)
        outcome.findings += check_interface(spec, metadata)
        try:
            spec.initial_state_json()
        except SpecError as exc:
            outcome.findings.append(Finding.of("execution", "initial_state", f"initial state does not validate: {exc}"))
            return outcome.finish()
        report = validate_environment(spec, hash_seeds=hash_seeds)
        outcome.findings += [Finding.of("execution", "determinism_lint", f"{x}") for x in report.lint_failures]
        outcome.findings += [hash_seed_finding(x) for x in report.determinism_failures]
        outcome.scenarios = [ScenarioOutcome(scenario_id=s.scenario_id, level=s.level, passed=s.passed, failures=s.failures)
                             for s in report.scenarios]
        for s in report.scenarios:
            outcome.findings += [_classify_step(s.scenario_id, f) for f in s.failures]
        outcome.coverage = {t: sorted(v) for t, v in report.coverage.items()}
        for f in report.coverage_failures:
            if f.startswith("scenarios: "):
                outcome.findings.append(Finding.of("results", "bad_scenarios", f))
            else:
                m = re.match(r"tool (\S+):", f)
                outcome.findings.append(Finding.of("results", "coverage", f, tool=m.group(1) if m else None))
        outcome.findings += [Finding.of("results", "task_replay", f) for f in report.task_failures]
        outcome.n_tasks = report.n_tasks
        if report.scenarios:
            missing = [lv for lv in LEVELS if lv not in {s.level for s in report.scenarios}]
            if missing:
                outcome.findings.append(Finding.of("results", "levels", f"no scenario of level {', '.join(missing)}"))
            outcome.findings += _replay_twice(spec)
    except MemoryError:
        outcome.findings.append(Finding.of("execution", "resource_limit", MEMORY_LIMIT_MESSAGE))
    except Exception as exc:  # noqa: BLE001 - reported as a blocking finding, never swallowed
        log.exception("validator crashed on %s", folder)
        outcome.findings.append(Finding.of("execution", "validator_crash", f"{type(exc).__name__}: {exc}"))
    finally:
        if unload:
            _unload(tag)
    return outcome.finish()


def child_main() -> None:
    """Entry point of a validation child, process or container (:func:`~.sandbox.validate_in_child`):
    ``sys.argv[1:5]`` are ``PKG METADATA_JSON OUT_JSON ATTEMPT``; the report is written to ``OUT_JSON``."""
    pkg, meta, out, attempt = sys.argv[1:5]
    outcome = validate_package(pkg, json.loads(Path(meta).read_text()), attempt=int(attempt), unload=False)
    Path(out).write_text(outcome.model_dump_json(indent=1))
