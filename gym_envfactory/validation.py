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

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_envfactory.environment.scenarios import Scenario
from gym_envfactory.errors import DatasetError, SpecError
from gym_envfactory.replay import task_reference

if TYPE_CHECKING:  # pragma: no cover
    from gym_envfactory.environment.spec import EnvironmentSpec

#: The folder this gym_envfactory is imported from (what a probe child must import).
_GYM_ROOT = str(Path(__file__).resolve().parent.parent)

__all__ = ["PROBE_HASH_SEEDS", "ScenarioReport", "ValidationReport", "fingerprint_differences",
           "hash_seed_differences", "replay_fingerprint", "run_scenarios", "validate_environment", "get_path",
           "Progress"]

_MISSING = object()

#: The ``PYTHONHASHSEED`` values the determinism probe replays a package under, one child process each.
#: Each seed orders a set afresh, so a dependence escapes only when every seed happens to order it alike:
#: for a set of two strings about half the time under two seeds, one time in eight under four (measured over
#: 400 pairs: 207 under seeds 0-1, 59 under 0-3; sets of three: 78 and 2).  The lint (:func:`set_iterations`)
#: is the check that does not depend on luck, where it sees the set.
PROBE_HASH_SEEDS: tuple[int, ...] = (0, 1, 2, 3)
#: Validation scenarios the probe replays at most (as EnvGen's replay-twice check).
PROBE_SCENARIOS = 50






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
    #: per-tool coverage gaps reported, not failed: an imported environment's (the import's own rule,
    #: issue 26: ``envfactory import`` and ``envfactory validate`` agree)
    coverage_warnings: list[str] = field(default_factory=list)
    task_failures: list[str] = field(default_factory=list)
    lint_failures: list[str] = field(default_factory=list)
    #: differences between the replays under several hash seeds (:func:`hash_seed_differences`)
    determinism_failures: list[str] = field(default_factory=list)
    n_tasks: int = 0

    @property
    def passed(self) -> bool:
        """True when every scenario passed and no coverage, task replay, lint or hash-seed check failed."""
        return (all(s.passed for s in self.scenarios) and not self.coverage_failures
                and not self.task_failures and not self.lint_failures and not self.determinism_failures)

    def failures(self) -> list[str]:
        """Every failure as one line: scenario steps, then coverage gaps, task replays, lint findings and
        hash-seed differences."""
        out = [f"scenario {s.scenario_id}: {f}" for s in self.scenarios for f in s.failures]
        return (out + self.coverage_failures + self.task_failures + [f"lint: {x}" for x in self.lint_failures]
                + [f"determinism: {x}" for x in self.determinism_failures])




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
                         progress: Progress | None = None,
                         hash_seeds: Sequence[int] | None = PROBE_HASH_SEEDS) -> ValidationReport:
    """Run every validation scenario, check that each tool has a success and an error path covered,
    replay every task's ground truth, and lint the package for nondeterminism (docs/authoring.md).  Never
    raises for environment faults: they are collected in the report.  ``progress(stage, done, total)``
    (stage ``"scenarios"``, then ``"tasks"``) is called as scenarios run and tasks replay (the CLI's
    progress bar).

    With ``replay_tasks`` and ``hash_seeds`` (two or more seeds; default :data:`PROBE_HASH_SEEDS`), a package
    loaded from a folder is also replayed in one child process per seed (``PYTHONHASHSEED``; tasks and
    scenarios, :func:`hash_seed_differences`): a result or state that differs between them is a
    ``determinism_failures`` entry naming the task, turn and call.  ``None`` skips it (a caller that cannot
    start processes, inside a sandbox, runs the probe from outside: EnvGen's ``validate_in_child``);
    an environment defined in code (no folder) is not probed."""
    report = ValidationReport(env=spec.name)
    if lint:
        report.lint_failures = lint_environment(spec)
    try:
        report.scenarios, report.coverage = run_scenarios(spec, progress=progress)
    except SpecError as exc:
        report.coverage_failures.append(f"scenarios: {exc}")
        return report
    if require_coverage:
        # an imported environment's gaps are warnings (its probe cannot always reach a success path),
        # in the import and here alike; everyone else's fail
        gaps = report.coverage_warnings if spec.manifest.provenance.kind == "imported" else report.coverage_failures
        for tool, seen in report.coverage.items():
            for kind in ("ok", "error"):
                if kind not in seen:
                    gaps.append(f"tool {tool}: no scenario covers its {'success' if kind == 'ok' else 'error'} path")
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
        if hash_seeds is not None and len(hash_seeds) >= 2 and spec.path is not None:
            report.determinism_failures = hash_seed_differences(spec.path, hash_seeds)
    return report


