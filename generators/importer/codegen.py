"""Code generation: the ``tools.py`` of an imported package, one ``@tool`` per FastMCP wrapper.

Each generated tool has the wrapper's name, docstring, parameters (annotations and defaults copied
from the wrapper's source, names of the server qualified through ``_source`` where they would clash)
and annotations, and calls ``_SERVER.call`` (:class:`.bridge.ImportedServer`).
"""

from __future__ import annotations

import ast
import copy
import keyword
from typing import overload

from .analysis import ImporterError, ServerAnalysis

__all__ = ["generate_tools_py"]

_RESERVED = {"tool", "annotations", "_source", "ImportedServer", "_SERVER"}


@overload
def _annotation(node: ast.AST) -> ast.AST: ...
@overload
def _annotation(node: None) -> None: ...
def _annotation(node: ast.AST | None) -> ast.AST | None:
    """A string annotation ("Book") parsed into its expression (``None`` stays ``None``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return node
    return node


def _names_in(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Qualify(ast.NodeTransformer):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Attribute(ast.Name("_source", ast.Load()), node.id, ast.Load()), node)
        return node


def _expr(node: ast.AST | None, qualify: set[str]) -> str | None:
    if node is None:
        return None
    return ast.unparse(_Qualify(qualify).visit(copy.deepcopy(node)))


def generate_tools_py(a: ServerAnalysis, env_name: str) -> str:
    """The source of ``tools.py`` for the package of ``a`` named ``env_name``.

    One ``@tool`` per wrapper in ``a.tools``: its name (a wrapper whose name is not a usable Python
    identifier gets a ``_tool_<i>`` function and ``name=`` in the decorator), docstring, parameters
    keyword-only with the wrapper's own annotation and default expressions, and the guessed
    annotations; its body calls ``_SERVER.call(state, name, arguments)``.

    Raises:
        ImporterError: a wrapper's source cannot be read.
    """
    module_ns = vars(a.module)
    def_names: dict[str, str] = {}
    for i, t in enumerate(a.tools):
        ok = t.name.isidentifier() and not keyword.iskeyword(t.name) and t.name not in _RESERVED
        def_names[t.name] = t.name if ok else f"_tool_{i}"
    # the expressions we copy from the wrappers (annotations, defaults)
    exprs: list[ast.AST] = []
    for t in a.tools:
        if t.node is None:
            raise ImporterError(f"cannot read the source of wrapper {t.name}", file=a.path)
        args = t.node.args
        for arg in args.args + args.kwonlyargs:
            if arg.annotation is not None:
                exprs.append(_annotation(arg.annotation))
        exprs += [d for d in args.defaults + args.kw_defaults if d is not None]
        if t.node.returns is not None:
            exprs.append(_annotation(t.node.returns))
    used = set().union(*(_names_in(e) for e in exprs)) if exprs else set()
    used = {n for n in used if n in module_ns}
    state_name = a.state_model.__name__
    taken = set(def_names.values()) | _RESERVED
    qualify = {n for n in used if n in taken}
    imports = sorted((used - qualify) | {state_name} if state_name not in taken else (used - qualify))
    state_ref = state_name if state_name not in taken else f"_source.{state_name}"
    server_args = (f"api_class={a.api_class.__name__!r}, instances={a.instances!r}, "
                   f"state_model={state_name!r}, helpers={a.helpers!r}")
    ctx = {t.name: tuple(t.context_params) for t in a.tools if t.context_params}
    if ctx:
        server_args += f", context_params={ctx!r}"
    lines = [
        f'"""Tools of {env_name}, imported from {a.path.name} by gym_envfactory.generators.importer.',
        "",
        "Each tool runs the original @mcp.tool() wrapper of _source.py against the session's one live",
        f"{a.api_class.__name__} (built on its first call with load_scenario(state); private attributes survive",
        "between calls); the state is refreshed from save_scenario() only when read.  A write runs under an",
        "undo journal (_undo.py): when it fails, what it touched is put back in place, nothing is rebuilt.",
        "See _bridge.py.  Generated: re-run the importer instead of editing.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from gym_envfactory import tool",
        "",
        "from . import _source",
        "from ._bridge import ImportedServer",
    ]
    if imports:
        lines.append(f"from ._source import {', '.join(imports)}")
    lines += ["", f"_SERVER = ImportedServer(_source, {server_args})", ""]
    for t in a.tools:
        node = t.node
        assert node is not None
        pos = {arg.arg: arg for arg in node.args.args + node.args.kwonlyargs}
        n_pos_defaults = len(node.args.defaults)
        pos_args = node.args.args
        defaults: dict[str, ast.AST] = {}
        for arg, d in zip(pos_args[len(pos_args) - n_pos_defaults:], node.args.defaults, strict=True):
            defaults[arg.arg] = d
        for arg, kw_default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
            if kw_default is not None:
                defaults[arg.arg] = kw_default
        names = {p.name for p in t.params}
        state_param = "_state"
        while state_param in names:
            state_param += "_"
        parts = [f"{state_param}: {state_ref}"]
        if t.params:
            parts.append("*")
        for p in t.params:
            ann = _expr(_annotation(pos[p.name].annotation), qualify)
            text = f"{p.name}: {ann}"
            if p.name in defaults:
                text += f" = {_expr(defaults[p.name], qualify)}"
            parts.append(text)
        ret = _expr(_annotation(node.returns), qualify)
        deco_opts = []
        if def_names[t.name] != t.name:
            deco_opts.append(f"name={t.name!r}")
        if t.read_only:
            deco_opts.append("read_only=True")
        if t.destructive:
            deco_opts.append("destructive=True")
        lines.append("")
        lines.append(f"@tool({', '.join(deco_opts)})" if deco_opts else "@tool")
        head = f"def {def_names[t.name]}({', '.join(parts)})" + (f" -> {ret}" if ret else "") + ":"
        lines.append(head)
        if t.description:
            lines.append(f"    {t.description!r}")
        call_args = "{" + ", ".join(f"{p.name!r}: {p.name}" for p in t.params) + "}"
        lines.append(f"    return _SERVER.call({state_param}, {t.name!r}, {call_args})")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"

