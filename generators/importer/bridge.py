"""Runtime bridge of an imported tool server.

This module is ``generators/importer/bridge.py`` (``gym_envfactory.generators.importer.bridge``).  The
importer uses it directly and copies it byte for byte into every imported package as ``_bridge.py``,
so a package runs without the importer, fastmcp or any MCP SDK: edit this file, never the copies
(re-import a package to refresh its copy).

``_source.py`` is the original server, copied verbatim.  It is executed with a stand-in for FastMCP
(``fastmcp`` and ``mcp.server*`` imports resolve to stubs that record ``@mcp.tool()`` registrations), so
the package needs neither fastmcp nor a particular MCP SDK version.  Its module-level API instance is
replaced by a guard.

**One live instance per session** (issue 12, part 2): the first tool call on a session's state builds
an API instance (``load_scenario(state)``) and keeps it in the state model's private storage
(:class:`LiveInstance`, under :data:`LIVE_KEY`); later calls run the original wrapper against that same
instance, so private attributes (a login token, a counter) survive between calls and a call costs what
the original method costs.  The state model's fields are brought up to date from ``save_scenario()``
lazily, only when someone reads them (serialisation for scoring, snapshots, forks, comparisons; the
root model's attribute access is hooked by :func:`install_live_hooks`).  Copying the state model (a
session's fork, rebase or rollback view) deep-copies the instance, private attributes included, so a
rolled-back session replays onto the instance as it was at its rollback point.  A model edited from
outside (``Session.state_model()``) is reloaded into a fresh instance before the next call when its
content changed.  A state built from bytes (reset, restore, a new session) gets a fresh instance.
A write call runs under an undo journal (:mod:`.undo`, issue 26): when it fails, the session asks the
state model (``__envfactory_undo_last__``, :func:`undo_last`) to undo it in place, at the cost of what it
touched; only an inexact journal falls back to the session's rebuild-and-replay rollback.

**Determinism without editing** (issue 12, part 3): the server's ``import random``, ``import uuid``,
``import time``, ``import datetime`` (and ``from X import ...``) resolve to stand-ins that draw from the
calling session's :class:`Entropy` (a ``random.Random`` seeded from the state the instance was built
from, and a clock that starts at :data:`CLOCK_START` and advances :data:`CLOCK_STEP` seconds per read),
and its builtin ``hash`` is :func:`stable_hash`; so the same calls give the same state in any process,
whatever ``PYTHONHASHSEED``.  Only the server's module sees them, never the rest of the process.

It imports only the standard library, pydantic and ``gym_envfactory.ToolError``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import datetime
import hashlib
import importlib.util
import inspect
import json
import logging
import random
import re
import sys
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import BaseModel

from gym_envfactory import ToolError
from gym_envfactory.authoring import TOOL_ATTR

try:  # inside an imported package the undo journal is its _undo.py (copied beside this file)
    undo: Any = importlib.import_module(f"{__package__}._undo")
except ImportError:  # inside the importer
    from . import undo

STUBBED_MODULES = ("fastmcp", "mcp.server")
SERVER_CLASSES = ("FastMCP", "MCPServer")
#: Exceptions that mean a bug in the imported code, not a domain failure: they stay internal errors.
PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError, ImportError, RecursionError,
                      NotImplementedError, SyntaxError, ZeroDivisionError, UnicodeError)
_ERROR_TEXT = re.compile(r"^(error|failed|failure|exception)\b", re.IGNORECASE)
#: Past-participle flags of an action reply: ``{"deleted": false}`` alone says the action did not happen.
_DONE_FLAGS = frozenset({"deleted", "removed", "cancelled", "canceled", "created", "updated", "added", "sent", "saved",
                         "booked", "registered", "uploaded", "moved", "renamed", "submitted", "scheduled",
                         "transferred", "refunded", "reserved", "written", "shipped", "paid", "applied"})
#: Shell-style error text (``bash: foo: command not found``, ``cd: x: No such file or directory``).
_SHELL_ERROR = re.compile(r"(?:^|:\s)(?:command not found|no such file or directory|permission denied|not a directory"
                          r"|is a directory|directory not empty)\s*$", re.IGNORECASE | re.MULTILINE)


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
        self.name: str = str(options.get("name") or getattr(fn, "__name__", None) or repr(fn))
        self.description: str | None = options.get("description")


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

    vars(mod)["__getattr__"] = attr  # PEP 562: the module's own __getattr__
    return mod


def stub_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    """``__import__`` for the server's module: :data:`STUBBED_MODULES` resolve to :func:`stub_module`,
    :data:`SEEDED_MODULES` to :func:`seeded_module`, everything else imports normally."""
    if level == 0 and any(name == m or name.startswith(m + ".") for m in STUBBED_MODULES):
        return stub_module(name if fromlist else name.partition(".")[0])
    if level == 0 and name in SEEDED_MODULES:
        return seeded_module(name)
    return builtins.__import__(name, globals, locals, fromlist, level)


# --------------------------------------------------------------------------- determinism (issue 12, part 3)
#: Where every stand-in clock starts: 2025-01-01T00:00:00Z, in seconds since the epoch.
CLOCK_START = 1735689600.0
#: Seconds the stand-in clock advances per read (so two reads never return the same instant).
CLOCK_STEP = 1.0
#: Modules the server's imports get as stand-ins (:func:`seeded_module`).
SEEDED_MODULES = ("random", "uuid", "time", "datetime")
#: Calls the stand-ins make deterministic (the importer's static check does not refuse them): the global
#: ``random`` functions, ``uuid1``/``uuid4``, clock reads and the builtin ``hash``.
SEEDED_CALLS = ("random", "randint", "randrange", "choice", "choices", "sample", "shuffle", "uniform", "gauss",
                "normalvariate", "getrandbits", "randbytes", "triangular", "betavariate", "expovariate",
                "gammavariate", "lognormvariate", "vonmisesvariate", "paretovariate", "weibullvariate", "seed",
                "uuid1", "uuid4", "now", "utcnow", "today", "time", "time_ns", "monotonic", "monotonic_ns",
                "perf_counter", "perf_counter_ns", "localtime", "gmtime", "hash")
_utc_struct = time.gmtime  # always called with explicit seconds from an Entropy clock


class Entropy:
    """What the stand-ins draw from: ``rng`` (a ``random.Random``) and ``clock`` (seconds since the epoch,
    advanced :data:`CLOCK_STEP` per read).  One per live instance (deep-copied with it on a fork)."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self.clock = CLOCK_START
        self._marked = False
        self._saved: Any = None

    @property
    def rng(self) -> random.Random:
        """The generator (its state is saved on first use after :meth:`mark`)."""
        if self._marked and self._saved is None:
            self._saved = self._rng.getstate()
        return self._rng

    def now(self) -> float:
        """The next clock reading (seconds since the epoch)."""
        self.clock += CLOCK_STEP
        return self.clock

    def mark(self) -> float:
        """Remember where the clock is (and the generator, if it gets used) for :meth:`rewind`; costs
        nothing more unless the generator is used."""
        self._marked, self._saved = True, None
        return self.clock

    def rewind(self, clock: float) -> None:
        """Put the clock back to ``clock`` (from :meth:`mark`) and the generator where it was then (a
        failed write undone in place takes back its draws)."""
        if self._saved is not None:
            self._rng.setstate(self._saved)
        self.clock, self._marked, self._saved = clock, False, None


