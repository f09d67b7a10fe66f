"""EnvGen: synthesise, execution-validate and revise environments from tool metadata (arXiv 2605.18703, §3.2).

Per environment the pipeline runs four stages::

    Code Agent (LLM, stage "code")   metadata (+ authentic resources) -> state.py, tools.py, initial state, manifest
    Test Agent (LLM, stage "test")   code + metadata -> validation scenarios (simple ... error), optional tasks
    Validator  (no LLM)              fresh import + execution -> structured report (four dimensions)
    Reviser    (LLM, stage "revise") code + failures + metadata -> revised code (+ scenarios) -> Validator again

The loop ends when the report has no blocking finding or the revision budget is spent (default 3).
Only environments that pass are written to the output catalog (``env_images/<Name>/``, provenance
``kind = "generated"``) and registered as ``envfactory/<Name>-v0``; the others go to the quarantine
folder with their last code and ``report.json``.

SECURITY -- generated code is untrusted code.  EnvGen never imports it in its own process: the
Validator runs it in a child process whose environment is an allow-list (:data:`CHILD_ENV_ALLOW`;
``HOME`` is an empty temporary folder, so API keys, database URLs and cloud credentials are not
inherited), and a passing environment is registered with Gymnasium from its manifest only (the
output folder is added to ``$ENVFACTORY_CATALOG``), so its code runs again only on an explicit
``gym.make``.  The static gate (:func:`check_imports`) is a SAFETY NET, not a sandbox: Python cannot
be confined by inspecting its source, and code that passes the gate can still read files or open
sockets through routes the gate does not know.  Generated code from a model you do not control must
be generated, validated and run inside a sandbox (a container or VM without credentials or network).

The Validator never asks the model anything.  It checks, by execution (DESIGN §3):

* ``interface``: generated tool schemas against the metadata (missing/extra tools, parameter names,
  required fields, JSON types, enums) -- :func:`check_interface`;
* ``execution``: a static gate (a safety net, see above) refuses imports outside :data:`ALLOWED_IMPORTS`,
  ``eval``/``exec``/``open``/``getattr``..., dunders and routes to ``os``/``sys`` before anything runs; the package imports in a fresh module (a unique module name per attempt, so revised
  code is really re-executed), the initial state validates, the determinism lint
  (:func:`gym_envfactory.validation.lint_environment`) and a replay-twice check are clean;
* ``results`` and ``state``: every scenario executed by :func:`gym_envfactory.validation.validate_environment`
  in isolated sessions with ``check_writes=True`` (a write that reports success without changing the
  state is a failure), per-tool coverage of success and error paths, replay of task ground truth.

Severities come from which check failed (:data:`SEVERITY`), never from wording; ``high`` and
``medium`` findings block, ``low`` ones are advice.  By default the Validator runs in a child process
(``isolation="process"``) with a timeout, so generated code that hangs or exits cannot take the run
down; ``isolation="inline"`` validates in this process.

Checkpoints: ``<checkpoint_dir>/<Name>.json`` records the stage reached, the attempt, paths and token
usage after every stage; each attempt's artefacts (``code.json``, ``scenarios.json``, ``report.json``,
``pkg/``) live in ``<checkpoint_dir>/<Name>/attempt-<k>/``.  :func:`resume_checkpoint` continues from
the first missing artefact, and the LLM layer's on-disk cache (``<checkpoint_dir>/cache``) replays any
request already answered, so a resumed run repeats no paid call.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from pydantic import BaseModel, Field

from gym_envfactory.environment.manifest import DOMAINS, Manifest, canonical_json
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import EnvFactoryError, SpecError

from . import prompts

__all__ = [
    "EnvGen",
    "EnvGenError",
    "EnvGenJob",
    "EnvGenOptions",
    "EnvGenResult",
    "Finding",
    "ValidationOutcome",
    "SEVERITY",
    "check_interface",
    "check_imports",
    "child_environment",
    "add_catalog_dir",
    "validate_package",
    "load_package",
    "write_package",
    "resume_checkpoint",
    "env_name",
]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "envgen-checkpoint/1"
Dimension = Literal["interface", "execution", "results", "state"]
Severity = Literal["high", "medium", "low"]

#: The severity of every check the Validator runs (the single source of severities).
SEVERITY: dict[str, Severity] = {
    # interface
    "missing_tool": "high",
    "extra_tool": "high",
    "missing_param": "high",
    "extra_required_param": "high",
    "extra_optional_param": "medium",
    "required_but_optional": "medium",   # metadata requires it, the code gives it a default
    "optional_but_required": "high",     # metadata makes it optional, the code rejects calls without it
    "type_mismatch": "high",
    "enum_mismatch": "medium",
    "item_type_mismatch": "medium",
    "output_fields": "low",
    # execution
    "import": "high",
    "forbidden_import": "high",
    "initial_state": "high",
    "determinism_lint": "high",
    "nondeterministic_replay": "high",
    "tool_crash": "high",
    "timeout": "high",
    "validator_crash": "high",
    # state
    "silent_write": "high",
    "read_only_write": "high",
    "partial_write": "high",
    "missing_change": "medium",
    "unexpected_change": "medium",
    "state_mismatch": "medium",
    # results
    "bad_scenarios": "high",
    "outcome_mismatch": "medium",
    "error_code": "medium",
    "result_mismatch": "medium",
    "scenario": "medium",
    "coverage": "medium",
    "task_replay": "medium",
    "levels": "low",
}
BLOCKING: frozenset[str] = frozenset({"high", "medium"})
LEVELS = ("simple", "medium", "complex", "boundary", "error")
#: Blocking findings shown to the Reviser (the report on disk keeps all of them).
MAX_FAILURES_IN_PROMPT = 60

_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_tags = itertools.count()


class EnvGenError(EnvFactoryError):
    """EnvGen cannot start or continue (a name clash, an unreadable checkpoint, a hand-written
    environment in the way).  Validation failures are not errors: they end in quarantine."""


# ------------------------------------------------------------------------------------------ report


class Finding(BaseModel):
    """One failed check.  ``severity`` is :data:`SEVERITY` of ``check``."""

    dimension: Dimension
    check: str
    severity: Severity
    message: str
    tool: str | None = None
    scenario: str | None = None

    @classmethod
    def of(cls, dimension: Dimension, check: str, message: str, **kw: Any) -> "Finding":
        return cls(dimension=dimension, check=check, severity=SEVERITY[check], message=message[:2000], **kw)

    @property
    def blocking(self) -> bool:
        return self.severity in BLOCKING


class ScenarioOutcome(BaseModel):
    scenario_id: str
    level: str
    passed: bool
    failures: list[str] = Field(default_factory=list)


class ValidationOutcome(BaseModel):
    """The Validator's structured report on one attempt."""

    env: str
    attempt: int = 0
    passed: bool = False
    findings: list[Finding] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    scenarios: list[ScenarioOutcome] = Field(default_factory=list)
    coverage: dict[str, list[str]] = Field(default_factory=dict)
    n_tasks: int = 0

    def finish(self) -> "ValidationOutcome":
        self.passed = not any(f.blocking for f in self.findings)
        return self

    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{dimension: {severity: n}}`` over all findings."""
        out: dict[str, dict[str, int]] = {d: {} for d in ("interface", "execution", "results", "state")}
        for f in self.findings:
            out[f.dimension][f.severity] = out[f.dimension].get(f.severity, 0) + 1
        return out

    @property
    def scenarios_passed(self) -> int:
        return sum(s.passed for s in self.scenarios)


# ------------------------------------------------------------------------------------ interface


def _ref_target(ref: str, defs: Mapping[str, Any]) -> Any:
    return defs.get(ref.rsplit("/", 1)[-1], {})


def _json_types(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> set[str]:
    """JSON types a schema admits (``$ref``, ``anyOf``/``oneOf``/``allOf``, ``enum`` resolved)."""
    if not isinstance(schema, dict) or depth > 10:
        return set()
    if "$ref" in schema:
        return _json_types(_ref_target(schema["$ref"], defs), defs, depth + 1)
    out: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        out.add(t)
    elif isinstance(t, list):
        out.update(x for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            out |= _json_types(sub, defs, depth + 1)
    values = schema.get("enum", [schema["const"]] if "const" in schema else [])
    if not out and values:
        for v in values:
            out.add("null" if v is None else "boolean" if isinstance(v, bool) else "integer" if isinstance(v, int)
                    else "number" if isinstance(v, float) else "string" if isinstance(v, str) else
                    "array" if isinstance(v, list) else "object")
    if not out and "properties" in schema:
        out.add("object")
    if not out and "items" in schema:
        out.add("array")
    return out


def _enum(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> set[Any] | None:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "$ref" in schema:
        return _enum(_ref_target(schema["$ref"], defs), defs, depth + 1)
    if "enum" in schema:
        return {json.dumps(v, sort_keys=True) for v in schema["enum"] if v is not None}
    if "const" in schema:
        return {json.dumps(schema["const"], sort_keys=True)}
    subs = [s for k in ("anyOf", "oneOf") for s in schema.get(k) or []]
    found = [e for e in (_enum(s, defs, depth + 1) for s in subs) if e is not None]
    return set().union(*found) if found else None


def _items(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "$ref" in schema:
        return _items(_ref_target(schema["$ref"], defs), defs, depth + 1)
    if isinstance(schema.get("items"), dict):
        return schema["items"]
    for k in ("anyOf", "oneOf"):
        for s in schema.get(k) or []:
            it = _items(s, defs, depth + 1)
            if it is not None:
                return it
    return None


def _accepts(generated: set[str], wanted: str) -> bool:
    return wanted in generated or (wanted == "integer" and "number" in generated)


def _compare_types(tool: str, param: str, meta: Any, mdefs: Mapping[str, Any], gen: Any,
                   gdefs: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    mt, gt = _json_types(meta, mdefs) - {"null"}, _json_types(gen, gdefs) - {"null"}
    if mt and gt:
        missing = sorted(t for t in mt if not _accepts(gt, t))
        if missing:
            out.append(Finding.of("interface", "type_mismatch",
                                  f"tool {tool}: parameter {param!r} is {'/'.join(sorted(mt))} in the metadata but "
                                  f"{'/'.join(sorted(gt))} in the code", tool=tool))
            return out
    me, ge = _enum(meta, mdefs), _enum(gen, gdefs)
    if me is not None and ge is not None and me != ge:
        out.append(Finding.of("interface", "enum_mismatch",
                              f"tool {tool}: parameter {param!r} allows {sorted(me)} in the metadata but {sorted(ge)} "
                              "in the code", tool=tool))
    if "array" in mt and "array" in gt:
        mi, gi = _items(meta, mdefs), _items(gen, gdefs)
        if mi is not None and gi is not None:
            mit, git = _json_types(mi, mdefs) - {"null"}, _json_types(gi, gdefs) - {"null"}
            if mit and git and any(not _accepts(git, t) for t in mit):
                out.append(Finding.of("interface", "item_type_mismatch",
                                      f"tool {tool}: items of {param!r} are {'/'.join(sorted(mit))} in the metadata but "
                                      f"{'/'.join(sorted(git))} in the code", tool=tool))
    return out


def _defs(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}


def check_interface(spec: EnvironmentSpec, metadata: Mapping[str, Any]) -> list[Finding]:
    """Compare the generated tools' JSON schemas with the metadata (names, parameters, required
    fields, JSON types, enums, array item types; output fields as advice).

    ``metadata`` is the EnvFactory metadata dict (``{"class_name", "description", "tools": [...]}``).
    """
    out: list[Finding] = []
    meta_tools = {t["name"]: t for t in metadata.get("tools", [])}
    for name in meta_tools:
        if name not in spec.tools:
            out.append(Finding.of("interface", "missing_tool", f"the metadata's tool {name!r} is not implemented", tool=name))
    for name in spec.tools:
        if name not in meta_tools:
            out.append(Finding.of("interface", "extra_tool", f"tool {name!r} is not in the metadata; remove it or "
                                  "rename it to a metadata tool", tool=name))
    for name, mt in meta_tools.items():
        ts = spec.tools.get(name)
        if ts is None:
            continue
        mschema = mt.get("input_schema") or {}
        gschema = ts.input_schema
        mdefs, gdefs = _defs(mschema), _defs(gschema)
        mprops, gprops = mschema.get("properties") or {}, gschema.get("properties") or {}
        mreq, greq = set(mschema.get("required") or []), set(gschema.get("required") or [])
        for p in mprops:
            if p not in gprops:
                out.append(Finding.of("interface", "missing_param", f"tool {name}: parameter {p!r} of the metadata is "
                                      f"missing (code has {sorted(gprops) or 'none'})", tool=name))
        for p in gprops:
            if p not in mprops:
                check = "extra_required_param" if p in greq else "extra_optional_param"
                out.append(Finding.of("interface", check, f"tool {name}: parameter {p!r} is not in the metadata "
                                      f"(metadata has {sorted(mprops) or 'none'})", tool=name))
        for p in mprops:
            if p not in gprops:
                continue
            if p in mreq and p not in greq:
                out.append(Finding.of("interface", "required_but_optional",
                                      f"tool {name}: parameter {p!r} is required in the metadata but has a default in the code", tool=name))
            elif p not in mreq and p in greq:
                out.append(Finding.of("interface", "optional_but_required",
                                      f"tool {name}: parameter {p!r} is optional in the metadata but required in the code", tool=name))
            out += _compare_types(name, p, mprops[p], mdefs, gprops[p], gdefs)
        mout, gout = mt.get("output_schema") or {}, ts.output_schema or {}
        mfields = set((mout.get("properties") or {}))
        gfields = set((gout.get("properties") or {}))
        if not gfields and "$ref" in gout:
            gfields = set((_ref_target(gout["$ref"], _defs(gout)).get("properties") or {}))
        if mfields and gfields and mfields - gfields:
            out.append(Finding.of("interface", "output_fields", f"tool {name}: result lacks the metadata's output fields "
                                  f"{sorted(mfields - gfields)}", tool=name))
    return out


# ------------------------------------------------------------------------------------ validation


def load_package(folder: str | Path, tag: str | None = None) -> EnvironmentSpec:
    """Load an environment package under a unique module name (``gym_envfactory._envs.<Name>__envgen_<tag>``).

    :func:`gym_envfactory.spec.load_environment` caches modules by environment name, so a revised
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
    byte-identical (DESIGN §3)."""
    from gym_envfactory.environment.states import resolve_task_state
    from gym_envfactory.session import Session

    out = []
    for sc in spec.scenarios[:limit]:
        try:
            initial = resolve_task_state(spec, sc.initial_state, {"task_id": sc.scenario_id})
        except SpecError:
            continue  # reported by the scenario run
        runs = []
        for _ in range(2):
            s = Session.from_states(spec, {spec.name: initial})
            results = [s.call(step.call, step.arguments) for step in sc.steps]
            runs.append((canonical_json([[r.ok, r.content, r.error] for r in results]), s.state_bytes()))
            s.close()
        if runs[0] != runs[1]:
            out.append(Finding.of("execution", "nondeterministic_replay",
                                  f"scenario {sc.scenario_id}: two replays from the same state gave different "
                                  f"{'states' if runs[0][1] != runs[1][1] else 'results'}", scenario=sc.scenario_id))
    return out


#: Top-level modules generated code may import (DESIGN §2: the authoring API, pydantic, and the pure
#: parts of the standard library).  Anything else (os, subprocess, socket, pathlib, HTTP clients ...) is
#: refused before the code is executed.  ``gym_envfactory`` is special: only
#: ``from gym_envfactory import <ALLOWED_RUNTIME_NAMES>`` and ``from gym_envfactory.authoring import ...``.
ALLOWED_IMPORTS: frozenset[str] = frozenset({
    "__future__", "gym_envfactory", "pydantic", "annotated_types", "typing", "typing_extensions", "datetime",
    "decimal", "enum", "math", "re", "random", "collections", "dataclasses", "functools", "itertools", "json",
    "string", "copy", "operator", "statistics", "fractions", "calendar", "zoneinfo", "textwrap", "uuid",
    "bisect", "heapq", "abc", "numbers", "unicodedata",
})
#: What generated code may take from the runtime package itself (no submodules: they import os,
#: subprocess, sockets ...).
ALLOWED_RUNTIME_NAMES: frozenset[str] = frozenset({"ToolError", "tool", "ToolAnnotations"})
ALLOWED_RUNTIME_MODULES: frozenset[str] = frozenset({"gym_envfactory", "gym_envfactory.authoring"})
#: Names refused wherever they appear (called or not): dynamic code, I/O, reflection by string.
_FORBIDDEN_BUILTINS = frozenset({
    "open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "help", "memoryview",
})
#: Attribute (and imported) names refused anywhere: the usual routes from a harmless module or object
#: to the operating system (``uuid.os``, ``random._os``, ``functools.sys`` ...), to import-by-string
#: (pydantic ``ImportString``), to attribute-access-by-string (``operator.attrgetter``) and to frames.
_FORBIDDEN_ATTRS = frozenset({
    "os", "_os", "sys", "_sys", "subprocess", "_subprocess", "builtins", "_builtins", "__builtins__", "shutil",
    "socket", "_socket", "posix", "_posix", "nt", "io", "_io", "importlib", "ctypes", "_ctypes", "pathlib",
    "platform", "signal", "threading", "_thread", "multiprocessing", "pickle", "marshal", "tempfile", "glob",
    "urllib", "http", "select", "mmap", "resource", "pty", "fcntl", "environ", "popen",
    "ImportString", "PyObject", "import_string", "import_module", "attrgetter", "methodcaller",
    "ForwardRef", "get_type_hints", "_eval_type",
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "f_globals",
    "f_locals", "f_builtins", "f_back", "f_code", "co_code", "func_globals", "codecs", "_codecs",
    "eval", "exec", "__import__", "getattr", "setattr", "delattr", "globals", "locals", "vars", "breakpoint",
})
#: Further attributes refused on anything reached from an imported module (``json.codecs.open``), but
#: fine on the environment's own objects (``ticket.open``, ``re.compile``).
_FORBIDDEN_MODULE_ATTRS = frozenset({"open", "input", "help"})
#: The only dunder names/attributes generated code may use (method *definitions* such as ``def __eq__``
#: are not names and are always fine).
_ALLOWED_DUNDERS = frozenset({"__name__", "__doc__", "__init__", "__post_init__", "__all__", "__slots__"})
#: Dunder methods a method may delegate to with ``super().__x__(...)``.
_SUPER_DUNDERS = frozenset({"__init__", "__post_init__", "__init_subclass__", "__eq__", "__ne__", "__lt__", "__le__",
                            "__gt__", "__ge__", "__hash__", "__repr__", "__str__"})
_FORMAT_FIELD_RE = re.compile(r"\{[^{}]*?[.\[]\s*_")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Gate:
    """The AST walk behind :func:`check_imports` (one file)."""

    def __init__(self, fname: str) -> None:
        import ast

        self.ast = ast
        self.fname = fname
        self.problems: list[tuple[int, str]] = []
        self.module_aliases: set[str] = set()  # names bound by imports (modules, or things from modules)

    def bad(self, node: Any, msg: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), msg))

    def check_tree(self, tree: Any) -> None:
        ast = self.ast
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.module_aliases.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and not node.level:
                for a in node.names:
                    self.module_aliases.add(a.asname or a.name)
        self.visit(tree, params=frozenset())

    def visit(self, node: Any, params: frozenset[str]) -> None:
        ast = self.ast
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for d in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
                self.visit(d, params)  # defaults are evaluated in the enclosing scope
            if not isinstance(node, ast.Lambda):
                for d in node.decorator_list:
                    self.visit(d, params)
                if node.returns is not None:
                    self.visit_annotation(node.returns, params)
            names = set()
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, *(x for x in (args.vararg, args.kwarg) if x)]:
                names.add(a.arg)
                if a.annotation is not None:
                    self.visit_annotation(a.annotation, params)
            inner = params | frozenset(names)
            body = node.body if isinstance(node.body, list) else [node.body]
            for b in body:
                self.visit(b, inner)
            return
        if isinstance(node, ast.AnnAssign):
            self.visit_annotation(node.annotation, params)
            for child in (node.target, node.value):
                if child is not None:
                    self.visit(child, params)
            return
        self.check_node(node, params)
        for child in ast.iter_child_nodes(node):
            self.visit(child, params)

    def visit_annotation(self, ann: Any, params: frozenset[str]) -> None:
        """Annotations are code too: Pydantic evaluates string annotations with ``eval``."""
        self.visit(ann, params)
        self._check_type_strings(ann, params, 0)

    def _check_type_strings(self, ann: Any, params: frozenset[str], depth: int) -> None:
        for sub in self._type_strings(ann):
            if depth > 4:
                self.bad(sub, "string annotations nested too deeply")
                return
            try:
                expr = self.ast.parse(sub.value.strip(), mode="eval")
            except SyntaxError:
                continue  # not code: Pydantic cannot evaluate it either
            self.visit(expr, params)
            self._check_type_strings(expr.body, params, depth + 1)

    def _type_strings(self, ann: Any) -> list[Any]:
        """String constants in type positions of an annotation (forward references), not the
        arguments of calls (``Field(description=...)``), ``Annotated`` metadata or ``Literal`` values."""
        ast = self.ast
        if isinstance(ann, ast.Constant):
            return [ann] if isinstance(ann.value, str) else []
        if isinstance(ann, ast.Call):
            return []
        if isinstance(ann, ast.Subscript):
            head = ann.value.attr if isinstance(ann.value, ast.Attribute) else getattr(ann.value, "id", "")
            if head == "Literal":
                return []
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if head == "Annotated":
                elts = elts[:1]
            return [x for e in [ann.value, *elts] for x in self._type_strings(e)]
        return [x for c in ast.iter_child_nodes(ann) for x in self._type_strings(c)]

    def check_node(self, node: Any, params: frozenset[str]) -> None:
        ast = self.ast
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top == "gym_envfactory":
                    self.bad(node, f"`import {a.name}`: use `from gym_envfactory import ToolError, tool`")
                elif top not in ALLOWED_IMPORTS:
                    self.bad(node, f"import of {a.name!r}: an environment imports only gym_envfactory, pydantic and "
                                   "pure standard-library modules (no I/O, processes or network)")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level > 1:
                self.bad(node, "relative imports may only reach modules of the package itself (`from .state import ...`)")
            elif node.level == 0:
                top = mod.split(".")[0]
                if top == "gym_envfactory":
                    if mod not in ALLOWED_RUNTIME_MODULES:
                        self.bad(node, f"import from {mod!r}: only `from gym_envfactory import ToolError, tool` is allowed")
                    elif mod == "gym_envfactory":
                        extra = sorted(a.name for a in node.names if a.name not in ALLOWED_RUNTIME_NAMES)
                        if extra:
                            self.bad(node, f"`from gym_envfactory import {', '.join(extra)}`: only "
                                           f"{', '.join(sorted(ALLOWED_RUNTIME_NAMES))} may be imported from the runtime")
                elif top not in ALLOWED_IMPORTS:
                    self.bad(node, f"import of {mod!r}: an environment imports only gym_envfactory, pydantic and pure "
                                   "standard-library modules (no I/O, processes or network)")
            for a in node.names:
                if a.name == "*" and mod != "__future__":
                    self.bad(node, f"`from {mod or '.'} import *` is not allowed; import names explicitly")
                elif mod != "__future__" and (a.name in _FORBIDDEN_ATTRS or a.name in _FORBIDDEN_BUILTINS
                                              or a.name in _FORBIDDEN_MODULE_ATTRS or _is_dunder(a.name)
                                              or (node.level == 0 and a.name.startswith("_"))):
                    self.bad(node, f"importing {a.name!r} from {mod or '.'!r} is not allowed")
        elif isinstance(node, ast.Name):
            if node.id in _FORBIDDEN_BUILTINS and node.id not in params and isinstance(node.ctx, ast.Load):
                self.bad(node, f"{node.id} is not allowed in an environment (no I/O, no dynamic code, no "
                               "reflection by name)")
            elif _is_dunder(node.id) and node.id not in _ALLOWED_DUNDERS:
                self.bad(node, f"the name {node.id} is not allowed in an environment")
        elif isinstance(node, ast.Attribute):
            if node.attr in _FORBIDDEN_ATTRS:
                self.bad(node, f"attribute .{node.attr} is not allowed in an environment (a route to the "
                               "operating system or to dynamic code)")
            elif _is_dunder(node.attr) and node.attr not in _ALLOWED_DUNDERS and not (
                    node.attr in _SUPER_DUNDERS and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"):
                self.bad(node, f"dunder attribute .{node.attr} is not allowed in an environment")
            elif node.attr.startswith("_") or node.attr in _FORBIDDEN_MODULE_ATTRS:
                root = node.value
                while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                    root = root.func if isinstance(root, ast.Call) else root.value
                if isinstance(root, ast.Name) and root.id in self.module_aliases:
                    self.bad(node, f"attribute .{node.attr} of something from an imported module is not allowed")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _FORMAT_FIELD_RE.search(node.value):
                self.bad(node, "a format string that reads private attributes (`{x.__class__}`) is not allowed")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("format", "format_map", "vformat") \
                and not (isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
            self.bad(node, f".{node.func.attr}() on a computed format string is not allowed; use an f-string")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            pass  # the determinism lint reports `global`


def check_imports(folder: str | Path) -> list[Finding]:
    """Static gate run before generated code is executed (a *safety net*, not a sandbox).

    Refuses: imports outside :data:`ALLOWED_IMPORTS` (relative imports inside the package are fine;
    from the runtime only ``from gym_envfactory import ToolError, tool``); star imports; the names in
    :data:`_FORBIDDEN_BUILTINS` wherever they appear (``_o = open`` too), except as a tool's own
    parameter; attributes that lead to the operating system, import-by-string or frames
    (``uuid.os``, ``random._os``, ``x.gi_frame``, ``operator.attrgetter`` ...); private attributes of
    imported modules; dunder names and attributes other than ``__name__``/``__doc__``/``__init__``
    (``__builtins__['__import__']``, ``x.__class__.__subclasses__``); string annotations that hide such
    code (Pydantic evaluates them); format strings that read private attributes.

    Python cannot be made safe by inspecting its source: code that passes here can still misbehave,
    so :class:`EnvGen` also validates in a child process with an allow-listed environment, never
    imports generated code in its own process, and untrusted models' code belongs in a sandbox.
    """
    import ast

    out = []
    for f in sorted(Path(folder).rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
        except (SyntaxError, ValueError) as exc:
            out.append(Finding.of("execution", "import", f"{f.name}:{getattr(exc, 'lineno', 0)}: syntax error: "
                                  f"{getattr(exc, 'msg', exc)}"))
            continue
        gate = _Gate(f.name)
        gate.check_tree(tree)
        seen = set()
        for line, msg in gate.problems:
            if (line, msg) not in seen:
                seen.add((line, msg))
                out.append(Finding.of("execution", "forbidden_import", f"{f.name}:{line}: {msg}"))
    return out


def validate_package(folder: str | Path, metadata: Mapping[str, Any], *, attempt: int = 0,
                     tag: str | None = None, unload: bool = True) -> ValidationOutcome:
    """The Validator: import ``folder`` afresh, check the four dimensions by execution, return the report.

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
        outcome.findings.append(Finding.of("execution", "import", f"the package does not load: {exc}"))
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
        report = validate_environment(spec)
        outcome.findings += [Finding.of("execution", "determinism_lint", f"{x}") for x in report.lint_failures]
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
    except Exception as exc:  # noqa: BLE001 - reported as a blocking finding, never swallowed
        log.exception("validator crashed on %s", folder)
        outcome.findings.append(Finding.of("execution", "validator_crash", f"{type(exc).__name__}: {exc}"))
    finally:
        if unload:
            _unload(tag)
    return outcome.finish()


