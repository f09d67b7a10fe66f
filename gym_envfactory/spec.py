"""Environment specifications: loading ``env_images/<Name>/`` packages and defining environments in code.

An environment package (DESIGN §3) is a folder::

    env_images/HotelBooking/
        environment.toml      # manifest (this module's :class:`Manifest`)
        __init__.py           # makes the folder an importable package (may be empty)
        state.py              # the root Pydantic model (the database)
        tools.py              # @tool functions: tool(state, *, arg: T = default) -> R
        initial_states/*.json # validated by the state model; at least "small" and "large"
        tasks.jsonl           # tasks (gym_envfactory.tasks.Task), one JSON object per line
        scenarios.jsonl       # validation scenarios (gym_envfactory.validation.Scenario)

Errors name the file, line and field (:class:`~gym_envfactory.errors.SpecError`).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import sys
import threading
import tomllib
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .authoring import TOOL_ATTR
from .errors import SpecError, UnknownEnvironmentError
from .tools import ToolSpec, format_validation_error, tool_spec_from_function

if TYPE_CHECKING:  # pragma: no cover
    from .tasks import TaskSet
    from .validation import Scenario

__all__ = [
    "DOMAINS",
    "Manifest",
    "EnvironmentSpec",
    "load_environment",
    "define_environment",
    "get_environment",
    "list_environments",
    "catalog_dirs",
    "canonical_json",
]

log = logging.getLogger(__name__)

#: The one place where environment domains are declared (DESIGN §3).
DOMAINS: tuple[str, ...] = (
    "commerce",
    "finance",
    "travel",
    "office",
    "lifestyle",
    "research",
    "utilities",
)

_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_STATE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # no paths: never a file outside initial_states/
_SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8.  Used for hashes and C04 checks."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Provenance(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["hand-written", "generated", "imported", "programmatic"] = "hand-written"
    model: str | None = None
    date: str | None = None
    source: str | None = None


class Manifest(BaseModel):
    """``environment.toml``.

    Fields: ``name`` (CamelCase, the gym id is ``envfactory/<name>-v<major>``), ``version`` (semver),
    ``domain`` (one of :data:`DOMAINS`), ``description``, ``state_model`` (``"module:Class"`` inside
    the package), ``tools_module``, ``default_initial_state``, ``bookkeeping_fields`` (dotted paths
    excluded from state equivalence, ``*`` matches any key), ``set_fields`` (lists compared as
    multisets), ``free_text_fields`` (dotted paths of free text such as notes and reasons that tasks
    mask in calls; excluded from state equivalence, since any faithful wording is right), ``provenance``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    domain: str
    description: str
    state_model: str = "state:State"
    tools_module: str = "tools"
    default_initial_state: str = "small"
    bookkeeping_fields: list[str] = Field(default_factory=list)
    free_text_fields: list[str] = Field(default_factory=list)
    set_fields: list[str] = Field(default_factory=list)
    provenance: Provenance = Field(default_factory=Provenance)

    def check(self, file: Path | None) -> None:
        if not _NAME_RE.match(self.name):
            raise SpecError("name must be CamelCase ASCII ([A-Z][A-Za-z0-9]*)", file=file, field="name")
        if not _SEMVER_RE.match(self.version):
            raise SpecError(f"version {self.version!r} is not semver", file=file, field="version")
        if self.domain not in DOMAINS:
            raise SpecError(
                f"domain {self.domain!r} is not one of {', '.join(DOMAINS)} (declare new domains in "
                "gym_envfactory.spec.DOMAINS)",
                file=file,
                field="domain",
            )


