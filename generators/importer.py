"""Importer: existing tool servers and plain Python classes become catalog environments (issue 4, part 5).

Two entry points:

:func:`import_tool_server` takes a single-file tool server in the common EnvFactory layout and writes an
environment package (DESIGN §3, docs/authoring.md) **without editing the file**.  The layout::

    class Book(BaseModel): ...                     # Pydantic record models
    class BookStoreScenario(BaseModel): ...        # the root scenario model (what save_scenario returns)
    class BookStoreAPI:                            # constructor sets empty state
        def load_scenario(self, scenario: dict): ...
        def save_scenario(self) -> dict: ...
        def search_books(self, query: str) -> list: ...   # one method per tool
    api = BookStoreAPI()                           # ONE instance shared by every client of the server
    mcp = FastMCP("bookstore")
    @mcp.tool()
    def search_books(query: str) -> list:          # the wrapper: name, docstring, typed parameters
        '''Search the catalogue.'''
        return api.search_books(query)

The package written to ``out_dir/<Name>/``::

    environment.toml        provenance kind = "imported", source = <path>, sha256 of the source
    __init__.py             loads _source.py through _bridge (FastMCP stubbed out)
    _source.py              the server, copied byte for byte
    _bridge.py              the runtime bridge (this module's BRIDGE_SOURCE, copied)
    state.py                re-exports the root scenario model (the state model)
    tools.py                one generated @tool per FastMCP wrapper
    initial_states/small.json   the scenario given, or the API's empty save_scenario()
    scenarios.jsonl         scenarios given, plus scenarios recorded by probing every tool
    tasks.jsonl             tasks given (optional)

How a tool call runs (``_bridge.ImportedServer.call``): a **fresh** API instance is built, loaded with
``load_scenario(state.model_dump(mode="json"))``; the original wrapper function runs with its
module-level API name (``api``) bound to that fresh instance (the function is re-created over a copy of
the module globals, so argument conversion and post-processing in the wrapper are kept exactly); then
``save_scenario()`` is validated with the root model and written into the session's state in place.
An exception raised by the API (``ValueError``, ``KeyError``, a custom error class) or an error-looking
result (``{"error": ...}``, ``{"success": False, ...}``, ``"Error: ..."``) becomes a :class:`ToolError`
and the state is **not** written back, so every failing call leaves the state unchanged even where the
API mutated its instance before raising.  Programming errors (``TypeError``, ``AttributeError``...)
stay internal errors.  The module-level instance of the package's own copy is replaced by a guard that
raises on use, so nothing can reach a shared instance; the original module (if imported elsewhere) is
never touched.  ``load_scenario``/``save_scenario`` are the state interface only: wrappers that expose
them as tools are not imported.

:func:`import_python_class` turns a plain class into a programmatic environment: public attributes of
an instance are the state (a generated Pydantic model), public methods with typed signatures are the
tools (parameters keyword-only), and every call constructs its own instance, sets the attributes from
the session's state, calls the method and reads the attributes back.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import inspect
import json
import keyword
import logging
import re
import shutil
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, get_type_hints

from pydantic import BaseModel, Field, ValidationError, create_model

from gym_envfactory.authoring import ToolError, tool
from gym_envfactory.environment.catalog import define_environment
from gym_envfactory.environment.package import load_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import SpecError

__all__ = [
    "ImporterError",
    "import_tool_server",
    "import_python_class",
    "analyze_tool_server",
    "check_session_isolation",
    "shared_module_globals",
    "ServerAnalysis",
    "BRIDGE_SOURCE",
    "DEFAULT_OUT_DIR",
]

log = logging.getLogger(__name__)


class ImporterError(SpecError):
    """The source does not fit the importable layout, or the imported environment failed validation."""


def _default_out_dir() -> Path:
    import gym_envfactory.environment.spec as _spec

    checkout = Path(_spec.__file__).resolve().parent.parent / "env_images"
    return checkout if checkout.is_dir() else Path.cwd() / "env_images"


#: Where imported environments go by default: the checkout's catalog folder (``./env_images`` when
#: the runtime is installed from a wheel; add it to ``ENVFACTORY_CATALOG`` to find it later).
DEFAULT_OUT_DIR = _default_out_dir()

# ============================================================================ the runtime bridge
# The text below is written into every imported package as ``_bridge.py`` (so the package runs without
# the importer, fastmcp or any MCP SDK) and is also executed here, so the importer and the packages
# share one implementation of the stubbing, the per-call API instance and the error mapping.

BRIDGE_SOURCE = '''\
"""Runtime bridge of an imported tool server (written by gym_envfactory.generators.importer; do not edit).

