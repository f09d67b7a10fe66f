"""Server-side session registry: many isolated sessions of the catalog's environments in one process.

Every transport (the fast session protocol, the MCP endpoint, the HTTP control plane) goes through
one :class:`SessionManager`.  Sessions are identified by unguessable ids, expire after ``ttl_s``
seconds without use, and are bounded by ``max_sessions``.  All methods are synchronous and cheap;
the manager is driven from one asyncio event loop (no locking needed) or guarded by the caller.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.environment.catalog import get_environment, list_environments
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.states import task_environments, task_initial_state
from gym_envfactory.errors import (
    BadRequestError,
    CapacityError,
    EnvFactoryError,
    UnknownSessionError,
)
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import RewardConfig, TurnRecord, score_episode
from gym_envfactory.session import Session

__all__ = ["SessionManager", "ManagedSession", "UnknownSessionError", "CapacityError", "BadRequestError"]

log = logging.getLogger(__name__)








@dataclass
class ManagedSession:
    """A live session and its bookkeeping (ids, environments, task, last use)."""

    session_id: str
    session: Session
    envs: list[str]
    task_id: str | None
    created: float
    last_used: float
    calls: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


class SessionManager:
    """Create, look up, fork, snapshot and expire sessions.

    Args:
        envs: environment names this server serves (default: the whole catalog, leaving out, with an
            error in the log and in :attr:`skipped`, every package that does not load).
        ttl_s: idle seconds after which :meth:`expire` closes a session.
        max_sessions: hard cap; :meth:`create` raises :class:`CapacityError` beyond it.
        clock: monotonic time source in seconds (injectable for tests).

    Raises:
        UnknownEnvironmentError, SpecError: a name in ``envs`` that does not load.
        BadRequestError: serving the whole catalog, and no package of it loads.
    """

    def __init__(self, envs: Sequence[str] | None = None, *, ttl_s: float = 900.0, max_sessions: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        names = list(envs) if envs else list_environments()
        self.specs: dict[str, EnvironmentSpec] = {}
        #: Catalog packages left out because they do not load (name → error), when serving the whole catalog.
        self.skipped: dict[str, str] = {}
        for n in names:
            if envs:
                spec = get_environment(n)  # asked for by name: a broken package is the caller's error
            else:
                try:
                    spec = get_environment(n)
                    spec.tasks  # noqa: B018 - a broken tasks file is found now, not by the first client
                except Exception as exc:  # noqa: BLE001 - one broken package never stops the others
                    self.skipped[n] = exc.__class__.__name__ + ": " + str(exc)[:2000]
                    log.error("not serving %s: the package is broken: %s", n, self.skipped[n])
                    continue
            self.specs[spec.name] = spec
        if not self.specs and not envs and self.skipped:
            raise BadRequestError(f"no environment to serve: every catalog package is broken "
                                  f"({'; '.join(f'{k}: {v}' for k, v in self.skipped.items())})")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.sessions: dict[str, ManagedSession] = {}
        self.counters = {"created": 0, "closed": 0, "expired": 0, "calls": 0, "errors": 0}

    # ------------------------------------------------------------------ helpers
    def spec(self, name: str) -> EnvironmentSpec:
        """The served environment called ``name``.  Raises :class:`BadRequestError` when it is not served."""
        spec = self.specs.get(name)
        if spec is None:
            raise BadRequestError(f"this server does not serve {name!r}; it serves {', '.join(self.specs)}")
        return spec

    def _register(self, session: Session, env_names: list[str], task_id: str | None) -> ManagedSession:
        if len(self.sessions) >= self.max_sessions:
            self.expire()
            if len(self.sessions) >= self.max_sessions:
                session.close()
                raise CapacityError(f"server holds {self.max_sessions} sessions; close some or raise max_sessions")
        now = self.clock()
        sid = secrets.token_hex(16)
        ms = ManagedSession(sid, session, env_names, task_id, now, now)
        self.sessions[sid] = ms
        self.counters["created"] += 1
        return ms

    def get(self, session_id: str) -> ManagedSession:
        """The live session ``session_id`` (touches its idle timer).  Raises :class:`UnknownSessionError`."""
        ms = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if ms is None:
            raise UnknownSessionError(f"no live session {session_id!r} (closed, expired, or from another server)")
        ms.last_used = self.clock()
        return ms

    # ------------------------------------------------------------------ control plane
    def create(self, env: str | Sequence[str], *, task_id: str | None = None, initial_state: Any = None,
               snapshot: str | bytes | None = None) -> ManagedSession:
        """Create a session of ``env`` (one name or several) from a task's initial state, an explicit
        initial state (a state name or dict), a :meth:`snapshot`, or the default initial state.

        Raises:
            BadRequestError: unknown environment or task, invalid state or snapshot.
            CapacityError: too many sessions.
        """
        if not isinstance(env, (str, list)) or (isinstance(env, list) and not all(isinstance(e, str) for e in env)):
            raise BadRequestError("env must be an environment name or a list of names")
        if snapshot is not None and not isinstance(snapshot, (str, bytes)):
            raise BadRequestError("snapshot must be the string returned by the snapshot method")
        if task_id is not None and not isinstance(task_id, str):
            raise BadRequestError("task_id must be a string")
        names = [env] if isinstance(env, str) else list(env)
        if not names:
            raise BadRequestError("give at least one environment")
        specs = [self.spec(n) for n in names]
        try:
            if task_id is not None:
                tasks = specs[0].tasks
                task = tasks.get(task_id)
                if task.envs != [s.name for s in specs] and len(names) == 1:
                    specs = task_environments(specs[0], task)
                    for s in specs:
                        self.spec(s.name)
                session = Session.from_states(specs, task_initial_state(specs[0], task))
            else:
                session = Session(specs, initial_state)
            if snapshot is not None:
                session.restore(snapshot if isinstance(snapshot, bytes) else snapshot.encode())
        except (EnvFactoryError, KeyError) as exc:
            raise BadRequestError(str(exc)) from None
        return self._register(session, [s.name for s in specs], task_id)

    def fork(self, session_id: str, k: int = 1) -> list[ManagedSession]:
        """``k`` independent copies of a session (GRPO groups)."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1024:
            raise BadRequestError("k must be an integer in 1..1024")
        src = self.get(session_id)
        if len(self.sessions) + k > self.max_sessions:
            self.expire()
            if len(self.sessions) + k > self.max_sessions:  # refuse before creating anything
                raise CapacityError(f"forking {k} would exceed {self.max_sessions} sessions "
                                    f"({len(self.sessions)} live); close some or raise max_sessions")
        return [self._register(s, list(src.envs), src.task_id) for s in src.session.fork_many(k)]

    def close(self, session_id: str) -> bool:
        """Close and forget a session; ``False`` if it did not exist."""
        ms = self.sessions.pop(session_id, None)
        if ms is None:
            return False
        ms.session.close()
        self.counters["closed"] += 1
        return True

    def expire(self) -> int:
        """Close every session idle for longer than ``ttl_s``; returns how many."""
        cutoff = self.clock() - self.ttl_s
        stale = [sid for sid, ms in self.sessions.items() if ms.last_used < cutoff]
        for sid in stale:
            self.sessions.pop(sid).session.close()
        self.counters["expired"] += len(stale)
        return len(stale)

    def close_all(self) -> None:
        """Close every live session (server shutdown)."""
        for sid in list(self.sessions):
            self.close(sid)

    # ------------------------------------------------------------------ session operations
    def call(self, session_id: str, name: str, arguments: Any = None, *, call_id: str | None = None,
             tag: Any = None) -> dict[str, Any]:
        """Run one tool call; returns :meth:`ToolResult.to_dict` (typed errors, never raises for a bad call)."""
        ms = self.get(session_id)
        res = ms.session.call(name, arguments, call_id=call_id, tag=tag)
        ms.calls += 1
        self.counters["calls"] += 1
        if not res.ok:
            self.counters["errors"] += 1
        return res.to_dict()

    def record_invalid(self, session_id: str, name: str, raw: Any, message: str, *, call_id: str | None = None,
                       tag: Any = None) -> dict[str, Any]:
        """Log a call the client could not parse (``parse_error``); returns :meth:`ToolResult.to_dict`.

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        ms = self.get(session_id)
        self.counters["errors"] += 1
        return ms.session.record_invalid(name, raw, message, call_id=call_id, tag=tag).to_dict()

    def state(self, session_id: str) -> Any:
        """The session's canonical state (one env: its dict; several: ``{env_name: dict}``).

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        return self.get(session_id).session.state()

    def snapshot(self, session_id: str) -> str:
        """The session's :meth:`Session.snapshot` as JSON text (for the wire).

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        return self.get(session_id).session.snapshot().decode()

    def restore(self, session_id: str, snapshot: str | bytes) -> None:
        """Replace the session's states and log with ``snapshot`` (text or bytes of a snapshot).

        Raises:
            UnknownSessionError: no live session ``session_id``.
            BadRequestError: the snapshot is invalid (the session is left unchanged).
        """
        try:
            self.get(session_id).session.restore(snapshot if isinstance(snapshot, bytes) else snapshot.encode())
        except EnvFactoryError as exc:
            if isinstance(exc, UnknownSessionError):
                raise
            raise BadRequestError(str(exc)) from None

    def reset(self, session_id: str) -> None:
        """Return the session to the state it was created with, with an empty action log.

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        self.get(session_id).session.reset()

    def info(self, session_id: str) -> dict[str, Any]:
        """The session's id, environment names, task id, call count, idle seconds and tools (OpenAI format).

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        ms = self.get(session_id)
        return {"session_id": ms.session_id, "envs": ms.envs, "task_id": ms.task_id, "calls": ms.calls,
                "idle_s": self.clock() - ms.last_used,
                "tools": [t.openai_schema() for t in ms.session.tools.values()]}

    def action_log(self, session_id: str) -> list[dict[str, Any]]:
        """The session's calls since its last reset, as :meth:`ActionRecord.to_dict` dicts.

        Raises:
            UnknownSessionError: no live session ``session_id``.
        """
        return [r.to_dict() for r in self.get(session_id).session.action_log]

    def score(self, session_id: str, *, reward: Mapping[str, float] | None = None,
              texts: Sequence[str] | None = None) -> dict[str, Any]:
        """The reward of a session created from a task, as the episode stands (docs/reward.md): every
        component and the state difference against the task's ground truth, so a harness in any
        language gets the gym's reward without running the Gymnasium layer.

        Calls are grouped into turns by their ``tag`` (the turn index the Gymnasium env sends; untagged
        calls count in turn 0).  Per-turn states are not known server-side, so ``R_state`` is the final
        state's verdict.  ``texts``: the assistant's replies per turn, for ``R_output``; ``reward``:
        :class:`~gym_envfactory.reward.RewardConfig` fields (``alpha``, ``gamma``, ...).

        Raises:
            UnknownSessionError: no live session ``session_id``.
            BadRequestError: the session was not created from a task, or bad ``reward``/``texts``.
        """
        ms = self.get(session_id)
        if ms.task_id is None:
            raise BadRequestError("score needs a session created from a task (create with task_id)")
        try:
            cfg = RewardConfig.coerce(dict(reward) if reward is not None else None)
        except (TypeError, ValueError) as exc:
            raise BadRequestError(f"bad reward config: {exc}") from None
        if texts is not None and (not isinstance(texts, list) or not all(isinstance(x, str) for x in texts)):
            raise BadRequestError("texts must be a list of strings (the assistant's replies per turn)")
        reference = task_reference(self.spec(ms.envs[0]), ms.task_id)
        records: list[TurnRecord] = [TurnRecord()]
        for rec in ms.session.action_records():
            turn = rec.tag if isinstance(rec.tag, int) and not isinstance(rec.tag, bool) and 0 <= rec.tag < 10_000 else 0
            while len(records) <= turn:
                records.append(TurnRecord())
            res = rec.result
            records[turn].calls.append((res.name, res.arguments, res.is_invalid_call))
        for i, text in enumerate(texts or []):
            while len(records) <= i:
                records.append(TurnRecord())
            records[i].text = text
        result = score_episode(records, reference, ms.session.state(), cfg)
        out = result.to_dict()
        out["state_diff"] = [str(d) for d in result.state_diff]
        return out

    def stats(self) -> dict[str, Any]:
        """Live session count, the lifetime counters (created, closed, expired, calls, errors) and
        the environments served."""
        return {"sessions": len(self.sessions), **self.counters, "envs": list(self.specs)}

    def catalog(self) -> list[dict[str, Any]]:
        """One row per served environment: name, version, domain, tool and task counts, gym id."""
        return [{"name": s.name, "version": s.version, "domain": s.domain, "tools": len(s.tools),
                 "tasks": len(s.tasks), "gym_id": s.gym_id} for s in self.specs.values()]


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