def _validate_main() -> None:
    """Child-process entry: ``python -c '...; _validate_main()' PKG METADATA_JSON OUT_JSON ATTEMPT``."""
    pkg, meta, out, attempt = sys.argv[1:5]
    outcome = validate_package(pkg, json.loads(Path(meta).read_text()), attempt=int(attempt), unload=False)
    Path(out).write_text(outcome.model_dump_json(indent=1))


#: The only variables of this process's environment a validation child inherits (an allow-list: API
#: keys, database URLs and cloud credentials never reach generated code, whatever they are called).
CHILD_ENV_ALLOW: tuple[str, ...] = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
                                    "ENVFACTORY_CATALOG", "SYSTEMROOT")


def child_environment(home: Path) -> dict[str, str]:
    """The environment of a validation child: :data:`CHILD_ENV_ALLOW` from ours, ``HOME`` a fresh
    empty folder, ``PYTHONHASHSEED=0``, no user site-packages."""
    env = {k: os.environ[k] for k in CHILD_ENV_ALLOW if k in os.environ}
    env.update(HOME=str(home), PYTHONHASHSEED="0", PYTHONNOUSERSITE="1")
    return env


async def _validate_in_child(pkg: Path, metadata_file: Path, out: Path, attempt: int, timeout_s: float) -> ValidationOutcome:
    home = Path(tempfile.mkdtemp(prefix="envgen-validate-"))
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from gym_envfactory.generators.envgen import _validate_main; _validate_main()",
            str(Path(pkg).resolve()), str(Path(metadata_file).resolve()), str(Path(out).resolve()), str(attempt),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_environment(home), cwd=home)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return ValidationOutcome(env=pkg.name, attempt=attempt, findings=[Finding.of(
                "execution", "timeout", f"validation did not finish in {timeout_s:.0f} s (an endless loop in a tool or at import?)")]).finish()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if proc.returncode != 0 or not out.is_file():
        tail = err.decode(errors="replace")[-1500:]
        return ValidationOutcome(env=pkg.name, attempt=attempt, findings=[Finding.of(
            "execution", "import", f"the validator process exited with {proc.returncode}: {tail}")]).finish()
    return ValidationOutcome.model_validate_json(out.read_text())


