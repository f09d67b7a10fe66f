"""Runtime bridge of an imported plain Python class (issue 12, part 4).

This module is ``generators/importer/classbridge.py``; :func:`import_python_class` uses it directly and
``envfactory import FILE --class NAME`` copies it byte for byte into the package as ``_classbridge.py``
(beside ``_bridge.py``, the runtime bridge it builds on), so a class package runs without the importer.

:func:`class_environment` turns a class into a state model and tools:

- **State**: the public attributes of an instance (``cls(*init_args, **init_kwargs)``, then
  ``loader(initial_state)`` when the class loads scenarios, BFCL-style ``_load_scenario``), including
  attributes only annotated in ``__init__`` (``self.x: T``).  Types from class annotations and
  ``self.x: T = ...`` annotations, else inferred from the values (``set`` stays a set, serialised as a
  sorted list; ``dict`` with ``int`` keys keeps ``int`` keys).  A class with a serialiser hook
  (``to_dict()`` with a ``from_dict`` classmethod, or its own ``__getstate__``/``__setstate__``) is
  read and rebuilt through it instead, so object graphs work.  A class whose instances have no
  attribute at all and that declares none (a calculator) is a **tools-only** environment: an empty
  state, every tool read-only (issue 26 item 9).  One with only private attributes, or with class
  annotations that only a loaded scenario fills, is refused (:class:`ClassImportError`, naming the
  class and what to pass), never a silently empty environment.
- **Tools**: public methods with typed parameters (keyword-only in the schema).  Each call runs the
  method on the session's **live instance** (:class:`~.bridge.LiveInstance`, built on the session's
  first call the way the class builds itself: constructor, its loader on the stored scenario, then the
  public fields), so private attributes (``self._logged_in``, what the loader sets) survive between calls; the state's fields are
  refreshed from the instance only when read, and copied with it on forks and rollbacks (:mod:`.bridge`).

It imports only the standard library, pydantic, ``gym_envfactory.tool`` and the
runtime bridge.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import re
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Optional, get_origin, get_type_hints

import pydantic_core
from pydantic import BaseModel, Field, PlainSerializer, TypeAdapter, ValidationError, create_model

from gym_envfactory import tool

try:  # inside an imported package the runtime bridge is its _bridge.py
    bridge: Any = importlib.import_module(f"{__package__}._bridge")
except ImportError:  # inside the importer
    from . import bridge

__all__ = ["ClassBridge", "ClassImportError", "class_environment", "init_annotations", "infer_type"]


class ClassImportError(ValueError):
    """A class that cannot become an environment (no state, untyped tools, state that is not JSON data)."""


def _sort_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value if isinstance(value, (int, float, str)) else repr(value))


def _sorted_list(values: Any) -> list:
    return sorted(values, key=_sort_key)


def with_sorted_sets(annotation: Any) -> Any:
    """``annotation``, with a ``set``/``frozenset`` type serialised to JSON as a sorted list (so the state's
    bytes do not depend on ``PYTHONHASHSEED``); anything else unchanged."""
    if annotation in (set, frozenset) or get_origin(annotation) in (set, frozenset):
        return Annotated[annotation, PlainSerializer(_sorted_list, return_type=list, when_used="json")]
    return annotation


def infer_type(value: Any) -> Any:
    """A type for a value without an annotation: scalars their type, ``list``/``set``/``dict`` with the
    item type when all items share one (``dict`` keys ``str`` or ``int``), ``None`` Any."""
    if value is None:
        return Any
    if isinstance(value, (bool, int, float, str)):
        return type(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        kinds = {infer_type(v) for v in value}
        item = sorted(kinds, key=repr)[0] if len(kinds) == 1 else Any
        return (set[item] if isinstance(value, (set, frozenset)) else list[item])  # type: ignore[valid-type]
    if isinstance(value, dict):
        kinds = {infer_type(v) for v in value.values()}
        keys = {type(k) for k in value}
        key = sorted(keys, key=repr)[0] if len(keys) == 1 and keys <= {str, int} else (str if not value else Any)
        return dict[key, sorted(kinds, key=repr)[0] if len(kinds) == 1 else Any]  # type: ignore[valid-type,misc]
    return type(value)


def init_annotations(cls: type) -> dict[str, Any]:
    """``self.x: T`` and ``self.x: T = ...`` annotations in ``cls.__init__`` (evaluated in the class's
    module; one that does not evaluate is left out)."""
    import sys

    init = cls.__dict__.get("__init__")
    if not isinstance(init, types.FunctionType):
        return {}
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(init))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return {}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.args.args:
        return {}
    self_name = node.args.args[0].arg
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


def attribute_place(cls: type, attr: str) -> str:
    """``"file:line"`` where ``cls`` annotates or first assigns attribute ``attr`` (a class annotation, or
    ``self.attr`` in a method), else the class's own ``file:line``; ``"<unknown>"`` without source."""
    try:
        lines, start = inspect.getsourcelines(cls)
        file = inspect.getsourcefile(cls) or "<unknown>"
    except (OSError, TypeError):
        return "<unknown>"
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return f"{file}:{start}"
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
            best = node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) for t in targets):
                best = node.lineno if best is None else min(best, node.lineno)
        if best is not None and isinstance(node, ast.AnnAssign):
            break
    return f"{file}:{start + (best or 1) - 1}"