class EnvironmentSpec:
    """A loaded environment: state model, tools, initial states, tasks, validation scenarios.

    Instances are immutable after construction and shared by every session of the environment; all
    per-episode state lives in :class:`~gym_envfactory.session.Session`.
    """

    def __init__(
        self,
        manifest: Manifest,
        state_model: type[BaseModel],
        tools: Sequence[ToolSpec],
        *,
        path: Path | None = None,
        initial_states: Mapping[str, Any] | None = None,
        tasks_source: Any = None,
        scenarios_source: Any = None,
    ) -> None:
        self.manifest = manifest
        self.name = manifest.name
        self.version = manifest.version
        self.domain = manifest.domain
        self.description = manifest.description
        self.state_model = state_model
        self.path = path
        self.bookkeeping_fields = tuple(manifest.bookkeeping_fields)
        self.free_text_fields = tuple(manifest.free_text_fields)
        self.set_fields = tuple(manifest.set_fields)
        self.tools: dict[str, ToolSpec] = {}
        for t in tools:
            if t.name in self.tools:
                raise SpecError(f"duplicate tool name {t.name!r}", file=path, field="tools")
            t.env = self.name
            self.tools[t.name] = t
        if not self.tools:
            raise SpecError("an environment needs at least one tool", file=path, field="tools")
        self._inline_states = dict(initial_states or {})
        self._state_cache: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._tasks_source = tasks_source
        self._scenarios_source = scenarios_source

    def __repr__(self) -> str:
        return f"EnvironmentSpec({self.name!r}, v{self.version}, {len(self.tools)} tools)"

    @property
    def excluded_fields(self) -> tuple[str, ...]:
        """Paths left out of state equivalence: bookkeeping plus free text (DESIGN §7, CASES C07)."""
        return self.bookkeeping_fields + self.free_text_fields

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    @property
    def gym_id(self) -> str:
        return f"envfactory/{self.name}-v{self.major}"

    # ---------------------------------------------------------------- initial states
    def initial_state_names(self) -> list[str]:
        names = set(self._inline_states)
        if self.path is not None and (self.path / "initial_states").is_dir():
            names.update(p.stem for p in (self.path / "initial_states").glob("*.json"))
        return sorted(names)

    def initial_state_json(self, name: str | None = None) -> bytes:
        """The named initial state as validated JSON bytes (cached).  Raises :class:`SpecError`."""
        name = name or self.manifest.default_initial_state
        if not isinstance(name, str) or not _STATE_NAME_RE.match(name):
            raise SpecError(f"initial state names are plain names such as 'small' or 'large', got {str(name)[:80]!r}")
        cached = self._state_cache.get(name)
        if cached is not None:
            return cached
        with self._lock:
            if name in self._state_cache:
                return self._state_cache[name]
            file: Path | None = None
            if name in self._inline_states:
                raw = self._inline_states[name]
                if isinstance(raw, BaseModel):
                    raw = raw.model_dump(mode="json")
            else:
                file = self.path / "initial_states" / f"{name}.json" if self.path else None
                if file is None or not file.is_file():
                    raise SpecError(
                        f"environment {self.name} has no initial state {name!r}; "
                        f"available: {', '.join(self.initial_state_names()) or 'none'}",
                        file=file,
                    )
                try:
                    raw = json.loads(file.read_text())
                except json.JSONDecodeError as exc:
                    raise SpecError(f"invalid JSON: {exc.msg}", file=file, line=exc.lineno) from None
            model = self.validate_state(raw, file=file)
            data = model.model_dump_json().encode()
            self._state_cache[name] = data
            return data

    def validate_state(self, raw: Any, *, file: Path | str | None = None) -> BaseModel:
        """Validate a state dict with the state model.  Raises :class:`SpecError` naming the field."""
        try:
            return self.state_model.model_validate(raw)
        except ValidationError as exc:
            d = format_validation_error(exc)[0]
            raise SpecError(
                f"{d['message']} ({len(exc.errors())} error(s) in state)", file=file, field=d["field"]
            ) from None

    # ---------------------------------------------------------------- tasks & scenarios
    @cached_property
    def tasks(self) -> "TaskSet":
        """All tasks of the environment (loaded and schema-checked on first access)."""
        from .tasks import TaskSet

        src = self._tasks_source
        if src is None and self.path is not None and (self.path / "tasks.jsonl").is_file():
            src = self.path / "tasks.jsonl"
        if src is None:
            return TaskSet(self, [], source=None)
        if isinstance(src, (str, Path)):
            return TaskSet.from_jsonl(self, Path(src))
        return TaskSet.from_objects(self, list(src))

    @cached_property
    def scenarios(self) -> list["Scenario"]:
        from .validation import load_scenarios

        src = self._scenarios_source
        if src is None and self.path is not None and (self.path / "scenarios.jsonl").is_file():
            src = self.path / "scenarios.jsonl"
        if src is None:
            return []
        return load_scenarios(src)

    # ---------------------------------------------------------------- schemas
    def openai_tools(self) -> list[dict[str, Any]]:
        """OpenAI chat-completions ``tools`` list (function-calling format)."""
        return [t.openai_schema() for t in self.tools.values()]

    def mcp_tools(self) -> list[dict[str, Any]]:
        return [t.mcp_schema() for t in self.tools.values()]

    def content_hash(self) -> str:
        """sha256 over the package files (or tool schemas for programmatic environments)."""
        import hashlib

        h = hashlib.sha256()
        if self.path is None:
            h.update(canonical_json(self.mcp_tools()))
        else:
            for p in sorted(self.path.rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts:
                    h.update(str(p.relative_to(self.path)).encode())
                    h.update(p.read_bytes())
        return h.hexdigest()


# ------------------------------------------------------------------------------------ loading


def _import_package(name: str, folder: Path) -> ModuleType:
    mod_name = f"gym_envfactory._envs.{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    if "gym_envfactory._envs" not in sys.modules:
        parent = ModuleType("gym_envfactory._envs")
        parent.__path__ = []  # namespace-like container
        sys.modules["gym_envfactory._envs"] = parent
    init = folder / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        mod_name, init if init.exists() else None, submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise SpecError("cannot import environment package", file=folder)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        if init.exists():
            spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise SpecError(f"importing the package failed: {exc!r}", file=init) from exc
    return module


def _import_member(pkg: ModuleType, folder: Path, module: str, *, field: str) -> ModuleType:
    file = folder / (module.replace(".", "/") + ".py")
    try:
        return importlib.import_module(f"{pkg.__name__}.{module}")
    except ModuleNotFoundError as exc:
        raise SpecError(f"module {module!r} not found ({exc})", file=file, field=field) from exc
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"importing {module!r} failed: {exc!r}", file=file, field=field) from exc


