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
#: Verbs that write (used to find the verb of a name with a service prefix, ``hotel_book_room``).
_WRITE_VERBS = ("add", "create", "make", "book", "set", "update", "edit", "modify", "change", "place", "submit",
                "send", "post", "put", "register", "assign", "apply", "reserve", "transfer", "pay", "start", "stop",
                "open", "move", "rename", "upload", "schedule", "reschedule", "login", "logout", "approve", "mark",
                "enroll", "insert", "save", "write", "issue", "confirm", "toggle", "checkout", "deposit", "withdraw")


def _verb(name: str) -> str:
    """The verb of a tool or method name: its first word that is a known reading or destructive verb
    (``hotel_get_room`` -> ``get``, ``crmListLeads`` -> ``list``), else its first word."""
    words = [w.lower() for w in re.split(r"_|(?<=[a-z])(?=[A-Z])", name) if w]
    for w in words[:3]:
        if w in _READ_PREFIXES or w in _DESTRUCTIVE_PREFIXES or w in _WRITE_VERBS:
            return w
    return words[0] if words else ""


def mcp_annotations(node: ast.FunctionDef | ast.AsyncFunctionDef | None) -> dict[str, bool]:
    """The MCP tool annotations a wrapper's decorator gives, read from its source:
    ``@mcp.tool(annotations={"readOnlyHint": True})`` or ``annotations=ToolAnnotations(readOnlyHint=True,
    destructiveHint=False)``.  Returns ``{"readOnlyHint": ..., "destructiveHint": ...}`` for the hints
    given as literal booleans (empty when none)."""
    out: dict[str, bool] = {}
    if node is None:
        return out
    for deco in node.decorator_list:
        if not isinstance(deco, ast.Call):
            continue
        for kw in deco.keywords:
            if kw.arg != "annotations":
                continue
            pairs: list[tuple[Any, ast.AST]] = []
            if isinstance(kw.value, ast.Dict):
                pairs = [(k.value if isinstance(k, ast.Constant) else None, v)
                         for k, v in zip(kw.value.keys, kw.value.values, strict=True)]
            elif isinstance(kw.value, ast.Call):
                pairs = [(k.arg, k.value) for k in kw.value.keywords]
            for key, value in pairs:
                if key in ("readOnlyHint", "destructiveHint") and isinstance(value, ast.Constant) \
                        and isinstance(value.value, bool):
                    out[key] = value.value
    return out


