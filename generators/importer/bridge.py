"""Runtime bridge of an imported tool server.

This module is ``generators/importer/bridge.py`` (``gym_envfactory.generators.importer.bridge``).  The
importer uses it directly and copies it byte for byte into every imported package as ``_bridge.py``,
so a package runs without the importer, fastmcp or any MCP SDK: edit this file, never the copies
(re-import a package to refresh its copy).

``_source.py`` is the original server, copied verbatim.  It is executed with a stand-in for FastMCP
(``fastmcp`` and ``mcp.server*`` imports resolve to stubs that record ``@mcp.tool()`` registrations), so
the package needs neither fastmcp nor a particular MCP SDK version.  Its module-level API instance is
replaced by a guard: every tool call builds a fresh API instance from the session's state
(``load_scenario``), runs the original wrapper with its API name bound to that instance, and writes
``save_scenario()`` back into the state.  Nothing is shared between sessions.

It imports only the standard library, pydantic and ``gym_envfactory.ToolError``.
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
_ERROR_TEXT = re.compile(r"^(error|failed|failure)\b\s*[:\-]", re.IGNORECASE)


class Anything:
    """Stand-in for any other FastMCP/MCP SDK object: callable, subscriptable, transparent as a decorator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Return a lone callable argument unchanged (a decorator), else another stand-in."""
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
        """``@mcp.tool``, ``@mcp.tool()``, ``@mcp.tool("name")`` or ``@mcp.tool(name=..., description=...)``:
        record the function and return it unchanged."""
        if callable(name_or_fn):
            return self._record(name_or_fn, kwargs)
        if isinstance(name_or_fn, str):
            kwargs.setdefault("name", name_or_fn)
        return lambda fn: self._record(fn, kwargs)

    def add_tool(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``mcp.add_tool(fn, ...)``: record ``fn`` (stand-ins are ignored) and return it."""
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
    """A stand-in module: :data:`SERVER_CLASSES` are :class:`StubServer`, lower-case attributes are
    stub submodules, anything else is :class:`Anything`."""
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
    """``__import__`` for the server's module: :data:`STUBBED_MODULES` resolve to :func:`stub_module`,
    everything else imports normally."""
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
    sys.modules[package]._source = module
    return module


def registrations(module: types.ModuleType) -> list[Registration]:
    """Every tool registered on a (stub) server object defined at the module's top level."""
    out: list[Registration] = []
    for value in list(vars(module).values()):
        if isinstance(value, StubServer):
            out.extend(value.registrations)
    return out


def error_code_for(exc: BaseException) -> str:
    """The ToolError code for a domain exception: ``not_found`` (LookupError), ``forbidden``
    (PermissionError), ``invalid_request``/``tool_error`` for built-in errors, else the class name in
    snake case without an ``_error``/``_exception`` suffix (``OutOfStockError`` -> ``out_of_stock``)."""
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
        """A fresh API instance loaded from ``state`` (``load_scenario(state.model_dump(mode="json"))``)."""
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