def serializer_hook(cls: type) -> str | None:
    """``"to_dict"`` (``to_dict()`` and a ``from_dict`` classmethod/staticmethod), ``"getstate"`` (the
    class's own ``__getstate__`` and ``__setstate__``) or None."""
    if callable(getattr(cls, "to_dict", None)) and isinstance(
            inspect.getattr_static(cls, "from_dict", None), (classmethod, staticmethod)):
        return "to_dict"
    own = [vars(k) for k in cls.__mro__[:-1]]
    if any("__getstate__" in d for d in own) and any("__setstate__" in d for d in own):
        return "getstate"
    return None


class ClassBridge:
    """Owner of the live instances of one imported class (the interface :class:`~.bridge.LiveInstance`
    needs: :meth:`build` and :meth:`saved_model`).

    Args:
        cls: the class.
        state_model: the generated state model.
        fields: the state's field names (public attributes, or the hook's keys).
        hook: :func:`serializer_hook` of ``cls``.
        init_args, init_kwargs: how to construct an instance (no hook).
        loader, scenario: the class's own loader (a method name) and the scenario it loads (JSON data)
            when the class loads scenarios: each instance runs it before its public fields are set, so
            what the loader alone sets (a seeded ``self._random``, an id counter) exists (issue 26).
    """

    def __init__(self, cls: type[Any], state_model: type[BaseModel], fields: Sequence[str], hook: str | None,
                 init_args: Sequence[Any] = (), init_kwargs: Mapping[str, Any] | None = None,
                 loader: str | None = None, scenario: Mapping[str, Any] | None = None) -> None:
        self.cls, self.state_model, self.fields, self.hook = cls, state_model, tuple(fields), hook
        self.init_args, self.init_kwargs = tuple(init_args), dict(init_kwargs or {})
        self.loader = loader if scenario is not None else None
        self.scenario = copy.deepcopy(dict(scenario)) if scenario is not None else None

    def dump(self, obj: Any) -> dict[str, Any]:
        """The state of an instance: ``to_dict()``, ``__getstate__()`` or its public attributes."""
        if self.hook == "to_dict":
            return dict(obj.to_dict())
        if self.hook == "getstate":
            return dict(obj.__getstate__())
        return {f: getattr(obj, f) for f in self.fields}

    def load(self, values: dict[str, Any]) -> Any:
        """A new instance holding ``values`` (typed values, owned by the caller), built the way the class
        builds itself: ``from_dict``/``__setstate__`` with a hook, else the constructor, then the loader on
        a copy of the stored scenario (when there is one), then the public fields."""
        if self.hook == "to_dict":
            return self.cls.from_dict(values)
        if self.hook == "getstate":
            # mypy resolves cls.__new__ on a type[Any] receiver to the metaclass's type.__new__
            obj = self.cls.__new__(self.cls)  # type: ignore[call-overload]
            obj.__setstate__(values)
            return obj
        obj = self.cls(*self.init_args, **self.init_kwargs)
        if self.loader is not None:
            getattr(obj, self.loader)(copy.deepcopy(self.scenario))
        for f in self.fields:
            setattr(obj, f, values[f])
        return obj

    def build(self, data: dict) -> bridge.LiveInstance:
        """A fresh live instance from a state's JSON data (validated by the state model first, so sets,
        ``int`` keys and nested models come back typed)."""
        model = self.state_model.model_validate(data)
        values = {f: model.__dict__[f] for f in self.state_model.model_fields}
        entropy = bridge.Entropy(bridge.state_seed(data))
        with bridge.drawing_from(entropy):
            obj = self.load(values)
        return bridge.LiveInstance(self, obj, entropy)

    def saved_model(self, obj: Any) -> BaseModel:
        """The instance's state validated by the state model (through JSON data: it shares no object with
        the instance)."""
        return self.state_model.model_validate(pydantic_core.to_jsonable_python(self.dump(obj)))


