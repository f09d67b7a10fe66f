"""Environment specifications: loading ``env_images/<Name>/`` packages and defining environments in code.

An environment package (docs/authoring.md) is a folder::

    env_images/HotelBooking/
        environment.toml      # manifest (this module's :class:`Manifest`)
        __init__.py           # makes the folder an importable package (may be empty)
        state.py              # the root Pydantic model (the database)
        tools.py              # @tool functions: tool(state, *, arg: T = default) -> R
        initial_states/*.json # validated by the state model; at least "small" and "large"
        tasks.jsonl           # tasks (gym_envfactory.environment.tasks.Task), one JSON object per line
        scenarios.jsonl       # validation scenarios (gym_envfactory.validation.Scenario)

Errors name the file, line and field (:class:`~gym_envfactory.errors.SpecError`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.cow import plain_model
from gym_envfactory.environment.manifest import STATE_NAME_RE, Manifest, canonical_json, parse_json_text
from gym_envfactory.environment.scenarios import Scenario, load_scenarios
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.environment.tools import ToolSpec
from gym_envfactory.errors import SpecError, UntrustedPackageError

__all__ = ["EnvironmentSpec", "require_trusted"]

log = logging.getLogger(__name__)










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
        #: ``(module name, file)`` whose import defines this environment (set by ``define_environment``
        #: from its caller), so a server process can import it (``envfactory serve --module``); else ``None``.
        self.defined_in: tuple[str, str | None] | None = None
        self.bookkeeping_fields = tuple(manifest.bookkeeping_fields)
        self.free_text_fields = tuple(manifest.free_text_fields)
        self.set_fields = tuple(manifest.set_fields)
        self.tools: dict[str, ToolSpec] = {}
        for t in tools:
            if t.name in self.tools:
                raise SpecError(f"duplicate tool name {t.name!r}", file=path, field="tools")
            t.env = self.name
            t.strict_arguments = manifest.strict_arguments  # docs/argument-policy.md, "Strict mode"
            # docs/performance.md, "Shared reads": only for state models all in their fields
            t.shared_reads = manifest.shared_reads and t.read_only and plain_model(state_model)
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
        """Paths left out of state equivalence: bookkeeping plus free text (docs/reward.md; docs/cases.md C07)."""
        return self.bookkeeping_fields + self.free_text_fields

    @property
    def major(self) -> int:
        """The major version (the ``N`` of semver ``N.m.p``), which the gym id carries."""
        return int(self.version.split(".", 1)[0])

    @property
    def gym_id(self) -> str:
        """The Gymnasium id, ``envfactory/<name>-v<major>`` (docs/architecture.md, "The Gymnasium contract")."""
        return f"envfactory/{self.name}-v{self.major}"

    # ---------------------------------------------------------------- initial states
    def initial_state_names(self) -> list[str]:
        """Names of the available initial states, sorted: inline ones and ``initial_states/*.json``."""
        names = set(self._inline_states)
        if self.path is not None and (self.path / "initial_states").is_dir():
            names.update(p.stem for p in (self.path / "initial_states").glob("*.json"))
        return sorted(names)

    def initial_state_json(self, name: str | None = None) -> bytes:
        """The named initial state as validated JSON bytes (cached).  Raises :class:`SpecError`."""
        name = name or self.manifest.default_initial_state
        if not isinstance(name, str) or not STATE_NAME_RE.match(name):
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
                raw = parse_json_text(file.read_text(encoding="utf-8"), file=file)
            data = self.dump_state(raw, file=file)
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

    def dump_state(self, raw: Any, *, file: Path | str | None = None) -> bytes:
        """The JSON bytes a session keeps for state ``raw`` (a state dict or a model of this environment):
        validated by the state model, dumped with ``model_dump_json`` and checked to load back into the
        model, so that every call, :meth:`~gym_envfactory.session.Session.state` and a restored snapshot of
        the session can parse what it stores (a float NaN or infinity, for one, is written as ``null``).

        Raises:
            SpecError: ``raw`` does not validate, or its JSON does not load back (``field``: the dotted path
                of the first offending field; the message says what the JSON holds there).  Nothing is kept.
        """
        data = self.validate_state(raw, file=file).model_dump_json().encode()
        try:
            self.state_model.model_validate_json(data)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in err.get("loc", ())) or None
            written = json.dumps(err.get("input"), default=repr)[:80]
            hint = "; JSON has no NaN or infinity: a float NaN or infinity is written as null" if written == "null" else ""
            raise SpecError(
                f"the state does not load back from the JSON a session would keep: {field or 'the state'} is "
                f"written as {written}, which the state model refuses ({err.get('msg', 'invalid')}){hint}",
                file=file, field=field) from None
        return data

    # ---------------------------------------------------------------- tasks & scenarios
    @cached_property
    def tasks(self) -> TaskSet:
        """All tasks of the environment (loaded and schema-checked on first access)."""
        src = self._tasks_source
        if src is None and self.path is not None and (self.path / "tasks.jsonl").is_file():
            src = self.path / "tasks.jsonl"
        if src is None:
            return TaskSet(self.name, [], source=None)
        if isinstance(src, TaskSet):
            return src
        if isinstance(src, (str, Path)):
            return TaskSet.from_jsonl(self.name, Path(src))
        return TaskSet.from_objects(self.name, list(src))

    def with_tasks(self, tasks: TaskSet | Sequence[Any] | str | Path) -> EnvironmentSpec:
        """This environment with ``tasks`` as its tasks in place of its own (``tasks.jsonl`` or the
        programmatic list): same manifest, state model, tools, initial states and validation scenarios,
        a new spec that is not registered and writes nothing.  ``tasks``: a :class:`TaskSet` of this
        environment (kept as it is, with the files and lines it was read from: what ``--tasks FILE`` and
        ``gym.make(..., tasks=...)`` hand over, :func:`~gym_envfactory.environment.taskfiles.read_tasks`),
        task dicts or :class:`~gym_envfactory.environment.tasks.Task` objects, or a ``tasks.jsonl`` path.

        Raises:
            ValueError: a :class:`TaskSet` of another environment.
        """
        if isinstance(tasks, TaskSet) and tasks.env_name != self.name:
            raise ValueError(f"the task set is {tasks.env_name!r}'s, not {self.name!r}'s")
        inline = None
        if self.path is None:  # a code-defined environment keeps its states inline: carry them over
            inline = {n: json.loads(self.initial_state_json(n)) for n in self.initial_state_names()}
        source: Any = tasks if isinstance(tasks, (TaskSet, str, Path)) else list(tasks)
        spec = EnvironmentSpec(self.manifest, self.state_model, list(self.tools.values()), path=self.path,
                               initial_states=inline, tasks_source=source, scenarios_source=self._scenarios_source)
        spec.defined_in = self.defined_in
        return spec

    @cached_property
    def scenarios(self) -> list[Scenario]:
        """The validation scenarios (``scenarios.jsonl`` or the objects given; loaded on first access).

        Raises:
            SpecError: a malformed scenario (file, line, field).
        """
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
        """The MCP ``tools/list`` entries, one per tool (name, description, ``inputSchema``, annotations
        and, when the result is typed, ``outputSchema``; MCP spec 2025-06-18, ``Tool``)."""
        return [t.mcp_schema() for t in self.tools.values()]

    def content_hash(self) -> str:
        """sha256 over the package files (or tool schemas for programmatic environments)."""
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










# ------------------------------------------------------------------------------------ registry


def require_trusted(specs: Iterable[EnvironmentSpec], *, trust: bool, doing: str) -> None:
    """Refuse to run untrusted packages' code in this process (provenance ``generated`` or ``imported``:
    :attr:`Provenance.trusted`) unless ``trust``: the one rule of ``envfactory validate``, ``gen tasks``,
    ``graph sample --check`` and ``tasks import`` (docs/architecture.md, "Trust").

    Raises:
        UntrustedPackageError: a spec of ``specs`` is untrusted and ``trust`` is false; the message names the
            packages and their provenance, says what ``doing`` would run here, and to pass ``--trust``.
    """
    if trust:
        return
    untrusted = [s for s in dict.fromkeys(specs) if not s.manifest.provenance.trusted]
    if untrusted:
        names = ", ".join(f"{s.name} (provenance {s.manifest.provenance.kind})" for s in untrusted)
        raise UntrustedPackageError(f"{names} untrusted: {doing} runs their code in this process; pass --trust to "
                                    f"do so (EnvGen and the importer validated them in their sandbox)")