# ------------------------------------------------------------------------------------ packages


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return _toml_str(str(v))


def _root_class(state_py: str) -> str:
    """The last top-level class of ``state.py`` (the root model usually comes after its records)."""
    import ast

    try:
        classes = [n.name for n in ast.parse(state_py).body if isinstance(n, ast.ClassDef)]
    except SyntaxError:
        return "State"
    return classes[-1] if classes else "State"


def manifest_toml(name: str, code: Mapping[str, Any], provenance: Mapping[str, Any], *, domain: str | None = None) -> str:
    """``environment.toml`` for a generated package (name forced to ``name``; an unknown domain falls
    back to ``utilities``)."""
    m = dict(code.get("manifest") or {})
    dom = domain or m.get("domain")
    if dom not in DOMAINS:
        dom = "utilities"
    state_model = m.get("state_model") or f"state:{_root_class(code.get('state_py', ''))}"
    if ":" not in state_model:
        state_model = f"state:{state_model}"
    lines = [
        f"name = {_toml_str(name)}",
        'version = "0.1.0"',
        f"domain = {_toml_str(dom)}",
        f"description = {_toml_str(str(m.get('description') or name))}",
        f"state_model = {_toml_str(state_model)}",
        'tools_module = "tools"',
        'default_initial_state = "small"',
    ]
    for key in ("bookkeeping_fields", "free_text_fields", "set_fields"):
        vals = [str(x) for x in m.get(key) or [] if isinstance(x, str)]
        if vals:
            lines.append(f"{key} = {_toml_value(vals)}")
    lines.append("")
    lines.append("[provenance]")
    for k, v in provenance.items():
        if v is not None and re.fullmatch(r"[A-Za-z0-9_]+", k):
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def write_package(folder: Path, name: str, code: Mapping[str, Any], scenarios: Sequence[Mapping[str, Any]],
                  tasks: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any], *, domain: str | None = None) -> Path:
    """Write an environment package (docs/authoring.md) from a Code Agent answer."""
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "initial_states").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text(str(code.get("state_py", "")))
    (folder / "tools.py").write_text(str(code.get("tools_py", "")))
    (folder / "initial_states" / "small.json").write_text(json.dumps(code.get("initial_state") or {}, indent=1, ensure_ascii=False) + "\n")
    (folder / "environment.toml").write_text(manifest_toml(name, code, provenance, domain=domain))
    (folder / "scenarios.jsonl").write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in scenarios))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks))
    return folder