#: What code of the server running outside a tool call (its module body at import) draws from.
IMPORT_ENTROPY = Entropy(0)
_CALLING = threading.local()


def current_entropy() -> Entropy:
    """The :class:`Entropy` of the tool call running in this thread, else :data:`IMPORT_ENTROPY`."""
    return getattr(_CALLING, "entropy", None) or IMPORT_ENTROPY


@contextlib.contextmanager
def drawing_from(entropy: Entropy | None) -> Iterator[None]:
    """Make ``entropy`` what the stand-ins draw from in this thread for the ``with`` block."""
    previous = getattr(_CALLING, "entropy", None)
    _CALLING.entropy = entropy
    try:
        yield
    finally:
        _CALLING.entropy = previous


def state_seed(data: Any) -> int:
    """The seed of a fresh instance's :class:`Entropy`: the first 8 bytes of the SHA-256 of the state it was
    loaded from, as JSON (so the same state gives the same draws in any process)."""
    return int.from_bytes(hashlib.sha256(pydantic_core.to_json(data)).digest()[:8], "big")


def stable_hash(obj: Any) -> int:
    """The server's builtin ``hash``: for ``str``/``bytes`` (and tuples and frozensets of them) the first 8
    bytes of a BLAKE2b digest as a signed integer, the same in every process; anything else as
    ``builtins.hash`` (numbers, None and objects hash the same in every process already)."""
    if isinstance(obj, str):
        obj = obj.encode("utf-8", "surrogatepass")
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return int.from_bytes(hashlib.blake2b(bytes(obj), digest_size=8).digest(), "big", signed=True)
    if isinstance(obj, tuple):
        return stable_hash(b"(" + b",".join(stable_hash(x).to_bytes(8, "big", signed=True) for x in obj))
    if isinstance(obj, frozenset):
        return stable_hash(b"{" + b",".join(sorted(stable_hash(x).to_bytes(8, "big", signed=True) for x in obj)))
    return builtins.hash(obj)