def assigned_targets(node: ast.AST) -> list[ast.AST]:
    """What ``node`` assigns to or deletes: the targets of an ``=``, augmented or annotated assignment or a
    ``del``; ``[]`` for any other node."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


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
        targets = assigned_targets(sub)
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _rooted_at(target, owners):
                return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr in _MUTATORS and _rooted_at(sub.func.value, owners):
                return True
            if (isinstance(sub.func.value, ast.Name) and sub.func.value.id == self_name
                    and _mutates_self(cls, sub.func.attr, seen)):
                return True
    return False


def _root_attr(node: ast.AST, roots: Mapping[str, str | None], self_name: str) -> tuple[bool, str | None]:
    """(rooted, attribute): whether ``node`` is rooted at ``self`` or a local alias of part of it, and the
    ``self`` attribute it reaches (``self.orders[k].status`` → ``orders``; ``None`` when unknown)."""
    chain: list[ast.AST] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        chain.append(node)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in roots:
        return False, None
    if node.id != self_name:
        return True, roots[node.id]
    last = chain[-1] if chain else None
    return True, last.attr if isinstance(last, ast.Attribute) else None


def written_attributes(cls: type, method: str, seen: set[str] | None = None) -> set[str] | None:
    """The attributes of ``self`` that ``cls.method`` visibly writes (directly, through a local alias such
    as ``order = self.orders[k]; order.status = ...`` → ``orders``, or through another method it calls),
    or ``None`` when that cannot be told (no source, a write whose attribute is unknown).  The same
    heuristic as the read/write guess; the importer uses it so that the probe never reclassifies as
    read-only a tool whose code writes a state field on a branch the probe did not reach (issue 26)."""
    seen = set() if seen is None else seen
    if method in seen:
        return set()
    seen.add(method)
    fn = getattr(cls, method, None)
    node = function_node(fn) if callable(fn) else None
    if node is None:
        return None
    args = node.args.posonlyargs + node.args.args
    if not args:
        return set()
    self_name = args[0].arg
    roots: dict[str, str | None] = {self_name: None}
    for sub in ast.walk(node):
        value = None
        if isinstance(sub, ast.Assign):
            value = sub.value.func if isinstance(sub.value, ast.Call) and isinstance(sub.value.func, ast.Attribute) \
                else sub.value
            for t in sub.targets:
                rooted, attr = _root_attr(value, roots, self_name)
                if rooted and isinstance(t, ast.Name):
                    roots[t.id] = attr
        if isinstance(sub, (ast.For, ast.comprehension)) and isinstance(sub.target, ast.Name):
            it = sub.iter.func if isinstance(sub.iter, ast.Call) else sub.iter
            rooted, attr = _root_attr(it, roots, self_name)
            if rooted:
                roots[sub.target.id] = attr
    out: set[str] = set()
    for sub in ast.walk(node):
        targets = assigned_targets(sub)
        calls: list[ast.AST] = []
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr in _MUTATORS:
                calls.append(sub.func.value)
            if isinstance(sub.func.value, ast.Name) and sub.func.value.id == self_name:
                inner = written_attributes(cls, sub.func.attr, seen)
                if inner is None:
                    return None
                out |= inner
        for target in [t for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))] + calls:
            rooted, attr = _root_attr(target, roots, self_name)
            if rooted:
                if attr is None:
                    return None
                out.add(attr)
    return out


def classify_tool(name: str, cls: type | None, methods: Sequence[str], read_only: Mapping[str, bool] | None,
                  destructive: Mapping[str, bool] | None,
                  annotations: Mapping[str, bool] | None = None) -> tuple[bool, bool]:
    """The MCP annotations ``(read_only, destructive)`` of tool ``name`` calling ``methods`` of ``cls``.

    In order: the overrides (``read_only``/``destructive`` map tool names to values), the server's own
    MCP annotations (``annotations``: ``readOnlyHint``/``destructiveHint``, :func:`mcp_annotations`),
    then a guess: read-only when the verbs of the tool and of every method it calls are reading verbs
    (``get``, ``list``, ``search`` ...; a service prefix is skipped, ``hotel_get_room`` reads) and none
    of the methods visibly mutates ``self``, or, whatever the verbs, when no method visibly writes any
    attribute of ``self`` (:func:`written_attributes`: ``balance``, ``pick_driver``); destructive when it is not read-only and a verb is
    ``cancel``, ``delete``, ``remove`` ...  The import probe then reclassifies a guessed write whose
    name reads and whose calls changed nothing (:mod:`.probe`); the validator's write checks catch a
    wrong guess.
    """
    given = dict(annotations or {})
    verbs = {_verb(name)} | {_verb(m) for m in methods}
    if "readOnlyHint" in given:
        ro = bool(given["readOnlyHint"])
    else:
        ro = all(v in _READ_PREFIXES for v in verbs)
        if ro and cls is not None and methods:
            ro = not any(_mutates_self(cls, m) for m in methods)
        elif not ro and cls is not None and methods:  # whatever its verb, code that writes nothing reads
            ro = all(written_attributes(cls, m) == set() for m in methods)
    if read_only and name in read_only:
        ro = bool(read_only[name])
    de = not ro and (bool(given["destructiveHint"]) if "destructiveHint" in given
                     else any(v in _DESTRUCTIVE_PREFIXES for v in verbs))
    if destructive and name in destructive:
        de = bool(destructive[name])
    return ro, de


def reads_by_name(name: str) -> bool:
    """True when the verb of ``name`` (service prefix skipped) is a reading verb."""
    return _verb(name) in _READ_PREFIXES


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
        #: True when read_only came from the server's MCP annotations or an override, not a guess.
        self.annotated = False


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


def _interface_models(cls: type, models: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """Models the state interface names: ``save_scenario``'s return annotation, ``load_scenario``'s
    parameter annotations, else the models ``load_scenario`` builds from its argument
    (``Model(**scenario)``, ``Model.model_validate(scenario)``, ``Model.parse_obj(scenario)``)."""
    by_name = {m.__name__: m for m in models}
    found: list[type[BaseModel]] = []

    def add(m: Any) -> None:
        if isinstance(m, type) and m in models and m not in found:
            found.append(m)

    for meth in _STATE_INTERFACE:
        fn = getattr(cls, meth, None)
        try:
            hints = get_type_hints(fn) if callable(fn) else {}
        except Exception:  # noqa: BLE001 - unresolvable annotations name nothing
            hints = {}
        for key, hint in hints.items():
            if (meth == "save_scenario") == (key == "return"):
                add(hint)
    if found:
        return found
    loader = getattr(cls, "load_scenario", None)
    node = function_node(loader) if callable(loader) else None
    if node is not None:
        args = node.args.posonlyargs + node.args.args
        params = {a.arg for a in args[1:]}
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Call):
                continue
            passes = any(isinstance(a, ast.Name) and a.id in params for a in sub.args) or any(
                isinstance(k.value, ast.Name) and k.value.id in params for k in sub.keywords)
            target = sub.func
            if isinstance(target, ast.Attribute) and target.attr in ("model_validate", "parse_obj", "validate"):
                target = target.value
            if passes and isinstance(target, ast.Name) and target.id in by_name:
                add(by_name[target.id])
    return found


def _pick_state_model(module: types.ModuleType, empty: dict[str, Any], wanted: str | None,
                      cls: type | None = None, sample: Mapping[str, Any] | None = None) -> type[BaseModel]:
    """The root scenario model, in order: ``wanted`` (``--state-model``); the one model the state
    interface names (:func:`_interface_models`) that accepts ``sample`` (the scenario given, else the
    empty ``save_scenario()``) or, with no sample given, whose fields hold the keys of the empty state;
    else the models whose fields hold the keys of ``sample`` (or of the empty state), ranked by
    validating ``sample``, exact key match, a name like ``*Scenario``/``*State``/``*DB`` and fewest
    fields.  The empty state only ranks: it is never required to validate (a required field
    legitimately fails on it).  Raises ImporterError when none or several equally good models fit."""
    models = [v for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__]
    if wanted:
        for m in models:
            if m.__name__ == wanted:
                return m
        raise ImporterError(f"no Pydantic model {wanted!r} in the server module; models: "
                            f"{', '.join(m.__name__ for m in models) or 'none'}")
    data = dict(sample) if sample is not None else empty
    keys = set(data) if sample is not None else set(empty)

    def validates(m: type[BaseModel]) -> bool:
        try:
            m.model_validate(data)
        except ValidationError:
            return False
        return True

    def holds(m: type[BaseModel]) -> bool:
        names = set(m.model_fields) | {f.alias for f in m.model_fields.values() if f.alias}
        return keys <= names

    named = [m for m in (_interface_models(cls, models) if cls is not None else []) if holds(m)]
    if len(named) == 1:
        return named[0]
    scored = []
    for m in (named or models):
        if not holds(m):
            continue
        ok = validates(m)
        if sample is not None and not ok:
            continue
        exact = set(m.model_fields) == keys
        hint = any(w in m.__name__.lower() for w in ("scenario", "state", "db", "database"))
        scored.append((ok, exact, hint, -len(m.model_fields), m))
    what = "the initial state given" if sample is not None else "what save_scenario() returns"
    if not scored:
        raise ImporterError(
            f"no Pydantic model of the server matches {what} (keys {sorted(keys)}); "
            "name the root scenario model with --state-model NAME (state_model=)")
    scored.sort(key=lambda t: t[:4], reverse=True)
    if len(scored) > 1 and scored[0][:4] == scored[1][:4]:
        raise ImporterError(f"several models match {what}: {scored[0][4].__name__}, "
                            f"{scored[1][4].__name__}; choose one with --state-model NAME (state_model=)")
    return scored[0][4]


def analyze_tool_server(path: str | Path, *, api_class: str | None = None,
                        state_model: str | None = None, read_only: Mapping[str, bool] | None = None,
                        destructive: Mapping[str, bool] | None = None,
                        sample_state: Mapping[str, Any] | None = None) -> ServerAnalysis:
    """Load a server file (FastMCP stubbed; nothing served) and find its parts.  Raises ImporterError.

    ``sample_state``: the scenario the import was given (its ``small`` initial state), used to choose
    the root model (:func:`_pick_state_model`) unless ``state_model`` names it.

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
        module = sys.modules.get(mod_name)
        if module is None or getattr(module, "__file__", None) != str(path):  # a copy elsewhere (a removed stage folder)
            module = bridge.load_source(mod_name, path)
    except Exception as exc:
        raise ImporterError(f"importing the server failed: {exc!r}", file=path) from exc
    # the API class
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == mod_name
               and all(callable(getattr(v, m, None)) for m in _STATE_INTERFACE)]
    if api_class:
        classes = [c for c in classes if c.__name__ == api_class]
    if len(classes) != 1:
        def at(c: type) -> str:
            try:
                return f"{c.__name__} (line {inspect.getsourcelines(c)[1]})"
            except (OSError, TypeError):
                return c.__name__

        raise ImporterError(
            "expected exactly one API class with load_scenario() and save_scenario(), found "
            f"{', '.join(at(c) for c in classes) or 'none'}"
            + ("" if api_class else "; choose one with --api-class NAME (api_class=)"),
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
    try:
        root = _pick_state_model(module, empty, state_model, cls, sample_state)
    except ImporterError as exc:
        raise ImporterError(str(exc.args[0]) if exc.args else str(exc), file=path) from None
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
        hints = mcp_annotations(node)
        ro, de = classify_tool(name, cls, methods, read_only, destructive, hints)
        plan = ToolPlan(name, fn, node, description, methods, params, ctx, ro, de)
        plan.annotated = "readOnlyHint" in hints or bool(read_only and name in read_only)
        tools.append(plan)
    if not tools:
        raise ImporterError("the server has no tools besides load_scenario/save_scenario", file=path)
    return ServerAnalysis(path, source, module, cls, instances, tuple(helpers), root, empty, tools, hidden)

