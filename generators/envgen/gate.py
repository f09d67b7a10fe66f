"""The static gate run before generated code is executed: defence in depth, not a sandbox.

:func:`check_imports` is an allow-list (issue 24): a module is imported only when it is in
:data:`~.allowlist.ALLOWED_MODULES`, a name is taken from it (``from m import a``, ``m.a``) only when it is
on that module's list, a name that resolves to a builtin only when it is in
:data:`~.allowlist.ALLOWED_BUILTINS` (scopes are read with the standard library's :mod:`symtable`), and a
dunder only when it is in :data:`~.allowlist.ALLOWED_DUNDERS`.  On top of that it refuses routes from
strings to attributes or code (format fields, string types Pydantic evaluates) and frame attributes.
Python cannot be confined by inspecting its source: untrusted packages run on the isolated backend
(docs/architecture.md, "Trust"), and EnvGen validates in a child process with an allow-listed environment
(:mod:`gym_envfactory.generators.sandbox`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .allowlist import ALLOWED_BUILTINS, ALLOWED_DUNDERS, ALLOWED_MODULES, SUPER_DUNDERS
from .report import Finding

__all__ = ["ALLOWED_BUILTINS", "ALLOWED_IMPORTS", "ALLOWED_MODULES", "ALLOWED_RUNTIME_MODULES",
           "ALLOWED_RUNTIME_NAMES", "check_imports"]

#: Top-level modules generated code may import (each with the names listed in :data:`ALLOWED_MODULES`).
ALLOWED_IMPORTS: frozenset[str] = frozenset(m.split(".")[0] for m in ALLOWED_MODULES)
#: What generated code may take from the runtime package itself (no submodules: they import os,
#: subprocess, sockets ...).
ALLOWED_RUNTIME_NAMES: frozenset[str] = ALLOWED_MODULES["gym_envfactory"]
ALLOWED_RUNTIME_MODULES: frozenset[str] = frozenset({"gym_envfactory", "gym_envfactory.authoring"})
#: Attributes of *objects* (not modules, whose attributes are allow-listed) that lead to frames, code
#: and globals: refused on anything (``g.gi_frame``, ``tb.tb_frame.f_globals``).
_FRAME_ATTRS = frozenset({
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "f_globals",
    "f_locals", "f_builtins", "f_back", "f_code", "co_code", "func_globals",
})
_ALLOWED_DUNDERS = ALLOWED_DUNDERS
_SUPER_DUNDERS = SUPER_DUNDERS
_FORMAT_FIELD_RE = re.compile(r"\{([^{}!:]*)")
#: ``str`` methods that resolve ``{0.attr}``/``{0[key]}`` fields of a template (a getattr by string): only
#: ``"literal".format(...)`` called directly on a string constant whose fields read no attribute or index
#: is allowed; any other reference (``str.format``, ``m = s.format``, ``map(str.format, ...)``) is refused.
_FORMAT_METHODS = frozenset({"format", "format_map"})
_DUNDER_RE = re.compile(r"__\w+__")
#: Names refused wherever they appear (a name, an attribute, an imported name): library routes from a
#: string to an attribute (``string.Formatter().get_field("0.__globals__", ...)``) or from a string to
#: code (Pydantic ``create_model`` and ``FieldInfo``, ``typing.ForwardRef``, ``get_type_hints`` and the
#: other helpers that evaluate string annotations).  Imported names and attributes of imported modules
#: that contain ``eval`` or ``forward`` are refused too (:func:`_evaluates_strings`).
_EVAL_SINKS = frozenset({
    "Formatter", "vformat", "get_field", "format_field", "convert_field", "create_model", "ForwardRef",
    "get_type_hints", "get_annotations", "evaluate_forward_ref", "eval_type", "eval_type_backport",
    "eval_type_lenient", "_eval_type", "make_dataclass", "FieldInfo", "parse_obj_as", "parse_raw_as",
    "update_forward_refs", "annotation", "rebuild_annotation", "from_annotation", "from_annotated_attribute",
    "TypeAliasType", "literal_eval", "format", "format_map",
})
#: Pydantic's deprecated v1 class methods, still on every ``BaseModel``: ``parse_raw`` unpickles
#: (``proto="pickle"``), ``parse_file`` reads any file, ``from_orm`` reads attributes of any object; the rest
#: have ``model_*`` successors.  Refused as attributes of anything (review finding: pickle RCE via a subclass).
_MODEL_V1_METHODS = frozenset({"parse_raw", "parse_file", "parse_obj", "from_orm", "schema_json", "construct"})
#: Called with arguments, these turn strings into forward references that Pydantic later evaluates
#: (use the class syntax, whose annotations the gate checks).
_FUNCTIONAL_TYPES = frozenset({"NamedTuple", "TypedDict"})
#: Calls whose listed arguments are types: ``TypeAdapter(<type>)``, ``TypeVar("T", <type>..., bound=<type>)``,
#: ``NewType("N", <type>)``: checked like annotations (no computed strings, no parameters).
_TYPE_ARG_CALLS = {"TypeAdapter": 0, "TypeVar": 1, "NewType": 1, "RootModel": 0}
#: Calls that make a type (pydantic's constrained types): their positional arguments are type positions.
_TYPE_FACTORIES = frozenset({"constr", "conint", "confloat", "condecimal", "conlist", "conset", "confrozenset",
                             "conbytes", "condate", "TypeVar", "NewType"})
#: Subscripting one of these is a type expression (its arguments are type positions), as is subscripting
#: a class of the package or anything imported from :data:`_TYPE_MODULES`.
_GENERIC_BUILTINS = frozenset({"list", "dict", "set", "frozenset", "tuple", "type"})
_TYPE_MODULES = frozenset({"typing", "typing_extensions", "pydantic", "collections", "annotated_types"})
#: Expressions in a string constant that make it code (a string Pydantic or typing may evaluate).
_CODE_NODES = ("Call", "Lambda", "NamedExpr", "ListComp", "SetComp", "DictComp", "GeneratorExp", "Await",
               "Yield", "YieldFrom")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _evaluates_strings(name: str) -> bool:
    """A library name that (by its name) evaluates strings or makes forward references."""
    low = name.lower()
    return name in _EVAL_SINKS or "eval" in low or "forward" in low


def _format_reads_attributes(template: str, depth: int = 0) -> bool:
    """Whether ``template.format(...)`` would read an attribute or an index of an argument (``{0.x}``,
    ``{a[k]}``, nested in a format spec too), or the template is malformed (fields before the error run)."""
    import string

    try:
        fields = list(string.Formatter().parse(template))
    except (ValueError, TypeError):
        return True
    for _, name, spec, _ in fields:
        if name is not None and ("." in name or "[" in name):
            return True
        if spec and "{" in spec and (depth > 2 or _format_reads_attributes(spec, depth + 1)):
            return True
    return False


def _terminal(ast: Any, node: Any) -> str:
    """``Optional`` of ``Optional``, ``typing.Optional`` and ``typing.Optional[int]``; ``""`` otherwise."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _root_name(ast: Any, node: Any) -> str:
    """The name an attribute chain starts from (``json`` of ``json.codecs.open``), ``""`` if none."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _type_value(ast: Any, value: Any, heads: set[str], edges: list[str]) -> bool:
    """Whether ``value`` (the right side of an assignment) is a type expression; names and attributes it
    reads are appended to ``edges`` (the assigned name is unsafe when one of them is)."""
    if isinstance(value, ast.Constant):
        return value.value is None
    if isinstance(value, (ast.Name, ast.Attribute)):
        edges.append(_terminal(ast, value))
        return True
    if isinstance(value, ast.Subscript):
        head = _terminal(ast, value.value)
        if head not in heads and head not in _GENERIC_BUILTINS:
            return False
        edges.append(head)
        if head == "Literal":
            return True
        elts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
        return all(_type_value(ast, e, heads, edges) for e in (elts[:1] if head == "Annotated" else elts))
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
        return _type_value(ast, value.left, heads, edges) and _type_value(ast, value.right, heads, edges)
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_type_value(ast, e, heads, edges) for e in value.elts)
    return isinstance(value, ast.Call) and _terminal(ast, value.func) in _TYPE_FACTORIES


def _assigned_non_types(ast: Any, body: list[Any], *, local: bool, heads: set[str] | None = None,
                        base: frozenset[str] = frozenset()) -> frozenset[str]:
    """Names bound in ``body`` to anything but a type expression (strings, calls, loop variables ...),
    plus names aliasing such a name (``X = s``) or one of ``base``; ``global``/``nonlocal`` names too.
    Module level (``local=False``) does not look into functions; class bodies count as module level."""
    heads = heads if heads is not None else set(_GENERIC_BUILTINS)
    unsafe: set[str] = set()
    aliases: list[tuple[str, list[str]]] = []

    def targets(t: Any) -> list[str]:
        return [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]

    def assign(t: Any, value: Any) -> None:
        names = targets(t)
        edges: list[str] = []
        if value is None or not isinstance(t, ast.Name) or not _type_value(ast, value, heads, edges):
            unsafe.update(names)
        else:
            aliases.extend((n, edges) for n in names)

    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for d in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                stack.append(d)
            continue  # its body is another scope
        if isinstance(node, ast.Assign):
            for t in node.targets:
                assign(t, node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            assign(node.target, node.value)
        elif isinstance(node, ast.AugAssign):
            unsafe.update(targets(node.target))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            unsafe.update(targets(node.target))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            unsafe.update(targets(node.optional_vars))
        elif isinstance(node, ast.NamedExpr):
            unsafe.update(targets(node.target))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            unsafe.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            unsafe.update(node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            unsafe.update(a.asname or a.name for a in node.names if a.name in base)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            unsafe.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            unsafe.add(node.rest)
        elif isinstance(node, ast.comprehension):
            unsafe.update(targets(node.target))
        stack.extend(ast.iter_child_nodes(node))
    changed = True
    while changed:
        changed = False
        for name, edges in aliases:
            if name not in unsafe and any(e in unsafe or e in base for e in edges):
                unsafe.add(name)
                changed = True
    return frozenset(unsafe)


class _Gate:
    """The AST walk behind :func:`check_imports` (one file)."""

    def __init__(self, fname: str) -> None:
        import ast

        self.ast = ast
        self.fname = fname
        self.problems: list[tuple[int, str]] = []
        self.module_aliases: set[str] = set()  # names bound by imports (modules, or things from modules)
        self.type_heads: set[str] = set(_GENERIC_BUILTINS)  # subscripting these is a type expression
        self.pkg_unsafe: frozenset[str] = frozenset()  # package-level names that may hold strings
        self.local_unsafe: list[frozenset[str]] = []  # per enclosing function: parameters, non-type locals
        self.literal_formats: set[int] = set()  # ids of `.format` attributes of allowed `"literal".format(...)` calls
        self.modules: dict[str, str] = {}  # name bound to a module by an import -> the module (``abc`` -> collections.abc)
        self.attr_bases: set[int] = set()  # ids of nodes read as ``<node>.attr``
        self.pkg_modules: frozenset[str] = frozenset()  # names any module of the package binds to a module
        self.relative: set[str] = set()  # names bound by relative imports (the package's own modules and names)

    def bad(self, node: Any, msg: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), msg))

    def check_tree(self, tree: Any) -> None:
        ast = self.ast
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.module_aliases.add((a.asname or a.name).split(".")[0])
                    target = a.name if a.asname else a.name.split(".")[0]
                    if target in ALLOWED_MODULES:  # a refused import is reported as such
                        self.modules[a.asname or a.name.split(".")[0]] = target
            if isinstance(node, ast.ImportFrom) and node.level:
                self.relative.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                for a in node.names:
                    self.module_aliases.add(a.asname or a.name)
                    if f"{node.module}.{a.name}" in ALLOWED_MODULES:
                        self.modules[a.asname or a.name] = f"{node.module}.{a.name}"
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in _TYPE_MODULES):
                self.type_heads.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.ClassDef):
                self.type_heads.add(node.name)
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
            outer = self.unsafe_names() | frozenset(names)
            self.local_unsafe.append(outer | _assigned_non_types(self.ast, body, local=True, heads=self.type_heads,
                                                                 base=outer))
            try:
                for b in body:
                    self.visit(b, inner)
            finally:
                self.local_unsafe.pop()
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
        self.check_type_expr(ann, params, 0)

    def unsafe_names(self) -> frozenset[str]:
        """Names that may hold a string where a type is read: package-level names bound to anything but
        a type expression, and the enclosing function's parameters and non-type locals."""
        return self.pkg_unsafe | (self.local_unsafe[-1] if self.local_unsafe else frozenset())

    def check_type_expr(self, node: Any, params: frozenset[str], depth: int) -> None:
        """A type position (an annotation, ``TypeAdapter(...)``, ``Optional[...]``): only names of types,
        their subscripts, ``|`` and string forward references that are themselves such expressions.
        A name that may hold a computed string is refused: typing and Pydantic evaluate a string type."""
        ast = self.ast
        if depth > 4:
            self.bad(node, "type expressions nested too deeply in strings")
            return
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                try:
                    expr = ast.parse(node.value.strip(), mode="eval")
                except SyntaxError:
                    return  # not code: Pydantic cannot evaluate it either
                for sub in ast.walk(expr):
                    sub.lineno = getattr(node, "lineno", 0)
                self.visit(expr, params)
                self.check_type_expr(expr.body, params, depth + 1)
            return
        if isinstance(node, ast.Name):
            if node.id in self.unsafe_names():
                self.bad(node, f"{node.id} is used as a type but may hold a string or another value (typing and "
                               "Pydantic evaluate string types): name a class or an imported type")
            return
        if isinstance(node, ast.Attribute):
            if node.attr in self.pkg_unsafe:
                self.bad(node, f".{node.attr} is used as a type but the package binds {node.attr} to something "
                               "other than a type")
            return
        if isinstance(node, ast.Subscript):
            self.check_type_expr(node.value, params, depth)
            head = _terminal(ast, node.value)
            if head == "Literal":
                return
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for e in elts[:1] if head == "Annotated" else elts:
                self.check_type_expr(e, params, depth)
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self.check_type_expr(node.left, params, depth)
            self.check_type_expr(node.right, params, depth)
            return
        if isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self.check_type_expr(e, params, depth)
            return
        if isinstance(node, ast.Call) and _terminal(ast, node.func) in _TYPE_FACTORIES:
            for a in node.args:
                self.check_type_expr(a, params, depth)
            return
        self.bad(node, f"a {type(node).__name__} expression where a type is expected: types are names of "
                       "classes, their subscripts and `|` (typing and Pydantic evaluate what is there)")

    def check_string(self, node: Any, text: str) -> None:
        """Any string constant (f-string parts and docstrings too): no dunder names, no Python code with
        calls (typing and Pydantic evaluate strings), no format fields reading private or forbidden attributes."""
        ast = self.ast
        if text != "__main__" and _DUNDER_RE.search(text):
            self.bad(node, "a string containing a dunder name (`__x__`) is not allowed in an environment (format "
                           "strings and string types reach attributes through it)")
            return
        for m in _FORMAT_FIELD_RE.finditer(text):
            parts = re.split(r"[.\[\]]", m.group(1))
            if len(parts) > 1 and any(p.strip().startswith("_") or p.strip() in _FRAME_ATTRS for p in parts[1:]):
                self.bad(node, "a format string that reads private attributes (`{x._y}`) is not allowed")
                return
        stripped = text.strip()
        if "(" not in stripped and "lambda" not in stripped and ":=" not in stripped and " for " not in stripped \
                and "await" not in stripped and "yield" not in stripped and "." not in stripped:
            return
        try:
            expr = ast.parse(stripped, mode="eval")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Call) and not _root_name(ast, sub.func):
                continue  # calling a constant (`'a' (b)` in prose) runs nothing
            if type(sub).__name__ in _CODE_NODES:
                self.bad(node, "a string that is Python code with calls is not allowed in an environment "
                               "(typing and Pydantic evaluate string types)")
                return
            if isinstance(sub, ast.Attribute) and (sub.attr in _FRAME_ATTRS or sub.attr in _EVAL_SINKS
                                                   or (self.module_of(sub.value) is not None and sub.attr not in ALLOWED_MODULES[self.module_of(sub.value) or ''])):
                self.bad(node, f"a string that reads .{sub.attr} is not allowed in an environment")
                return

    def check_sinks(self, node: Any, params: frozenset[str]) -> None:
        """Routes from strings to attributes or code through libraries, and type positions outside annotations."""
        ast = self.ast
        if isinstance(node, ast.Name) and node.id in _EVAL_SINKS and node.id not in params:
            self.bad(node, f"{node.id} is not allowed in an environment (it reaches attributes or code through "
                           "strings; use an f-string or a class)")
        elif isinstance(node, ast.Attribute) and node.attr in _FORMAT_METHODS:
            if id(node) not in self.literal_formats:
                self.bad(node, f".{node.attr} is only allowed called directly on a string literal "
                               f"(`'{{}} items'.{node.attr}(...)`), not as a value or on a computed string "
                               "(it reads attributes named in the template); use an f-string")
        elif isinstance(node, ast.Attribute) and node.attr in _MODEL_V1_METHODS:
            self.bad(node, f"attribute .{node.attr} is not allowed in an environment (Pydantic's deprecated v1 API "
                           "unpickles, reads files or reads any object's attributes; use model_validate / "
                           "model_validate_json)")
        elif isinstance(node, ast.Attribute) and (
                node.attr in _EVAL_SINKS or (_evaluates_strings(node.attr) and _root_name(ast, node) in self.module_aliases)):
            self.bad(node, f"attribute .{node.attr} is not allowed in an environment (it evaluates strings or "
                           "reaches attributes through them)")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if not node.level and any(part.startswith("_") for part in mod.split(".")) and mod != "__future__":
                self.bad(node, f"import from the private module {mod!r} is not allowed")
            for a in node.names:
                if _evaluates_strings(a.name):
                    self.bad(node, f"importing {a.name!r} is not allowed (it evaluates strings as code or types)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            if _DUNDER_RE.search(node.value.decode("latin-1")):
                self.bad(node, "a bytes constant containing a dunder name (`__x__`) is not allowed in an environment")
        elif isinstance(node, ast.Call):
            head = _terminal(ast, node.func)
            if isinstance(node.func, ast.Attribute) and head in _FORMAT_METHODS \
                    and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
                self.literal_formats.add(id(node.func))  # the call is judged here, not its attribute
                if _format_reads_attributes(node.func.value.value):
                    self.bad(node, f"'...'.{head}() with a field that reads an attribute or an index ({{0.x}}, "
                                   "{0[x]}), or a malformed template, is not allowed; pass the value itself or use "
                                   "an f-string")
            if head in _FUNCTIONAL_TYPES and (node.args or node.keywords):
                self.bad(node, f"the functional form {head}(...) is not allowed (its field types become evaluated "
                               f"forward references); use the class syntax `class X({head}): ...`")
            elif head in _TYPE_ARG_CALLS:
                for a in node.args[_TYPE_ARG_CALLS[head]:] + [k.value for k in node.keywords if k.arg == "bound"]:
                    self.check_type_expr(a, params, 0)
        elif isinstance(node, ast.Subscript) and _terminal(ast, node.value) in self.type_heads \
                and isinstance(node.ctx, ast.Load):
            self.check_type_expr(node, params, 0)

    def module_of(self, node: Any) -> str | None:
        """The allowed module ``node`` names (``typing``, ``collections.abc``), None if it names none."""
        ast = self.ast
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.module_of(node.value)
            if base is not None and f"{base}.{node.attr}" in ALLOWED_MODULES and node.attr in ALLOWED_MODULES[base]:
                return f"{base}.{node.attr}"
        return None

    def check_import(self, node: Any) -> None:
        """``import m`` and ``from m import a``: m and a on the allow-list (relative imports stay in the package)."""
        ast = self.ast
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "gym_envfactory":
                    self.bad(node, f"`import {a.name}`: use `from gym_envfactory import ToolError, tool`")
                elif a.name not in ALLOWED_MODULES or any(
                        p not in ALLOWED_MODULES for p in _prefixes(a.name)):
                    self.bad(node, f"import of {a.name!r} is not allowed: {_modules_hint()}")
            return
        mod = node.module or ""
        if node.level > 1:
            self.bad(node, "relative imports may only reach modules of the package itself (`from .state import ...`)")
        if node.level:
            for a in node.names:
                if a.name == "*":
                    self.bad(node, f"`from {'.' * node.level}{mod} import *` is not allowed; import names explicitly")
                elif _is_dunder(a.name):
                    self.bad(node, f"importing {a.name!r} from {'.' * node.level}{mod} is not allowed")
                elif a.name in self.pkg_modules:
                    self.bad(node, f"`from {'.' * node.level}{mod} import {a.name}`: {a.name} is a module a module of "
                                   "the package imports; import it (and only its allowed names) where it is used")
            return
        if mod not in ALLOWED_MODULES:
            self.bad(node, f"import from {mod!r} is not allowed: {_modules_hint()}")
            return
        for a in node.names:
            if a.name not in ALLOWED_MODULES[mod]:
                self.bad(node, f"`from {mod} import {a.name}`: {a.name!r} is not on {mod}'s allow-list; allowed: "
                               f"{', '.join(sorted(ALLOWED_MODULES[mod]))}")

    def check_node(self, node: Any, params: frozenset[str]) -> None:
        ast = self.ast
        self.check_sinks(node, params)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.check_import(node)
        elif isinstance(node, ast.Name):
            if _is_dunder(node.id) and node.id not in _ALLOWED_DUNDERS:
                self.bad(node, f"the name {node.id} is not allowed in an environment (allowed dunders: "
                               f"{', '.join(sorted(_ALLOWED_DUNDERS))})")
            elif node.id in self.modules and isinstance(node.ctx, ast.Load) and id(node) not in self.attr_bases:
                self.bad(node, f"the module {self.modules[node.id]} is used as a value: a module is only read "
                               f"as `{node.id}.<name>` with a name on its allow-list")
        elif isinstance(node, ast.Attribute):
            self.attr_bases.add(id(node.value))
            base = self.module_of(node.value)
            if base is not None:
                allowed = ALLOWED_MODULES[base]
                if node.attr not in allowed:
                    self.bad(node, f"{base}.{node.attr} is not on the allow-list of {base}; allowed: "
                                   f"{', '.join(sorted(allowed))}")
                elif not isinstance(node.ctx, ast.Load):
                    self.bad(node, f"{base}.{node.attr} is assigned or deleted: modules are read-only for an environment")
                elif self.module_of(node) is not None and id(node) not in self.attr_bases:
                    self.bad(node, f"the module {base}.{node.attr} is used as a value: read a name from it")
            elif node.attr in self.pkg_modules and isinstance(node.value, ast.Name) and node.value.id in self.relative:
                self.bad(node, f"{node.value.id}.{node.attr} reads a module another module of the package imports; "
                               f"import {node.attr} where it is used (only its allowed names)")
            elif node.attr in _FRAME_ATTRS:
                self.bad(node, f"attribute .{node.attr} is not allowed in an environment (frames, code and globals)")
            elif _is_dunder(node.attr) and node.attr not in _ALLOWED_DUNDERS and not (
                    node.attr in _SUPER_DUNDERS and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"):
                self.bad(node, f"dunder attribute .{node.attr} is not allowed in an environment (allowed: "
                               f"{', '.join(sorted(_ALLOWED_DUNDERS))}, and super().__x__ for comparison, hash, "
                               "repr and init methods)")
            elif node.attr.startswith("_") and _root_name(ast, node) in self.module_aliases:
                self.bad(node, f"attribute .{node.attr} of something from an imported module is not allowed "
                               "(private names)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.check_string(node, node.value)

    def check_builtins(self, tree: Any, source: str) -> None:
        """Every name that resolves to a builtin is in :data:`ALLOWED_BUILTINS` (scopes from :mod:`symtable`;
        annotation names too, which ``from __future__ import annotations`` hides from it)."""
        import symtable

        ast = self.ast
        try:
            top = symtable.symtable(source, self.fname, "exec")
        except SyntaxError as exc:
            self.bad(exc, f"syntax error: {exc.msg}")
            return

        def bound_in_module(name: str) -> bool:
            if name not in top.get_identifiers():
                return False
            sym = top.lookup(name)
            return sym.is_assigned() or sym.is_imported() or sym.is_namespace()

        refused: dict[str, set[int]] = {}  # name -> first lines of the scopes where it resolves to a builtin
        tables = [top]
        while tables:
            table = tables.pop()
            tables.extend(table.get_children())
            for sym in table.get_symbols():
                name = sym.get_name()
                if not sym.is_referenced() or name in ALLOWED_BUILTINS or _is_dunder(name):
                    continue
                if (table is top and not (sym.is_assigned() or sym.is_imported() or sym.is_namespace())) or (
                        table is not top and sym.is_global() and not bound_in_module(name)):
                    refused.setdefault(name, set()).add(table.get_lineno() if table is not top else 0)
        annotations = [n.annotation for n in ast.walk(tree) if isinstance(n, (ast.arg, ast.AnnAssign)) and n.annotation]
        annotations += [n.returns for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and n.returns is not None]
        for ann in annotations:
            for n in ast.walk(ann):
                if isinstance(n, ast.Name) and not bound_in_module(n.id) and n.id not in ALLOWED_BUILTINS \
                        and not _is_dunder(n.id) and n.id in _builtin_names():
                    refused.setdefault(n.id, set()).add(-1)
        for name in sorted(refused):
            names = [n for n, scope in _loads_by_scope(ast, tree, 0) if n.id == name and scope in refused[name]]
            first = names[0] if names else next((n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name),
                                                None)
            self.bad(first, f"{name} is not an allowed builtin and the package does not define it (no I/O, no "
                            f"dynamic code, no reflection by name); allowed builtins: {', '.join(sorted(ALLOWED_BUILTINS))}")


def _loads_by_scope(ast: Any, node: Any, scope: int) -> list[tuple[Any, int]]:
    """Every name read under ``node`` with the first line of its scope (as :mod:`symtable` numbers them)."""
    out: list[tuple[Any, int]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            out.append((child, scope))
        inner = child.lineno if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                                   ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) else scope
        out.extend(_loads_by_scope(ast, child, inner))
    return out


def _module_bindings(ast: Any, tree: Any) -> frozenset[str]:
    """Names ``tree`` binds to modules by its imports (``typing``; ``abc`` of ``from collections import abc``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in ALLOWED_MODULES)
    return frozenset(out)


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _modules_hint() -> str:
    return ("an environment imports only " + ", ".join(sorted(m for m in ALLOWED_MODULES if m != "__future__"))
            + " (and its own modules: `from .state import ...`)")


def _builtin_names() -> frozenset[str]:
    import builtins

    return frozenset(dir(builtins))


def check_imports(folder: str | Path) -> list[Finding]:
    """Static gate run before generated code is executed (a *safety net*, not a sandbox).

    An allow-list (:mod:`.allowlist`): modules in :data:`ALLOWED_MODULES` only (relative imports inside the
    package are fine), and from each only the names on its list (``from m import a`` and ``m.a``; a module
    is never a value, so ``t = typing`` is refused too); names that resolve to builtins only when in
    :data:`ALLOWED_BUILTINS`; dunder names and attributes only when in :data:`ALLOWED_DUNDERS` (and
    ``super().__x__`` for the comparison, hash, repr and init methods).  Beside the lists: private
    attributes of anything from an imported module; frame attributes (``g.gi_frame``); star imports;
    string annotations and strings that hide code (Pydantic evaluates them); library routes from strings
    to attributes or code (:data:`_EVAL_SINKS`); ``.format`` and ``.format_map`` anywhere but called
    directly on a string literal whose fields read no attribute or index (``m = str.format; m(t, x)``
    is a getattr by string).  Every message names the file, the line and the refused name.

    Python cannot be made safe by inspecting its source: code that passes here can still misbehave,
    so :class:`EnvGen` also validates in a child process with an allow-listed environment, never
    imports generated code in its own process, and untrusted models' code belongs in a sandbox.
    """
    import ast

    out = []
    trees: list[tuple[Path, Any]] = []
    for f in sorted(Path(folder).rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        try:
            trees.append((f, ast.parse(f.read_text(encoding="utf-8"), str(f))))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            out.append(Finding.of("execution", "import", f"{f.name}:{getattr(exc, 'lineno', 0)}: syntax error: "
                                  f"{getattr(exc, 'msg', exc)}"))
    # names any module of the package binds to something other than a type (a string may hide there)
    heads = set(_GENERIC_BUILTINS)
    for _, tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, ast.ClassDef):
                heads.add(n.name)
            elif isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").split(".")[0] in _TYPE_MODULES):
                heads.update(a.asname or a.name for a in n.names)
    pkg_modules: frozenset[str] = frozenset().union(*(_module_bindings(ast, tree) for _, tree in trees))
    pkg_unsafe: frozenset[str] = frozenset()
    for _ in range(3):  # aliases across modules (``from .state import S``; ``X = S``)
        pkg_unsafe = frozenset().union(*(_assigned_non_types(ast, t.body, local=False, heads=heads, base=pkg_unsafe)
                                         for _, t in trees))
    for f, tree in trees:
        gate = _Gate(f.name)
        gate.pkg_unsafe = pkg_unsafe
        gate.pkg_modules = pkg_modules
        try:
            gate.check_tree(tree)
            gate.check_builtins(tree, f.read_text(encoding="utf-8"))
        except RecursionError:
            gate.bad(None, "the code is nested too deeply to be checked")
        seen = set()
        for line, msg in gate.problems:
            if (line, msg) not in seen:
                seen.add((line, msg))
                out.append(Finding.of("execution", "forbidden_import", f"{f.name}:{line}: {msg}"))
    return out