def _class_state(cls: type, proto: Any, name: str, hook: str | None, exclude: Sequence[str],
                 lenient: bool = False) -> type[BaseModel]:
    hints: dict[str, Any] = {}  # field name -> type (none from a to_dict/__getstate__ hook)
    if hook is not None:
        data = (proto.to_dict() if hook == "to_dict" else proto.__getstate__())
        if not isinstance(data, dict):
            raise ClassImportError(f"{cls.__qualname__}.{'to_dict' if hook == 'to_dict' else '__getstate__'}() "
                                   f"returned {type(data).__name__}, not a dict of the state's fields")
        values = {k: v for k, v in data.items() if k not in exclude}
    else:
        try:
            hints.update({k: v for k, v in get_type_hints(cls).items() if not k.startswith("_")})
        except Exception:  # noqa: BLE001 - unresolvable class annotations: inference
            pass
        annotated = {k: v for k, v in init_annotations(cls).items() if not k.startswith("_")}
        hints.update(annotated)
        values = {k: v for k, v in vars(proto).items()
                  if not k.startswith("_") and k not in exclude and not callable(v)}
        for k in annotated:  # annotated in __init__ but never assigned: a field holding None until set
            if k not in values and k not in exclude:
                values[k] = None
                hints[k] = Optional[hints[k]]  # noqa: UP045 - hints[k] may be a typing form
    if lenient:  # --lenient-types: the annotations are advisory; the loaded values decide
        hints = {k: infer_type(v) for k, v in values.items()}
    declared = [k for k in hints if k not in exclude]
    if not values and declared and hook is None:  # class-level annotations that only a loaded scenario fills
        raise ClassImportError(
            f"{cls.__qualname__} declares {', '.join(sorted(declared)[:6])} but a new instance sets none of them: "
            "pass --initial-state SCENARIO.json (initial_state=) with the data its loader (_load_scenario, "
            "load_scenario) reads, or set them in __init__")
    if not values and hook is None and not vars(proto):  # no attribute at all: a stateless tool class
        doc = (cls.__doc__ or f"State of {name}").strip()
        return create_model(f"{name}State", __doc__=doc)
    if not values:
        raise ClassImportError(
            f"{cls.__qualname__} has no state: an instance has no public attributes"
            + (" in its to_dict()/__getstate__()" if hook else "")
            + "; give __init__ public attributes (self.accounts: dict[str, Account] = {}), load a scenario "
              "(initial_state= with a loader such as _load_scenario), or define to_dict()/from_dict()")
    fields: dict[str, Any] = {}
    bad = []
    for k, v in values.items():
        typ = with_sorted_sets(hints.get(k, infer_type(v)))
        try:
            TypeAdapter(typ)
        except Exception as exc:  # noqa: BLE001 - PydanticSchemaGenerationError, or a broken annotation
            shown = getattr(typ, "__name__", None) or repr(typ)
            bad.append(f"{attribute_place(cls, k)}: attribute {k!r} of type {shown} is not JSON data "
                       f"({type(exc).__name__})")
            continue
        fields[k] = (typ, Field(default_factory=functools.partial(copy.deepcopy, v)))
    if bad:
        raise ClassImportError(
            f"{cls.__qualname__}: {len(bad)} attribute(s) cannot be state:\n  " + "\n  ".join(bad)
            + "\n  keep JSON-like attributes (dicts, lists, numbers, strings, Pydantic models), make them private "
              "(_name), or give the class to_dict()/from_dict()")
    doc = (cls.__doc__ or f"State of {name}").strip()
    return create_model(f"{name}State", __doc__=doc, **fields)