# ------------------------------------------------------------------------------- hash-seed probe



def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=repr).encode()).hexdigest()[:16]


def replay_fingerprint(spec: EnvironmentSpec) -> dict[str, list[list[str]]]:
    """What the determinism probe compares between processes: per task (``"task <id>"``) the digest of
    each ground-truth call's result (label ``"turn T call C (tool)"``) and of the state after each turn
    (``"turn T state"``), and per validation scenario (``"scenario <id>"``, the first
    :data:`PROBE_SCENARIOS`) the digest of each step's outcome (``"step I (tool)"``) and of the final
    state (``"final state"``).  ``{unit: [[label, 16 hex digits], ...]}``, JSON-ready.  A task whose
    ground truth does not replay (or a scenario whose initial state does not resolve) is one
    ``["error", digest of the message]`` entry; validation reports the fault itself.  Never raises for
    environment faults."""
    from gym_envfactory.environment.manifest import canonical_json
    from gym_envfactory.environment.states import resolve_state
    from gym_envfactory.session import Session

    out: dict[str, list[list[str]]] = {}
    try:
        tasks = list(spec.tasks)
    except SpecError:
        tasks = []
    for task in tasks:
        entries: list[list[str]] = []
        try:
            ref = task_reference(spec, task)
            for t, (calls, state) in enumerate(zip(ref.turn_calls, ref.turn_states, strict=True)):
                entries += [[f"turn {t} call {c} ({call.name})", _digest(call.result)] for c, call in enumerate(calls)]
                entries.append([f"turn {t} state", hashlib.sha256(canonical_json(state)).hexdigest()[:16]])
        except Exception as exc:  # noqa: BLE001 - a ground truth that does not replay: reported elsewhere
            entries = [["error", _digest(f"{type(exc).__name__}: {exc}")]]
        out[f"task {task.task_id}"] = entries
    try:
        scenarios = spec.scenarios[:PROBE_SCENARIOS]
    except SpecError:
        scenarios = []
    for sc in scenarios:
        try:
            initial = resolve_state(spec, sc.initial_state, task_form=True, where={"task_id": sc.scenario_id})
        except Exception as exc:  # noqa: BLE001 - reported by the scenario run
            out[f"scenario {sc.scenario_id}"] = [["error", _digest(str(exc))]]
            continue
        session = Session.from_states(spec, {spec.name: initial})
        try:
            entries = []
            for i, step in enumerate(sc.steps):
                r = session.call(step.call, step.arguments)
                entries.append([f"step {i} ({step.call})", _digest([r.ok, r.content, r.error, r.error_code])])
            entries.append(["final state", hashlib.sha256(session.state_bytes()).hexdigest()[:16]])
        except Exception as exc:  # noqa: BLE001 - a state that does not load: reported by the scenario run
            entries = [["error", _digest(str(exc))]]
        finally:
            session.close()
        out[f"scenario {sc.scenario_id}"] = entries
    return out


