"""OpenEnv endpoint: every served environment speaks OpenEnv's HTTP/WebSocket protocol (issue 28, part 1).

OpenEnv (``pip install openenv-core``, the package TRL's, Unsloth's and open-instruct's environment
examples use) talks to an environment server at a base URL: ``GET /health``, ``GET /schema``,
``GET /metadata``, ``GET /state``, ``POST /reset``, ``POST /step`` and the persistent session
``/ws``, where each WebSocket connection owns one environment instance and exchanges
``{"type": "reset"|"step"|"state"|"close", "data": ...}`` messages, answered by
``{"type": "observation"|"state"|"error", "data": ...}``.  An observation travels as
``{"observation": {...}, "reward": float | None, "done": bool, "metadata": {...}}`` (the wire format of
``openenv.core.env_server.serialization.serialize_observation``, read back by ``EnvClient._parse_result``).

``envfactory serve`` mounts one such server per environment at ``/openenv/<Env>`` (through the
``envfactory.routes`` entry point, :func:`openenv_routes`), so an OpenEnv client takes
``http://HOST:PORT/openenv/HotelBooking`` as its base URL::

    from openenv.core.generic_client import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8765/openenv/HotelBooking").sync() as env:
        result = env.reset(task_id="hb_001")
        result = env.step({"type": "call_tool", "tool_name": "search_hotels", "arguments": {...}})

Actions (``data`` of a ``step`` message; ``type`` selects):

- ``{"type": "call_tool", "tool_name": str, "arguments": {...}}``: OpenEnv's MCP tool-calling action
  (``openenv.core.env_server.mcp_types.CallToolAction``), one tool call in the current user turn.
  The observation has OpenEnv's ``CallToolObservation`` fields: ``tool_name``, ``result`` (an MCP
  ``CallToolResult``-shaped dict whose ``data`` is the tool's JSON result) and ``error`` (``None``, or
  ``{"error_type": "tool_not_found" | "invalid_args" | "execution_error", "message": ...}``), so
  ``MCPToolClient.step(CallToolAction(...))`` reads it as such.
- ``{"type": "list_tools"}``: ``ListToolsAction``; the observation lists ``tools``
  (``name``, ``description``, ``input_schema``).
- ``{"type": "message", "content": str, "tool_calls": [...]}``: an assistant message, exactly what
  :meth:`~gym_envfactory.EnvFactoryEnv.step` takes (OpenAI ``tool_calls``, or raw model text with
  ``<tool_call>`` blocks).  With no tool call it ends the user turn: the observation brings the next
  user message, or ``done`` and the episode's reward after the last turn.

Every step observation also carries ``messages`` (the new tool and user messages, OpenAI format, as the
Gymnasium env returns them), ``turn``, and the reward components (part 5): ``turn_reward_components``
when a user turn ended (R_traj, R_state, R_output, P_len of that turn) and ``reward_components`` (the
episode's) with ``done``.  ``reward`` is the gym's step reward (``reward_mode="episode"``: the episode
reward at the last step, 0.0 before); ``reset`` takes ``task_id``, ``seed``, ``episode_id``, ``split``,
``start_turn``, ``end_turn``.  HTTP ``POST /reset`` answers from a fresh, discarded episode (OpenEnv's
stateless HTTP path); an episode is stepped on the WebSocket session only, so ``POST /step`` says so
(HTTP 409).  OpenEnv's production mode is served too: ``POST /mcp`` (JSON-RPC 2.0:
``openenv/session/create`` and ``openenv/session/close``, ``tools/list``, and ``tools/call`` on a
session's episode, answered with the ``call_tool`` observation), and ``/ws?session_id=ID`` attaches a
WebSocket to that session's episode (to reset it and read rewards), which outlives the connection
until ``openenv/session/close``: what the ``MCPToolClient`` of ``openenv`` 0.10.0 does.

Sessions: each WebSocket connection gets its own :class:`~gym_envfactory.EnvFactoryEnv` (its own
session, state and reward bookkeeping), closed when the connection ends, at most ``--max-sessions`` at
once (:class:`LiveEpisodes`); the server runs the environments in its own process, as it runs the MCP
and fast-protocol sessions.  They are not the session manager's sessions, but each is admitted
against its memory budget (``SessionManager.reserve_episode``: the cost of the environment's largest
initial state) and refused with OpenEnv's ``CAPACITY_REACHED`` frame (HTTP 503, JSON-RPC -32000) when it
would not fit.  An HTTP MCP session with no WebSocket attached closes after the server's ``ttl_s``
unused, and one client holds at most the manager's ``max_sessions_per_client`` of them; request bodies
and frames are capped at the server's ``max_body_bytes`` (HTTP 413).  Needs the ``server``
extra (starlette); OpenEnv itself is only needed by clients (extra ``openenv``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import EnvFactoryError, MemoryBudgetError

__all__ = ["OpenEnvEpisode", "OpenEnvActionError", "LiveEpisodes", "openenv_routes", "openenv_app", "openenv_tools", "turn_reward_components",
           "OPENENV_PREFIX", "ACTION_TYPES"]

log = logging.getLogger(__name__)

#: Where ``envfactory serve`` mounts each environment's OpenEnv server: ``/openenv/<Env>``.
OPENENV_PREFIX = "/openenv"
#: The ``type`` values a step action may have.
ACTION_TYPES = ("call_tool", "list_tools", "message")
#: ``reset`` data keys: OpenEnv's ``seed`` and ``episode_id``, and the gym's reset options.
RESET_KEYS = frozenset({"seed", "episode_id", "task_id", "split", "start_turn", "end_turn"})

# the session's error types -> OpenEnv's ToolErrorType values (openenv.core.env_server.mcp_types)
_ERROR_TYPES = {"unknown_tool": "tool_not_found", "invalid_arguments": "invalid_args", "parse_error": "invalid_args",
                "tool_error": "execution_error", "internal_error": "execution_error"}


class OpenEnvActionError(EnvFactoryError, ValueError):
    """A step's action is not one of :data:`ACTION_TYPES` with its fields, or the episode is not running.
    Answered on the wire as an OpenEnv error message (``{"type": "error", ...}``); the session lives on."""


def openenv_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-format tool schemas as OpenEnv/MCP ``Tool`` dicts: ``name``, ``description``, ``input_schema``."""
    out = []
    for t in tools:
        fn = t.get("function", t)
        out.append({"name": fn["name"], "description": fn.get("description") or "",
                    "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})
    return out


def turn_reward_components(turn_score: Mapping[str, Any]) -> dict[str, Any]:
    """One user turn's reward components from ``info["turn_score"]`` (:meth:`TurnScore.to_dict`), in the
    episode's names (docs/reward.md): ``reward``, ``r_traj``, ``r_state``, ``r_output``, ``p_len`` (surplus
    plus invalid calls of the turn), ``penalty`` (γ·p_len, capped) and ``vacuous``; ``None`` = no criteria."""
    out = {k: turn_score.get(k) for k in ("reward", "r_traj", "r_state", "r_output")}
    out["p_len"] = int(turn_score.get("surplus") or 0) + int(turn_score.get("invalid") or 0)
    out["penalty"] = turn_score.get("penalty")
    out["vacuous"] = list(turn_score.get("vacuous") or [])
    return out


def _payload(observation: dict[str, Any], reward: float | None, done: bool, metadata: dict[str, Any]) -> dict[str, Any]:
    """The OpenEnv wire form of one observation (``serialize_observation``): metadata nested and beside it."""
    observation = {**observation, "metadata": metadata}
    return {"observation": observation, "reward": reward, "done": done, "metadata": metadata}


def _tool_result(result: Mapping[str, Any]) -> tuple[Any, dict[str, str] | None]:
    """One :meth:`ToolResult.to_dict` as OpenEnv's ``CallToolObservation`` ``(result, error)``."""
    if result.get("ok"):
        content = result.get("content")
        text = json.dumps(content, ensure_ascii=False)
        return {"content": [{"type": "text", "text": text}], "structured_content": {"result": content},
                "data": content, "is_error": False}, None
    return None, {"error_type": _ERROR_TYPES.get(str(result.get("error_type")), "execution_error"),
                  "message": str(result.get("error") or result.get("error_type"))}


class OpenEnvEpisode:
    """One OpenEnv session: an :class:`~gym_envfactory.EnvFactoryEnv` driven by OpenEnv messages.

    Args:
        env: the environment (name or spec).
        **env_kwargs: :class:`~gym_envfactory.EnvFactoryEnv` keyword arguments (reward, limits, backend).

    Every method returns the OpenEnv wire payload (see the module doc) and never raises for a bad
    action of the model: a tool error, unknown tool or malformed call is part of the observation.

    Raises:
        OpenEnvActionError: (from :meth:`step`) an action that is not an OpenEnv action of
            :data:`ACTION_TYPES`, or a step with no running episode; (from :meth:`reset`) an unknown key.
        UnknownTaskError: (from :meth:`reset`) no such task.
    """

    def __init__(self, env: str | EnvironmentSpec, **env_kwargs: Any) -> None:
        self.env = EnvFactoryEnv(env, **env_kwargs)
        #: held while a message runs: a WebSocket attached to an HTTP MCP session and that session's
        #: ``tools/call`` requests may arrive together
        self.lock = threading.Lock()
        #: Bytes of the server's memory budget this episode holds (:meth:`LiveEpisodes.reserve`).
        self.reserved = 0
        self.episode_id: str | None = None
        self.step_count = 0
        self._tools: list[dict[str, Any]] = []
        #: As an HTTP MCP session (``openenv/session/create``): the client that made it, when it was last
        #: used (:attr:`LiveEpisodes.clock` seconds) and how many WebSockets are attached to it now.
        self.client: str | None = None
        self.last_used = 0.0
        self.attached = 0

    @property
    def name(self) -> str:
        """The environment's name."""
        return self.env.environment.name

    def _meta(self, **extra: Any) -> dict[str, Any]:
        env = self.env
        meta: dict[str, Any] = {"env": self.name, "episode_id": self.episode_id,
                                "task_id": env.task.task_id if env.task is not None else None, "turn": env.turn}
        meta.update(extra)
        return meta

    def reset(self, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Start an episode (``data``: :data:`RESET_KEYS`); the observation holds the opening
        ``messages``, the ``openai_tools`` (OpenAI format, for a chat template) and the task's ids."""
        data = dict(data or {})
        unknown = set(data) - RESET_KEYS
        if unknown:
            raise OpenEnvActionError(f"unknown reset field(s) {_clip(sorted(unknown))}; reset takes {sorted(RESET_KEYS)}")
        seed = data.pop("seed", None)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise OpenEnvActionError(f"seed must be an integer >= 0 (OpenEnv's ResetRequest), got {_clip(seed)}")
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise OpenEnvActionError("episode_id must be a string of at most 255 characters (OpenEnv's ResetRequest)")
        self.episode_id = str(data.pop("episode_id", None) or uuid.uuid4().hex)  # as OpenEnv's server names them
        options = {k: v for k, v in data.items() if v is not None}
        messages, info = self.env.reset(seed=seed, options=options or None)
        self.step_count = 0
        self._tools = list(info["tools"])
        obs = {"messages": messages, "openai_tools": self._tools, "task_id": info["task_id"],
               "turn": info["turn"], "n_turns": info["n_turns"]}
        return _payload(obs, None, False, self._meta(n_turns=info["n_turns"]))

    def step(self, action: Mapping[str, Any]) -> dict[str, Any]:
        """Run one OpenEnv action (see the module doc) and return its observation payload."""
        if not isinstance(action, Mapping):
            raise OpenEnvActionError(f"an action is a JSON object with a 'type' in {list(ACTION_TYPES)}")
        kind = action.get("type")
        if kind == "list_tools":
            return _payload({"tools": openenv_tools(self.env.tools if self.env.task is not None else self._tools)},
                            None, self.env.done and self.env.task is not None, self._meta())
        if self.env.task is None or self.env.done:
            raise OpenEnvActionError("no episode is running: send a reset first (an episode ends with done)")
        if kind == "call_tool":
            name = action.get("tool_name")
            arguments = action.get("arguments", {})
            if not isinstance(name, str) or not isinstance(arguments, Mapping):
                raise OpenEnvActionError("call_tool needs 'tool_name' (a string) and 'arguments' (an object)")
            message: Any = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call_{self.step_count + 1}_0", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(dict(arguments), ensure_ascii=False)}}]}
        elif kind == "message":
            content = action.get("content", "")
            if not isinstance(content, str):
                raise OpenEnvActionError("message needs 'content' (a string)")
            tool_calls = action.get("tool_calls")
            message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
            if not tool_calls:
                message = content  # raw text: the gym parses <tool_call> blocks and keeps the text as generated
        else:
            raise OpenEnvActionError(f"unknown action type {_clip(kind)}; an action's 'type' is one of {list(ACTION_TYPES)}")
        messages, reward, terminated, truncated, info = self.env.step(message)
        self.step_count += 1
        done = bool(terminated or truncated)
        obs: dict[str, Any] = {"messages": messages, "turn": info["turn"], "turn_ended": info["turn_ended"],
                               "errors": info["errors"]}
        if kind == "call_tool":
            result, error = _tool_result(info["tool_results"][0])
            obs.update(tool_name=action["tool_name"], result=result, error=error)
        if "turn_score" in info:
            obs["turn_reward_components"] = turn_reward_components(info["turn_score"])
        extra: dict[str, Any] = {}
        if done:
            obs["reward_components"] = info["reward_components"]
            extra = {"terminated": bool(terminated), "truncated": bool(truncated)}
            if truncated:
                extra["truncated_reason"] = info.get("truncated_reason")
        if "tools" in info:
            obs["openai_tools"] = info["tools"]
        return _payload(obs, float(reward), done, self._meta(**extra))

    def state(self) -> dict[str, Any]:
        """OpenEnv's ``State``: ``episode_id`` and ``step_count``, plus the task, turn and ``done``."""
        env = self.env
        return {"episode_id": self.episode_id, "step_count": self.step_count, "env": self.name,
                "task_id": env.task.task_id if env.task is not None else None, "turn": env.turn,
                "done": bool(env.done) if env.task is not None else None}

    def close(self) -> None:
        """Close the environment and its session."""
        self.env.close()


class LiveEpisodes:
    """The episodes the OpenEnv mounts of one app hold, at most ``cap`` at once (counting those being
    built): a connection beyond it gets OpenEnv's ``CAPACITY_REACHED`` error frame and is closed, as
    OpenEnv's own server answers past ``max_concurrent_envs``.

    Args:
        cap: most live episodes (WebSocket connections and HTTP MCP sessions together).
        manager: the server's session manager (memory budget), or ``None``.
        ttl_s: seconds an HTTP MCP session with no WebSocket attached may sit unused before
            :meth:`expired` closes it (the server's ``--ttl``); ``None``: never.
        max_sessions_per_client: most HTTP MCP sessions one client (:func:`~gym_envfactory.server.manager.
            authenticated_client`) may hold at once; ``None``: no per-client limit.
        max_body_bytes: most bytes of a request body or WebSocket frame (the server's ``max_body_bytes``).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, cap: int, manager: Any = None, *, ttl_s: float | None = None,
                 max_sessions_per_client: int | None = None, max_body_bytes: int = 4 * 1024 * 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cap = cap
        self.episodes: set[OpenEnvEpisode] = set()
        self.pending = 0
        #: The server's session manager, whose memory budget every episode is admitted against
        #: (``reserve_episode``/``release_episode``), as its own sessions are; ``None``: no budget.
        self.manager = manager
        #: HTTP MCP sessions (``openenv/session/create``) of every mount, by id.
        self.sessions: dict[str, OpenEnvEpisode] = {}
        self.ttl_s = ttl_s
        self.max_sessions_per_client = max_sessions_per_client
        self.max_body_bytes = max_body_bytes
        self.clock = clock

    def held_by(self, client: str) -> int:
        """How many HTTP MCP sessions ``client`` holds."""
        return sum(1 for ep in self.sessions.values() if ep.client == client)

    def expired(self) -> list[OpenEnvEpisode]:
        """Take out of :attr:`sessions` every HTTP MCP session unused for longer than :attr:`ttl_s` with no
        WebSocket attached and no call running, and return them (the caller closes them: :func:`_drop`)."""
        if self.ttl_s is None:
            return []
        cutoff = self.clock() - self.ttl_s
        gone = [sid for sid, ep in self.sessions.items()
                if ep.attached <= 0 and ep.last_used < cutoff and not ep.lock.locked()]
        return [self.sessions.pop(sid) for sid in gone]

    def reserve(self, spec: EnvironmentSpec) -> int:
        """Admit one more episode of ``spec`` against the server's memory budget; returns the bytes reserved.

        Raises:
            MemoryBudgetError: it would not fit (nothing reserved).
        """
        if self.manager is None:
            return 0
        return int(self.manager.reserve_episode([spec], f"an OpenEnv episode of {spec.name}"))

    def release(self, nbytes: int) -> None:
        """Give back what :meth:`reserve` reserved."""
        if self.manager is not None and nbytes:
            self.manager.release_episode(nbytes)

    def full(self) -> bool:
        """Whether one more episode would exceed :attr:`cap`."""
        return len(self.episodes) + self.pending >= self.cap

    def close_all(self) -> None:
        """Close every live episode (server shutdown)."""
        for ep in list(self.episodes):
            try:
                ep.close()
            finally:
                self.release(ep.reserved)
                ep.reserved = 0
        self.episodes.clear()
        self.sessions.clear()


def _clip(value: Any, limit: int = 200) -> str:
    """``value`` as quoted in an error message (a string as it is, else its ``repr``), cut to ``limit``
    characters: a client's huge value is never echoed back whole."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _locked(ep: OpenEnvEpisode, fn: Callable[..., Any], *args: Any) -> Any:
    with ep.lock:
        return fn(*args)


async def _drop(live: LiveEpisodes, ep: OpenEnvEpisode) -> None:
    """Close a live episode and give back its share of the memory budget."""
    live.episodes.discard(ep)
    try:
        await asyncio.to_thread(_locked, ep, ep.close)
    finally:
        live.release(ep.reserved)
        ep.reserved = 0


async def _expire(live: LiveEpisodes) -> int:
    """Close the HTTP MCP sessions :meth:`LiveEpisodes.expired` takes out; returns how many."""
    gone = live.expired()
    for ep in gone:
        log.info("OpenEnv session of %s (client %s) expired after %s s unused", ep.name, ep.client, live.ttl_s)
        await _drop(live, ep)
    return len(gone)


async def _expire_forever(live: LiveEpisodes, ttl_s: float) -> None:
    """Expire idle HTTP MCP sessions every ``ttl_s / 4`` seconds (at least 0.05, at most 30), as the
    server expires its own sessions."""
    period = max(0.05, min(30.0, ttl_s / 4))
    while True:
        await asyncio.sleep(period)
        try:
            await _expire(live)
        except Exception:  # a close that failed is logged; the sweep goes on
            log.exception("expiring idle OpenEnv sessions failed")


def _anonymous(request: Any) -> str:
    return "anonymous"


def _schemas(spec: EnvironmentSpec) -> dict[str, Any]:
    """``GET /schema``: JSON schemas of the action, observation and state (OpenEnv's ``SchemaResponse``)."""
    call = {"type": "object", "title": "CallToolAction", "required": ["type", "tool_name"],
            "properties": {"type": {"const": "call_tool"}, "tool_name": {"type": "string", "enum": sorted(spec.tools)},
                           "arguments": {"type": "object"}}}
    listing = {"type": "object", "title": "ListToolsAction", "required": ["type"],
               "properties": {"type": {"const": "list_tools"}}}
    message = {"type": "object", "title": "AssistantMessageAction", "required": ["type", "content"],
               "properties": {"type": {"const": "message"}, "content": {"type": "string"},
                              "tool_calls": {"type": "array", "items": {"type": "object"}}}}
    components = {"type": "object", "properties": {k: {"type": ["number", "null"]}
                                                   for k in ("reward", "r_traj", "r_state", "r_output", "p_len", "penalty")}}
    observation = {"type": "object", "title": "EnvFactoryObservation", "properties": {
        "messages": {"type": "array", "items": {"type": "object"}}, "turn": {"type": "integer"},
        "tool_name": {"type": "string"}, "result": {}, "error": {"type": ["object", "null"]},
        "tools": {"type": "array", "items": {"type": "object"}}, "turn_reward_components": components,
        "reward_components": {"type": "object"}, "metadata": {"type": "object"},
        "done": {"type": "boolean"}, "reward": {"type": ["number", "null"]}}}
    reset_observation = {"type": "object", "title": "EnvFactoryResetObservation", "properties": {
        "messages": {"type": "array", "items": {"type": "object"}}, "openai_tools": {"type": "array"},
        "task_id": {"type": "string"}, "turn": {"type": "integer"}, "n_turns": {"type": "integer"}}}
    state = {"type": "object", "title": "EnvFactoryState", "properties": {
        "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer", "minimum": 0},
        "task_id": {"type": ["string", "null"]}, "turn": {"type": "integer"}, "done": {"type": ["boolean", "null"]}}}
    return {"action": {"oneOf": [call, listing, message]}, "observation": observation,
            "reset_observation": reset_observation, "state": state}


def _env_routes(spec: EnvironmentSpec, make: Callable[[], OpenEnvEpisode], live: LiveEpisodes,
                client_of: Callable[[Any], str]) -> list[Any]:
    """The OpenEnv routes of one environment (relative to its mount); ``client_of(request)``: the client
    an HTTP MCP session is counted against (raises ``BadRequestError`` for a bad client name)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    from gym_envfactory.server.app import read_capped_body

    limit = live.max_body_bytes
    too_big = f"request body over {limit} bytes"

    def session(sid: str) -> OpenEnvEpisode | None:
        """This environment's HTTP MCP session ``sid``, or ``None``."""
        ep = live.sessions.get(sid)
        return ep if ep is not None and ep.name == spec.name else None

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    async def schema(request: Request) -> JSONResponse:
        return JSONResponse(_schemas(spec))

    async def metadata(request: Request) -> JSONResponse:
        m = spec.manifest
        return JSONResponse({"name": spec.name, "description": m.description, "version": m.version,
                             "author": None, "readme_content": None, "documentation_url": None})

    async def state(request: Request) -> JSONResponse:
        return JSONResponse({"episode_id": None, "step_count": 0, "env": spec.name, "task_id": None, "turn": 0,
                             "done": None})

    async def body(request: Request) -> dict[str, Any] | None:
        """The request's JSON object; ``None`` when the body is over ``limit`` bytes."""
        try:
            raw = await read_capped_body(request, limit)
        except ValueError:
            raise OpenEnvActionError("bad Content-Length") from None
        if raw is None:
            return None
        try:
            data = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise OpenEnvActionError(f"the request body is not valid JSON: {_clip(str(exc))}") from None
        if not isinstance(data, dict):
            raise OpenEnvActionError("the request body is a JSON object")
        return data

    async def reset(request: Request) -> JSONResponse:
        def run(data: dict[str, Any]) -> dict[str, Any]:
            cost = live.reserve(spec)
            try:
                ep = make()
                try:
                    return ep.reset(data)
                finally:
                    ep.close()
            finally:
                live.release(cost)
        await _expire(live)
        if live.full():
            return JSONResponse({"detail": f"at capacity: {live.cap} OpenEnv episodes are live"}, status_code=503)
        live.pending += 1
        try:
            data = await body(request)
            if data is None:
                return JSONResponse({"detail": too_big}, status_code=413, headers={"Connection": "close"})
            return JSONResponse(await asyncio.to_thread(run, data))
        except MemoryBudgetError as exc:
            return JSONResponse({"detail": _clip(str(exc), 2000)}, status_code=503)
        except (EnvFactoryError, ValueError, TypeError, RecursionError) as exc:
            return JSONResponse({"detail": _clip(str(exc), 2000)}, status_code=422)
        finally:
            live.pending -= 1

    async def step(request: Request) -> JSONResponse:
        return JSONResponse({"detail": f"an episode of {spec.name} lives on the WebSocket session: connect to "
                                       f"{OPENENV_PREFIX}/{spec.name}/ws (OpenEnv's EnvClient does), reset, then step"},
                            status_code=409)

    async def run(ep: OpenEnvEpisode, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(_locked, ep, fn, *args)
        finally:
            ep.last_used = live.clock()

    async def new_episode() -> OpenEnvEpisode:
        """A new live episode, admitted against the server's memory budget (MemoryBudgetError if it does
        not fit: nothing is built)."""
        live.pending += 1
        try:
            cost = await asyncio.to_thread(live.reserve, spec)
            try:
                ep = await asyncio.to_thread(make)
            except BaseException:
                live.release(cost)
                raise
        finally:
            live.pending -= 1
        ep.reserved = cost
        live.episodes.add(ep)
        return ep

    async def ws(websocket: WebSocket) -> None:
        ep: OpenEnvEpisode | None = None
        attach = websocket.query_params.get("session_id")
        if attach is None:
            await _expire(live)  # idle HTTP MCP sessions give their room back
        attached = session(attach) if attach is not None else None
        if attached is not None:
            attached.attached += 1  # not expired while a WebSocket is attached: counted before the accept
        try:
            await websocket.accept()
            if attach is not None and attached is None:
                await websocket.send_text(_error(f"Unknown session_id: {_clip(attach)}", "SESSION_ERROR"))
                return
            if attach is None and live.full():
                await websocket.send_text(json.dumps({"type": "error", "data": {
                    "message": f"at capacity: {live.cap} OpenEnv episodes are live; retry later",
                    "code": "CAPACITY_REACHED", "active_sessions": len(live.episodes), "max_sessions": live.cap}}))
                return
            # an HTTP MCP session's episode (OpenEnv's production mode) outlives this connection
            try:
                ep = attached if attached is not None else await new_episode()
            except MemoryBudgetError as exc:
                await websocket.send_text(json.dumps({"type": "error", "data": {
                    "message": str(exc), "code": "CAPACITY_REACHED", "active_sessions": len(live.episodes),
                    "max_sessions": live.cap}}))
                return
            while True:
                text = await websocket.receive_text()
                if len(text) > limit or len(text.encode()) > limit:
                    await websocket.send_text(_error(f"frame over {limit} bytes", "VALIDATION_ERROR"))
                    continue
                try:
                    msg = json.loads(text)
                except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
                    await websocket.send_text(_error(f"Invalid JSON: {_clip(str(exc))}", "INVALID_JSON"))
                    continue
                kind = msg.get("type") if isinstance(msg, dict) else None
                if kind == "close":
                    break
                try:
                    if kind == "reset":
                        out = {"type": "observation", "data": await run(ep, ep.reset, msg.get("data") or {})}
                    elif kind == "step":
                        out = {"type": "observation", "data": await run(ep, ep.step, msg.get("data"))}
                    elif kind == "state":
                        out = {"type": "state", "data": await run(ep, ep.state)}
                    else:
                        await websocket.send_text(_error(f"Unknown message type: {_clip(kind)}", "UNKNOWN_TYPE"))
                        continue
                except (EnvFactoryError, ValueError, TypeError) as exc:
                    await websocket.send_text(_error(str(exc), "EXECUTION_ERROR"))
                    continue
                except Exception as exc:  # a fault of ours, not the client's: logged, answered, the session lives on
                    log.exception("OpenEnv %s message on %s failed", kind, spec.name)
                    await websocket.send_text(_error(f"internal error: {type(exc).__name__}: {exc}", "EXECUTION_ERROR"))
                    continue
                await websocket.send_text(json.dumps(out, ensure_ascii=False))
        except WebSocketDisconnect:
            pass
        finally:
            if attached is not None:
                attached.attached -= 1
                attached.last_used = live.clock()  # its idle time counts from now
            elif ep is not None:
                await _drop(live, ep)
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close()

    async def mcp(request: Request) -> JSONResponse:
        """OpenEnv's HTTP MCP endpoint (JSON-RPC 2.0): ``openenv/session/create`` / ``close``,
        ``tools/list`` and ``tools/call`` on a session (a ``/ws?session_id=`` connection resets it)."""
        try:
            raw = await read_capped_body(request, limit)
        except ValueError:
            return _rpc_error(None, -32600, "Invalid Request: bad Content-Length")
        if raw is None:
            return _rpc_error(None, -32600, f"Invalid Request: {too_big}", status_code=413, headers={"Connection": "close"})
        try:
            req = json.loads(raw)
            if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
                return _rpc_error(None, -32600, "Invalid Request")
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            return _rpc_error(None, -32700, "Parse error")
        rid, method, params = req.get("id"), req["method"], req.get("params") or {}
        if not isinstance(params, dict):
            return _rpc_error(rid, -32602, "Params must be an object")
        sid = params.get("session_id")
        if sid is not None and not isinstance(sid, str):
            return _rpc_error(rid, -32602, "Invalid params - 'session_id' must be a string")
        await _expire(live)
        if method == "openenv/session/create":
            try:
                client = client_of(request)
            except EnvFactoryError as exc:
                return _rpc_error(rid, -32600, f"Invalid Request: {_clip(str(exc))}")
            per_client = live.max_sessions_per_client
            if per_client is not None and live.held_by(client) >= per_client:
                return _rpc_error(rid, -32000, f"client {_clip(client)!r} holds {live.held_by(client)} OpenEnv "
                                               f"sessions, the most one client may hold; close some "
                                               f"(openenv/session/close), let them expire, or raise "
                                               f"--max-sessions-per-client")
            if live.full():
                return _rpc_error(rid, -32000, f"at capacity: {live.cap} OpenEnv episodes are live")
            try:
                ep = await new_episode()
            except MemoryBudgetError as exc:
                return _rpc_error(rid, -32000, str(exc))
            sid = uuid.uuid4().hex
            ep.client, ep.last_used = client, live.clock()
            live.sessions[sid] = ep
            return _rpc_result(rid, {"session_id": sid})
        if sid is not None and session(sid) is None:
            return _rpc_error(rid, -32602, f"Unknown session_id: {_clip(sid)}")
        if sid is not None:
            live.sessions[sid].last_used = live.clock()  # a request naming a session uses it
        if method == "openenv/session/close":
            if sid is None:
                return _rpc_error(rid, -32602, "Invalid params - 'session_id' is required")
            await _drop(live, live.sessions.pop(sid))
            return _rpc_result(rid, {"session_id": sid, "closed": True})
        if method == "tools/list":
            return _rpc_result(rid, {"tools": openenv_tools(spec.openai_tools())})
        if method == "tools/call":
            name = params.get("name")
            if not name:
                return _rpc_error(rid, -32602, "Missing 'name' in params")
            if sid is None:
                return _rpc_error(rid, -32602, "tools/call runs on a session's episode: give 'session_id' "
                                               "(openenv/session/create, then reset it on /ws?session_id=...)")
            ep = live.sessions[sid]
            try:
                out = await run(ep, ep.step, {"type": "call_tool", "tool_name": name,
                                              "arguments": params.get("arguments") or {}})
            except (EnvFactoryError, ValueError, TypeError, RecursionError) as exc:
                return _rpc_error(rid, -32000, str(exc))
            return _rpc_result(rid, {**out["observation"], "done": out["done"], "reward": out["reward"]})
        return _rpc_error(rid, -32601, f"Method not found: {_clip(method)}")

    return [Route("/health", health), Route("/schema", schema), Route("/metadata", metadata),
            Route("/state", state), Route("/reset", reset, methods=["POST"]), Route("/step", step, methods=["POST"]),
            Route("/mcp", mcp, methods=["POST"]), WebSocketRoute("/ws", ws)]


def _rpc_result(rid: Any, result: Any) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"jsonrpc": "2.0", "id": _rpc_id(rid), "result": result})


def _rpc_error(rid: Any, code: int, message: str, status_code: int = 200, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import JSONResponse

    error = {"code": code, "message": _clip(message, 2000), "data": None}
    return JSONResponse({"jsonrpc": "2.0", "id": _rpc_id(rid), "error": error}, status_code=status_code, headers=headers)


def _rpc_id(rid: Any) -> Any:
    """The request's JSON-RPC ``id`` as echoed: a string or number of at most 200 characters, else ``None``."""
    ok = rid is None or isinstance(rid, (str, int, float)) and not isinstance(rid, bool) and len(str(rid)) <= 200
    return rid if ok else None


def _error(message: str, code: str) -> str:
    """An OpenEnv ``WSErrorResponse`` frame (``EnvClient`` raises ``RuntimeError`` with its message)."""
    return json.dumps({"type": "error", "data": {"message": _clip(message, 2000), "code": code}}, ensure_ascii=False)


def _mounts(specs: Mapping[str, EnvironmentSpec], middleware: list[Any], live: LiveEpisodes,
            client_of: Callable[[Any], str] = _anonymous, **env_kwargs: Any) -> list[Any]:
    from starlette.routing import Mount

    mounts = []
    for name, spec in specs.items():
        def make(spec: EnvironmentSpec = spec) -> OpenEnvEpisode:
            return OpenEnvEpisode(spec, **env_kwargs)
        mounts.append(Mount(f"{OPENENV_PREFIX}/{name}", routes=_env_routes(spec, make, live, client_of), middleware=middleware))
    return mounts


def openenv_routes(manager: Any, config: Any) -> tuple[list[Any], Callable[[Any], Any]]:
    """The ``envfactory.routes`` entry point: OpenEnv mounts ``/openenv/<Env>`` for every environment
    ``manager`` serves, behind the server's Host/Origin guard and bearer token (``config``), and a
    lifespan hook expiring idle HTTP MCP sessions (``config.ttl_s``) and closing the live episodes at
    shutdown.  Returns ``(routes, hook)``.  At most ``config.max_sessions`` OpenEnv episodes live at once
    (:class:`LiveEpisodes`), at most ``manager.max_sessions_per_client`` HTTP MCP sessions per client (the
    client as the server's own routes name it: ``X-Envfactory-Client`` proved by its key or the bearer
    token), and a request body or frame holds at most ``config.max_body_bytes`` (HTTP 413 above).

    Episodes run in this process (``trust=True``): the server already imported and runs every package it
    serves; run the server in a sandbox (``backend="isolated"``, Docker) for untrusted ones."""
    from starlette.middleware import Middleware

    from gym_envfactory.server.middleware import BearerAuthMiddleware, OriginHostGuardMiddleware

    middleware = [Middleware(OriginHostGuardMiddleware, host=config.host, allowed_origins=config.allowed_origins),
                  Middleware(BearerAuthMiddleware, token=config.token)]
    live = LiveEpisodes(int(config.max_sessions), manager, ttl_s=getattr(config, "ttl_s", None),
                        max_sessions_per_client=getattr(manager, "max_sessions_per_client", None),
                        max_body_bytes=int(getattr(config, "max_body_bytes", 4 * 1024 * 1024)))
    return _mounts(manager.specs, middleware, live, _client_reader(config.token), backend="inprocess",
                   trust=True), _lifespan(live)


def _client_reader(token: str | None) -> Callable[[Any], str]:
    """``request -> client``: :func:`~gym_envfactory.server.manager.authenticated_client` of its headers."""
    from gym_envfactory.protocol import AUTHORIZATION_HEADER, CLIENT_HEADER, CLIENT_KEY_HEADER
    from gym_envfactory.server.manager import authenticated_client

    def client_of(request: Any) -> str:
        headers = request.headers
        return authenticated_client(headers.get(CLIENT_HEADER), token=token, key=headers.get(CLIENT_KEY_HEADER),
                                    authorization=headers.get(AUTHORIZATION_HEADER))
    return client_of


def _lifespan(live: LiveEpisodes) -> Callable[[Any], Any]:
    """A lifespan hook: expire idle HTTP MCP sessions while the app runs, close every episode at shutdown."""
    @contextlib.asynccontextmanager
    async def hook(app: Any) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_expire_forever(live, live.ttl_s)) if live.ttl_s is not None else None
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            live.close_all()
    return hook


def openenv_app(envs: list[str | EnvironmentSpec], *, max_episodes: int = 1024, ttl_s: float | None = None,
                max_sessions_per_client: int | None = None, max_body_bytes: int = 4 * 1024 * 1024,
                clock: Callable[[], float] = time.monotonic, **env_kwargs: Any) -> Any:
    """A Starlette app serving only the OpenEnv mounts of ``envs`` (no token: bind it to loopback), for
    tests and embedding: at most ``max_episodes`` live at once; ``ttl_s``, ``max_sessions_per_client``,
    ``max_body_bytes`` and ``clock`` as :class:`LiveEpisodes` takes them (the client: the
    ``X-Envfactory-Client`` header, on trust); ``env_kwargs`` go to each episode's
    :class:`~gym_envfactory.EnvFactoryEnv`."""
    from starlette.applications import Starlette

    from gym_envfactory import get_environment

    specs = {}
    for e in envs:
        spec = e if isinstance(e, EnvironmentSpec) else get_environment(e)
        specs[spec.name] = spec
    live = LiveEpisodes(max_episodes, ttl_s=ttl_s, max_sessions_per_client=max_sessions_per_client,
                        max_body_bytes=max_body_bytes, clock=clock)
    return Starlette(routes=_mounts(specs, [], live, _client_reader(None), **env_kwargs), lifespan=_lifespan(live))
