"""Discovery: what a single-file tool server is made of (the API class, its wrappers, the state model).

:func:`analyze_tool_server` executes the server with FastMCP stubbed (:mod:`.bridge`; nothing is
served) and finds the one API class with ``load_scenario``/``save_scenario``, its module-level
instance(s), the ``@mcp.tool()`` wrappers and the methods they call, helpers that use the instance,
and the root scenario model.  :func:`classify_tool` guesses the MCP annotations (read-only,
destructive) from names and a static look at the methods.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from gym_envfactory.generators.errors import ImporterError

from . import bridge

__all__ = ["ImporterError", "ServerAnalysis", "ToolPlan", "analyze_tool_server", "classify_tool", "function_node"]





_READ_PREFIXES = ("get", "list", "search", "find", "lookup", "look", "check", "view", "show", "count",
                  "describe", "query", "fetch", "read", "is", "has", "browse", "retrieve", "compute",
                  "calculate", "estimate", "quote", "preview", "summarize", "summarise", "validate", "filter")
_DESTRUCTIVE_PREFIXES = ("cancel", "delete", "remove", "clear", "drop", "void", "revoke", "purge", "close",
                         "archive", "terminate", "refund", "reject")
_MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault",
             "add", "discard", "sort", "reverse", "__setitem__", "__delitem__"}
_STATE_INTERFACE = ("load_scenario", "save_scenario")


def _verb(name: str) -> str:
    return re.split(r"_|(?<=[a-z])(?=[A-Z])", name, maxsplit=1)[0].lower()


def _rooted_at(node: ast.AST, names: set[str]) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id in names


def function_node(fn: Callable[..., Any]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The AST of ``fn``'s definition, parsed from its source (``inspect.getsource``, dedented), or
    ``None`` when the source cannot be read or parsed."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def _mutates_self(cls: type, method: str, seen: set[str] | None = None) -> bool:
    """True when ``cls.method`` visibly mutates ``self`` (assignments, deletions, mutating calls on
    self.* or on locals taken from self.*, or calls to other mutating methods).  A heuristic: it feeds
    the MCP annotations only, and the validator's write checks catch a wrong guess."""
    seen = set() if seen is None else seen
    if method in seen:
        return False
    seen.add(method)
    fn = getattr(cls, method, None)
    node = function_node(fn) if callable(fn) else None
    if node is None:
        return True  # unknown: assume it writes
    args = node.args.posonlyargs + node.args.args
    if not args:
        return False
    owners = {args[0].arg}
    # locals aliasing parts of self (order = self.orders[oid]; order.status = ...)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and (
            _rooted_at(sub.value, owners)
            or (isinstance(sub.value, ast.Call) and _rooted_at(sub.value.func, owners))
        ):
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    owners.add(t.id)
        if isinstance(sub, (ast.For, ast.comprehension)) and _rooted_at(
            sub.iter.func if isinstance(sub.iter, ast.Call) else sub.iter, owners
        ) and isinstance(sub.target, ast.Name):
            owners.add(sub.target.id)
    self_name = args[0].arg
    for sub in ast.walk(node):
        targets: list[ast.AST] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            targets = [sub.target]
        elif isinstance(sub, ast.Delete):
            targets = list(sub.targets)
        for t in targets:
            if isinstance(t, (ast.Attribute, ast.Subscript)) and _rooted_at(t, owners):
                return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr in _MUTATORS and _rooted_at(sub.func.value, owners):
                return True
            if (isinstance(sub.func.value, ast.Name) and sub.func.value.id == self_name
                    and _mutates_self(cls, sub.func.attr, seen)):
                return True
    return False


def classify_tool(name: str, cls: type | None, methods: Sequence[str], read_only: Mapping[str, bool] | None,
                  destructive: Mapping[str, bool] | None) -> tuple[bool, bool]:
    """The MCP annotations ``(read_only, destructive)`` of tool ``name`` calling ``methods`` of ``cls``.

    Read-only when the verbs of the tool and of every method it calls are reading verbs (``get``,
    ``list``, ``search`` ...) and none of the methods visibly mutates ``self``; destructive when it is
    not read-only and a verb is ``cancel``, ``delete``, ``remove`` ...  ``read_only`` and
    ``destructive`` map tool names to overrides.  A heuristic: the validator's write checks catch a
    wrong guess.
    """
    verbs = {_verb(name)} | {_verb(m) for m in methods}
    ro = all(v in _READ_PREFIXES for v in verbs)
    if ro and cls is not None and methods:
        ro = not any(_mutates_self(cls, m) for m in methods)
    if read_only and name in read_only:
        ro = bool(read_only[name])
    de = not ro and any(v in _DESTRUCTIVE_PREFIXES for v in verbs)
    if destructive and name in destructive:
        de = bool(destructive[name])
    return ro, de