def _seeded_random(name: str) -> Any:
    real = getattr(random, name)
    if not (callable(real) and isinstance(getattr(real, "__self__", None), random.Random)):
        return real  # Random, SystemRandom, constants (random.random is a builtin method, choice a Python one)

    def seeded(*args: Any, **kwargs: Any) -> Any:
        return getattr(current_entropy().rng, name)(*args, **kwargs)

    seeded.__name__ = seeded.__qualname__ = name
    seeded.__doc__ = real.__doc__
    return seeded


def _uuid4() -> uuid.UUID:
    return uuid.UUID(int=current_entropy().rng.getrandbits(128), version=4)


def _uuid1(node: Any = None, clock_seq: Any = None) -> uuid.UUID:
    return uuid.UUID(int=current_entropy().rng.getrandbits(128), version=1)


def _clock() -> float:
    return current_entropy().now()


def _clock_ns() -> int:
    return int(current_entropy().now() * 1_000_000_000)


def _sleep(seconds: float) -> None:
    current_entropy().clock += max(0.0, float(seconds))


def _struct(seconds: float | None = None) -> time.struct_time:
    return _utc_struct(current_entropy().now() if seconds is None else seconds)


def _strftime(fmt: str, t: Any = None) -> str:
    return time.strftime(fmt, _struct() if t is None else t)


def _ctime(seconds: float | None = None) -> str:
    return time.asctime(_struct(seconds))


TIME_STANDINS = {"time": _clock, "monotonic": _clock, "perf_counter": _clock, "process_time": _clock,
                  "time_ns": _clock_ns, "monotonic_ns": _clock_ns, "perf_counter_ns": _clock_ns,
                  "process_time_ns": _clock_ns, "sleep": _sleep, "localtime": _struct, "gmtime": _struct,
                  "strftime": _strftime, "ctime": _ctime}


class _RealClassCheck(type):
    """Metaclass of the clock classes: ``isinstance(x, SeededDatetime)`` is ``isinstance(x, datetime)``."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.__mro__[1])

    def __subclasscheck__(cls, sub: Any) -> bool:
        return isinstance(sub, type) and issubclass(sub, cls.__mro__[1])


class SeededDatetime(datetime.datetime, metaclass=_RealClassCheck):
    """The server's ``datetime.datetime``: ``now``/``utcnow``/``today`` read the session's clock (UTC; naive
    unless a ``tz`` is given); constructors and every other method give real ``datetime`` objects."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A real ``datetime`` (the constructors of the stand-in class give real objects)."""
        return datetime.datetime(*args, **kwargs)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        """The session clock's next reading."""
        moment = datetime.datetime.fromtimestamp(current_entropy().now(), datetime.UTC)
        return moment.replace(tzinfo=None) if tz is None else moment.astimezone(tz)

    @classmethod
    def utcnow(cls) -> Any:
        """The session clock's next reading, naive UTC."""
        return cls.now()

    @classmethod
    def today(cls) -> Any:
        """The session clock's next reading, naive UTC."""
        return cls.now()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler(datetime.datetime)


class SeededDate(datetime.date, metaclass=_RealClassCheck):
    """The server's ``datetime.date``: ``today()`` is the session clock's date (UTC)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A real ``date``."""
        return datetime.date(*args, **kwargs)

    @classmethod
    def today(cls) -> Any:
        """The date of the session clock's next reading."""
        return datetime.datetime.fromtimestamp(current_entropy().now(), datetime.UTC).date()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler(datetime.date)


