"""Sessions: one episode's private copy of one or more environments' states, plus the action log.

docs/architecture.md, "Sessions".  Every shell (Gymnasium env, servers, trainers) is a thin layer over :class:`Session`.

Isolation: a session never mutates an object another session (or the spec) can see.  States are held
as validated JSON bytes until a call needs them (``reset``/``restore``/``fork`` of untouched states are
O(1)); the first call then takes a copy-on-write *view* (:mod:`gym_envfactory.environment.cow`) of a
parsed *base* shared through a process-wide cache keyed by the bytes, so sessions on the same bytes share
one parse and copy only the records they touch.  Forking a materialised session freezes its current
model as a new base (no serialisation, no parse) and gives parent and children views of it.

A bad model action never raises: :meth:`Session.call` returns a typed :class:`ToolResult`.

Calls are atomic: a call that fails (a ``ToolError`` after a partial write, any other exception, a
result that fails the tool's return type, a write that leaves the state invalid) leaves the state
exactly as it was before the call.  The successful path pays nothing for this: a live state keeps the
frozen base its view was made from and the write calls applied since (``_LiveState``); a failed write
call rebuilds the state as a fresh view of that base by replaying them (tools are deterministic, docs/authoring.md;
a replayed write whose result differs from the logged one, or writes that give two different states in two
replays, are reported in the failed call's error).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self, runtime_checkable

import pydantic_core
from pydantic import BaseModel, ValidationError

from gym_envfactory.authoring import ToolError
from gym_envfactory.environment import cow
from gym_envfactory.environment.arguments import (
    decode_arguments,
    describe_validation_error,
    raw_text,
    safe_repr,
    scrub,
)
from gym_envfactory.environment.manifest import canonical_json
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.states import resolve_initial_states
from gym_envfactory.environment.tools import ToolSpec
from gym_envfactory.errors import (
    ArgumentError,
    SessionClosedError,
    SnapshotError,
    SpecError,
)

__all__ = ["Session", "SessionProtocol", "ToolResult", "ActionRecord", "ErrorType", "INVALID_CALL_ERRORS"]

log = logging.getLogger(__name__)

ErrorType = Literal["parse_error", "unknown_tool", "invalid_arguments", "tool_error", "internal_error"]

#: Error types caused by a malformed call (counted as *invalid* calls by the length penalty).
INVALID_CALL_ERRORS: frozenset[str] = frozenset({"parse_error", "unknown_tool", "invalid_arguments"})

#: Write calls a live state replays at most on a rollback; past this many it re-serialises (amortised:
#: one state serialisation per this many successful writes).
REDO_LIMIT = 1024


@dataclass(slots=True)
class _LiveState:
    """One environment's materialised state: the model (a copy-on-write view of ``base``, or the model
    handed out by :meth:`Session.state_model`), the frozen base it started from (never mutated; shared
    with other sessions), and the successful write calls applied since (``redo``: ``(tool, canonical
    arguments the caller gave (defaults it left out are not logged), result fingerprint)``, so a rollback
    can tell a replay that diverges).  ``exposed``: the
    model was handed out by :meth:`Session.state_model`, so it may change outside calls: every write call
    first takes a frozen copy of it as the new base, and a fork copies it instead of freezing it.
    ``pristine``: the model is a view of ``base`` that no call has touched yet, so a fork can share ``base``
    as it is (repeated forks of one session then share one base)."""

    model: BaseModel
    base: BaseModel
    redo: list[tuple[ToolSpec, dict[str, Any], Any]]
    exposed: bool = False
    pristine: bool = True
    #: the model whose shared-reads cell (:func:`~gym_envfactory.environment.cow.share_cell`) is ``cell``
    cell_of: BaseModel | None = None
    cell: list[bool] | None = None






@dataclass(slots=True)
class ToolResult:
    """The typed outcome of one tool call.

    Attributes:
        name: tool name as called.
        ok: ``True`` when the tool ran and returned ``content``.
        content: the JSON-serialisable result (``ok``) or ``None``.
        error_type: ``None`` or one of :data:`ErrorType`.
        error: human/model-readable message (``None`` when ok).
        error_code: the :class:`ToolError` code (domain errors) or the error type.
        details: per-field problems for ``invalid_arguments``.
        arguments: the validated arguments in canonical JSON form (``None`` if they did not validate).
        call_id: the id the model gave the call (OpenAI ``tool_call_id``), if any.
    """

    name: str
    ok: bool
    content: Any = None
    error_type: ErrorType | None = None
    error: str | None = None
    error_code: str | None = None
    details: list[dict[str, str]] | None = None
    arguments: dict[str, Any] | None = None
    call_id: str | None = None

    @property
    def is_invalid_call(self) -> bool:
        """True for parse errors, unknown tools and invalid arguments (docs/reward.md, ``P_len``)."""
        return self.error_type in INVALID_CALL_ERRORS

    def to_text(self) -> str:
        """The tool message content the model sees (JSON)."""
        if self.ok:
            return json.dumps(self.content, ensure_ascii=False)
        body: dict[str, Any] = {"error": {"type": self.error_type, "message": self.error}}
        if self.error_code and self.error_code != self.error_type:
            body["error"]["code"] = self.error_code
        if self.details:
            body["error"]["details"] = self.details
        return json.dumps(body, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict (the wire form of the session protocol; :class:`ToolResult`
        takes it back as keyword arguments)."""
        return {
            "name": self.name,
            "ok": self.ok,
            "content": self.content,
            "error_type": self.error_type,
            "error": self.error,
            "error_code": self.error_code,
            "details": self.details,
            "arguments": self.arguments,
            "call_id": self.call_id,
        }


