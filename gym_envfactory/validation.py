"""Validation scenarios and the runner that checks an environment by execution.

These are the tests EnvGen's Test Agent writes (EnvFactory paper §3.2, "Validator"); the same runner
checks hand-written and generated environments.  ``scenarios.jsonl``, one scenario per line::

    {"scenario_id": "cancel-unknown-booking",
     "level": "error",                              # simple | medium | complex | boundary | error
     "initial_state": "small",                      # same forms as a task's initial_state
     "steps": [
       {"call": "cancel_booking", "arguments": {"booking_id": "BK-9999"},
        "expect": "tool_error",                     # ok | tool_error | invalid_arguments | unknown_tool
        "error_code": "not_found",                  # optional
        "result": {"status": "cancelled"},          # optional: subset match against the result
        "state": {"bookings.BK-0001.status": "cancelled"},   # optional: dotted paths after the step
        "state_absent": ["holds.H-1"],              # optional: paths that must not exist after the step
        "exact": false,                             # true: result/state values must equal, not contain
        "state_unchanged": true}                    # optional; errors must never change the state
     ]}

Sessions run with ``check_writes=True``: a write tool that reports success without changing the state,
a read-only tool that writes, or an error after a partial write fails the scenario (docs/cases.md C14).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_envfactory.environment.scenarios import Scenario
from gym_envfactory.errors import DatasetError, SpecError
from gym_envfactory.replay import task_reference

if TYPE_CHECKING:  # pragma: no cover
    from gym_envfactory.environment.spec import EnvironmentSpec

__all__ = ["ScenarioReport", "ValidationReport",
           "run_scenarios", "validate_environment", "get_path", "Progress"]

_MISSING = object()






@dataclass
class ScenarioReport:
    """The outcome of one scenario: ``passed`` when no step failed; ``failures`` names each failing
    step (index, tool) and what differed."""

    scenario_id: str
    level: str
    passed: bool
    failures: list[str] = field(default_factory=list)


@dataclass
class ValidationReport:
    """Result of :func:`validate_environment`: scenarios, coverage, and ground-truth replays."""

    env: str
    scenarios: list[ScenarioReport] = field(default_factory=list)
    coverage: dict[str, set[str]] = field(default_factory=dict)
    coverage_failures: list[str] = field(default_factory=list)
    task_failures: list[str] = field(default_factory=list)
    lint_failures: list[str] = field(default_factory=list)
    n_tasks: int = 0

    @property
    def passed(self) -> bool:
        """True when every scenario passed and no coverage, task replay or lint check failed."""
        return (all(s.passed for s in self.scenarios) and not self.coverage_failures
                and not self.task_failures and not self.lint_failures)

    def failures(self) -> list[str]:
        """Every failure as one line: scenario steps, then coverage gaps, task replays and lint findings."""
        out = [f"scenario {s.scenario_id}: {f}" for s in self.scenarios for f in s.failures]
        return out + self.coverage_failures + self.task_failures + [f"lint: {x}" for x in self.lint_failures]




def get_path(obj: Any, path: str) -> Any:
    """Value at a dotted path (``bookings.BK-0001.status``; list indices are integers)."""
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict):
            if part not in cur:
                return _MISSING
            cur = cur[part]
        elif isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError):
                return _MISSING
        else:
            return _MISSING
    return cur


def _subset_match(expected: Any, actual: Any, exact: bool = False) -> bool:
    """``expected`` is contained in ``actual`` (dict keys as a subset; lists element-wise, same
    length); with ``exact`` dicts must have the same keys too.  Numbers compare by value."""
    if exact and isinstance(expected, dict) and (not isinstance(actual, dict) or expected.keys() != actual.keys()):
        return False
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and _subset_match(v, actual[k], exact) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(_subset_match(e, a, exact) for e, a in zip(expected, actual, strict=True)))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and expected == actual
    return expected == actual


#: ``progress(stage, done, total)``: ``stage`` is ``"scenarios"`` or ``"tasks"``; called after each item.
Progress = Callable[[str, int, int], None]


def run_scenarios(spec: EnvironmentSpec, scenarios: list[Scenario] | None = None, *,
                  progress: Progress | None = None) -> tuple[list[ScenarioReport], dict[str, set[str]]]:
    """Execute scenarios in isolated sessions.  Returns reports and per-tool coverage
    (``{"ok", "error"}`` outcomes observed per tool); ``progress("scenarios", done, total)`` is called
    after each scenario."""
    from gym_envfactory.environment.states import resolve_state
    from gym_envfactory.session import Session

    scenarios = spec.scenarios if scenarios is None else scenarios
    coverage: dict[str, set[str]] = {t: set() for t in spec.tools}
    reports: list[ScenarioReport] = []
    for sc in scenarios:
        if progress is not None and reports:
            progress("scenarios", len(reports), len(scenarios))
        failures: list[str] = []
        try:
            initial = resolve_state(spec, sc.initial_state, task_form=True, where={"task_id": sc.scenario_id})
        except DatasetError as exc:
            reports.append(ScenarioReport(sc.scenario_id, sc.level, False, [f"initial state: {exc}"]))
            continue
        session = Session.from_states(spec, {spec.name: initial}, check_writes=True)
        for i, step in enumerate(sc.steps):
            before = session.state_bytes()
            res = session.call(step.call, step.arguments)
            got = "ok" if res.ok else res.error_type
            if res.ok:
                coverage.setdefault(step.call, set()).add("ok")
            elif res.error_type in ("tool_error", "invalid_arguments"):
                coverage.setdefault(step.call, set()).add("error")
            pre = f"step {i} ({step.call})"
            if got != step.expect:
                failures.append(f"{pre}: expected {step.expect}, got {got}: {res.error or 'ok'}")
                continue
            if step.error_code and res.error_code != step.error_code:
                failures.append(f"{pre}: expected error code {step.error_code!r}, got {res.error_code!r}")
            if step.result is not None and not _subset_match(step.result, res.content, step.exact):
                failures.append(f"{pre}: result {json.dumps(res.content)[:300]} does not match {json.dumps(step.result)[:300]}")
            after = session.state_bytes()
            unchanged = step.state_unchanged
            if unchanged is None and not res.ok:
                unchanged = True
            if unchanged and after != before:
                failures.append(f"{pre}: state changed but the step expects it unchanged")
            if unchanged is False and after == before:
                failures.append(f"{pre}: state unchanged but the step expects a change")
            if step.state or step.state_absent:
                state = session.state()
                for path in step.state_absent:
                    if get_path(state, path) is not _MISSING:
                        failures.append(f"{pre}: state {path} exists but the step expects it absent")
                for path, want in step.state.items():
                    have = get_path(state, path)
                    if have is _MISSING or not _subset_match(want, have, step.exact):
                        failures.append(f"{pre}: state {path} = {'<missing>' if have is _MISSING else json.dumps(have)[:200]}, expected {json.dumps(want)[:200]}")
        session.close()
        reports.append(ScenarioReport(sc.scenario_id, sc.level, not failures, failures))
    if progress is not None:
        progress("scenarios", len(reports), len(scenarios))
    return reports, coverage


def validate_environment(spec: EnvironmentSpec, *, replay_tasks: bool = True,
                         require_coverage: bool = True, lint: bool = True,
                         progress: Progress | None = None) -> ValidationReport:
    """Run every validation scenario, check that each tool has a success and an error path covered,
    replay every task's ground truth, and lint the package for nondeterminism (docs/authoring.md).  Never
    raises for environment faults: they are collected in the report.  ``progress(stage, done, total)``
    (stage ``"scenarios"``, then ``"tasks"``) is called as scenarios run and tasks replay (the CLI's
    progress bar)."""
    report = ValidationReport(env=spec.name)
    if lint:
        report.lint_failures = lint_environment(spec)
    try:
        report.scenarios, report.coverage = run_scenarios(spec, progress=progress)
    except SpecError as exc:
        report.coverage_failures.append(f"scenarios: {exc}")
        return report
    if require_coverage:
        for tool, seen in report.coverage.items():
            for kind in ("ok", "error"):
                if kind not in seen:
                    report.coverage_failures.append(f"tool {tool}: no scenario covers its {'success' if kind == 'ok' else 'error'} path")
    if replay_tasks:
        try:
            tasks = spec.tasks
        except SpecError as exc:
            report.task_failures.append(str(exc))
            return report
        report.n_tasks = len(tasks)
        for done, task in enumerate(tasks, 1):
            try:
                task_reference(spec, task)
            except SpecError as exc:
                report.task_failures.append(str(exc))
            if progress is not None:
                progress("tasks", done, report.n_tasks)
    return report


# ------------------------------------------------------------------------------- determinism lint

#: Call targets that read the wall clock or a global entropy source (docs/authoring.md).
_FORBIDDEN_CALLS = {
    "datetime.now": "wall-clock time (read state.now instead)",
    "datetime.utcnow": "wall-clock time (read state.now instead)",
    "datetime.today": "wall-clock time (read state.now instead)",
    "date.today": "wall-clock time (derive the date from state.now)",
    "time.time": "wall-clock time", "time.time_ns": "wall-clock time", "time.monotonic": "wall-clock time",
    "time.perf_counter": "wall-clock time", "time.localtime": "wall-clock time", "time.gmtime": "wall-clock time",
    "uuid.uuid1": "random ids (use a counter in the state)", "uuid.uuid4": "random ids (use a counter in the state)",
    "uuid1": "random ids (use a counter in the state)", "uuid4": "random ids (use a counter in the state)",
    "hash": "the builtin hash() is salted per process (PYTHONHASHSEED)",
    "os.urandom": "global entropy", "secrets.token_hex": "global entropy", "secrets.token_urlsafe": "global entropy",
}
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "bytearray"}
#: Files of an environment folder that are not imported by the runtime (state generators).
LINT_SKIP = frozenset({"build_states.py"})


def _dotted(node: Any) -> str | None:
    import ast

    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


#: Methods that mutate a list, dict, set or deque in place.
_MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "add", "discard",
    "sort", "reverse", "difference_update", "intersection_update", "symmetric_difference_update", "appendleft",
    "extendleft", "popleft", "rotate", "move_to_end", "__setitem__", "__delitem__", "__iadd__"})
#: Functions that mutate their first argument in place.
_MUTATING_FUNCTIONS = frozenset({"heappush", "heappop", "heapify", "heapreplace", "heappushpop", "insort",
                                 "insort_left", "insort_right", "shuffle"})


def module_mutations(tree: Any) -> dict[str, tuple[int, str]]:
    """Module-level names of a parsed module (``ast.Module``) that code inside a function or method
    mutates or aliases: ``{name: (line, how)}`` for the first such place.

    Counted: a mutating method call on the name or anything under it (``items.append(x)``,
    ``cache[k].update(...)``), item/attribute assignment, deletion or augmented assignment under it,
    rebinding it after ``global``, passing it to ``heapq``/``bisect``/``random.shuffle`` style functions,
    and binding it to another name or attribute (``self.items = ITEMS``: mutations through the alias
    would reach the module's object).  A name a function shadows (parameter or local assignment) is
    that function's own.  Code at module level (import-time setup) is not counted."""
    import ast

    module_names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        module_names.update(t.id for t in targets if isinstance(t, ast.Name))
    found: dict[str, tuple[int, str]] = {}

    def root(node: Any) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def note(name: str | None, line: int, how: str, local: set[str]) -> None:
        if name and name in module_names and name not in local and name not in found:
            found[name] = (line, how)

    def scan(fn: Any) -> None:
        args = fn.args
        params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        declared = {n for sub in ast.walk(fn) for n in getattr(sub, "names", ()) if isinstance(sub, ast.Global)}
        stored = {sub.id for sub in ast.walk(fn) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
        local = (params | stored) - declared
        for name in declared & stored:
            line = next(sub.lineno for sub in ast.walk(fn) if isinstance(sub, ast.Name) and sub.id == name
                        and isinstance(sub.ctx, ast.Store))
            note(name, line, "is rebound after 'global'", set())
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _MUTATING_METHODS:
                note(root(sub.func.value), sub.lineno, f"is mutated (.{sub.func.attr}())", local)
            elif isinstance(sub, ast.Call) and (_dotted(sub.func) or "").split(".")[-1] in _MUTATING_FUNCTIONS and sub.args:
                note(root(sub.args[0]), sub.lineno, f"is mutated ({_dotted(sub.func)}())", local)
            targets: list[Any] = []
            if isinstance(sub, ast.Assign):
                targets = list(sub.targets)
                if isinstance(sub.value, ast.Name):
                    note(sub.value.id, sub.lineno, "is aliased (bound to another name)", local)
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = list(sub.targets) if isinstance(sub, ast.Delete) else [sub.target]
                if isinstance(sub, ast.AnnAssign) and isinstance(sub.value, ast.Name):
                    note(sub.value.id, sub.lineno, "is aliased (bound to another name)", local)
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    note(root(t), t.lineno, "is mutated (item or attribute assignment)", local)
                elif isinstance(t, ast.Name) and isinstance(sub, ast.AugAssign):
                    note(t.id, t.lineno, "is mutated (augmented assignment)", local)

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            scan(node)
    return found


def lint_source(source: str, filename: str = "<source>", *, module_state: str = "type",
                allowed_calls: Any = ()) -> list[str]:
    """Determinism lint of one module's source (docs/authoring.md; EnvGen's generated code is checked the same way).

    Rejects: wall-clock reads (``datetime.now()``, ``date.today()``, ``time.time()``...), ``uuid1/uuid4``,
    the builtin ``hash()``, the global ``random`` module (``random.Random(seed)`` instances are allowed),
    ``global`` statements, and module-level mutable state (a lower-case module name bound to a
    dict/list/set display or constructor; UPPER_CASE names are read-only constants by convention).
    ``module_state="mutation"`` (imported servers, whose names follow no convention) flags a
    module-level dict/list/set, whatever its name, only where a function mutates it or aliases it
    (:func:`module_mutations`), naming the line of the mutation.  ``allowed_calls``: call names (the
    last dotted part: ``uuid4``, ``now``, ``choice``) not to flag, those an imported package's bridge
    replaces with per-session seeded stand-ins.
    Returns ``"file:line: message"`` strings; empty means clean.  A syntax error is reported, not raised.
    """
    import ast

    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        return [f"{filename}:{exc.lineno}: syntax error: {exc.msg}"]
    out: list[str] = []
    random_names = {"random"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            for a in node.names:
                if a.name != "Random" and a.name not in allowed_calls:
                    out.append(f"{filename}:{node.lineno}: 'from random import {a.name}' uses the global random state; "
                               "use random.Random(seed) with the seed kept in the state")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "random" and a.asname:
                    random_names.add(a.asname)
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is None or name.rsplit(".", 1)[-1] in allowed_calls:
                continue
            if name in _FORBIDDEN_CALLS or any(name.endswith("." + k) and "." in k for k in _FORBIDDEN_CALLS):
                key = name if name in _FORBIDDEN_CALLS else next(k for k in _FORBIDDEN_CALLS if name.endswith("." + k))
                out.append(f"{filename}:{node.lineno}: {name}() is nondeterministic: {_FORBIDDEN_CALLS[key]}")
            head, _, attr = name.partition(".")
            if head in random_names and attr and attr not in ("Random",):
                out.append(f"{filename}:{node.lineno}: {name}() uses the global random state; use random.Random(seed)")
        elif isinstance(node, ast.Global):
            out.append(f"{filename}:{node.lineno}: 'global {', '.join(node.names)}' is module-level mutable state")
    mutated = module_mutations(tree) if module_state == "mutation" else None
    for node in tree.body:
        targets: list[Any] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and (_dotted(value.func) or "").split(".")[-1] in _MUTABLE_CALLS)
        if not mutable:
            continue
        for t in targets:
            if mutated is not None and isinstance(t, ast.Name) and t.id in mutated and not t.id.startswith("__"):
                line, how = mutated[t.id]
                out.append(f"{filename}:{line}: module-level mutable {t.id!r} (line {node.lineno}) {how}, so it would be "
                           "shared by every session; keep it in the API instance (load_scenario/save_scenario)")
            elif mutated is None and isinstance(t, ast.Name) and not t.id.isupper() and not t.id.startswith("__"):
                out.append(f"{filename}:{node.lineno}: module-level mutable {t.id!r} would be shared by every session; "
                           "keep it in the state model (or name a read-only constant in UPPER_CASE)")
    return out


def _seeded_calls(bridge: Path) -> frozenset[str]:
    """The string tuple ``SEEDED_CALLS = (...)`` of an imported package's ``_bridge.py``, read without
    running it (empty when absent or not a literal)."""
    import ast

    try:
        tree = ast.parse(bridge.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SEEDED_CALLS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return frozenset()
            return frozenset(v for v in value if isinstance(v, str)) if isinstance(value, (tuple, list)) else frozenset()
    return frozenset()


def lint_environment(spec: EnvironmentSpec) -> list[str]:
    """:func:`lint_source` over every module of an environment folder (``build_states.py`` skipped).

    The unedited server of an imported package (``_source.py``, provenance kind ``"imported"``) is
    linted with ``module_state="mutation"``: its module-level lists and dicts follow no naming
    convention, so only mutated or aliased ones are flagged; the calls its ``_bridge.py`` lists in
    ``SEEDED_CALLS`` (a tuple of names, read statically) are allowed, the bridge seeds them per session."""
    if spec.path is None:
        return []
    imported = spec.manifest.provenance.kind == "imported"
    out = []
    for f in sorted(spec.path.rglob("*.py")):
        if f.name in LINT_SKIP or "__pycache__" in f.parts:
            continue
        source = imported and f.name == "_source.py"
        out += lint_source(f.read_text(encoding="utf-8"), str(f), module_state="mutation" if source else "type",
                           allowed_calls=_seeded_calls(f.with_name("_bridge.py")) if source else ())
    return out
