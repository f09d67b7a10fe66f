"""``import_python_class``: a plain Python class becomes a programmatic environment.

Public attributes of an instance are the state (a generated Pydantic model), public methods with
typed signatures are the tools (parameters keyword-only); every call constructs its own instance,
sets the attributes from the session's state, calls the method and reads the attributes back.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, Field, create_model

from gym_envfactory.authoring import ToolError, tool
from gym_envfactory.environment.catalog import define_environment
from gym_envfactory.environment.spec import EnvironmentSpec

from . import bridge
from .analysis import ImporterError, classify_tool, function_node

__all__ = ["import_python_class"]


def _infer_type(value: Any) -> Any:
    if value is None:
        return Any
    if isinstance(value, (bool, int, float, str)):
        return type(value)
    if isinstance(value, list):
        kinds = {_infer_type(v) for v in value}
        return list[kinds.pop()] if len(kinds) == 1 else list[Any]
    if isinstance(value, tuple):
        return list[Any]
    if isinstance(value, dict):
        kinds = {_infer_type(v) for v in value.values()}
        key = str if all(isinstance(k, str) for k in value) else Any
        return dict[key, kinds.pop()] if len(kinds) == 1 else dict[key, Any]  # type: ignore[valid-type]
    if isinstance(value, set):
        return list[Any]
    return type(value)


def _init_annotations(cls: type) -> dict[str, Any]:
    """``self.x: T = ...`` annotations in ``__init__`` (evaluated in the class's module)."""
    init = cls.__dict__.get("__init__")
    node = function_node(init) if isinstance(init, types.FunctionType) else None
    if node is None:
        return {}
    self_name = (node.args.posonlyargs + node.args.args)[0].arg if node.args.args else "self"
    ns = dict(vars(sys.modules.get(cls.__module__, types.ModuleType("x"))))
    out = {}
    for sub in ast.walk(node):
        if (isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Attribute)
                and isinstance(sub.target.value, ast.Name) and sub.target.value.id == self_name):
            try:
                out[sub.target.attr] = eval(ast.unparse(sub.annotation), ns)  # noqa: S307 - the class's own code
            except Exception:  # noqa: BLE001 - fall back to inference
                pass
    return out