# ============================================================================ server analysis


class ToolPlan:
    """One tool to generate: the wrapper it runs and how it is exposed."""

    def __init__(self, name: str, fn: Callable[..., Any], node: ast.FunctionDef | ast.AsyncFunctionDef | None,
                 description: str, methods: list[str], params: list[inspect.Parameter],
                 context_params: list[str], read_only: bool, destructive: bool) -> None:
        self.name = name
        self.fn = fn
        self.node = node
        self.description = description
        self.methods = methods
        self.params = params
        self.context_params = context_params
        self.read_only = read_only
        self.destructive = destructive


class ServerAnalysis:
    """What :func:`analyze_tool_server` found in a server file."""

    def __init__(self, path: Path, source: str, module: types.ModuleType, api_class: type,
                 instances: tuple[str, ...], helpers: tuple[str, ...], state_model: type[BaseModel],
                 empty_scenario: dict[str, Any], tools: list[ToolPlan], hidden: list[str]) -> None:
        self.path = path
        self.source = source
        self.module = module
        self.api_class = api_class
        self.instances = instances
        self.helpers = helpers
        self.state_model = state_model
        self.empty_scenario = empty_scenario
        self.tools = tools
        self.hidden = hidden

    @property
    def module_doc(self) -> str:
        """The server module's docstring, stripped (empty when it has none)."""
        return (self.module.__doc__ or "").strip()


def _is_context(annotation: Any) -> bool:
    if annotation is bridge.Anything or isinstance(annotation, bridge.Anything):
        return True
    return getattr(annotation, "__name__", "") == "Context"


def _pick_state_model(module: types.ModuleType, empty: dict[str, Any], wanted: str | None) -> type[BaseModel]:
    models = [v for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__]
    if wanted:
        for m in models:
            if m.__name__ == wanted:
                return m
        raise ImporterError(f"no Pydantic model {wanted!r} in the server module; models: "
                            f"{', '.join(m.__name__ for m in models) or 'none'}")
    keys = set(empty)
    scored = []
    for m in models:
        names = set(m.model_fields) | {f.alias for f in m.model_fields.values() if f.alias}
        if not keys <= names:
            continue
        try:
            m.model_validate(empty)
        except ValidationError:
            continue
        exact = set(m.model_fields) == keys
        hint = any(w in m.__name__.lower() for w in ("scenario", "state", "db", "database"))
        scored.append((exact, hint, -len(m.model_fields), m))
    if not scored:
        raise ImporterError(
            f"no Pydantic model of the server matches what save_scenario() returns (keys {sorted(keys)}); "
            "name the root scenario model with state_model=")
    scored.sort(key=lambda t: t[:3], reverse=True)
    if len(scored) > 1 and scored[0][:3] == scored[1][:3]:
        raise ImporterError(f"several models match save_scenario(): {scored[0][3].__name__}, "
                            f"{scored[1][3].__name__}; choose one with state_model=")
    return scored[0][3]