def collect_tools(module: ModuleType, env: str) -> list[ToolSpec]:
    """Every ``@tool`` function defined in ``module``, in definition order."""
    out = []
    for obj in vars(module).values():
        if callable(obj) and hasattr(obj, TOOL_ATTR) and getattr(obj, "__module__", None) == module.__name__:
            out.append(tool_spec_from_function(obj, env))
    out.sort(key=lambda t: t.fn.__code__.co_firstlineno)
    return out


def load_environment(path: str | Path) -> EnvironmentSpec:
    """Load and check an environment package folder.  Raises :class:`SpecError` (file, line, field)."""
    folder = Path(path).resolve()
    man_file = folder / "environment.toml"
    if not man_file.is_file():
        raise SpecError("missing manifest environment.toml", file=man_file)
    try:
        raw = tomllib.loads(man_file.read_text())
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise SpecError(f"invalid TOML: {exc}", file=man_file, line=int(m.group(1)) if m else None) from None
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        raise SpecError(d["message"], file=man_file, field=d["field"]) from None
    manifest.check(man_file)
    pkg = _import_package(manifest.name, folder)
    mod_name, _, cls_name = manifest.state_model.partition(":")
    state_mod = _import_member(pkg, folder, mod_name, field="state_model")
    state_model = getattr(state_mod, cls_name or "State", None)
    if not (isinstance(state_model, type) and issubclass(state_model, BaseModel)):
        raise SpecError(
            f"{manifest.state_model!r} is not a Pydantic model", file=man_file, field="state_model"
        )
    tools_mod = _import_member(pkg, folder, manifest.tools_module, field="tools_module")
    tools = collect_tools(tools_mod, manifest.name)
    return EnvironmentSpec(manifest, state_model, tools, path=folder)


# ------------------------------------------------------------------------------------ registry

_PROGRAMMATIC: dict[str, EnvironmentSpec] = {}
_CATALOG: dict[str, EnvironmentSpec] = {}
_REG_LOCK = threading.Lock()


def catalog_dirs() -> list[Path]:
    """Folders searched for environment packages, in order.

    ``$ENVFACTORY_CATALOG`` (``os.pathsep``-separated) first, then the catalog shipped in the wheel
    (``gym_envfactory/_catalog``), then ``env_images/`` of a source checkout.
    """
    dirs: list[Path] = []
    env = os.environ.get("ENVFACTORY_CATALOG")
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    here = Path(__file__).resolve().parent
    dirs.append(here / "_catalog")
    dirs.append(here.parent / "env_images")
    return [d for d in dirs if d.is_dir()]