``_source.py`` is the original server, copied verbatim.  It is executed with a stand-in for FastMCP
(``fastmcp`` and ``mcp.server*`` imports resolve to stubs that record ``@mcp.tool()`` registrations), so
the package needs neither fastmcp nor a particular MCP SDK version.  Its module-level API instance is
replaced by a guard: every tool call builds a fresh API instance from the session's state
(``load_scenario``), runs the original wrapper with its API name bound to that instance, and writes
``save_scenario()`` back into the state.  Nothing is shared between sessions.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib.util
import inspect
import json
import re
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import BaseModel

from gym_envfactory import ToolError

STUBBED_MODULES = ("fastmcp", "mcp.server")
SERVER_CLASSES = ("FastMCP", "MCPServer")
#: Exceptions that mean a bug in the imported code, not a domain failure: they stay internal errors.
PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError, ImportError, RecursionError,
                      NotImplementedError, SyntaxError, ZeroDivisionError, UnicodeError)
_ERROR_TEXT = re.compile(r"^(error|failed|failure)\\b\\s*[:\\-]", re.IGNORECASE)


class Anything:
    """Stand-in for any other FastMCP/MCP SDK object: callable, subscriptable, transparent as a decorator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return Anything()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()

    def __getitem__(self, key: Any) -> Any:
        return self


class Registration:
    """One ``@mcp.tool()`` registration: the function and the name/description given to the decorator."""

    def __init__(self, fn: Any, options: dict) -> None:
        self.fn = fn
        self.name = options.get("name") or getattr(fn, "__name__", None)
        self.description = options.get("description")


class StubServer:
    """Records ``@mcp.tool``, ``@mcp.tool()``, ``@mcp.tool("name")``, ``@mcp.tool(name=..., description=...)``
    and ``mcp.add_tool(fn)``; everything else (resources, prompts, ``run``) is a no-op."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.registrations: list[Registration] = []

    def tool(self, name_or_fn: Any = None, *args: Any, **kwargs: Any) -> Any:
        if callable(name_or_fn):
            return self._record(name_or_fn, kwargs)
        if isinstance(name_or_fn, str):
            kwargs.setdefault("name", name_or_fn)
        return lambda fn: self._record(fn, kwargs)

    def add_tool(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if callable(fn) and not isinstance(fn, Anything):
            self._record(fn, kwargs)
        return fn

    def _record(self, fn: Any, options: dict) -> Any:
        self.registrations.append(Registration(getattr(fn, "fn", fn), options))
        return fn

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()


def stub_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    for cls in SERVER_CLASSES:
        setattr(mod, cls, StubServer)

    def attr(item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return stub_module(f"{name}.{item}") if item[:1].islower() else Anything

    mod.__getattr__ = attr  # PEP 562
    return mod


def stub_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    if level == 0 and any(name == m or name.startswith(m + ".") for m in STUBBED_MODULES):
        return stub_module(name if fromlist else name.partition(".")[0])
    return builtins.__import__(name, globals, locals, fromlist, level)


def load_source(module_name: str, path: str | Path) -> types.ModuleType:
    """Execute the server file as ``module_name`` with FastMCP stubbed (registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = dict(vars(builtins), __import__=stub_import)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_package_source(package: str, init_file: str) -> types.ModuleType:
    """Called by the package's ``__init__``: load its ``_source.py`` once as ``<package>._source``."""
    name = package + "._source"
    module = sys.modules.get(name) or load_source(name, Path(init_file).with_name("_source.py"))
    setattr(sys.modules[package], "_source", module)
    return module


def registrations(module: types.ModuleType) -> list[Registration]:
    """Every tool registered on a (stub) server object defined at the module's top level."""
    out: list[Registration] = []
    for value in list(vars(module).values()):
        if isinstance(value, StubServer):
            out.extend(value.registrations)
    return out


def error_code_for(exc: BaseException) -> str:
    if isinstance(exc, LookupError):
        return "not_found"
    if isinstance(exc, PermissionError):
        return "forbidden"
    name = type(exc).__name__
    if type(exc).__module__ == "builtins" or name in ("ValidationError", "Exception"):
        return "invalid_request" if isinstance(exc, ValueError) else "tool_error"
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    snake = re.sub(r"_(error|exception)$", "", snake)
    return snake or "tool_error"


def as_tool_error(exc: BaseException) -> ToolError:
    """The ToolError a model sees for a domain exception raised by imported code."""
    if len(exc.args) == 1 and isinstance(exc.args[0], str):
        message = exc.args[0]
    else:
        message = str(exc) or type(exc).__name__
    return ToolError(message, code=error_code_for(exc))


def error_in(result: Any) -> tuple[str, str] | None:
    """(message, code) when a result reports a failure instead of raising, else None."""
    obj = result
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, str):
        text = obj.strip()
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                return None
        elif _ERROR_TEXT.match(text):
            return text, "tool_error"
        else:
            return None
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    code = obj.get("error_code") or obj.get("code")
    if err:
        if isinstance(err, dict):
            code = code or err.get("code") or err.get("type")
            err = err.get("message") or json.dumps(err, sort_keys=True)
        message = str(err)
    elif obj.get("success") is False or obj.get("ok") is False or obj.get("status") in ("error", "failed"):
        message = str(obj.get("message") or obj.get("detail") or obj.get("reason")
                      or json.dumps(obj, sort_keys=True, default=str))
    else:
        return None
    return message, code if isinstance(code, str) and code else "tool_error"


def run_awaitable(awaitable: Any) -> Any:
    """Result of an async wrapper, from sync code (in a helper thread when a loop already runs here)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(wait())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def rebind(fn: Any, scope: dict) -> Any:
    """A copy of ``fn`` whose globals are ``scope``."""
    out = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def write_back(state: BaseModel, new: BaseModel) -> None:
    """Replace the contents of ``state`` with ``new`` (same model class) in place."""
    state.__dict__.update(new.__dict__)
    if getattr(new, "__pydantic_extra__", None) is not None:
        object.__setattr__(state, "__pydantic_extra__", dict(new.__pydantic_extra__))
    object.__setattr__(state, "__pydantic_fields_set__", set(state.__pydantic_fields_set__) | set(new.__pydantic_fields_set__))


class SharedInstanceGuard:
    """Replaces the server's module-level API instance: using it would share state between sessions."""

    def __init__(self, name: str, api_class: str) -> None:
        object.__setattr__(self, "_what", f"the shared module-level instance {name!r} of {api_class}")

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise RuntimeError(f"{self._what} was used; imported tools get a fresh instance per call")

    def __setattr__(self, item: str, value: Any) -> None:
        raise RuntimeError(f"{self._what} was written; imported tools get a fresh instance per call")


class ImportedServer:
    """The imported server inside a package: runs one wrapper per call on a fresh API instance.

    Args:
        module: the loaded ``_source`` module.
        api_class: name of the API class (has ``load_scenario``/``save_scenario``).
        instances: module-level names bound to the shared API instance (rebound per call).
        state_model: name of the root scenario model.
        helpers: module-level functions (not wrappers) that also use an instance name; rebound too.
        context_params: per tool, parameters typed as an MCP ``Context`` (passed ``None``).
    """

    def __init__(self, module: types.ModuleType, *, api_class: str, instances: tuple = (),
                 state_model: str, helpers: tuple = (), context_params: Any = None) -> None:
        self.module = module
        self.api_class = getattr(module, api_class)
        self.state_model = getattr(module, state_model)
        self.instances = tuple(instances)
        self.helpers = tuple(helpers)
        self.context_params = dict(context_params or {})
        self.wrappers = {r.name: inspect.unwrap(r.fn) for r in registrations(module)}
        for name in self.instances:
            if not isinstance(vars(module).get(name), SharedInstanceGuard):
                setattr(module, name, SharedInstanceGuard(name, api_class))

    def new_api(self, state: BaseModel) -> Any:
        api = self.api_class()
        api.load_scenario(state.model_dump(mode="json"))
        return api

    def call(self, state: BaseModel, tool_name: str, arguments: dict) -> Any:
        """Run the wrapper registered as ``tool_name`` against a fresh API loaded from ``state``."""
        fn = self.wrappers[tool_name]
        api = self.new_api(state)
        scope = dict(fn.__globals__)
        for name in self.instances:
            scope[name] = api
        for name in self.helpers:
            scope[name] = rebind(inspect.unwrap(scope[name]), scope)
        kwargs = dict(arguments)
        for name in self.context_params.get(tool_name, ()):
            kwargs[name] = None
        try:
            result = rebind(fn, scope)(**kwargs)
            if inspect.isawaitable(result):
                result = run_awaitable(result)
        except ToolError:
            raise
        except PROGRAMMING_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - a domain failure of the imported API
            raise as_tool_error(exc) from exc
        problem = error_in(result)
        if problem is not None:
            raise ToolError(problem[0], code=problem[1])
        saved = self.state_model.model_validate(pydantic_core.to_jsonable_python(api.save_scenario()))
        write_back(state, saved)
        return result
'''


def _bridge_module() -> types.ModuleType:
    mod = types.ModuleType("gym_envfactory.generators._import_bridge")
    mod.__file__ = __file__
    sys.modules[mod.__name__] = mod
    exec(compile(BRIDGE_SOURCE, "<importer bridge>", "exec"), mod.__dict__)  # noqa: S102 - our own text
    return mod


bridge = _bridge_module()

# ============================================================================ static analysis helpers

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


def _function_node(fn: Callable[..., Any]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
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
    node = _function_node(fn) if callable(fn) else None
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


def _classify(name: str, cls: type | None, methods: Sequence[str], read_only: Mapping[str, bool] | None,
              destructive: Mapping[str, bool] | None) -> tuple[bool, bool]:
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
    """Load a server file (FastMCP stubbed; nothing served) and find its parts.  Raises ImporterError."""
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
        node = _function_node(fn)
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
        ro, de = _classify(name, cls, methods, read_only, destructive)
        tools.append(ToolPlan(name, fn, node, description, methods, params, ctx, ro, de))
    if not tools:
        raise ImporterError("the server has no tools besides load_scenario/save_scenario", file=path)
    return ServerAnalysis(path, source, module, cls, instances, tuple(helpers), root, empty, tools, hidden)


# ============================================================================ code generation

_RESERVED = {"tool", "annotations", "_source", "ImportedServer", "_SERVER"}


def _annotation(node: ast.AST | None) -> ast.AST | None:
    """A string annotation ("Book") parsed into its expression."""
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


def _generate_tools_py(a: ServerAnalysis, env_name: str) -> str:
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
        f"Each tool runs the original @mcp.tool() wrapper of _source.py against a fresh {a.api_class.__name__}",
        "loaded from the session's state (load_scenario), then writes save_scenario() back into the state;",
        "see _bridge.py.  Generated: re-run the importer instead of editing.",
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
        for arg, d in zip(pos_args[len(pos_args) - n_pos_defaults:], node.args.defaults):
            defaults[arg.arg] = d
        for arg, d in zip(node.args.kwonlyargs, node.args.kw_defaults):
            if d is not None:
                defaults[arg.arg] = d
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


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _manifest(name: str, version: str, domain: str, description: str, state_model: str, source: Path,
              sha256: str, api_class: str, extra: Mapping[str, Sequence[str]]) -> str:
    lines = [
        f"name = {_toml_str(name)}",
        f"version = {_toml_str(version)}",
        f"domain = {_toml_str(domain)}",
        f"description = {_toml_str(description)}",
        f"state_model = {_toml_str('state:' + state_model)}",
        'tools_module = "tools"',
        'default_initial_state = "small"',
    ]
    for key, values in extra.items():
        lines.append(f"{key} = [{', '.join(_toml_str(v) for v in values)}]")
    lines += [
        "",
        "[provenance]",
        'kind = "imported"',
        f"source = {_toml_str(str(source))}",
        f"sha256 = {_toml_str(sha256)}",
        f"api_class = {_toml_str(api_class)}",
        'importer = "gym_envfactory.generators.importer"',
    ]
    return "\n".join(lines) + "\n"


def _camel(name: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", name)
    out = "".join(p[:1].upper() + p[1:] for p in parts if p)
    if not out or not out[0].isalpha():
        out = "Imported" + out
    return out


def _default_env_name(a: ServerAnalysis) -> str:
    base = re.sub(r"(API|Api|Service|Server|Client)$", "", a.api_class.__name__) or a.path.stem
    return _camel(base)


def _jsonl_objects(src: str | Path | Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if src is None:
        return []
    if isinstance(src, (str, Path)):
        out = []
        for line in Path(src).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out
    return [dict(o) for o in src]


def _state_json(src: Any) -> Any:
    if isinstance(src, (str, Path)):
        return json.loads(Path(src).read_text(encoding="utf-8"))
    if isinstance(src, BaseModel):
        return src.model_dump(mode="json")
    return src


# ============================================================================ probing


def _json_type(schema: Mapping[str, Any]) -> str | None:
    if "type" in schema:
        t = schema["type"]
        return t if isinstance(t, str) else next((x for x in t if x != "null"), None)
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key, []):
            t = _json_type(sub)
            if t and t != "null":
                return t
    if "enum" in schema:
        return "enum"
    return None


def _state_values(state: Any) -> tuple[dict[str, list[Any]], list[str]]:
    """Scalar values by field name, and every key of every collection (dict of objects)."""
    values: dict[str, list[Any]] = {}
    keys: list[str] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            if obj and all(isinstance(v, dict) for v in obj.values()):
                keys.extend(str(k) for k in obj)
            for k, v in obj.items():
                if isinstance(v, (str, int, float, bool)) and v is not None:
                    lst = values.setdefault(str(k), [])
                    if v not in lst:
                        lst.append(v)
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(state)
    return values, keys


def _candidates(pname: str, schema: Mapping[str, Any], values: dict[str, list[Any]], keys: list[str]) -> list[Any]:
    t = _json_type(schema)
    enum = schema.get("enum") or next((s.get("enum") for s in schema.get("anyOf", []) if s.get("enum")), None)
    if enum:
        return list(enum)[:3]
    fits = {"string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool)}.get(t or "", lambda v: False)
    out = [v for v in values.get(pname, []) if fits(v)]
    if not out and t == "string" and pname.lower().endswith("id"):
        out = list(keys)
    if not out:
        out = {"string": ["a"], "integer": [1], "number": [1.0], "boolean": [True],
               "array": [[]], "object": [{}]}.get(t or "", [])
    return out[:3]


def _probe_scenarios(spec: EnvironmentSpec, taken: set[str]) -> list[dict[str, Any]]:
    """Scenarios recorded by calling every tool once from the default initial state.

    They pin the imported code's current behaviour (characterisation tests): a success path per tool
    where simple arguments drawn from the state reach one, and an error path (an unknown id, else an
    unknown parameter).  Re-running them at validation also checks that the import is deterministic."""
    from gym_envfactory.session import Session

    state = json.loads(spec.initial_state_json())
    values, keys = _state_values(state)
    out: list[dict[str, Any]] = []

    def run(tool_name: str, args: dict[str, Any]) -> Any:
        s = Session(spec, check_writes=True)
        try:
            return s.call(tool_name, args)
        finally:
            s.close()

    for t in spec.tools.values():
        props = t.input_schema.get("properties", {})
        required = list(t.input_schema.get("required", []))
        options = {p: _candidates(p, props[p], values, keys) for p in required}
        ok_step = err_step = None
        attempts = max([len(v) for v in options.values()] + [1])
        for i in range(attempts):
            if any(not v for v in options.values()):
                break
            args = {p: v[min(i, len(v) - 1)] for p, v in options.items()}
            res = run(t.name, args)
            if res.ok and ok_step is None:
                ok_step = {"call": t.name, "arguments": args, "expect": "ok", "result": res.content,
                           "state_unchanged": t.read_only}
            elif res.error_type == "tool_error" and err_step is None:
                err_step = {"call": t.name, "arguments": args, "expect": "tool_error", "error_code": res.error_code}
            if ok_step is not None:
                break
        if err_step is None:
            id_params = [p for p in required if p.lower().endswith("id") and _json_type(props[p]) == "string"]
            if id_params and all(options.get(p) for p in required):
                args = {p: options[p][0] for p in required}
                args.update({p: "__no_such_id__" for p in id_params})
                res = run(t.name, args)
                if res.error_type == "tool_error":
                    err_step = {"call": t.name, "arguments": args, "expect": "tool_error",
                                "error_code": res.error_code}
        if err_step is None:
            err_step = {"call": t.name, "arguments": {"__unexpected_parameter__": 1}, "expect": "invalid_arguments"}
        for kind, step, level in (("ok", ok_step, "simple"), ("error", err_step, "error")):
            if step is None:
                continue
            sid = f"probe-{t.name}-{kind}"
            if sid in taken:
                continue
            out.append({"scenario_id": sid, "level": level,
                        "description": "recorded by the importer's probe: pins the imported code's behaviour",
                        "initial_state": spec.manifest.default_initial_state, "steps": [step]})
    return out


# ============================================================================ isolation check

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
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
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


def _isolation_runs(spec: EnvironmentSpec, limit: int = 50) -> str | None:
    """Run the scenarios' calls twice in fresh sessions and once interleaved with a second session
    doing the same; ``None`` when every run gives the same results and states, else what differed."""
    from gym_envfactory.environment.states import resolve_task_state
    from gym_envfactory.session import Session

    def fingerprint(results: list[Any], session: Any) -> tuple[bytes, bytes]:
        return (json.dumps([[r.ok, r.content, r.error_code] for r in results], sort_keys=True,
                           default=str).encode(), session.state_bytes())

    for sc in spec.scenarios[:limit]:
        try:
            initial = resolve_task_state(spec, sc.initial_state, {"task_id": sc.scenario_id})
        except Exception:  # noqa: BLE001 - validation reports a bad scenario
            continue
        runs = []
        for _ in range(2):
            s = Session.from_states(spec, {spec.name: initial})
            runs.append(fingerprint([s.call(st.call, st.arguments) for st in sc.steps], s))
            s.close()
        if runs[0] != runs[1]:
            what = "states" if runs[0][0] == runs[1][0] else "results"
            return f"scenario {sc.scenario_id}: two runs in fresh sessions from the same state gave different {what}"
        x, y = Session.from_states(spec, {spec.name: initial}), Session.from_states(spec, {spec.name: initial})
        rx, ry = [], []
        for st in sc.steps:
            rx.append(x.call(st.call, st.arguments))
            ry.append(y.call(st.call, st.arguments))
        fx, fy = fingerprint(rx, x), fingerprint(ry, y)
        x.close()
        y.close()
        for label, f in (("first", fx), ("second", fy)):
            if f != runs[0]:
                what = "states" if f[0] == runs[0][0] else "results"
                return (f"scenario {sc.scenario_id}: run interleaved with another session, the {label} session "
                        f"gave different {what} than a session on its own")
    return None


def check_session_isolation(a: ServerAnalysis, spec: EnvironmentSpec) -> None:
    """Refuse (:class:`ImporterError`) an import whose sessions are not isolated or not deterministic:
    the scenarios are run twice in fresh sessions and once interleaved with another session, and any
    difference is reported with the module-level globals (:func:`shared_module_globals`) responsible."""
    shared = shared_module_globals(a)
    problem = _isolation_runs(spec)
    where = "; ".join(f"{n} (used by {', '.join(users)})" for n, users in shared.items())
    if problem is None:
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


# ============================================================================ registration


def _purge_modules(env_name: str) -> None:
    prefix = f"gym_envfactory._envs.{env_name}"
    for mod in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[mod]


def _register(spec: EnvironmentSpec) -> None:
    """Make ``spec`` what get_environment/gym.make find under its name, wherever its folder is.

    Uses the runtime's in-process registry (as define_environment does); see the final report: a public
    ``register_spec`` in gym_envfactory.spec would be the clean hook."""
    import gym_envfactory.environment.spec as spec_mod
    from gym_envfactory.environment.catalog import register_environment

    with spec_mod._REG_LOCK:
        spec_mod._CATALOG.pop(spec.name, None)
        spec_mod._PROGRAMMATIC[spec.name] = spec
    register_environment(spec)


# ============================================================================ import_tool_server


def import_tool_server(
    path: str | Path,
    *,
    name: str | None = None,
    out_dir: str | Path | None = None,
    domain: str = "utilities",
    register: bool = True,
    initial_state: str | Path | Mapping[str, Any] | BaseModel | None = None,
    initial_states: Mapping[str, str | Path | Mapping[str, Any] | BaseModel] | None = None,
    tasks: str | Path | Iterable[Mapping[str, Any]] | None = None,
    scenarios: str | Path | Iterable[Mapping[str, Any]] | None = None,
    probe: bool = True,
    validate: bool = True,
    state_model: str | None = None,
    api_class: str | None = None,
    read_only: Mapping[str, bool] | None = None,
    destructive: Mapping[str, bool] | None = None,
    version: str = "0.1.0",
    description: str | None = None,
    bookkeeping_fields: Sequence[str] = (),
    free_text_fields: Sequence[str] = (),
    set_fields: Sequence[str] = (),
    overwrite: bool = False,
    check_isolation: bool = True,
) -> EnvironmentSpec:
    """Turn a single-file tool server (module docstring layout) into ``out_dir/<name>/`` and load it.

    Args:
        path: the server file; it is copied, never edited.
        name: environment name (CamelCase); default from the API class (``BookStoreAPI`` → ``BookStore``).
        out_dir: parent folder (default: the checkout's ``env_images/``).
        domain: one of :data:`gym_envfactory.spec.DOMAINS`.
        register: make ``gym.make("envfactory/<name>-v0")`` and ``get_environment(name)`` find it.
        initial_state: the ``small`` state: a scenario JSON file, a dict or a model; default the API's
            empty ``save_scenario()``.  ``initial_states`` adds more by name.
        tasks, scenarios: JSON Lines files or objects copied into ``tasks.jsonl``/``scenarios.jsonl``.
        probe: add scenarios recorded by calling every tool once (see :func:`_probe_scenarios`).
        validate: run :func:`~gym_envfactory.validation.validate_environment` (scenarios, tasks,
            determinism lint; per-tool coverage gaps are logged, not fatal) and refuse (removing the
            folder) when it fails.
        state_model, api_class: names in the server module, when detection is ambiguous.
        read_only, destructive: per-tool overrides of the annotations guessed from names and code.
        overwrite: replace an existing folder of the same name.
        check_isolation: run the scenarios twice in fresh sessions and once interleaved with another
            session and refuse the import when they differ (module-level counters, lists or caches the
            API mutates leak between sessions); see :func:`check_session_isolation`.

    Raises:
        ImporterError: the file does not fit the layout, or the result failed validation.
        SpecError: a bad name, domain, state or task.
    """
    a = analyze_tool_server(path, api_class=api_class, state_model=state_model,
                            read_only=read_only, destructive=destructive)
    env_name = name or _default_env_name(a)
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
    folder = out / env_name
    if folder.exists():
        if not overwrite:
            raise ImporterError(f"{folder} exists; pass overwrite=True to replace it", file=folder)
        shutil.rmtree(folder)
    states: dict[str, Any] = {"small": _state_json(initial_state) if initial_state is not None else a.empty_scenario}
    for k, v in (initial_states or {}).items():
        states[k] = _state_json(v)
    for k, v in states.items():
        try:
            a.state_model.model_validate(v)
        except ValidationError as exc:
            raise ImporterError(f"initial state {k!r} does not validate with {a.state_model.__name__}: "
                                f"{exc.error_count()} error(s): {exc.errors()[0]['msg']}") from None
    sha = hashlib.sha256(a.source.encode()).hexdigest()
    desc = description or (a.module_doc.splitlines()[0] if a.module_doc else f"Imported from {a.path.name}")
    extra = {k: list(v) for k, v in (("bookkeeping_fields", bookkeeping_fields),
                                     ("free_text_fields", free_text_fields), ("set_fields", set_fields)) if v}
    manifest = _manifest(env_name, version, domain, desc, a.state_model.__name__, a.path, sha,
                         a.api_class.__name__, extra)
    tools_py = _generate_tools_py(a, env_name)
    user_scenarios = _jsonl_objects(scenarios)
    task_objs = _jsonl_objects(tasks)
    folder.mkdir(parents=True)
    try:
        (folder / "environment.toml").write_text(manifest, encoding="utf-8")
        shutil.copyfile(a.path, folder / "_source.py")
        (folder / "_bridge.py").write_text(BRIDGE_SOURCE, encoding="utf-8")
        (folder / "__init__.py").write_text(
            f'"""{env_name}: imported from {a.path.name} (see _bridge.py); _source.py is the original, unedited."""\n\n'
            "from ._bridge import load_package_source\n\nload_package_source(__name__, __file__)\n",
            encoding="utf-8")
        (folder / "state.py").write_text(
            f'"""State model of {env_name}: the root scenario model of the imported server."""\n\n'
            f"from ._source import {a.state_model.__name__}\n\n__all__ = [{a.state_model.__name__!r}]\n",
            encoding="utf-8")
        (folder / "tools.py").write_text(tools_py, encoding="utf-8")
        (folder / "initial_states").mkdir()
        for k, v in states.items():
            (folder / "initial_states" / f"{k}.json").write_text(
                json.dumps(v, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        if task_objs:
            (folder / "tasks.jsonl").write_text(
                "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in task_objs), encoding="utf-8")
        if user_scenarios:
            (folder / "scenarios.jsonl").write_text(
                "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in user_scenarios), encoding="utf-8")
        _purge_modules(env_name)
        spec = load_environment(folder)
        if probe:
            recorded = _probe_scenarios(spec, {s.get("scenario_id", "") for s in user_scenarios})
            all_sc = user_scenarios + recorded
            (folder / "scenarios.jsonl").write_text(
                "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in all_sc), encoding="utf-8")
            _purge_modules(env_name)
            spec = load_environment(folder)
        if check_isolation:
            check_session_isolation(a, spec)
        if validate:
            from gym_envfactory.validation import validate_environment

            report = validate_environment(spec)
            gaps = [f for f in report.coverage_failures if f.startswith("tool ")]
            hard = [f for f in report.failures() if f not in gaps]
            if hard:
                raise ImporterError("the imported environment failed validation:\n  "
                                    + "\n  ".join(hard[:20]), file=folder)
            for gap in gaps:
                log.warning("%s: %s (pass scenarios= to cover it)", env_name, gap)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        _purge_modules(env_name)
        raise
    if register:
        _register(spec)
    return spec


# ============================================================================ import_python_class


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
    node = _function_node(init) if isinstance(init, types.FunctionType) else None
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
        ro, de = _classify(method_name, cls, [method_name], read_only, destructive)
        return tool(read_only=ro, destructive=de)(call)

    tool_fns = [make(n, f) for n, f in methods]
    init_state = State() if initial_state is None else initial_state
    return define_environment(
        name, State, tool_fns, initial_state=init_state, tasks=tasks, scenarios=scenarios, domain=domain,
        version=version, description=description or (cls.__doc__ or name).strip().splitlines()[0],
        register=register,
    )