def fingerprint_differences(fingerprints: Mapping[int, Mapping[str, Sequence[Sequence[str]]]]) -> list[str]:
    """Compare :func:`replay_fingerprint` results taken under different hash seeds (``{seed: fingerprint}``,
    two or more): one line per task or scenario whose replays differ, naming the first call, step or
    state that does (``"task t1: turn 0 call 1 (list_tags): the result differs between PYTHONHASHSEED=0
    and PYTHONHASHSEED=1 ..."``).  Empty when every replay agrees."""
    seeds = list(fingerprints)
    out: list[str] = []
    first = seeds[0]
    for other in seeds[1:]:
        a, b = fingerprints[first], fingerprints[other]
        for unit in sorted(set(a) | set(b)):
            ea, eb = [tuple(e) for e in a.get(unit, [])], [tuple(e) for e in b.get(unit, [])]
            if ea == eb:
                continue
            where = "the replay"
            for (la, da), (lb, db) in zip(ea, eb, strict=False):
                if la != lb or da != db:
                    where = la if la == lb else f"{la} / {lb}"
                    break
            else:
                where = "the number of calls or steps"
            what = ("state" if where.endswith("state") else "outcome" if where.startswith("step")
                    else "result" if "call" in where else "replay")
            out.append(f"{unit}: {where}: the {what} differs between PYTHONHASHSEED={first} and "
                       f"PYTHONHASHSEED={other}, so it depends on the order of string hashes (iterating a set, "
                       f"or a dict or list built from one); sort it (sorted(...))")
    return out


def fingerprint_main() -> None:
    """Entry point of a probe child: ``sys.argv[1:3]`` are ``PACKAGE_FOLDER OUT_JSON``; loads the package
    and writes its :func:`replay_fingerprint` to ``OUT_JSON``.  Run under a chosen ``PYTHONHASHSEED``."""
    import sys

    from gym_envfactory.environment.package import load_environment

    folder, out = sys.argv[1:3]
    Path(out).write_text(json.dumps(replay_fingerprint(load_environment(folder))), encoding="utf-8")


#: The ``python -c`` program of a probe child.
PROBE_PROGRAM = "from gym_envfactory.validation import fingerprint_main; fingerprint_main()"