def import_python_class(
    cls: type,
    *,
    name: str,
    init_args: Sequence[Any] = (),
    init_kwargs: Mapping[str, Any] | None = None,
    domain: str = "utilities",
    version: str = "0.1.0",
    description: str | None = None,
    initial_state: Mapping[str, Any] | BaseModel | None = None,
    tasks: Iterable[Mapping[str, Any]] | str | Path | None = None,
    scenarios: Iterable[Mapping[str, Any]] | str | Path | None = None,
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    exclude: Sequence[str] = (),
    register: bool = True,
) -> EnvironmentSpec:
    """A plain Python class as a programmatic environment (registered with Gymnasium by default).

    State: the public attributes of ``cls(*init_args, **init_kwargs)`` become a Pydantic model
    ``<name>State`` (types from ``self.x: T`` annotations in ``__init__`` or class annotations, else
    inferred from the values; the values are the defaults, i.e. the initial state).  Tools: public
    instance methods with fully typed parameters (``*args``/``**kwargs`` rejected), keyword-only in the
    tool signature.  Each call constructs its own instance, sets the attributes from the session's
    state (deep copies), calls the method, and reads the attributes back; an exception the method raises
    (other than programming errors) or an error-looking result is a ToolError and the state is left
    unchanged.

    Raises:
        ImporterError: untyped or variadic method parameters, attributes that are not JSON data, no tools.
    """
    init_kwargs = dict(init_kwargs or {})
    try:
        proto = cls(*init_args, **init_kwargs)
    except Exception as exc:
        raise ImporterError(f"constructing {cls.__qualname__} failed: {exc!r}") from exc
    attrs = {k: v for k, v in vars(proto).items()
             if not k.startswith("_") and k not in exclude and not callable(v)}
    hints: dict[str, Any] = {}
    try:
        hints.update({k: v for k, v in get_type_hints(cls).items() if not k.startswith("_")})
    except Exception:  # noqa: BLE001
        pass
    hints.update(_init_annotations(cls))
    fields: dict[str, Any] = {}
    for k, v in attrs.items():
        typ = hints.get(k, _infer_type(v))
        fields[k] = (typ, Field(default_factory=functools.partial(copy.deepcopy, v)))
    State = create_model(f"{name}State", __doc__=(cls.__doc__ or f"State of {name}").strip(), **fields)  # type: ignore[call-overload]
    try:
        State().model_dump_json()
    except Exception as exc:
        raise ImporterError(f"the public attributes of {cls.__qualname__} are not JSON data: {exc}") from exc
    field_names = tuple(attrs)

    methods: list[tuple[str, Callable[..., Any]]] = []
    seen: set[str] = set()
    for klass in cls.__mro__[:-1]:
        for attr, member in vars(klass).items():
            if attr.startswith("_") or attr in seen or attr in exclude:
                continue
            seen.add(attr)
            if isinstance(member, types.FunctionType):
                methods.append((attr, member))
    if not methods:
        raise ImporterError(f"{cls.__qualname__} has no public methods to use as tools")

    def make(method_name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        try:
            mhints = get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise ImporterError(f"{cls.__qualname__}.{method_name}: cannot resolve type hints: {exc}") from exc
        params = list(sig.parameters.values())[1:]
        pos_only = [p.name for p in params if p.kind is p.POSITIONAL_ONLY]
        new_params = [inspect.Parameter("_state", inspect.Parameter.POSITIONAL_ONLY, annotation=State)]
        annotations: dict[str, Any] = {"_state": State}
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ImporterError(f"{cls.__qualname__}.{method_name}: *args/**kwargs cannot be a tool schema")
            if p.name not in mhints:
                raise ImporterError(f"{cls.__qualname__}.{method_name}: parameter {p.name!r} has no type annotation")
            new_params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY,
                                                default=p.default, annotation=mhints[p.name]))
            annotations[p.name] = mhints[p.name]
        ret = mhints.get("return", Any)
        annotations["return"] = ret

        def call(_state: BaseModel, /, **kwargs: Any) -> Any:
            obj = cls(*init_args, **init_kwargs)
            for f in field_names:
                setattr(obj, f, copy.deepcopy(getattr(_state, f)))
            args = [kwargs.pop(p) for p in pos_only]
            try:
                result = getattr(obj, method_name)(*args, **kwargs)
            except ToolError:
                raise
            except bridge.PROGRAMMING_ERRORS:
                raise
            except Exception as exc:  # noqa: BLE001 - a domain failure of the class
                raise bridge.as_tool_error(exc) from exc
            problem = bridge.error_in(result)
            if problem is not None:
                raise ToolError(problem[0], code=problem[1])
            new = State.model_validate({f: copy.deepcopy(getattr(obj, f)) for f in field_names})
            bridge.write_back(_state, new)
            return result

        call.__name__ = method_name
        call.__qualname__ = f"{cls.__qualname__}.{method_name}"
        call.__doc__ = inspect.getdoc(fn) or method_name
        call.__signature__ = inspect.Signature(new_params, return_annotation=ret)  # type: ignore[attr-defined]
        call.__annotations__ = annotations
        ro, de = classify_tool(method_name, cls, [method_name], read_only, destructive)
        return tool(read_only=ro, destructive=de)(call)

    tool_fns = [make(n, f) for n, f in methods]
    init_state = State() if initial_state is None else initial_state
    return define_environment(
        name, State, tool_fns, initial_state=init_state, tasks=tasks, scenarios=scenarios, domain=domain,
        version=version, description=description or (cls.__doc__ or name).strip().splitlines()[0],
        register=register,
    )