def _make_tool(owner: ClassBridge, method_name: str, fn: Callable[..., Any], module_name: str | None,
               read_only: bool, destructive: bool, lenient: bool = False) -> Callable[..., Any]:
    cls, state_model = owner.cls, owner.state_model
    sig = inspect.signature(fn)
    try:
        mhints = get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ClassImportError(f"{cls.__qualname__}.{method_name}: cannot resolve type hints: {exc}") from exc
    params = list(sig.parameters.values())[1:]
    pos_only = [p.name for p in params if p.kind is p.POSITIONAL_ONLY]
    new_params = [inspect.Parameter("_state", inspect.Parameter.POSITIONAL_ONLY, annotation=state_model)]
    annotations: dict[str, Any] = {"_state": state_model}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ClassImportError(f"{cls.__qualname__}.{method_name}: *args/**kwargs cannot be a tool schema")
        if p.name not in mhints:
            raise ClassImportError(f"{cls.__qualname__}.{method_name}: parameter {p.name!r} has no type annotation")
        new_params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY,
                                            default=p.default, annotation=mhints[p.name]))
        annotations[p.name] = mhints[p.name]
    ret = Any if lenient else mhints.get("return", Any)  # lenient: results are checked only as JSON
    annotations["return"] = ret

    def call(_state: BaseModel, /, **kwargs: Any) -> Any:
        slot = bridge.live_instance(owner, _state)
        args = [kwargs.pop(p) for p in pos_only]
        method = getattr(slot.api, method_name)
        return bridge.run_on_live(slot, _state, read_only, lambda: method(*args, **kwargs))

    call.__name__ = method_name
    call.__qualname__ = f"{cls.__qualname__}.{method_name}"
    if module_name is not None:
        call.__module__ = module_name
    call.__doc__ = inspect.getdoc(fn) or method_name
    call.__signature__ = inspect.Signature(new_params, return_annotation=ret)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    return tool(read_only=read_only, destructive=destructive)(call)


#: Public methods that are the class's state interface, never agent tools (issue 26): its scenario
#: loader/saver and serialisers (``load_scenario``, ``save_scenario``, ``to_dict``, ``from_dict``...).
STATE_INTERFACE = re.compile(r"^(?:(?:load|save|dump|restore|export|import|reset)_(?:scenario|state|snapshot)s?"
                             r"|(?:to|from)_(?:dict|json)|as_dict|(?:get|set)state)$")


def public_methods(cls: type, exclude: Sequence[str] = ()) -> list[tuple[str, Callable[..., Any]]]:
    """``(name, function)`` of the public instance methods of ``cls`` and its bases, most derived first,
    without the state interface (:data:`STATE_INTERFACE`: the environment loads and saves the state
    itself; a model must not be able to replace or dump it)."""
    methods: list[tuple[str, Callable[..., Any]]] = []
    seen: set[str] = set()
    for klass in cls.__mro__[:-1]:
        for attr, member in vars(klass).items():
            if attr.startswith("_") or attr in seen or attr in exclude or STATE_INTERFACE.match(attr):
                continue
            seen.add(attr)
            if isinstance(member, types.FunctionType):
                methods.append((attr, member))
    return methods