def env_name(raw: str) -> str:
    """A CamelCase environment name from a metadata ``class_name`` (``plant_nursery_api`` -> ``PlantNurseryApi``)."""
    parts = re.split(r"[^A-Za-z0-9]+", raw.strip())
    name = "".join(p[:1].upper() + p[1:] for p in parts if p)
    if not name or not name[0].isalpha():
        name = "Env" + name
    return name


# ------------------------------------------------------------------------------------ pipeline


@dataclass
class EnvGenJob:
    """One environment to generate: its metadata (EnvFactory shape, as a dict), name and source."""

    metadata: dict[str, Any]
    name: str | None = None
    source: str = "metadata"
    resources: str | None = None

    def __post_init__(self) -> None:
        if hasattr(self.metadata, "model_dump"):
            self.metadata = self.metadata.model_dump(mode="json")  # type: ignore[union-attr]
        self.name = env_name(self.name or str(self.metadata.get("class_name") or "Generated"))
        if not _NAME_RE.match(self.name):
            raise EnvGenError(f"environment name {self.name!r} is not CamelCase ASCII")


@dataclass
class EnvGenOptions:
    """Where things go and how long the loop runs.

    Attributes:
        out_dir: the output catalog (environments that pass).
        quarantine_dir: environments that never pass, with ``report.json``.
        checkpoint_dir: checkpoints, attempt artefacts, and the LLM cache (``cache/``).
        max_revisions: Reviser rounds after the first attempt (default 3).
        domain: force a domain (else the Code Agent's choice, ``utilities`` if unknown).
        register: register passing environments with Gymnasium in this process (by manifest only; the
            code is imported on the first ``gym.make``).
        isolation: ``"process"`` (child process per validation, with ``validation_timeout_s`` and an
            allow-listed environment) or ``"inline"`` (validates in THIS process: generated code runs
            with this process's secrets and files; only for trusted code and tests).
        after_stage: ``callback(stage, run)`` after each stage's checkpoint is written (tests use it to
            simulate a crash).
        on_event: ``callback(env_name, event, detail)`` for progress reports.
    """

    out_dir: Path = Path("env_images")
    quarantine_dir: Path = Path("build/quarantine")
    checkpoint_dir: Path = Path("build/envgen")
    max_revisions: int = 3
    domain: str | None = None
    register: bool = True
    isolation: Literal["process", "inline"] = "process"
    validation_timeout_s: float = 300.0
    max_parallel_validations: int = max(1, min(8, os.cpu_count() or 1))
    after_stage: Callable[[str, "EnvGenRun"], None] | None = None
    on_event: Callable[[str, str, str], None] | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir).resolve()
        self.quarantine_dir = Path(self.quarantine_dir).resolve()
        self.checkpoint_dir = Path(self.checkpoint_dir).resolve()
        if self.max_revisions < 0:
            raise EnvGenError("max_revisions must be >= 0")

    def to_json(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "quarantine_dir": str(self.quarantine_dir),
                "checkpoint_dir": str(self.checkpoint_dir), "max_revisions": self.max_revisions,
                "domain": self.domain, "register": self.register, "isolation": self.isolation,
                "validation_timeout_s": self.validation_timeout_s}


