"""Session isolation of an imported server: module-level state every session would share.

:func:`shared_module_globals` finds, statically, the module-level names the API, its wrappers and
helpers use; :func:`check_session_isolation` runs the scenarios twice and interleaved
(:func:`gym_envfactory.generators.checks.run_differences`) and refuses an import whose sessions
differ, naming those globals.  Both take a live :class:`~.analysis.ServerAnalysis` (the static part
also looks up the module's values), so both run wherever the file was loaded: inside the importer's
sandbox (:mod:`.sandbox`, the ``check`` stage) when called by :func:`~.server.import_tool_server`.
"""

from __future__ import annotations

import ast
import logging
import types
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec

from ..checks import run_differences
from . import bridge
from .analysis import ImporterError, ServerAnalysis

__all__ = ["check_session_isolation", "shared_module_globals", "static_refusals"]

log = logging.getLogger(__name__)

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range)


def _immutable(value: Any) -> bool:
    if isinstance(value, _IMMUTABLE):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(v) for v in value)
    return False


def shared_module_globals(a: ServerAnalysis) -> dict[str, list[str]]:
    """Module-level names of the server that its API methods, wrappers or helpers (and the module
    functions they call) read or write, other than the API class, the shared instance, models, the
    MCP server, functions, classes, modules and UPPER_CASE immutable constants.

    Returns ``{name: [functions using it]}``.  Each one is state every session of the imported
    environment would share (a counter, an audit list, a cache)."""
    try:
        tree = ast.parse(a.source)
    except SyntaxError:
        return {}
    module = a.module
    functions: dict[str, ast.AST] = {}
    classes: dict[str, ast.ClassDef] = {}
    assigned: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            classes[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        assigned.add(sub.id)

    def excluded(name: str) -> bool:
        if name in a.instances or name == a.api_class.__name__ or name not in vars(module):
            return True
        v = vars(module)[name]
        if isinstance(v, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            return True  # models, classes, modules, functions
        if isinstance(v, (bridge.StubServer, bridge.Anything, bridge.SharedInstanceGuard)):
            return True  # the MCP server (stubbed)
        if isinstance(v, a.api_class):
            return True
        if callable(v) and hasattr(v, "__wrapped__"):
            return True  # a decorated function
        return name.isupper() and _immutable(v)

    candidates = {n for n in assigned if not excluded(n)}
    if not candidates:
        return {}
    roots: list[tuple[str, ast.AST]] = []
    if a.api_class.__name__ in classes:
        roots.append((a.api_class.__name__, classes[a.api_class.__name__]))
    for t in a.tools:
        if t.node is not None:
            roots.append((t.fn.__name__, t.node))
    for h in a.helpers:
        if h in functions:
            roots.append((h, functions[h]))
    used: dict[str, list[str]] = {}
    seen: set[str] = set()
    while roots:
        owner, node = roots.pop()
        if owner in seen:
            continue
        seen.add(owner)
        for sub in ast.walk(node):
            names: list[str] = []
            if isinstance(sub, ast.Name):
                names = [sub.id]
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                names = list(sub.names)
            for n in names:
                if n in candidates:
                    if owner not in used.setdefault(n, []):
                        used[n].append(owner)
                elif n in functions and n not in seen:
                    roots.append((n, functions[n]))
                elif n in classes and n not in seen and n != a.api_class.__name__:
                    roots.append((n, classes[n]))
    return {n: sorted(v) for n, v in sorted(used.items())}



def static_refusals(source: str, filename: str) -> list[str]:
    """What makes a server refused before anything runs: the determinism lint of its source
    (:func:`gym_envfactory.validation.lint_source` with ``module_state="mutation"``) as
    ``"file:line: the call or name: why"`` lines.

    Flagged: wall-clock reads, ``uuid1``/``uuid4``, the builtin ``hash()``, the global ``random``
    module, ``global`` statements, and module-level lists/dicts/sets a function mutates or aliases (a
    module constant no code mutates is fine, whatever its name or type).  Calls the bridge replaces
    with per-session seeded stand-ins (``bridge.SEEDED_CALLS``) are not refused; what no stand-in
    fixes (OS entropy, threads and pools, the process id:
    :func:`~.determinism.unfixable_nondeterminism`) is."""
    from gym_envfactory.validation import lint_source

    from .determinism import unfixable_nondeterminism

    covered = frozenset(getattr(bridge, "SEEDED_CALLS", ()) or ())
    out = lint_source(source, filename, module_state="mutation", allowed_calls=covered)
    places = {line.split(": ", 1)[0] for line in out}
    return out + [line for line in unfixable_nondeterminism(source, filename) if line.split(": ", 1)[0] not in places]


def check_session_isolation(a: ServerAnalysis, spec: EnvironmentSpec) -> None:
    """Refuse (:class:`ImporterError`) an import whose sessions are not isolated or not deterministic:
    the scenarios are run twice in fresh sessions and once interleaved with another session, and any
    difference is reported with the module-level globals (:func:`shared_module_globals`) responsible."""
    shared = shared_module_globals(a)
    difference = next(run_differences(spec, interleave=True), None)
    problem = None if difference is None else difference.describe()
    where = "; ".join(f"{n} (used by {', '.join(users)})" for n, users in shared.items())
    if problem is None:
        from gym_envfactory.validation import module_mutations

        mutated = module_mutations(ast.parse(a.source))
        shared = {n: users for n, users in shared.items()  # a collection no code mutates is a constant
                  if n in mutated or not isinstance(vars(a.module).get(n), (dict, list, set))}
        where = "; ".join(f"{n} (used by {', '.join(users)})" for n, users in shared.items())
        if shared:
            log.warning("%s: module-level names %s are used by the API or its tools; the scenarios did not show "
                        "them leaking between sessions, but make sure they are read-only", spec.name, where)
        return
    hint = (f"module-level state shared by every session: {where}" if shared else
            "no module-level name was found to blame (randomness, the clock, or state hidden in an import?)")
    raise ImporterError(
        f"sessions of the imported environment are not isolated or not deterministic: {problem}; {hint}. "
        "Keep per-session data in the API instance (set it in __init__/load_scenario and save_scenario) "
        "and derive ids from that state instead of module-level counters or lists", file=a.path)