def seeded_module(name: str) -> types.ModuleType:
    """The stand-in the server gets for ``import <name>`` (one of :data:`SEEDED_MODULES`): the real module's
    attributes, except that the global ``random`` functions draw from the calling session's
    ``Entropy.rng``, ``uuid1``/``uuid4`` from the same generator, clock reads (``time.time``,
    ``monotonic``, ``perf_counter``, ``localtime``/``gmtime``/``strftime``/``ctime`` without a time,
    ``datetime.now``/``utcnow``/``today``, ``date.today``) from its clock, and ``time.sleep`` advances
    that clock instead of sleeping."""
    real = sys.modules.get(name) or importlib.import_module(name)
    mod = types.ModuleType(name, real.__doc__)
    if name == "random":
        mod.__getattr__ = _seeded_random  # type: ignore[method-assign]  # PEP 562
        return mod
    overrides: dict[str, Any] = {}
    if name == "uuid":
        overrides = {"uuid4": _uuid4, "uuid1": _uuid1}
    elif name == "time":
        overrides = TIME_STANDINS
    elif name == "datetime":
        overrides = {"datetime": SeededDatetime, "date": SeededDate}

    def attr(item: str) -> Any:
        return overrides[item] if item in overrides else getattr(real, item)

    mod.__getattr__ = attr  # type: ignore[method-assign]  # PEP 562
    return mod