def class_environment(
    cls: type,
    *,
    name: str,
    module_name: str | None = None,
    init_args: Sequence[Any] = (),
    init_kwargs: Mapping[str, Any] | None = None,
    initial_state: Mapping[str, Any] | None = None,
    loader: str | None = None,
    exclude: Sequence[str] = (),
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    lenient_types: bool = False,
) -> tuple[type[BaseModel], dict[str, Callable[..., Any]], dict[str, Any]]:
    """The state model ``<name>State``, the tools (name -> ``@tool`` function; ``__module__`` set to
    ``module_name`` when given, so a package's ``tools.py`` collects them) and the initial state (JSON
    data) of ``cls``.

    ``initial_state``: with ``loader`` (a method name; default ``_load_scenario`` or ``load_scenario``
    when the class has one) it is loaded into the first instance and the state read from it; without a
    loader it is validated as the state itself.  ``read_only``/``destructive``: per tool (default False).
    ``lenient_types`` (opt-in, ``--lenient-types``): the class's annotations are advisory, as in some
    benchmark classes: the state's field types are inferred from the loaded values (not the attribute
    annotations) and results are checked only as JSON data (not against the return annotation);
    parameter annotations still make the tool schemas.  The default is strict.

    Raises:
        ClassImportError: constructing or loading failed; no state; state that is not JSON data;
            untyped or variadic tool parameters; no public method.
    """
    init_kwargs = dict(init_kwargs or {})
    hook = serializer_hook(cls)
    if loader is None and initial_state is not None:
        loader = next((m for m in ("_load_scenario", "load_scenario") if callable(getattr(cls, m, None))), None)
    try:
        proto = cls(*init_args, **init_kwargs)
        if loader is not None and initial_state is not None:
            getattr(proto, loader)(copy.deepcopy(dict(initial_state)))
    except Exception as exc:
        raise ClassImportError(f"constructing {cls.__qualname__}"
                               f"{' and loading the initial state' if loader else ''} failed: {exc!r}") from exc
    exclude = tuple(exclude) + ((loader,) if loader else ())
    state_model = _class_state(cls, proto, name, hook, exclude, lenient_types)
    bridge.install_live_hooks(state_model)
    owner = ClassBridge(cls, state_model, tuple(state_model.model_fields), hook, init_args, init_kwargs,
                        loader=loader, scenario=initial_state)
    try:
        if loader is None and initial_state is not None:
            start = state_model.model_validate(dict(initial_state))
        else:
            start = owner.saved_model(proto)
        start_json = start.model_dump(mode="json")
        pydantic_core.to_json(start_json)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(root)"
        raise ClassImportError(
            f"the state of {cls.__qualname__} contradicts its annotations: {exc.error_count()} error(s), first at "
            f"{where}: {first['msg']} (got {first.get('input')!r}); fix the data or the annotations, or import with "
            "--lenient-types (lenient_types=True: annotations advisory, types from the loaded values)") from None
    except Exception as exc:
        raise ClassImportError(f"the state of {cls.__qualname__} is not JSON data for {state_model.__name__}: {exc}; "
                               "keep JSON-like attributes or give the class to_dict()/from_dict()") from exc
    methods = public_methods(cls, exclude)
    if not methods:
        raise ClassImportError(f"{cls.__qualname__} has no public methods to use as tools")
    ro, de = dict(read_only or {}), dict(destructive or {})
    if not state_model.model_fields:  # a stateless tool class (issue 26 item 9): nothing to write
        ro, de = {m: True for m, _ in methods}, {}
    tools = {m: _make_tool(owner, m, f, module_name, ro.get(m, False), de.get(m, False), lenient_types)
             for m, f in methods}
    return state_model, tools, start_json