@dataclass(slots=True, frozen=True)
class ActionRecord:
    """One entry of the action log: the raw call as received and its typed result."""

    index: int
    name: str
    raw_arguments: Any
    result: ToolResult
    tag: Any = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict, the result nested as :meth:`ToolResult.to_dict`."""
        return {
            "index": self.index,
            "name": self.name,
            "raw_arguments": self.raw_arguments,
            "result": self.result.to_dict(),
            "tag": self.tag,
        }


_RESULT_MODELS: dict[int, tuple[Any, type | None]] = {}


def _result_model(adapter: Any) -> type | None:
    """The model class a tool's output adapter validates when its schema is exactly that model with no
    validator around it and ``revalidate_instances="never"``: then validating an instance of exactly that
    class returns it unchanged, so :meth:`Session._execute` may skip the call.  ``None`` otherwise.
    Cached per adapter (keyed by ``id``, the adapter kept to check identity)."""
    entry = _RESULT_MODELS.get(id(adapter))
    if entry is not None and entry[0] is adapter:
        return entry[1]
    cls = None
    try:
        schema = adapter.core_schema
        if schema.get("type") == "model" and schema.get("cls") is not None and not schema.get("custom_init") \
                and schema["cls"].model_config.get("revalidate_instances", "never") == "never" \
                and schema.get("revalidate_instances", "never") == "never":
            cls = schema["cls"]
    except (AttributeError, TypeError, KeyError):  # an adapter without a plain schema: always validate
        cls = None
    _RESULT_MODELS[id(adapter)] = (adapter, cls)
    return cls


def _same_state(a: BaseModel, b: BaseModel) -> bool:
    """Whether two models of one state are the same state: equal by value (records the two share are
    compared by identity, O(records)), else by their JSON (the ground truth: NaN, an imported API's
    private instance)."""
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises: the JSON decides
        pass
    return bool(a.model_dump_json() == b.model_dump_json())


def _fingerprint(content: Any) -> str:
    """A tool result as canonical JSON text (what a rollback compares a replayed result with; NaN
    equals NaN here), kept instead of the result object, which the caller may edit."""
    try:
        return json.dumps(content, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(content)


#: Characters of a call's name, of arguments that did not validate (their JSON) and (x2) of a
#: ``record_invalid`` message that the action log keeps: the reward needs that the call was invalid,
#: never its payload (issue 25, item 1: 3.9 MB of nested empty lists were kept whole, ~80 MB a call).
MAX_LOGGED_RAW = 2000


def _loggable(raw: Any) -> Any:
    """What the action log keeps of arguments that did not validate: JSON data whose encoding takes at
    most :data:`MAX_LOGGED_RAW` characters, else a safe string of at most that many (the encoding's head)."""
    if isinstance(raw, (str, bytes)) and len(raw) > MAX_LOGGED_RAW:
        return raw_text(raw[:MAX_LOGGED_RAW] if isinstance(raw, str) else raw[:MAX_LOGGED_RAW].decode("utf-8", "replace"))
    if not isinstance(raw, (str, bytes)):
        try:
            text = json.dumps(raw, ensure_ascii=False, default=safe_repr)
        except Exception:  # noqa: BLE001 - RecursionError, ValueError, a hostile object's own error
            return raw_text(raw)
        if len(text) > MAX_LOGGED_RAW:
            return scrub(text[:MAX_LOGGED_RAW])
    try:
        return decode_arguments(raw)
    except ValueError:
        return raw if isinstance(raw, str) and not raw.strip().startswith("{") and len(raw) < 2000 and scrub(raw) == raw else raw_text(raw)


@runtime_checkable
class SessionProtocol(Protocol):
    """What every shell may rely on, whether the session is local (:class:`Session`) or on a server
    (:class:`~gym_envfactory.backends.remote.RemoteSession`).  Same results, same errors, same
    snapshots: the conformance suite (``tests/conformance/``) checks every backend against it.
    """

    envs: dict[str, EnvironmentSpec]
    tools: dict[str, ToolSpec]

    def call(self, name: str, arguments: Any = None, *, call_id: str | None = None, tag: Any = None) -> ToolResult:
        """Validate and run one tool call; a bad call is a typed result, never an exception."""
        ...

    def record_invalid(self, name: str, raw: Any, message: str, *, call_id: str | None = None,
                       tag: Any = None, not_recorded: int = 0, error_type: str = "parse_error") -> ToolResult:
        """Log a call that could not be parsed (``parse_error``), or one the env refused as an
        ``unknown_tool`` (a tool its task does not offer in this turn); ``not_recorded`` > 0: the record
        stands for that many calls the env did not log one by one (``calls_not_recorded``)."""
        ...

    def state(self) -> Any:
        """The canonical state (one env: its dict; several: ``{env_name: dict}``)."""
        ...

    def state_bytes(self) -> bytes:
        """Canonical JSON bytes of :meth:`state`."""
        ...

    @property
    def action_log(self) -> list[ActionRecord]:
        """The calls since the last reset (a copy)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        ...

    def snapshot(self) -> bytes:
        """States and action log as portable JSON bytes."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace states and log with a :meth:`snapshot`; :class:`SnapshotError` leaves them unchanged."""
        ...

    def reset(self, initial_state: Any = None) -> None:
        """Back to the initial state, with an empty action log."""
        ...

    def fork(self) -> Self:
        """An independent copy."""
        ...

    def fork_many(self, k: int) -> Sequence[Self]:
        """``k`` independent copies (a GRPO group)."""
        ...

    def close(self) -> None:
        """Release the session (idempotent)."""
        ...


class Session:
    """One episode's environment state(s) and action log.

    Args:
        env: one :class:`EnvironmentSpec`, or several for a task that spans environments (their tool
            names must be distinct).
        initial_state: a reference resolved by
            :func:`~gym_envfactory.environment.states.resolve_initial_states` (``None``, a state name, a state
            dict or model, or ``{env_name: one of those}``).
        check_writes: validation mode (EnvGen's Validator, ``envfactory validate``): a write tool that
            reports success without changing the state, a read-only tool that changes it, or a failing
            tool that leaves a partial write all become ``internal_error`` results (``contract_violation``),
            and a write that leaves the state invalid for its model is caught (``invalid_state``).  Costs
            one state serialisation (and one parse after a write) per call; off in training.  In either
            mode a failed call is rolled back (module docstring).

    Raises:
        SpecError: tool name collisions across environments or an invalid initial state.
    """

    __slots__ = ("envs", "tools", "check_writes", "_pending", "_unchecked", "_states", "_log", "_closed", "_initial",
                 "_lock", "__weakref__")

    def __init__(
        self,
        env: EnvironmentSpec | Sequence[EnvironmentSpec],
        initial_state: Any = None,
        *,
        check_writes: bool = False,
    ) -> None:
        self._setup(env, check_writes)
        self._initial = resolve_initial_states(self.envs, initial_state)
        self._pending = dict(self._initial)

    @classmethod
    def from_states(cls, env: EnvironmentSpec | Sequence[EnvironmentSpec], states: Mapping[str, bytes], *,
                    check_writes: bool = False) -> Session:
        """A session starting from ``states``: ``{env_name: JSON bytes}`` already validated by each
        environment's state model (what :func:`~gym_envfactory.environment.states.resolve_initial_states`
        returns, or a replay's ``initial_state``).  O(1): nothing is parsed until the first call.

        Raises:
            SpecError: no environment, tool name collisions, or ``states`` not naming exactly the
                session's environments.
        """
        self = cls.__new__(cls)
        self._setup(env, check_writes)
        if set(states) != set(self.envs):
            raise SpecError(f"states for {sorted(states)} given to a session over {sorted(self.envs)}")
        self._initial = dict(states)
        self._pending = dict(self._initial)
        return self

    def _setup(self, environments: EnvironmentSpec | Sequence[EnvironmentSpec], check_writes: bool) -> None:
        specs = [environments] if isinstance(environments, EnvironmentSpec) else list(environments)
        if not specs:
            raise SpecError("a session needs at least one environment")
        self.envs: dict[str, EnvironmentSpec] = {s.name: s for s in specs}
        self.tools: dict[str, ToolSpec] = {}
        for s in specs:
            for name, t in s.tools.items():
                if name in self.tools:
                    raise SpecError(
                        f"tool {name!r} exists in both {self.tools[name].env} and {s.name}; "
                        "environments combined in one session need distinct tool names"
                    )
                self.tools[name] = t
        self.check_writes = check_writes
        self._states: dict[str, _LiveState] = {}
        #: environments whose pending bytes came from a :meth:`restore` and are not validated yet
        self._unchecked: set[str] = set()
        self._log: list[ActionRecord] = []
        self._closed = False
        #: held while a call runs and while frozen_state/fork_many freeze a live model in place, so a
        #: reader in another thread (an env's score() during astep) never swaps the model under a tool
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ state access
    def _model(self, env_name: str) -> BaseModel:
        """The live model of ``env_name``: on first use a copy-on-write view of the base parsed from its
        pending bytes (shared through :data:`~gym_envfactory.environment.cow.BASE_CACHE`).

        Raises:
            SpecError: the pending bytes do not validate (the session keeps them; nothing changes).
        """
        m = self._states.get(env_name)
        if m is None:
            raw = self._pending[env_name]
            model_cls = self.envs[env_name].state_model
            try:
                base = cow.BASE_CACHE.get(model_cls, raw, model_cls.model_validate_json)
            except ValidationError as exc:  # bad bytes leave the session as it was
                text, details = describe_validation_error(exc, "state")
                raise SpecError(f"the state of {env_name} held by this session does not load: {text}",
                                field=details[0]["field"] if details else None) from None
            del self._pending[env_name]
            self._unchecked.discard(env_name)
            live = self._states[env_name] = _LiveState(cow.make_view(base), base, [])
            return live.model
        return m.model

    def _state_json(self, env_name: str) -> bytes:
        m = self._states.get(env_name)
        if m is None:
            if env_name not in self._unchecked:
                return self._pending[env_name]
            self._model(env_name)  # restored bytes: validated (SpecError) and made canonical on first use
            m = self._states[env_name]
        return m.model.model_dump_json().encode()

    def state_model(self, env: str | None = None) -> BaseModel:
        """The live Pydantic state of ``env`` (default: the only/first environment).  Mutating it
        mutates the session (kept by later rollbacks, at the cost of one deep copy of the state per write
        call and per fork from then on, until a rollback replaces the model); prefer :meth:`state` for
        reading.

        Raises:
            SpecError: the session's state of ``env`` does not validate (it is kept as it is).
            KeyError: no environment ``env`` in this session.
        """
        self._check_open()
        name = env or next(iter(self.envs))
        model = self._model(name)
        self._states[name].exposed = True
        return model

    def state(self) -> dict[str, Any]:
        """Canonical JSON-compatible form of the state (a copy).

        One environment: its state dict.  Several: ``{env_name: state dict}``.

        Raises:
            SpecError: a state restored from a snapshot does not validate (:meth:`restore`; nothing changes).
        """
        self._check_open()
        if len(self.envs) == 1:
            return json.loads(self._state_json(next(iter(self.envs))))
        return {n: json.loads(self._state_json(n)) for n in self.envs}

    def state_json(self) -> bytes:
        """:meth:`state` as JSON bytes, serialised once from the live models (not canonical: field order
        as the models dump; :meth:`state_bytes` sorts keys).  What a server sends for a ``state`` read,
        with no parse and re-encode in between.

        Raises:
            SpecError: as :meth:`state`.
        """
        self._check_open()
        if len(self.envs) == 1:
            return self._state_json(next(iter(self.envs)))
        return self._states_json()

    def _states_json(self) -> bytes:
        """``{env_name: state}`` as JSON bytes, each state as the session serialises it."""
        return b"{" + b",".join(json.dumps(n).encode() + b":" + self._state_json(n) for n in self.envs) + b"}"

    def frozen_state(self) -> cow.FrozenState:
        """The current states as a :class:`~gym_envfactory.environment.cow.FrozenState`: what the reward
        compares by record identity (docs/reward.md, "Cost").  No serialisation: an untouched state
        hands out its shared base; a changed one is frozen in place as a new base (the session goes on
        with a fresh view of it and a rollback point at this moment), O(records' pointers); a state
        handed out by :meth:`state_model` is deep-copied (it may still change), and so is a state whose
        model is not plain (:func:`~gym_envfactory.environment.cow.plain_model`: private attributes, an
        imported API's live instance), which leaves the session untouched (:attr:`frozen_in_place` tells
        which).  Safe to call from another thread while a call runs: it waits for the call.

        Raises:
            SessionClosedError: the session was closed.
            SpecError: a state's bytes do not load (nothing changes).
        """
        self._check_open()
        models: dict[str, BaseModel] = {}
        with self._lock:
            for name in self.envs:
                self._model(name)
                live = self._states[name]
                if live.pristine and not live.exposed:
                    models[name] = live.base
                elif live.exposed or not cow.plain_state(live.model):
                    # may change outside calls, or holds state a fresh view would not carry over (private
                    # attributes, an imported API's instance): a frozen copy, the session left as it is
                    models[name] = cow.frozen_copy(live.model)
                else:
                    self._rebase(live)
                    models[name] = live.base
        return cow.FrozenState(models)

    @property
    def frozen_in_place(self) -> bool:
        """Whether :meth:`frozen_state` costs O(records' pointers) here: every state model is plain
        (:func:`~gym_envfactory.environment.cow.plain_model`).  Otherwise it deep-copies the states, and
        :meth:`state` (one serialisation) is the cheaper read for the reward."""
        return all(cow.plain_model(spec.state_model) for spec in self.envs.values())

    def state_bytes(self) -> bytes:
        """Canonical JSON bytes of :meth:`state` (sorted keys): byte-identical for equal states."""
        return canonical_json(self.state())

    @property
    def action_log(self) -> list[ActionRecord]:
        """The calls made since the last reset (a deep copy: editing it never touches the session)."""
        return copy.deepcopy(self._log)

    def action_records(self) -> tuple[ActionRecord, ...]:
        """The action log without copying (for scoring and servers): records are frozen and shared by
        forks, and their results must be treated as read-only.  :attr:`action_log` hands out copies."""
        self._check_open()
        return tuple(self._log)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ------------------------------------------------------------------ calls
    def call(self, name: str, arguments: Any = None, *, call_id: str | None = None, tag: Any = None) -> ToolResult:
        """Validate and run one tool call; never raises for a bad call.

        Args:
            name: tool name.
            arguments: a dict, or a JSON string holding an object (decoded once).
            call_id: echoed in the result (OpenAI ``tool_call_id``).
            tag: stored with the action record (the Gymnasium env stores the turn index).

        Returns:
            :class:`ToolResult`: ok with content, or a typed error (``unknown_tool``,
            ``invalid_arguments``, ``tool_error``, ``internal_error``).  A failed call changes no state
            (the tool's partial writes are rolled back; a model handed out by :meth:`state_model` is
            replaced then) and is logged as failed.  ``internal_error`` codes: ``invalid_result`` (the
            result fails the tool's return type), ``invalid_state`` (the write left the state invalid),
            ``state_load_error`` (the session's state bytes do not load), ``contract_violation``
            (``check_writes``), ``internal_error`` (the tool raised).  The action log keeps this same
            object (and forks share log records), so treat it and its ``arguments`` as read-only
            (rollbacks replay them); :attr:`action_log` hands out deep copies.

        Raises:
            SessionClosedError: the session was closed (a programming error, not a model action).
        """
        if self._closed:
            raise SessionClosedError("session is closed")
        with self._lock:
            result = self._run(name, arguments, call_id)
            raw = result.arguments if result.arguments is not None else _loggable(arguments)
            log = self._log
            # result.name is the tool's name, or the unknown name scrubbed / safely repr'd by _run
            log.append(ActionRecord(len(log), result.name, raw, result, tag))
        return result

    def record_invalid(self, name: str, raw: Any, message: str, *, call_id: str | None = None, tag: Any = None,
                       not_recorded: int = 0, error_type: str = "parse_error") -> ToolResult:
        """Log a call that could not even be parsed (``parse_error``) so the trajectory keeps it, or,
        with ``error_type="unknown_tool"``, a call the env refused because its task does not offer that
        tool in this turn (docs/authoring.md, "Tool sets per turn"); the tool never runs.

        ``not_recorded`` > 0 marks the record as the summary of that many invalid calls the env did not
        log one by one (error code ``calls_not_recorded``, ``raw`` = ``{"not_recorded": n}``): only this
        parameter, which the env sets and a model's call never reaches, makes a record count more than
        once in ``P_len`` (a model writing ``{"not_recorded": 10**6}`` is one invalid call)."""
        self._check_open()
        n = not_recorded if isinstance(not_recorded, int) and not isinstance(not_recorded, bool) else 0
        kind: ErrorType = "unknown_tool" if error_type == "unknown_tool" and n == 0 else "parse_error"
        code = "calls_not_recorded" if n > 0 else kind
        result = ToolResult(name=scrub(str(name)[:200]), ok=False, error_type=kind, error=scrub(str(message)[:2 * MAX_LOGGED_RAW]),
                            error_code=code, call_id=call_id)
        self._log.append(ActionRecord(len(self._log), result.name, {"not_recorded": n} if n > 0 else _loggable(raw),
                                      result, tag))
        return result

    def _run(self, name: str, arguments: Any, call_id: str | None) -> ToolResult:
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self.tools)
            name = scrub(name[:200]) if isinstance(name, str) else safe_repr(name, 200)
            return ToolResult(name=name, ok=False, error_type="unknown_tool", error_code="unknown_tool",
                              error=f"unknown tool {name!r}; available tools: {known}", call_id=call_id)
        if isinstance(arguments, bytes):
            try:
                arguments = arguments.decode("utf-8")
            except UnicodeDecodeError:
                return ToolResult(name=name, ok=False, error_type="invalid_arguments", error_code="invalid_arguments",
                                  call_id=call_id, error=f"arguments of {name} are not UTF-8 text")
        try:
            arguments = decode_arguments(arguments)  # once per call: a parser's output passes through
        except ValueError as exc:
            return ToolResult(name=name, ok=False, error_type="invalid_arguments", error_code="invalid_arguments",
                              call_id=call_id, error=f"arguments of {name}: {exc}")
        try:
            validated = tool.validate_arguments(arguments)
        except ArgumentError as exc:
            return ToolResult(name=name, ok=False, error_type="invalid_arguments", error_code="invalid_arguments",
                              error=str(exc), details=exc.details, call_id=call_id)
        normalized = validated.__pydantic_serializer__.to_python(validated, mode="json")  # = model_dump(mode="json")
        live = self._states.get(tool.env)
        if live is None:
            try:
                self._model(tool.env)
            except SpecError as exc:
                return ToolResult(name=name, ok=False, error_type="internal_error", error_code="state_load_error",
                                  error=f"internal error in {name}: {exc}", arguments=normalized, call_id=call_id)
            live = self._states[tool.env]
        read_only = tool.read_only
        live.pristine = False
        if live.exposed and not read_only:
            self._rebase(live)  # the model was handed out and may have changed outside calls: copy it
        state = live.model
        before = state.model_dump_json() if self.check_writes else None
        try:
            if tool.shared_reads and before is None:  # docs/performance.md, "Shared reads"
                result = self._execute_shared(live, tool, state, validated, normalized, call_id)
            else:
                result = self._execute(tool, state, validated, normalized, call_id)
        except BaseException:  # KeyboardInterrupt and the like: still nothing half-done
            self._roll_back(tool, live, before)
            raise
        after = None
        if before is not None:
            result, after = self._check_write(tool, result, before, state)
        if not result.ok:
            if after is None or after != before:
                problem = self._roll_back(tool, live, before)
                if problem:
                    result.error = f"{result.error} ({problem})"
        elif after is not None:
            if not read_only:  # validation mode: the write is checked, make it the rollback point
                self._rebase(live)
        elif not read_only:
            # the result as JSON text, not the object: the caller may edit the content it was handed.  The
            # arguments as the caller gave them: a default it left out is not logged (an explicit None for
            # ``x: str = None`` would fail re-validation when the rollback replays the call)
            given = validated.model_fields_set
            redo_args = normalized if len(given) == len(normalized) else {
                k: v for k, v in normalized.items() if k in given}
            live.redo.append((tool, redo_args, _fingerprint(result.content)))
            if len(live.redo) > REDO_LIMIT:
                self._rebase(live)
        return result

    @classmethod
    def _execute_shared(cls, live: _LiveState, tool: ToolSpec, state: BaseModel, validated: BaseModel,
                        normalized: dict[str, Any], call_id: str | None) -> ToolResult:
        """:meth:`_execute` for a shared-reads tool: copy-on-write suspended on the state's collections
        for the call, so its scans read the base's records in place instead of copying them."""
        cell = live.cell
        if live.cell_of is not state or cell is None:
            cell = live.cell = cow.share_cell(state)
            live.cell_of = state
        cell[0] = True
        try:
            return cls._execute(tool, state, validated, normalized, call_id)
        finally:
            cell[0] = False

    @staticmethod
    def _execute(tool: ToolSpec, state: BaseModel, validated: BaseModel, normalized: dict[str, Any],
                 call_id: str | None) -> ToolResult:
        """Run the tool on ``state`` and validate its result; every ``Exception`` becomes a typed result."""
        name = tool.name
        try:
            raw = tool.fn(state, **validated.__dict__)
        except ToolError as exc:
            return ToolResult(name=name, ok=False, error_type="tool_error", error=exc.message,
                              error_code=exc.code, arguments=normalized, call_id=call_id)
        except OverflowError as exc:  # arithmetic on an extreme argument (amount=1e308): the call's fault
            message = f"a value is too large to compute with ({exc})"
            return ToolResult(name=name, ok=False, error_type="invalid_arguments", error_code="invalid_arguments",
                              error=f"invalid arguments for {name}: {message}",
                              details=[{"field": "<arguments>", "message": message}],
                              arguments=normalized, call_id=call_id)
        except ValidationError as exc:  # validate_assignment, or a record built from bad values
            text, details = describe_validation_error(exc, exc.title)
            log.warning("tool %s left the state invalid: %s", name, text)
            return ToolResult(name=name, ok=False, error_type="internal_error", error_code="invalid_state",
                              error=f"internal error in {name}: the tool's write left the state invalid: {text}",
                              details=details, arguments=normalized, call_id=call_id)
        except Exception as exc:  # noqa: BLE001 - a tool bug must become an observation, not a crash
            log.exception("tool %s raised", name)
            return ToolResult(name=name, ok=False, error_type="internal_error", error_code="internal_error",
                              error=f"internal error in {name}: {type(exc).__name__}: {exc}",
                              arguments=normalized, call_id=call_id)
        adapter = tool.output_adapter
        try:  # the TypeAdapter's own validator and serializer: validate_python / dump_python(mode="json")
            if type(raw) is not _result_model(adapter):  # an exact instance of the model would come back as is
                raw = adapter.validator.validate_python(raw)
            content = adapter.serializer.to_python(raw, mode="json")
        except ValidationError as exc:
            text, details = describe_validation_error(exc, "result")
            log.warning("tool %s returned a value that fails its return type: %s", name, text)
            return ToolResult(name=name, ok=False, error_type="internal_error", error_code="invalid_result",
                              error=f"internal error in {name}: the tool's result failed its declared return "
                                    f"type: {text}", details=details, arguments=normalized, call_id=call_id)
        except Exception as exc:  # noqa: BLE001 - PydanticSerializationError and the like
            log.warning("tool %s returned a value that cannot be serialised: %s", name, exc)
            return ToolResult(name=name, ok=False, error_type="internal_error", error_code="invalid_result",
                              error=f"internal error in {name}: the tool's result could not be serialised: "
                                    f"{type(exc).__name__}: {exc}", arguments=normalized, call_id=call_id)
        return ToolResult(name, True, content, None, None, None, None, normalized, call_id)  # positional: hot path

    def _check_write(self, tool: ToolSpec, result: ToolResult, before: str,
                     state: BaseModel) -> tuple[ToolResult, str]:
        """Validation mode: the write contract and the state's validity after the call; returns the
        (possibly replaced) result and the state's JSON after the call."""
        after = state.model_dump_json()
        changed = after != before
        problem = None
        if result.ok and tool.read_only and changed:
            problem = "read-only tool changed the state"
        elif result.ok and not tool.read_only and not changed and not getattr(
                state, "__envfactory_hidden_write__", bool)():  # an imported API's private change (a login)
            problem = "write tool reported success but did not change the state (silent no-op write)"
        elif not result.ok and changed:
            problem = f"tool failed ({result.error_type}) after partially changing the state"
        if problem is not None:
            return ToolResult(name=result.name, ok=False, error_type="internal_error", error_code="contract_violation",
                              error=f"{tool.name}: {problem}", arguments=result.arguments,
                              call_id=result.call_id), after
        if result.ok and changed:
            try:
                self.envs[tool.env].state_model.model_validate_json(after)
            except ValidationError as exc:
                text, details = describe_validation_error(exc, "state")
                return ToolResult(name=result.name, ok=False, error_type="internal_error", error_code="invalid_state",
                                  error=f"internal error in {tool.name}: the tool's write left the state invalid: {text}",
                                  details=details, arguments=result.arguments, call_id=result.call_id), after
        return result, after

    @staticmethod
    def _rebase(live: _LiveState) -> None:
        """Make the live model the new rollback point (``live.base``) with nothing to replay.

        Not exposed: the model is frozen in place as the base and the live model becomes a fresh view of
        it (O(number of records) pointer copies, no serialisation; the records this session had copied
        are copied again on their next use).  Exposed (someone outside may still mutate it): the base is
        a frozen deep copy (:func:`~gym_envfactory.environment.cow.frozen_copy`, O(state)) and the
        live model stays the handed-out one."""
        if live.exposed:
            live.base, live.redo = cow.frozen_copy(live.model), []
        else:
            live.base, live.redo = cow.freeze(live.model), []
            live.model, live.pristine = cow.make_view(live.base), True

    def _roll_back(self, tool: ToolSpec, live: _LiveState, before: str | None) -> str | None:
        """Put ``tool.env``'s state back as it was before the failed call; returns ``None``, or a note
        saying why it could not (a tool that is not deterministic: the replay raised, a replayed write
        returned something else than it did the first time, or two replays wrote different states).

        With ``before`` (validation mode) the state is parsed from it: exact, nothing replayed.  Otherwise a
        read-only tool has nothing to undo, and a write tool's state is rebuilt as a fresh view of
        ``live.base`` (no parse: the base is a model) by replaying ``live.redo`` (the successful write
        calls since): the failure path pays, never the success path.  A model handed out by
        :meth:`state_model` is kept when the failed call left it equal to the base (one serialisation of
        each).  Each replayed write's result is compared with the logged one, and the writes are replayed a
        second time onto another view of the base and the two states compared (by value, then by their
        JSON): on a mismatch see :meth:`_keep_after_divergence`.  The state before the failed call itself is
        never serialised (successful calls pay nothing), so a write that is not deterministic but gives the
        same result and the same state in both replays, only not the first time (a clock read at coarse
        resolution), goes unnoticed.  Before any of that, a state model whose class defines
        ``__envfactory_undo_last__(model) -> bool`` (an imported environment's live instance,
        ``generators/importer/undo.py``) is asked to undo the failed call in place; when it does, nothing
        is rebuilt or replayed (a failing write then costs about what a successful one does).
        """
        model_cls = self.envs[tool.env].state_model
        if before is not None:
            if not live.exposed and not live.redo:  # nothing since the base: it is the state before the call
                live.model = cow.make_view(live.base)  # (a view keeps what bytes cannot: an imported API instance)
                return None
            live.base = model_cls.model_validate_json(before)
            live.model, live.redo, live.exposed = cow.make_view(live.base), [], False
            return None
        if tool.read_only:
            return None
        undo_last = getattr(type(live.model), "__envfactory_undo_last__", None)
        if undo_last is not None and undo_last(live.model):  # an imported API instance undid the call itself
            return None
        if not live.redo and live.exposed:
            try:
                if live.model.model_dump_json() == live.base.model_dump_json():
                    return None
            except Exception:  # noqa: BLE001 - a write that cannot even be serialised: rebuild below
                pass
        try:
            model = cow.make_view(live.base)
            diverged = self._replay(live.redo, model)
            check = None
            if not diverged and live.redo:  # the same writes once more: the state must come back the same
                check = cow.make_view(live.base)
                self._replay(live.redo, check)
        except Exception as exc:  # noqa: BLE001 - a non-deterministic tool: keep what we have, say so
            log.error("rolling back %s failed: replaying the session's writes raised %s: %s",
                      tool.env, type(exc).__name__, exc)
            return f"its partial changes could not be rolled back: {type(exc).__name__} while replaying"
        if diverged:
            return self._keep_after_divergence(tool, live, model, diverged)
        if check is not None and not _same_state(model, check):
            return self._keep_after_divergence(tool, live, model, self._first_state_divergence(live), state=True)
        live.model, live.exposed = model, False
        if live.redo:
            self._rebase(live)  # the next failure replays nothing
        return None

    @staticmethod
    def _replay(redo: Sequence[tuple[ToolSpec, dict[str, Any], Any]], model: BaseModel) -> str:
        """Run the logged writes ``redo`` on ``model``; returns the name of the first whose result differs
        from the logged one, or ``""``.  Raises what a tool raises."""
        diverged = ""
        for t, args, content in redo:
            raw = t.fn(model, **t.input_model.model_validate(args).__dict__)
            if not diverged and _fingerprint(
                    t.output_adapter.dump_python(t.output_adapter.validate_python(raw), mode="json")) != content:
                diverged = t.name
        return diverged

    def _first_state_divergence(self, live: _LiveState) -> str:
        """Which logged write of ``live.redo`` writes different states when replayed twice (the mismatch
        path only: two replays step by step, the states compared after each write): ``"<tool>"``, or the
        tools' names when the replays now agree (or raise)."""
        try:
            a, b = cow.make_view(live.base), cow.make_view(live.base)
            for i in range(len(live.redo)):
                self._replay(live.redo[i:i + 1], a)
                self._replay(live.redo[i:i + 1], b)
                if not _same_state(a, b):
                    return live.redo[i][0].name
        except Exception:  # noqa: BLE001 - diagnostics only: name them all
            pass
        return ", ".join(dict.fromkeys(t.name for t, _, _ in live.redo))

    def _keep_after_divergence(self, tool: ToolSpec, live: _LiveState, replayed: BaseModel, diverged: str, *,
                               state: bool = False) -> str:
        """The replay did not reproduce the state: ``diverged`` (the earlier write call(s)) returned something
        else the second time, or (``state``) returned the same but wrote different states in two replays.
        Kept: the live state, i.e. the state before the failed call *plus its partial changes*: the only one
        that matches every result the caller has seen (the replayed one holds other ids, counters ...), when
        it still serialises and validates; otherwise the replayed state (the successful writes only, run
        again).  Either way it becomes the new rollback point, so later rollbacks do not replay the
        non-deterministic writes again.  Returns the note for the failed call's error."""
        model_cls = self.envs[tool.env].state_model
        try:
            current = live.model.model_dump_json()
            model_cls.model_validate_json(current)
        except Exception:  # noqa: BLE001 - the failed write broke the live state: the replayed one it is
            live.model, live.exposed = replayed, False
            self._rebase(live)
            kept = ("the state was rebuilt by the replay instead, so it differs from the one earlier results "
                    "describe")
        else:
            self._rebase(live)
            kept = "the state is kept as this call left it, with any partial changes it made"
        how = ("wrote different states when replayed twice (with the same result)" if state
               else "returned a different result")
        log.warning("rolling back %s could not reproduce the state: replaying %s %s (a tool that is not "
                    "deterministic); %s", tool.env, diverged, how, kept)
        call = f"the earlier {diverged} call" if "," not in diverged else f"the earlier calls ({diverged})"
        what = "wrote different states when replayed twice" if state else "gave a different result"
        return (f"its partial changes could not be rolled back: replaying {call} {what}, so the tool is not "
                f"deterministic and the state before this call cannot be rebuilt; {kept}")

    # ------------------------------------------------------------------ lifecycle
    def reset(self, initial_state: Any = None) -> None:
        """Return to ``initial_state`` (default: the state this session was created with) and clear the
        action log.  Nothing of the previous episode survives (docs/cases.md C02)."""
        self._check_open()
        if initial_state is not None:
            self._initial = resolve_initial_states(self.envs, initial_state)
        self._pending = dict(self._initial)
        self._unchecked = set()
        self._states = {}
        self._log = []

    def snapshot(self) -> bytes:
        """Serialise states and action log to JSON bytes (portable across processes and hosts).  A restored
        state that does not validate raises :class:`SpecError` (:meth:`restore`)."""
        self._check_open()
        log_json = json.dumps([r.to_dict() for r in self._log], ensure_ascii=False).encode()
        return b'{"v":1,"envs":' + self._states_json() + b',"log":' + log_json + b"}"

    def restore(self, data: bytes) -> None:
        """Replace states and action log with a :meth:`snapshot`.  Lazy, like :meth:`reset`: the states are
        kept as JSON bytes and parsed by their models on first use (no model parse or dump here).

        Raises :class:`SnapshotError`, and then leaves the session unchanged, when the snapshot is not JSON,
        its envelope is wrong (``envs`` naming other environments, a state that is not a JSON object) or its
        action log is malformed.  A state that is a JSON object but does not validate against its model
        surfaces on first use, as a bad initial state of :meth:`from_states` does: a call answers an
        ``internal_error`` result (``state_load_error``), :meth:`state`, :meth:`snapshot` and
        :meth:`state_model` raise :class:`SpecError`; the session keeps the bytes and stays usable
        (:meth:`reset`, another :meth:`restore`)."""
        self._check_open()
        try:  # pydantic-core's parser and serialiser: one pass each, no Python-level walk of the states
            obj = pydantic_core.from_json(data)
            envs, records = obj["envs"], obj["log"]
            if not isinstance(envs, dict) or not isinstance(records, list):
                raise TypeError("'envs' must be an object and 'log' a list")
        except (ValueError, RecursionError, KeyError, TypeError) as exc:
            raise SnapshotError(f"not a session snapshot: {exc}") from None
        if set(envs) != set(self.envs):
            raise SnapshotError(f"snapshot holds {sorted(envs)}, session has {sorted(self.envs)}")
        pending = {}
        for n, raw in envs.items():
            if not isinstance(raw, dict):
                raise SnapshotError(f"snapshot state of {n} is not a JSON object")
            pending[n] = pydantic_core.to_json(raw)
        try:
            log = [ActionRecord(int(r["index"]), str(r["name"]), r["raw_arguments"], ToolResult(**r["result"]), r.get("tag"))
                   for r in records]
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:  # index 1e999: inf
            raise SnapshotError(f"snapshot action log is malformed: {type(exc).__name__}: {exc}") from None
        self._pending = pending
        self._unchecked = set(pending)
        self._states = {}
        self._log = log

    def fork(self) -> Session:
        """An independent copy (state and action log); writes to either never reach the other
        (:meth:`fork_many` with ``k=1``)."""
        return self.fork_many(1)[0]

    def fork_many(self, k: int) -> list[Session]:
        """``k`` independent forks of the current states and action log (a GRPO group).

        Copy-on-write (docs/architecture.md, "Sessions"): an untouched state's bytes are shared as they
        are; a materialised one is frozen in place as a new base (this session continues on a fresh view
        of it) and every fork gets its own view, so the cost is O(collections + records' pointers) per
        fork, with no serialisation and no parse, and each session copies only the records it uses.  A
        state handed out by :meth:`state_model` is copied once (it may still change) instead of frozen.

        Raises:
            SessionClosedError: the session was closed.
            TypeError: ``k`` is not an integer.
        """
        self._check_open()
        bases: dict[str, BaseModel] = {}
        out = []
        with self._lock:  # the children take states, pending bytes and log as of one moment
            for n, live in self._states.items():
                if live.exposed:
                    bases[n] = cow.frozen_copy(live.model)
                else:
                    if not live.pristine:
                        self._rebase(live)
                    bases[n] = live.base
            for _ in range(k):
                child = Session.__new__(Session)
                child.envs, child.tools, child.check_writes = dict(self.envs), dict(self.tools), self.check_writes
                child._initial, child._pending, child._closed = dict(self._initial), dict(self._pending), False
                child._unchecked = set(self._unchecked)
                child._lock = threading.Lock()
                child._states = {n: _LiveState(cow.make_view(b), b, []) for n, b in bases.items()}
                child._log = list(self._log)  # records are never handed out uncopied, so they can be shared
                out.append(child)
        return out

    def close(self) -> None:
        """Release the state.  Idempotent.  Later calls raise :class:`SessionClosedError`."""
        self._closed = True
        self._states = {}
        self._pending = {}
        self._unchecked = set()
        self._log = []

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("session is closed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