def load_source(module_name: str, path: str | Path) -> types.ModuleType:
    """Execute the server file as ``module_name`` with FastMCP stubbed (registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    vars(module)["__builtins__"] = dict(vars(builtins), __import__=stub_import, hash=stable_hash)
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
    vars(sys.modules[package])["_source"] = module  # as the import system sets a submodule
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
    """(message, code) when a result reports a failure instead of raising, else None.

    The rule (docs/authoring.md, "Importing a tool server"): a result is a failure when it is

    * a dict (or a Pydantic model, or a string holding a JSON object) with a truthy ``error`` or
      ``errors`` key, ``success``/``ok`` false, or ``status``/``result`` one of ``error``, ``failed``,
      ``failure``, ``fail`` (any case) in a reply envelope (keys among ``status``, ``result``,
      ``message``, ``detail(s)``, ``reason``, ``code``, ``error_code``, ``success``, ``ok``; a record
      such as ``{"payment_id": ..., "status": "failed"}`` is data);
      A reply that also carries ids (``id``, ``*_id``) is a failure when its status is ``error``
      (``{"order_id": "O-1", "status": "Error"}``), data otherwise; a reply whose one other key is a
      past-participle action flag (``deleted``, ``removed``, ``cancelled``, ``created``, ``sent``...) set to
      false (``{"deleted": false}``, ``{"cancelled": false, "message": ...}``)
      is a failure;
    * free text whose first word is ``Error``, ``Failed``, ``Failure`` or ``Exception`` (any case),
      e.g. ``"Error: no such room"``, ``"error: bad flag"``, ``"Failed to book"``, or shell-style error
      text ending a line with ``: command not found``, ``: No such file or directory``, ``: Permission
      denied`` (``"bash: foo: command not found"``).

    The message is the ``error``/``message``/``detail``/``reason`` value (or the text); the code is
    the result's ``error_code``/``code`` (or the error object's ``code``/``type``), else ``tool_error``.
    """
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
        elif _ERROR_TEXT.match(text) or _SHELL_ERROR.search(text):
            return text, "tool_error"
        else:
            return None
    if not isinstance(obj, dict):
        return None
    err = obj.get("error") or obj.get("errors")
    code = obj.get("error_code") or obj.get("code")
    failed_words = ("error", "failed", "failure", "fail")
    envelope = {"status", "result", "message", "detail", "details", "reason", "code", "error_code", "success", "ok"}
    status = next((str(obj[k]).strip().lower() for k in ("status", "result") if isinstance(obj.get(k), str)), "")
    ids = {k for k in obj if isinstance(k, str) and (k == "id" or k.endswith("_id"))}
    others = set(obj) - envelope - ids
    if others or (ids and status != "error"):
        status = ""  # a record whose own status is "failed" (a payment, a job) is data, not a failure
    # {"deleted": false}: a reply whose one flag says the action did not happen
    flag = next((k for k in obj if k in others), None) if len(others) == 1 else None
    denied = flag is not None and obj[flag] is False and isinstance(flag, str) and flag.lower() in _DONE_FLAGS
    if err:
        if isinstance(err, dict):
            code = code or err.get("code") or err.get("type")
            err = err.get("message") or json.dumps(err, sort_keys=True)
        elif isinstance(err, list):
            err = "; ".join(str(e) for e in err)
        message = str(err) if not isinstance(err, bool) else str(obj.get("message") or json.dumps(obj, sort_keys=True,
                                                                                                       default=str))
    elif obj.get("success") is False or obj.get("ok") is False or status in failed_words or denied:
        message = str(obj.get("message") or obj.get("detail") or obj.get("reason")
                      or json.dumps(obj, sort_keys=True, default=str))
    else:
        return None
    return message, code if isinstance(code, str) and code else "tool_error"


def run_awaitable(awaitable: Any) -> Any:
    """Result of an async wrapper, from sync code (in a helper thread when a loop already runs here; the
    helper draws from the caller's :class:`Entropy`)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    box: dict[str, Any] = {}
    entropy = getattr(_CALLING, "entropy", None)

    def target() -> None:
        try:
            with drawing_from(entropy):
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
    extra = getattr(new, "__pydantic_extra__", None)
    if extra is not None:
        object.__setattr__(state, "__pydantic_extra__", dict(extra))
    object.__setattr__(state, "__pydantic_fields_set__", set(state.__pydantic_fields_set__) | set(new.__pydantic_fields_set__))


class SharedInstanceGuard:
    """Replaces the server's module-level API instance: using it would share state between sessions."""

    def __init__(self, name: str, api_class: str) -> None:
        object.__setattr__(self, "_what", f"the shared module-level instance {name!r} of {api_class}")

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise RuntimeError(f"{self._what} was used; imported tools get a live instance per session")

    def __setattr__(self, item: str, value: Any) -> None:
        raise RuntimeError(f"{self._what} was written; imported tools get a live instance per session")


# --------------------------------------------------------------------------- live instances (issue 12, part 2)
#: The key of a state model's ``__pydantic_private__`` holding its :class:`LiveInstance`.
LIVE_KEY = "__envfactory_live__"
#: Attribute reads of a state model that see its data, besides its fields: they bring it up to date first.
DATA_ATTRIBUTES = frozenset({"__dict__", "__pydantic_extra__", "__pydantic_fields_set__"})


class LiveInstance:
    """The live API instance behind one session's state model, and its stand-ins' :class:`Entropy`.

    ``owner`` (an :class:`ImportedServer`, or the bridge of an imported class) turns the instance into a
    validated state model (``owner.saved_model(api)``) and builds fresh ones (``owner.build(data)``).
    ``dirty``: calls ran since the model's fields were last brought up to date.  ``observed``: someone read
    the model's data since the last call (the next call then brings it up to date inside the call, so a
    ``save_scenario()`` that does not fit the state model is that call's error: validation mode).
    ``exposed``/``seen``: a field of the model was handed out (it may be edited from outside); ``seen`` is
    the model's JSON at that moment, compared before the next call.  ``hidden_write``: the last call
    brought up to date inside the call changed the instance's private attributes (a login), which the
    state's JSON does not show (the session's validation mode asks, through the model's
    ``__envfactory_hidden_write__()``, before calling a write a silent no-op).  ``holder``: ``id`` of the model the
    instance belongs to (set on first use; a shallow copy of the model, which shares this object, gets a
    fresh instance instead).

    A deep copy (what copying the state model does: a fork, a rebase, a rollback view) copies the instance
    with ``copy.deepcopy``, private attributes included; an instance that cannot be deep-copied is rebuilt
    from the copied model's fields on its next use.  Pickling keeps nothing (rebuilt from the fields).
    """

    __slots__ = ("owner", "api", "entropy", "dirty", "observed", "exposed", "seen", "holder", "hidden_write",
                 "fresh", "journal", "journal_off", "undo_clock")

    def __init__(self, owner: Any, api: Any, entropy: Entropy) -> None:
        self.owner, self.api, self.entropy = owner, api, entropy
        self.dirty = self.observed = self.exposed = self.hidden_write = False
        self.fresh = True  # no call ran on it yet
        self.seen: str | None = None
        self.holder: int | None = None
        self.journal: Any = None  # the undo journal of this call, when it writes (cleared per call)
        self.journal_off = False  # a call went over the journal's budget: failures replay instead
        self.undo_clock = 0.0  # the Entropy's mark when that journal opened

    def __deepcopy__(self, memo: dict) -> LiveInstance:
        try:
            api = copy.deepcopy(self.api, memo)
        except Exception as exc:  # noqa: BLE001 - an instance holding a lock, a file...: rebuilt from the fields
            logging.getLogger(__name__).warning(
                "the live %s instance cannot be copied (%s: %s): the copy is rebuilt from the state's fields, "
                "without its private attributes", type(self.api).__name__, type(exc).__name__, exc)
            api = None
        new = LiveInstance(self.owner, api, copy.deepcopy(self.entropy, memo))
        new.dirty, new.exposed, new.seen = self.dirty and api is not None, self.exposed, self.seen
        new.fresh, new.observed = False, self.observed  # read since its last call: so is the copy
        new.journal_off = self.journal_off
        return new

    def __copy__(self) -> LiveInstance:
        return self

    def __reduce__(self) -> Any:
        return (type(None), ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LiveInstance)  # the data is compared through the model's fields

    __hash__ = None  # type: ignore[assignment]

    def sync(self, model: BaseModel) -> None:
        """Bring ``model``'s fields up to date from the instance (``owner.saved_model``); a failure leaves
        the instance dirty and raises.  Writing the fields back is not a read: ``observed`` stays as it was
        (else a sync inside a call would make the next call sync again, and so on: every call O(state))."""
        self.dirty = False
        try:
            with drawing_from(self.entropy):
                saved = self.owner.saved_model(self.api)
        except BaseException:
            self.dirty = True
            raise
        observed = self.observed
        write_back(model, saved)
        self.observed = observed

    def expose(self, model: BaseModel) -> None:
        """A field of ``model`` was handed out or written: remember its JSON now (once)."""
        if not self.exposed:
            self.exposed = True
            self.seen = model.model_dump_json()


def private_fingerprint(obj: Any) -> str:
    """The attributes of ``obj`` whose names start with ``_`` (what ``save_scenario`` does not show) as
    JSON text, objects that are not JSON data by ``repr``: compared before and after a call in validation
    mode (:attr:`LiveInstance.hidden_write`)."""
    try:
        # an iterator (an itertools.count id counter) by repr: serialising it would drain it, forever
        attrs = {k: repr(v) if isinstance(v, Iterator) else v for k, v in vars(obj).items() if k.startswith("_")}
    except TypeError:  # no __dict__ (slots)
        return ""
    return json.dumps(pydantic_core.to_jsonable_python(attrs, fallback=repr), sort_keys=True, default=repr)


def run_on_live(slot: LiveInstance, state: BaseModel, read_only: bool, run: Any) -> Any:
    """Run ``run()`` (a call on ``slot.api``) as a tool call on ``state``: drawing from the slot's
    :class:`Entropy` (a read's draws and clock readings are kept, as the original server keeps them:
    a "random pick" read gives a new pick each call; issue 26), marking the instance dirty, turning domain failures
    into :class:`ToolError` (programming errors pass), and, when the state was read since the last call
    (validation mode), bringing it up to date inside the call; then, and on an instance's first call,
    noting whether its private attributes changed (:attr:`LiveInstance.hidden_write`).

    A write tool runs under an undo journal (:func:`undo.begin`, kept as ``slot.journal`` until the next
    call), so that when the session finds the call failed it is undone in place at the cost of what it
    touched (the state model's ``__envfactory_undo_last__()``, :func:`undo_last`)."""
    eager, slot.observed = slot.observed, False
    watch, slot.fresh = eager or slot.fresh, False  # a session's first call may be validation mode's too
    before = private_fingerprint(slot.api) if watch else None
    slot.dirty, slot.hidden_write = True, False
    journal = None
    if not read_only and not slot.journal_off:
        slot.undo_clock = slot.entropy.mark()
        journal = slot.journal = undo.begin(slot.api)
    try:
        with drawing_from(slot.entropy):
            result = run()
            if inspect.isawaitable(result):
                result = run_awaitable(result)
    except ToolError:
        raise
    except PROGRAMMING_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - a domain failure of the imported code
        raise as_tool_error(exc) from exc
    finally:
        if journal is not None:
            journal.close()
            if journal.spent:  # this instance's calls reach too much to journal: failures replay
                slot.journal_off = True
    problem = error_in(result)
    if problem is not None:
        raise ToolError(problem[0], code=problem[1])
    if watch:
        slot.hidden_write = private_fingerprint(slot.api) != before
    if eager:
        slot.sync(state)
    return result


def live_slot(model: Any, *, take: bool = False) -> LiveInstance | None:
    """The :class:`LiveInstance` of ``model`` (a state model), or None.

    Without ``take`` (attribute hooks): only an instance this model has used (``holder``), looked up
    without copying anything.  With ``take`` (a tool call): the private storage hands the instance out
    (a copy-on-write view of a state copies its rollback point's instance now) and one no model has
    used yet is claimed; one used by another model (``model`` is a shallow copy) is None."""
    try:
        private = object.__getattribute__(model, "__pydantic_private__")
    except AttributeError:
        return None
    if not private:
        return None
    slot = private.get(LIVE_KEY) if take else dict.get(private, LIVE_KEY)
    if not isinstance(slot, LiveInstance):
        return None
    if slot.holder is None and take:
        slot.holder = id(model)
    return slot if slot.holder == id(model) else None


def attach(model: BaseModel, slot: LiveInstance) -> LiveInstance:
    """Make ``slot`` the live instance of ``model`` (in a private dict of its own; other private
    attributes are handed over as the model's storage hands them out)."""
    private = object.__getattribute__(model, "__pydantic_private__") or {}
    own = {k: private[k] for k in dict.keys(private) if k != LIVE_KEY}
    own[LIVE_KEY] = slot
    object.__setattr__(model, "__pydantic_private__", own)
    slot.holder = id(model)
    return slot


def install_live_hooks(model_cls: type[BaseModel]) -> None:
    """Hook attribute access of ``model_cls`` (the root state model; idempotent) so that reading its data
    (a field, ``__dict__``: serialisation, copies, comparisons) first brings a model with a dirty
    :class:`LiveInstance` up to date, and handing out or writing a field marks it exposed.  Models without
    a live instance pay one dictionary lookup per such access."""
    if model_cls.__dict__.get("__envfactory_live_hooks__"):
        return
    fields = frozenset(model_cls.model_fields)
    plain_get = model_cls.__getattribute__
    plain_set = model_cls.__setattr__
    plain_del = model_cls.__delattr__

    def __getattribute__(self: Any, name: str) -> Any:
        if name in DATA_ATTRIBUTES or name in fields:
            slot = live_slot(self)
            if slot is not None:
                slot.observed = True
                if slot.dirty:
                    slot.sync(self)
                if name in fields:
                    slot.expose(self)
        return plain_get(self, name)

    def touch(self: Any) -> None:
        slot = live_slot(self)
        if slot is not None:
            slot.observed = True
            if slot.dirty:
                slot.sync(self)
            slot.expose(self)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        touch(self)
        plain_set(self, name, value)

    def __delattr__(self: Any, name: str) -> None:
        touch(self)
        plain_del(self, name)

    type.__setattr__(model_cls, "__getattribute__", __getattribute__)
    type.__setattr__(model_cls, "__setattr__", __setattr__)
    type.__setattr__(model_cls, "__delattr__", __delattr__)
    type.__setattr__(model_cls, "__envfactory_hidden_write__", _hidden_write)
    type.__setattr__(model_cls, "__envfactory_undo_last__", undo_last)
    type.__setattr__(model_cls, "__envfactory_live_hooks__", True)


def _hidden_write(self: Any) -> bool:
    """Whether the last tool call changed only what the state's JSON does not show (its live instance's
    private attributes): validation mode then does not call a write that reported success a no-op."""
    slot = live_slot(self)
    return bool(slot is not None and slot.hidden_write)


def undo_last(self: Any) -> bool:
    """Undo the last tool call on the live instance of ``self`` (a state model) in place, when it was a
    write whose journal is exact (:mod:`.undo`): the instance's attributes, the containers and objects the
    call touched, and the :class:`Entropy`'s draws and clock go back to where they were before the call.
    Returns whether it did; False (the session then rebuilds and replays) when there is no instance, the
    call was not journaled (a read, a failure before the call ran) or the journal is inexact.  The
    session calls it on a failed write (``Session._roll_back``)."""
    slot = live_slot(self)
    journal = slot.journal if slot is not None else None
    if slot is None or journal is None or not journal.exact:
        return False
    slot.journal = None
    journal.undo()
    slot.entropy.rewind(slot.undo_clock)
    slot.dirty = True  # the fields are brought up to date from the instance when read
    return True


def live_instance(owner: Any, state: BaseModel) -> LiveInstance:
    """The live instance of ``state`` for a tool call: its own, else one built from its fields
    (``owner.build(data)``); a model whose exposed fields changed since they were handed out is reloaded
    into a fresh instance (keeping the :class:`Entropy`)."""
    slot = live_slot(state, take=True)
    if slot is not None:
        slot.journal = None  # a new call: the last one's journal no longer applies
    if slot is None or slot.api is None:
        data = state.model_dump(mode="json")
        fresh = owner.build(data)
        if slot is not None:
            fresh.entropy = slot.entropy
        slot = attach(state, fresh)
    if slot.exposed:
        slot.exposed = False
        if state.model_dump_json() != slot.seen:
            slot.api = owner.build(state.model_dump(mode="json")).api
        slot.seen = None
    return slot


class ImportedServer:
    """The imported server inside a package: runs one wrapper per call on the session's live API instance.

    Args:
        module: the loaded ``_source`` module.
        api_class: name of the API class (has ``load_scenario``/``save_scenario``).
        instances: module-level names bound to the shared API instance (rebound per call).
        state_model: name of the root scenario model (its attribute access is hooked:
            :func:`install_live_hooks`).
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
        install_live_hooks(self.state_model)
        self._read_only: frozenset[str] | None = None

    def read_only_tools(self) -> frozenset[str]:
        """Names of the package's read-only tools (``@tool(read_only=True)`` in the ``tools`` module beside
        ``_source``; empty when there is none), looked up once."""
        if self._read_only is None:
            package = self.module.__name__.rpartition(".")[0]
            tools_mod = sys.modules.get(f"{package}.tools") if package else None
            names = set()
            for obj in vars(tools_mod).values() if tools_mod is not None else ():
                meta = getattr(obj, TOOL_ATTR, None) if callable(obj) else None
                if meta is not None and meta.annotations.read_only:
                    names.add(meta.name or obj.__name__)
            self._read_only = frozenset(names)
        return self._read_only

    def build(self, data: dict) -> LiveInstance:
        """A fresh live instance: ``api_class()`` then ``load_scenario(data)``, drawing from a new
        :class:`Entropy` seeded by :func:`state_seed` of ``data``."""
        entropy = Entropy(state_seed(data))
        with drawing_from(entropy):
            api = self.api_class()
            api.load_scenario(data)
        return LiveInstance(self, api, entropy)

    def new_api(self, state: BaseModel) -> Any:
        """A fresh API instance loaded from ``state`` (``load_scenario(state.model_dump(mode="json"))``)."""
        return self.build(state.model_dump(mode="json")).api

    def saved_model(self, api: Any) -> BaseModel:
        """``api.save_scenario()`` validated by the root model (through JSON data, so the model shares no
        object with the instance).  Raises ``pydantic.ValidationError`` when it does not fit."""
        return self.state_model.model_validate(pydantic_core.to_jsonable_python(api.save_scenario()))

    def call(self, state: BaseModel, tool_name: str, arguments: dict) -> Any:
        """Run the wrapper registered as ``tool_name`` against the live API instance of ``state``
        (:func:`live_instance`).  The instance is changed in place; a failed write is undone in place
        (:func:`run_on_live`).  A read-only tool's draws from the session's :class:`Entropy` are kept, as
        the original keeps them (the slow fallback rollback, which rebuilds and replays only writes, may
        then draw differently: docs/authoring.md).  Raises :class:`ToolError` for a domain
        failure (an exception of the API, an error-looking result) and programming errors as they are."""
        fn = self.wrappers[tool_name]
        slot = live_instance(self, state)
        scope = dict(fn.__globals__)
        for name in self.instances:
            scope[name] = slot.api
        for name in self.helpers:
            scope[name] = rebind(inspect.unwrap(scope[name]), scope)
        kwargs = dict(arguments)
        for name in self.context_params.get(tool_name, ()):
            kwargs[name] = None
        bound = rebind(fn, scope)
        return run_on_live(slot, state, tool_name in self.read_only_tools(), lambda: bound(**kwargs))
