"""The static gate run before generated code is executed: a *safety net*, not a sandbox.

:func:`check_imports` refuses imports outside :data:`ALLOWED_IMPORTS`, dynamic code, I/O builtins,
dunders and the usual routes from a harmless module to the operating system, before anything runs.
Python cannot be confined by inspecting its source: EnvGen also validates in a child process with an
allow-listed environment (:mod:`gym_envfactory.generators.checks`), and code from a model you do not
control belongs in a sandbox.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .report import Finding

__all__ = ["ALLOWED_IMPORTS", "ALLOWED_RUNTIME_MODULES", "ALLOWED_RUNTIME_NAMES", "check_imports"]

#: Top-level modules generated code may import (docs/architecture.md, "Layers": the authoring API, pydantic, and the pure
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