def _catalog_folders() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in catalog_dirs():
        for sub in sorted(d.iterdir()):
            if (sub / "environment.toml").is_file() and sub.name not in found:
                found[sub.name] = sub
    return found


def list_environments() -> list[str]:
    """Names of every catalog and programmatic environment."""
    return sorted(set(_catalog_folders()) | set(_PROGRAMMATIC))


def get_environment(name: str) -> EnvironmentSpec:
    """The environment called ``name`` (a folder name, an env name, or a gym id).

    Raises:
        UnknownEnvironmentError: no such environment.
        SpecError: the package exists but is malformed.
    """
    name = _strip_gym_id(name)
    if name in _PROGRAMMATIC:
        return _PROGRAMMATIC[name]
    with _REG_LOCK:
        if name in _CATALOG:
            return _CATALOG[name]
        folders = _catalog_folders()
        if name not in folders:
            raise UnknownEnvironmentError(
                f"unknown environment {name!r}; known: {', '.join(list_environments()) or 'none'}"
            )
        spec = load_environment(folders[name])
        _CATALOG[name] = spec
        return spec


def _strip_gym_id(name: str) -> str:
    m = re.fullmatch(r"(?:[\w.]+:)?(?:envfactory/)?([A-Za-z0-9_]+?)(?:-v\d+)?", name)
    return m.group(1) if m else name


def define_environment(
    name: str,
    state_model: type[BaseModel],
    tools: Iterable[Callable[..., Any]],
    *,
    initial_state: BaseModel | Mapping[str, Any] | None = None,
    initial_states: Mapping[str, BaseModel | Mapping[str, Any]] | None = None,
    tasks: Iterable[Mapping[str, Any]] | str | Path | None = None,
    scenarios: Iterable[Mapping[str, Any]] | str | Path | None = None,
    domain: str = "utilities",
    version: str = "0.1.0",
    description: str = "",
    bookkeeping_fields: Sequence[str] = (),
    free_text_fields: Sequence[str] = (),
    set_fields: Sequence[str] = (),
    register: bool = True,
) -> EnvironmentSpec:
    """Define an environment in code, without a folder, and (by default) register it with Gymnasium.

    Example::

        class Counter(BaseModel):
            value: int = 0

        @tool(read_only=True)
        def get(state: Counter) -> int: return state.value

        @tool
        def add(state: Counter, *, amount: int) -> int:
            state.value += amount
            return state.value

        spec = define_environment("Counter", Counter, [get, add], initial_state=Counter(),
                                  tasks=[{"task_id": "t1", "turns": [{"user": "add 2",
                                          "ground_truth": [{"name": "add", "arguments": {"amount": 2}}]}]}])
        env = gym.make("envfactory/Counter-v0")

    ``initial_state`` is stored as ``"small"`` (the default); ``initial_states`` names several.  Tasks
    follow the JSON Lines task format (:mod:`gym_envfactory.tasks`); ``env`` defaults to ``name``.

    Raises:
        SpecError: bad name/version/domain or a tool signature that breaks the authoring contract.
    """
    manifest = Manifest(
        name=name,
        version=version,
        domain=domain,
        description=description or (state_model.__doc__ or name).strip(),
        state_model=f"{state_model.__module__}:{state_model.__qualname__}",
        bookkeeping_fields=list(bookkeeping_fields),
        free_text_fields=list(free_text_fields),
        set_fields=list(set_fields),
        provenance=Provenance(kind="programmatic"),
    )
    manifest.check(None)
    states: dict[str, Any] = dict(initial_states or {})
    if initial_state is not None:
        states.setdefault("small", initial_state)
    if not states:
        states["small"] = state_model()
    if "small" not in states:
        manifest.default_initial_state = next(iter(states))
    specs = [tool_spec_from_function(f, name) for f in tools]
    spec = EnvironmentSpec(
        manifest,
        state_model,
        specs,
        initial_states=states,
        tasks_source=tasks,
        scenarios_source=scenarios,
    )
    if register:
        _PROGRAMMATIC[name] = spec
        from .registration import register_environment

        register_environment(spec)
    return spec