@dataclass
class EnvGenResult:
    """Outcome of one environment: ``status`` is ``passed``, ``quarantined`` or ``crashed``."""

    name: str
    status: Literal["passed", "quarantined", "crashed"]
    attempts: int
    report: ValidationOutcome | None
    path: Path | None
    checkpoint: Path
    usage: dict[str, dict[str, int]]
    history: list[dict[str, Any]] = field(default_factory=list)
    gym_id: str | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def revisions(self) -> int:
        return max(0, self.attempts - 1)


@dataclass
class EnvGenRun:
    """Mutable state of one environment's run; mirrored in its checkpoint file."""

    job: EnvGenJob
    options: EnvGenOptions
    date: str
    stage: str = "start"
    attempt: int = 0
    status: str = "running"
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    output: str | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        assert self.job.name is not None
        return self.job.name

    @property
    def work(self) -> Path:
        return self.options.checkpoint_dir / "work" / self.name

    @property
    def checkpoint(self) -> Path:
        return self.options.checkpoint_dir / f"{self.name}.json"

    def attempt_dir(self, k: int | None = None) -> Path:
        return self.work / f"attempt-{self.attempt if k is None else k}"

    def add_usage(self, stage: str, reply: Any) -> None:
        u = self.usage.setdefault(stage, {"requests": 0, "cached_hits": 0, "prompt_tokens": 0, "completion_tokens": 0})
        u["requests"] += 1
        if getattr(reply, "cached", False):
            u["cached_hits"] += 1
            return
        usage = getattr(reply, "usage", None) or {}
        for k in ("prompt_tokens", "completion_tokens"):
            v = usage.get(k) if isinstance(usage, Mapping) else getattr(usage, k, None)
            u[k] += int(v or 0)