def hash_seed_differences(folder: str | Path, seeds: Sequence[int] = PROBE_HASH_SEEDS, *,
                          timeout_s: float = 600.0) -> list[str]:
    """Replay the package in ``folder`` (tasks' ground truth and validation scenarios,
    :func:`replay_fingerprint`) in one child process per hash seed of ``seeds`` (``PYTHONHASHSEED``; the
    children run at once, with the environment of :func:`~gym_envfactory.isolation.child_environment`
    and an empty ``HOME``, killed after ``timeout_s`` seconds) and compare them
    (:func:`fingerprint_differences`).  Returns one failure line per task or scenario that differs,
    or per child that did not answer (exit status and the end of its standard error).  The children
    run the package's code as this user (no sandbox: the same trust as validating it in this process)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from gym_envfactory.isolation import child_environment

    folder = Path(folder).resolve()
    work = Path(tempfile.mkdtemp(prefix="envfactory-probe-"))
    procs: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
    out: list[str] = []
    try:
        for seed in seeds:
            home, answer = work / f"home-{seed}", work / f"seed-{seed}.json"
            home.mkdir()
            env = child_environment(home, hash_seed=seed)
            # the children import this very gym_envfactory (a source checkout on PYTHONPATH=. included)
            env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
                [_GYM_ROOT, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]))
            procs[seed] = (subprocess.Popen([sys.executable, "-c", PROBE_PROGRAM, str(folder), str(answer)],
                                            env=env, cwd=home,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), answer)
        prints: dict[int, Any] = {}
        for seed, (proc, answer) in procs.items():
            try:
                _, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                out.append(f"the replay under PYTHONHASHSEED={seed} did not finish in {timeout_s:.0f} s")
                continue
            try:
                prints[seed] = json.loads(answer.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                tail = err.decode(errors="replace")[-500:]
                out.append(f"the replay under PYTHONHASHSEED={seed} failed (exit {proc.returncode}): {tail}")
        if not out:
            out = fingerprint_differences(prints)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return out


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


#: Calls whose result does not depend on the order they iterate their argument in.
_ORDER_FREE_CALLS = frozenset({"sorted", "set", "frozenset", "len", "min", "max", "any", "all", "sum"})
#: Calls that keep the iteration order of their argument in what they return.
_ORDERING_CALLS = frozenset({"list", "tuple", "enumerate", "zip", "iter", "dict.fromkeys", "deque", "OrderedDict",
                             "collections.deque", "collections.OrderedDict"})
_SET_TYPES = frozenset({"set", "frozenset", "Set", "FrozenSet", "AbstractSet", "MutableSet", "typing.Set",
                        "typing.FrozenSet", "typing.AbstractSet", "collections.abc.Set", "abc.Set"})
_SET_METHODS = frozenset({"union", "intersection", "difference", "symmetric_difference", "copy"})


def set_iterations(tree: Any, filename: str = "<source>") -> list[str]:
    """Places in a parsed module (``ast.Module``) that iterate a set where the AST can see it, as
    ``"file:line: message"`` strings: the iteration order of a set of strings follows their hashes, which
    differ per process (``PYTHONHASHSEED``), so a result or state built in that order differs too.

    A *set* here is a set display (not one of number literals only: numbers hash alike in every process) or comprehension, a ``set(...)``/``frozenset(...)`` call, ``|``, ``&``,
    ``-``, ``^`` or ``.union()``-style methods on one, or a name every assignment of which in its function
    (or at module level) is one of those, or annotated ``set[...]``/``frozenset[...]`` (parameters too), or
    a call of a function of the module annotated to return a set or every ``return`` of which is one (a
    helper ``def distinct(xs): return set(xs)`` hid ``list(distinct(tags))`` before).
    Flagged: ``for`` over a set, a list/dict comprehension or generator over one (a generator handed
    straight to ``sorted``, ``min``, ``max``, ``sum``, ``any``, ``all``, ``len``, ``set`` or ``frozenset``
    is fine, and so is a set comprehension), ``list``/``tuple``/``enumerate``/``zip``/``iter``/
    ``dict.fromkeys``/``str.join`` of one, ``*`` unpacking of one, and ``.pop()`` on one.  Not seen:
    sets held in attributes or state fields, or passed between functions without an annotation."""
    import ast

    parents: dict[int, Any] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node

    def set_annotation(ann: Any) -> bool:
        if ann is None:
            return False
        if isinstance(ann, ast.Subscript):
            ann = ann.value
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value.split("[", 1)[0].strip() in _SET_TYPES
        return (_dotted(ann) or "") in _SET_TYPES

    def scopes() -> list[tuple[Any, list[Any]]]:
        """Each function (and the module) with the nodes that belong to it, nested functions left out."""
        out = []
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))]:
            nodes, todo = [], list(ast.iter_child_nodes(scope))
            while todo:
                n = todo.pop()
                nodes.append(n)
                if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    todo.extend(ast.iter_child_nodes(n))
            out.append((scope, nodes))
        return out

    set_functions: set[str] = set()

    def is_set(node: Any, names: set[str]) -> bool:
        if isinstance(node, ast.Set):  # numbers hash alike in every process: a set of them is not flagged
            return not all(isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) for e in node.elts)
        if isinstance(node, ast.SetComp):
            return True
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or ""
            if name in ("set", "frozenset") or name in set_functions:
                return True
            return (isinstance(node.func, ast.Attribute) and node.func.attr in _SET_METHODS
                    and is_set(node.func.value, names))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)):
            return is_set(node.left, names) or is_set(node.right, names)
        return isinstance(node, ast.Name) and node.id in names

    all_scopes = scopes()
    for _ in range(3):  # functions returning sets, functions returning what those return
        for scope, nodes in all_scopes:
            if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or scope.name in set_functions:
                continue
            local = {a.arg for a in scope.args.args + scope.args.kwonlyargs if set_annotation(a.annotation)}
            returns = [n.value for n in nodes if isinstance(n, ast.Return)]
            if set_annotation(scope.returns) or (returns and all(v is not None and is_set(v, local) for v in returns)):
                set_functions.add(scope.name)

    found: list[tuple[int, str]] = []
    for scope, nodes in all_scopes:
        names: set[str] = set()
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = scope.args
            names |= {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if set_annotation(p.annotation)}
        assigned: dict[str, list[Any]] = {}
        annotated: set[str] = set()
        for n in nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(n.value)
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                if set_annotation(n.annotation):
                    annotated.add(n.target.id)
                elif n.value is not None:
                    assigned.setdefault(n.target.id, []).append(n.value)
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension, ast.With, ast.AugAssign, ast.NamedExpr)):
                targets: list[Any] = [n.target] if not isinstance(n, ast.With) else [i.optional_vars for i in n.items]
                for t in targets:  # bound to something else: not known to be a set
                    for sub in ast.walk(t) if t is not None else ():
                        if isinstance(sub, ast.Name) and not isinstance(n, ast.AugAssign):
                            assigned.setdefault(sub.id, []).append(None)
        names |= annotated
        for _ in range(3):  # names bound to names bound to sets
            names |= {k for k, vs in assigned.items() if all(v is not None and is_set(v, names) for v in vs)}

        def flag(node: Any, what: str) -> None:
            found.append((node.lineno, what))

        for n in nodes:
            if isinstance(n, (ast.For, ast.AsyncFor)) and is_set(n.iter, names):
                flag(n, "a for loop over a set")
            elif isinstance(n, (ast.ListComp, ast.DictComp, ast.GeneratorExp)):
                parent = parents.get(id(n))
                order_free = (isinstance(n, ast.GeneratorExp) and isinstance(parent, ast.Call)
                              and (_dotted(parent.func) or "") in _ORDER_FREE_CALLS)
                if not order_free and any(is_set(g.iter, names) for g in n.generators):
                    flag(n, "a comprehension over a set")
            elif isinstance(n, ast.Call):
                name = _dotted(n.func) or ""
                if (name in _ORDERING_CALLS or name.endswith(".join")
                        or isinstance(n.func, ast.Attribute) and n.func.attr == "join") \
                        and any(is_set(arg, names) for arg in n.args):
                    flag(n, f"{name or 'join'}() of a set")
                elif isinstance(n.func, ast.Attribute) and n.func.attr == "pop" and not n.args \
                        and is_set(n.func.value, names):
                    flag(n, "set.pop() (it takes whichever element comes first)")
            elif isinstance(n, ast.Starred) and is_set(n.value, names):
                flag(n, "unpacking a set with *")
    return [f"{filename}:{line}: {what} follows the order of string hashes, which differs per process "
            "(PYTHONHASHSEED): iterate sorted(...) instead" for line, what in sorted(set(found))]


def lint_source(source: str, filename: str = "<source>", *, module_state: str = "type",
                allowed_calls: Any = ()) -> list[str]:
    """Determinism lint of one module's source (docs/authoring.md; EnvGen's generated code is checked the same way).

    Rejects: wall-clock reads (``datetime.now()``, ``date.today()``, ``time.time()``...), ``uuid1/uuid4``,
    the builtin ``hash()``, the global ``random`` module (``random.Random(seed)`` instances are allowed),
    ``global`` statements, module-level mutable state (a lower-case module name bound to a
    dict/list/set display or constructor; UPPER_CASE names are read-only constants by convention), and
    iteration over a set where the AST sees it (:func:`set_iterations`: ``for x in set(...)``,
    ``list(set(...))``; ``sorted(set(...))`` is fine).
    ``module_state="mutation"`` (imported servers, whose names follow no convention) flags a
    module-level dict/list/set, whatever its name, only where a function mutates it or aliases it
    (:func:`module_mutations`), naming the line of the mutation, and leaves set iteration out (the
    importer refuses on this lint; an imported server's set order is not checked yet, docs/authoring.md).  ``allowed_calls``: call names (the
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
    if module_state != "mutation":
        out += set_iterations(tree, filename)
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