def analyze_tool_server(path: str | Path, *, api_class: str | None = None,
                        state_model: str | None = None, read_only: Mapping[str, bool] | None = None,
                        destructive: Mapping[str, bool] | None = None) -> ServerAnalysis:
    """Load a server file (FastMCP stubbed; nothing served) and find its parts.  Raises ImporterError.

    This executes the file's module top level (and the API's constructor and ``save_scenario``) **in
    this process**: :func:`~.server.import_tool_server` calls it only inside its sandbox
    (:mod:`.sandbox`); call it directly only on files you trust."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ImporterError("no such file", file=path)
    source = path.read_text(encoding="utf-8")
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    mod_name = f"gym_envfactory.generators._imported_{digest}"
    try:
        module = sys.modules.get(mod_name) or bridge.load_source(mod_name, path)
    except Exception as exc:
        raise ImporterError(f"importing the server failed: {exc!r}", file=path) from exc
    # the API class
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == mod_name
               and all(callable(getattr(v, m, None)) for m in _STATE_INTERFACE)]
    if api_class:
        classes = [c for c in classes if c.__name__ == api_class]
    if len(classes) != 1:
        raise ImporterError(
            "expected exactly one API class with load_scenario() and save_scenario(), found "
            f"{', '.join(c.__name__ for c in classes) or 'none'}" + ("" if api_class else "; choose one with api_class="),
            file=path)
    cls = classes[0]
    for attr, value in vars(cls).items():
        if (not attr.startswith("__") and not attr.isupper() and isinstance(value, (dict, list, set, bytearray))):
            raise ImporterError(f"{cls.__name__}.{attr} is a mutable class attribute: it would be shared by "
                                "every instance, so sessions would leak into each other", file=path)
    try:
        empty = cls().save_scenario()
        if isinstance(empty, BaseModel):
            empty = empty.model_dump(mode="json")
    except Exception as exc:
        raise ImporterError(f"{cls.__name__}() or its save_scenario() failed: {exc!r}", file=path) from exc
    if not isinstance(empty, dict):
        raise ImporterError(f"{cls.__name__}.save_scenario() must return a dict, got {type(empty).__name__}", file=path)
    root = _pick_state_model(module, empty, state_model)
    instances = tuple(n for n, v in vars(module).items() if isinstance(v, cls))
    regs = bridge.registrations(module)
    if not regs:
        raise ImporterError("no @mcp.tool() wrappers found (expected a FastMCP instance with decorated functions)",
                            file=path)
    wrapper_codes = {inspect.unwrap(r.fn).__code__ for r in regs}

    def uses_instance(code: types.CodeType) -> bool:
        if set(code.co_names) & set(instances):
            return True
        return any(isinstance(c, types.CodeType) and uses_instance(c) for c in code.co_consts)

    helpers = []
    for n, v in vars(module).items():
        if isinstance(v, types.FunctionType) and v.__module__ == mod_name:
            inner = inspect.unwrap(v)
            if inner.__code__ not in wrapper_codes and uses_instance(inner.__code__):
                helpers.append(n)
        elif isinstance(v, type) and v.__module__ == mod_name:
            for attr, member in vars(v).items():
                f = getattr(member, "__func__", member)
                if isinstance(f, types.FunctionType) and uses_instance(f.__code__):
                    raise ImporterError(f"{v.__name__}.{attr} uses the shared module-level instance "
                                        f"{'/'.join(instances)}; the importer can only rebind it in functions",
                                        file=path)
    tools: list[ToolPlan] = []
    hidden: list[str] = []
    seen: set[str] = set()
    for reg in regs:
        fn = inspect.unwrap(reg.fn)
        node = function_node(fn)
        methods: list[str] = []
        if node is not None:
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                        and isinstance(sub.func.value, ast.Name) and sub.func.value.id in instances):
                    if sub.func.attr not in methods:
                        methods.append(sub.func.attr)
        if not methods and callable(getattr(cls, reg.name, None)):
            methods = [reg.name]  # mapped by name
        name = str(reg.name)
        if name in _STATE_INTERFACE or (methods and set(methods) <= set(_STATE_INTERFACE)):
            hidden.append(name)
            continue
        if name in seen:
            raise ImporterError(f"two wrappers register the tool name {name!r}", file=path)
        seen.add(name)
        sig = inspect.signature(fn)
        try:
            hints = get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise ImporterError(f"wrapper {name}: cannot resolve its type hints: {exc}", file=path) from exc
        params, ctx = [], []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise ImporterError(f"wrapper {name}: parameter {p.name!r} must be an ordinary named parameter",
                                    file=path)
            if _is_context(hints.get(p.name)):
                ctx.append(p.name)
                continue
            if p.name not in hints:
                raise ImporterError(f"wrapper {name}: parameter {p.name!r} has no type annotation", file=path)
            params.append(p)
        description = reg.description if reg.description is not None else (inspect.getdoc(fn) or "")
        ro, de = classify_tool(name, cls, methods, read_only, destructive)
        tools.append(ToolPlan(name, fn, node, description, methods, params, ctx, ro, de))
    if not tools:
        raise ImporterError("the server has no tools besides load_scenario/save_scenario", file=path)
    return ServerAnalysis(path, source, module, cls, instances, tuple(helpers), root, empty, tools, hidden)