def _llm_config_json(cfg: Any) -> dict[str, Any]:
    keys = ("model", "base_url", "api_key_env", "temperature", "seed", "max_concurrency", "timeout_s",
            "max_retries", "max_tokens")
    return {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}


def _read_json(p: Path) -> Any:
    return json.loads(p.read_text()) if p.is_file() else None


def _write_json(p: Path, obj: Any) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False, default=str))
    os.replace(tmp, p)


class EnvGen:
    """The EnvGen pipeline over one LLM client (shared by concurrent environments).

    Args:
        llm_config: an :class:`~gym_envfactory.generators.llm.LLMConfig`; its ``cache_dir`` defaults
            to ``<checkpoint_dir>/cache`` so a resumed run replays answered requests.
        options: :class:`EnvGenOptions`.
        client: an existing :class:`~gym_envfactory.generators.llm.LLMClient` (else one is made).
    """

    def __init__(self, llm_config: Any, options: EnvGenOptions | None = None, *, client: Any = None) -> None:
        from .llm import LLMClient

        self.options = options or EnvGenOptions()
        if getattr(llm_config, "cache_dir", None) is None:
            try:
                llm_config.cache_dir = self.options.checkpoint_dir / "cache"
            except (AttributeError, TypeError):  # frozen config: rebuild it
                import dataclasses

                llm_config = dataclasses.replace(llm_config, cache_dir=self.options.checkpoint_dir / "cache")
        self.llm_config = llm_config
        self.client = client or LLMClient(llm_config)
        self._validations = asyncio.Semaphore(self.options.max_parallel_validations)

    # ------------------------------------------------------------------ public API
    async def generate(self, job: EnvGenJob) -> EnvGenResult:
        """Run the whole loop for one environment from scratch (a previous run's artefacts of the same
        name are discarded; the LLM cache still replays its answers)."""
        self._check_name(job.name or "")
        run = EnvGenRun(job=job, options=self.options, date=dt.datetime.now(dt.timezone.utc).date().isoformat())
        if run.work.exists():
            shutil.rmtree(run.work)
        run.work.mkdir(parents=True)
        _write_json(run.work / "metadata.json", job.metadata)
        if job.resources:
            (run.work / "resources.md").write_text(job.resources)
        self._save(run)
        return await self._loop(run)

    async def generate_many(self, jobs: Sequence[EnvGenJob]) -> list[EnvGenResult]:
        """Several environments concurrently.  One environment's crash does not stop the others: it
        comes back as a ``crashed`` result whose checkpoint :func:`resume_checkpoint` continues."""
        names = [j.name for j in jobs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise EnvGenError(f"two jobs generate the same environment name(s) {sorted(dup)}; pass distinct names")
        for n in names:
            self._check_name(n or "")
        results = await asyncio.gather(*(self.generate(j) for j in jobs), return_exceptions=True)
        out: list[EnvGenResult] = []
        for job, r in zip(jobs, results):
            if isinstance(r, BaseException):
                if not isinstance(r, Exception):
                    raise r
                out.append(self._crashed(job, r))
            else:
                out.append(r)
        return out

    async def resume(self, checkpoint: str | Path) -> EnvGenResult:
        """Continue a run from its checkpoint file."""
        data = _read_json(Path(checkpoint))
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise EnvGenError(f"{checkpoint} is not an EnvGen checkpoint")
        work = Path(data["paths"]["work"])
        metadata = _read_json(work / "metadata.json")
        if metadata is None:
            raise EnvGenError(f"{work / 'metadata.json'} is missing; the checkpoint cannot be resumed")
        res = work / "resources.md"
        job = EnvGenJob(metadata=metadata, name=data["name"], source=data.get("source", "metadata"),
                        resources=res.read_text() if res.is_file() else None)
        run = EnvGenRun(job=job, options=self.options, date=data.get("date") or dt.date.today().isoformat(),
                        stage=data.get("stage", "start"), attempt=int(data.get("attempt", 0)),
                        usage=data.get("usage") or {}, history=data.get("history") or [])
        if run.work.resolve() != work.resolve():
            raise EnvGenError(f"checkpoint work folder {work} is not under checkpoint_dir {self.options.checkpoint_dir}")
        if data.get("status") in ("passed", "quarantined"):
            run.status, run.output = data["status"], data.get("paths", {}).get("output")
            report = _read_json(run.attempt_dir() / "report.json")
            return self._result(run, ValidationOutcome.model_validate(report) if report else None)
        return await self._loop(run)

    # ------------------------------------------------------------------ the loop
    async def _loop(self, run: EnvGenRun) -> EnvGenResult:
        job, opts = run.job, self.options
        while True:
            adir = run.attempt_dir()
            adir.mkdir(parents=True, exist_ok=True)
            code = _read_json(adir / "code.json")
            if code is None:
                if run.attempt == 0:
                    code = await self._ask(run, "code", prompts.code_messages(
                        run.name, job.metadata, resources=job.resources, domains=DOMAINS), prompts.CODE_SCHEMA)
                else:
                    prev = run.attempt_dir(run.attempt - 1)
                    report = ValidationOutcome.model_validate(_read_json(prev / "report.json"))
                    code = await self._ask(run, "revise", prompts.revise_messages(
                        run.name, job.metadata, _read_json(prev / "code.json"), _read_json(prev / "scenarios.json")["scenarios"],
                        [f.model_dump() for f in report.blocking()[:MAX_FAILURES_IN_PROMPT]], run.attempt), prompts.REVISE_SCHEMA)
                _write_json(adir / "code.json", code)
                self._stage_done(run, "code" if run.attempt == 0 else "revise")
            tests = _read_json(adir / "scenarios.json")
            if tests is None:
                if run.attempt == 0:
                    answer = await self._ask(run, "test", prompts.scenario_messages(run.name, job.metadata, code),
                                             prompts.TEST_SCHEMA)
                    tests = {"scenarios": answer.get("scenarios") or [], "tasks": answer.get("tasks") or []}
                else:
                    prev = _read_json(run.attempt_dir(run.attempt - 1) / "scenarios.json")
                    tests = {"scenarios": code.get("scenarios") or prev["scenarios"],
                             "tasks": code["tasks"] if code.get("tasks") is not None else prev.get("tasks", [])}
                _write_json(adir / "scenarios.json", tests)
                if run.attempt == 0:
                    self._stage_done(run, "test")
            report_json = _read_json(adir / "report.json")
            if report_json is None:
                report = await self._validate(run, code, tests)
                _write_json(adir / "report.json", report.model_dump(mode="json"))
                run.history.append({"attempt": run.attempt, "passed": report.passed,
                                    "blocking": len(report.blocking()), "counts": report.counts(),
                                    "scenarios": f"{report.scenarios_passed}/{len(report.scenarios)}"})
                self._stage_done(run, "validate")
            else:
                report = ValidationOutcome.model_validate(report_json)
            if report.passed:
                self._publish(run)
                return self._result(run, report)
            if run.attempt >= opts.max_revisions:
                self._quarantine(run, report)
                return self._result(run, report)
            run.attempt += 1
            run.stage = "revise"
            self._save(run)

    async def _ask(self, run: EnvGenRun, stage: str, messages: list[dict[str, str]], schema: dict[str, Any]) -> dict[str, Any]:
        self._event(run, stage, f"asking the LLM (attempt {run.attempt})")
        reply = await self.client.chat(messages, stage=stage, json_schema=schema)
        run.add_usage(stage, reply)
        data = reply.data
        if not isinstance(data, dict):
            from .llm import LLMOutputError

            raise LLMOutputError(f"stage {stage}: expected a JSON object, got {type(data).__name__}")
        return data

    async def _validate(self, run: EnvGenRun, code: Mapping[str, Any], tests: Mapping[str, Any]) -> ValidationOutcome:
        adir = run.attempt_dir()
        provenance = {"kind": "generated", "model": getattr(self.llm_config, "model", None), "date": run.date,
                      "source": run.job.source,
                      "metadata_sha256": hashlib.sha256(canonical_json(run.job.metadata)).hexdigest()}
        pkg = write_package(adir / "pkg" / run.name, run.name, code, tests.get("scenarios") or [],
                            tests.get("tasks") or [], provenance, domain=self.options.domain)
        self._event(run, "validate", f"executing attempt {run.attempt}")
        async with self._validations:
            if self.options.isolation == "process":
                report = await _validate_in_child(pkg, run.work / "metadata.json", adir / "report.child.json",
                                                  run.attempt, self.options.validation_timeout_s)
            else:
                report = await asyncio.to_thread(validate_package, pkg, run.job.metadata, attempt=run.attempt)
        report.attempt = run.attempt
        self._event(run, "validate", f"attempt {run.attempt}: {'passed' if report.passed else f'{len(report.blocking())} blocking finding(s)'}")
        return report

    # ------------------------------------------------------------------ outputs
    def _check_name(self, name: str) -> None:
        from gym_envfactory.environment.catalog import _PROGRAMMATIC, catalog_folders

        dest = self.options.out_dir / name
        existing = catalog_folders().get(name)
        if existing is not None and existing.resolve() != dest.resolve():
            raise EnvGenError(f"environment {name} already exists in the catalog at {existing}; choose another --name")
        if name in _PROGRAMMATIC:
            raise EnvGenError(f"environment {name} is already defined in code; choose another --name")
        self._check_replaceable(dest)

    @staticmethod
    def _check_replaceable(dest: Path) -> None:
        if not dest.exists():
            return
        try:
            kind = tomllib.loads((dest / "environment.toml").read_text()).get("provenance", {}).get("kind")
        except (OSError, tomllib.TOMLDecodeError):
            kind = None
        if kind != "generated":
            raise EnvGenError(f"{dest} exists and is not a generated environment; EnvGen will not overwrite it")

    def _publish(self, run: EnvGenRun) -> None:
        src = run.attempt_dir() / "pkg" / run.name
        dest = self.options.out_dir / run.name
        self._check_replaceable(dest)
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{run.name}.", dir=self.options.out_dir))
        shutil.copytree(src, tmp / run.name, ignore=shutil.ignore_patterns("__pycache__"))
        old = None
        if dest.exists():
            old = tmp / "old"
            os.replace(dest, old)
        os.replace(tmp / run.name, dest)
        shutil.rmtree(tmp)
        run.output = str(dest)
        run.status = "passed"
        run.stage = "done"
        self._save(run)
        if self.options.register:
            self._register(dest)
        self._event(run, "done", f"passed; written to {dest}")

    def _register(self, dest: Path) -> str:
        """Register a published environment with Gymnasium from its manifest alone.

        Generated code is never imported in this process here: the output folder is made discoverable
        through ``$ENVFACTORY_CATALOG`` and the gym id points at the generic entry point, so the code
        runs only when someone calls ``gym.make`` on it (and only then in whatever process does so).
        """
        import gymnasium as gym

        from gym_envfactory.environment import spec as spec_mod

        man = tomllib.loads((dest / "environment.toml").read_text())
        name = str(man.get("name") or dest.name)
        major = int(str(man.get("version", "0.0.0")).split(".", 1)[0])
        add_catalog_dir(dest.parent)
        with spec_mod._REG_LOCK:  # a previous publication of this name must not be served from the cache
            spec_mod._CATALOG.pop(name, None)
        prefix = f"gym_envfactory._envs.{name}"
        for mod in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
            del sys.modules[mod]
        env_id = f"envfactory/{name}-v{major}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="gym_envfactory.envs.env:EnvFactoryEnv", kwargs={"env": name},
                         disable_env_checker=True)
        return env_id

    def _quarantine(self, run: EnvGenRun, report: ValidationOutcome) -> None:
        dest = self.options.quarantine_dir / run.name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        pkg = run.attempt_dir() / "pkg" / run.name
        if pkg.is_dir():
            shutil.copytree(pkg, dest / "pkg", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(run.attempt_dir() / "code.json", dest / "code.json")
        shutil.copy(run.work / "metadata.json", dest / "metadata.json")
        _write_json(dest / "report.json", {"env": run.name, "status": "quarantined", "attempts": run.attempt + 1,
                                           "final": report.model_dump(mode="json"), "history": run.history,
                                           "usage": run.usage})
        run.output = str(dest)
        run.status = "quarantined"
        run.stage = "done"
        self._save(run)
        self._event(run, "done", f"quarantined after {run.attempt + 1} attempt(s); report {dest / 'report.json'}")

    # ------------------------------------------------------------------ bookkeeping
    def _stage_done(self, run: EnvGenRun, stage: str) -> None:
        run.stage = stage
        self._save(run)
        if self.options.after_stage is not None:
            self.options.after_stage(stage, run)

    def _save(self, run: EnvGenRun) -> None:
        _write_json(run.checkpoint, {
            "format": CHECKPOINT_FORMAT, "name": run.name, "source": run.job.source, "date": run.date,
            "stage": run.stage, "attempt": run.attempt, "status": run.status, "error": run.error,
            "paths": {"work": str(run.work), "attempt": str(run.attempt_dir()), "output": run.output},
            "llm": _llm_config_json(self.llm_config), "options": self.options.to_json(),
            "usage": run.usage, "history": run.history})

    def _event(self, run: EnvGenRun, event: str, detail: str) -> None:
        log.info("%s: %s: %s", run.name, event, detail)
        if self.options.on_event is not None:
            self.options.on_event(run.name, event, detail)

    def _result(self, run: EnvGenRun, report: ValidationOutcome | None) -> EnvGenResult:
        gym_id = f"envfactory/{run.name}-v0" if run.status == "passed" else None
        return EnvGenResult(name=run.name, status=run.status, attempts=run.attempt + 1, report=report,  # type: ignore[arg-type]
                            path=Path(run.output) if run.output else None, checkpoint=run.checkpoint,
                            usage=run.usage, history=run.history, gym_id=gym_id)

    def _crashed(self, job: EnvGenJob, exc: Exception) -> EnvGenResult:
        ckpt = self.options.checkpoint_dir / f"{job.name}.json"
        data = _read_json(ckpt) or {}
        if data:
            data["status"], data["error"] = "crashed", f"{type(exc).__name__}: {exc}"
            _write_json(ckpt, data)
        log.error("%s crashed: %s (resume with `envfactory gen resume %s`)", job.name, exc, ckpt)
        return EnvGenResult(name=job.name or "?", status="crashed", attempts=int(data.get("attempt", 0)) + 1,
                            report=None, path=None, checkpoint=ckpt, usage=data.get("usage") or {},
                            history=data.get("history") or [], error=f"{type(exc).__name__}: {exc}")


def add_catalog_dir(folder: str | Path) -> None:
    """Put ``folder`` first on ``$ENVFACTORY_CATALOG`` (``os.pathsep``-separated), once."""
    folder = str(Path(folder).resolve())
    current = [p for p in os.environ.get("ENVFACTORY_CATALOG", "").split(os.pathsep) if p]
    if folder not in current:
        os.environ["ENVFACTORY_CATALOG"] = os.pathsep.join([folder, *current])


async def resume_checkpoint(checkpoint: str | Path, *, llm_overrides: Mapping[str, Any] | None = None,
                            client: Any = None, **option_overrides: Any) -> EnvGenResult:
    """Resume one environment's run from ``<checkpoint_dir>/<Name>.json`` with the LLM settings and
    options stored there (``llm_overrides``, e.g. a new ``base_url``, and ``option_overrides`` win)."""
    from .llm import LLMConfig

    data = _read_json(Path(checkpoint))
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise EnvGenError(f"{checkpoint} is not an EnvGen checkpoint")
    opts = dict(data.get("options") or {})
    opts.update(option_overrides)
    options = EnvGenOptions(**opts)
    llm = dict(data.get("llm") or {})
    llm.update(llm_overrides or {})
    config = LLMConfig(**llm, cache_dir=options.checkpoint_dir / "cache")
    gen = EnvGen(config, options, client=client)
    try:
        return await gen.resume(checkpoint)
    except EnvGenError:
        raise
    except Exception as exc:  # noqa: BLE001 - a second crash is reported the same way as the first
        return gen._crashed(EnvGenJob(metadata={"class_name": data["name"]}, name=data["name"]), exc)
