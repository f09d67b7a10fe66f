"""NeMo Gym adapter: an environment of the catalog as a NeMo Gym *resources server* (issue 28, part 2).

NeMo Gym (``nemo-gym`` on PyPI, NVIDIA-NeMo/Gym; what NeMo RL trains through) splits an RL environment
into a model server, an agent server and a *resources server* that holds the tools, the per-rollout state
and the verifier.  The resources-server protocol (``nemo_gym.base_resources_server.SimpleResourcesServer``
0.4.0, and the agent that speaks it, ``responses_api_agents/simple_agent``), all JSON over HTTP ``POST``:

- ``/seed_session``: the dataset row (``responses_create_params`` and the verifier's own fields); the server
  starts the rollout's state and answers a cookie that names it.  The agent sends that cookie back on every
  later request of the rollout.
- ``/<tool name>``: the tool's arguments as a JSON object; the answer's body is the tool output the model sees.
- ``/verify``: the row plus ``response`` (the rollout as an OpenAI Responses object); the answer is the same
  body plus ``reward`` (float) and, as NeMo Gym's multi-reward example (``example_tool_call_multireward``)
  and GDPO trainers read it, ``reward_components`` (name -> value).

:func:`resources_app` builds that server for one environment of the catalog as a Starlette app (the
``server`` extra; run it with uvicorn): one :class:`~gym_envfactory.EnvFactoryEnv` episode per seeded
session, each posted tool call run in it as it arrives (the tool output the model sees), and ``/verify``
scoring the rollout as ``envfactory rollout`` scores the same model responses: the episode is replayed
from its start, one step per model response of ``response`` (its parallel calls together), then the user
turn ends (docs/reward.md).  The reward is the gym's (``R = α·R_traj + (1−α)·R_state − γ·P_len``, clipped
to [0, 1]); ``reward_components`` holds ``r_traj``, ``r_state``, ``r_output`` (``None`` when vacuous),
``p_len`` (surplus plus invalid calls) and ``penalty`` (``min(γ·P_len, cap)``), also written as top-level
fields for NeMo Gym's aggregate metrics.  Sessions expire after ``ttl_s`` idle seconds, at most
``max_sessions`` are held (a seed beyond is HTTP 503, never an eviction), and the routes carry the
Host/Origin guard and the optional bearer token of ``envfactory serve``; beyond loopback the token is
required.
:func:`dataset_rows` writes the JSONL rows NeMo Gym's datasets hold (``responses_create_params`` with the
opening messages and the tools in Responses format, plus ``reset_options``).

NeMo Gym's agents play one user turn (no simulated user between actions), so a row is one user turn:
``reset_options`` (``task_id``, ``start_turn``, ``end_turn``) plays that turn from the ground-truth state
after the turn before, as ``envfactory export rl --per turn`` rows do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from gym_envfactory import EnvFactoryEnv, get_environment
from gym_envfactory.envs.options import EpisodeLimits
from gym_envfactory.errors import CapacityError, EnvFactoryError
from gym_envfactory.protocol import read_token_file
from gym_envfactory.reward import EpisodeScore

__all__ = ["resources_app", "dataset_rows", "verify_fields", "responses_tools", "assistant_steps", "SESSION_COOKIE",
           "NeMoGymSessions", "DEFAULT_MAX_SESSIONS", "DEFAULT_TTL_S", "main"]

#: The cookie that names a rollout's session (NeMo Gym's agents send back every cookie a resources server sets).
SESSION_COOKIE = "envfactory_nemo_session"
#: Rollouts a resources server holds at once unless told otherwise (``--max-sessions``).
DEFAULT_MAX_SESSIONS = 4096
#: Idle seconds before a rollout expires unless told otherwise (``--ttl``; ``envfactory serve``'s default).
DEFAULT_TTL_S = 900.0


def responses_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat tool schemas (``{"type": "function", "function": {...}}``) in the Responses API form
    NeMo Gym rows carry (``{"type": "function", "name", "description", "parameters", "strict"}``)."""
    out = []
    for t in tools:
        fn = t.get("function", t)
        out.append({"type": "function", "name": fn["name"], "description": fn.get("description") or "",
                    "parameters": fn.get("parameters") or {"type": "object", "properties": {}}, "strict": False})
    return out


def dataset_rows(env_id: str, *, split: str | None = None, per_turn: bool = True,
                 **env_kwargs: Any) -> list[dict[str, Any]]:
    """NeMo Gym dataset rows (one JSON object per line of its JSONL datasets) for the tasks of ``env_id``.

    Each row: ``responses_create_params`` (``input``: the opening messages of the episode, system first;
    ``tools``: the environment's tools in Responses form), ``env`` (the environment's name) and
    ``reset_options`` (what :class:`~gym_envfactory.EnvFactoryEnv.reset` takes).  ``per_turn=True``
    (default): one row per user turn (``start_turn``/``end_turn``), the form NeMo Gym's single-turn agents
    can play whole; ``False``: one row per task (only its first user turn is played by such agents).

    Raises:
        UnknownEnvironmentError: no such environment.
    """
    env = EnvFactoryEnv(env_id, **env_kwargs)
    rows = []
    try:
        for task in env.tasks:
            if split is not None and task.split != split:
                continue
            windows = [(t, t + 1) for t in range(len(task.turns))] if per_turn else [(None, None)]
            for start, end in windows:
                options: dict[str, Any] = {"task_id": task.task_id}
                if start is not None:
                    options.update(start_turn=start, end_turn=end)
                messages, info = env.reset(options=options)
                rows.append({"responses_create_params": {"input": [{"role": m["role"], "content": m["content"]}
                                                                   for m in messages],
                                                         "tools": responses_tools(info["tools"])},
                             "env": env.environment.name, "reset_options": options})
    finally:
        env.close()
    return rows


def verify_fields(score: EpisodeScore) -> dict[str, Any]:
    """The fields ``/verify`` adds to the request body: ``reward``, ``reward_components`` and the same
    components as top-level fields (``r_traj``, ``r_state``, ``r_output``, ``p_len``, ``penalty``), plus
    ``vacuous`` (the components with no criteria in the task)."""
    components = {"r_traj": score.r_traj, "r_state": score.r_state, "r_output": score.r_output,
                  "p_len": float(score.p_len), "penalty": score.penalty, **score.extra}
    return {"reward": float(score.reward), "reward_components": components, **components,
            "vacuous": list(score.vacuous)}


def _message_text(item: Mapping[str, Any]) -> str:
    """The text of a Responses ``message`` item (a string, or ``output_text`` parts)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def assistant_steps(response: Any) -> list[dict[str, Any]]:
    """A Responses object's ``output`` as the assistant messages ``envfactory rollout`` would have stepped
    (OpenAI chat form, ``arguments`` as the model wrote them), one per model response.

    An agent appends a model response's items (``reasoning``, ``message``, ``function_call`` ...) and then
    one ``function_call_output`` per call (NeMo Gym's ``simple_agent``, verifiers'
    ``trace_to_nemo_response``): so a ``function_call_output`` closes the model response whose calls came
    before it, and the parallel calls of one response stay one message, one step, as in ``envfactory
    rollout``.  Output items of other types (``reasoning``) are not played.  A response with no tool output
    at all reads as one model response.  The last message is the closing reply when it has no call."""
    items = response.get("output") if isinstance(response, Mapping) else None
    steps: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []

    def close() -> None:
        if calls or texts:
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(t for t in texts if t)}
            if calls:
                msg["tool_calls"] = list(calls)
            steps.append(msg)
        texts.clear()
        calls.clear()

    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "function_call":
            call_id = item.get("call_id")
            calls.append({"id": call_id if isinstance(call_id, str) and call_id else f"call_{len(calls)}",
                          "type": "function", "function": {"name": item.get("name"), "arguments": item.get("arguments")}})
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            texts.append(_message_text(item))
        elif kind == "function_call_output" and calls:
            close()
    close()
    return steps


@dataclasses.dataclass
class _Rollout:
    """One seeded session: its episode, the lock its requests take, the reset options it was seeded with,
    the env's own step limits (the live episode runs with per-call ones), when it was last used."""

    env: EnvFactoryEnv
    options: dict[str, Any] | None
    limits: EpisodeLimits
    last_used: float
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    closed: bool = False

    def close(self) -> None:
        """Close the episode once (after any request running on it)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.env.close()


class NeMoGymSessions:
    """The rollouts a resources server holds: one :class:`EnvFactoryEnv` episode per session id, thread-safe.

    A session expires after ``ttl_s`` seconds without a request (least recently used first); at most
    ``max_sessions`` are held, and a seed beyond that is refused (:class:`~gym_envfactory.errors.CapacityError`):
    a live rollout is never evicted to make room.

    Tool calls arrive one per request, without the model response they belong to, so the live episode runs
    each call as a step, with per-turn and per-episode step limits ``max_calls_per_step`` times the env's
    (what it could run as messages): it answers what the model sees.  :meth:`verify` scores the rollout as
    ``envfactory rollout`` would have: it resets the episode and replays ``response`` one model response per
    step (:func:`assistant_steps`) under the env's own limits (docs/training.md, "NeMo Gym and verifiers").

    Args:
        env_id: the environment (gym id or name).
        max_sessions: rollouts held at once (>= 1).
        ttl_s: idle seconds before a rollout expires (> 0).
        clock: the monotonic clock in seconds (tests pass their own).
        env_kwargs: keywords of :class:`EnvFactoryEnv` (``reward``, ``backend``, ``tasks``, ``limits``, ...).

    Raises:
        ValueError: ``max_sessions`` < 1 or ``ttl_s`` <= 0.
    """

    def __init__(self, env_id: str, *, max_sessions: int = DEFAULT_MAX_SESSIONS, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic, **env_kwargs: Any) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0 seconds, got {ttl_s}")
        self.spec = get_environment(env_id)
        self.env_kwargs = env_kwargs
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.clock = clock
        self._rollouts: OrderedDict[str, _Rollout] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rollouts)

    def _expire_locked(self) -> list[_Rollout]:
        """Unregister the rollouts idle for ``ttl_s`` (under ``_lock``); the caller closes them."""
        now, out = self.clock(), []
        while self._rollouts:
            sid, r = next(iter(self._rollouts.items()))
            if now - r.last_used < self.ttl_s:
                break
            del self._rollouts[sid]
            out.append(r)
        return out

    def expire(self) -> int:
        """Close the rollouts idle for ``ttl_s`` seconds; how many."""
        with self._lock:
            gone = self._expire_locked()
        for r in gone:
            r.close()
        return len(gone)

    def _full(self) -> CapacityError:
        return CapacityError(f"the resources server holds {self.max_sessions} rollouts (max_sessions): verify them "
                             f"(POST /verify) or wait until idle ones expire ({self.ttl_s:g} s), then seed again",
                             limit=self.max_sessions)

    def seed(self, row: Mapping[str, Any]) -> str:
        """Start a rollout for ``row`` (its ``reset_options``, else its ``task_id``); returns its session id.

        Raises:
            ValueError, UnknownTaskError: the row names no valid episode (``task_id`` and ``split`` must be
                strings, ``start_turn``/``end_turn`` integers of the task's window).
            CapacityError: ``max_sessions`` rollouts are held (none idle for ``ttl_s``).
        """
        options = row.get("reset_options")
        if not options:
            options = {"task_id": row["task_id"]} if row.get("task_id") is not None else {}
        if not isinstance(options, Mapping):
            raise ValueError("reset_options must be an object (task_id, start_turn, end_turn)")
        options = {k: v for k, v in options.items() if v is not None}
        for key in ("task_id", "split"):
            if key in options and not isinstance(options[key], str):
                raise ValueError(f"{key} must be a string, got {type(options[key]).__name__}")
        self.expire()
        with self._lock:
            if len(self._rollouts) >= self.max_sessions:
                raise self._full()
        env = EnvFactoryEnv(self.spec, **self.env_kwargs)
        limits = env.limits
        try:
            # the live episode steps once per call: room for every call the env could run as messages
            env.max_steps = limits.max_steps * limits.max_calls_per_step
            env.max_steps_per_turn = limits.max_steps_per_turn * limits.max_calls_per_step
            env.reset(options=options or None)
        except Exception:
            env.close()
            raise
        sid = secrets.token_urlsafe(16)
        assert env.task is not None
        # the replay at /verify must play the task played here, also one the env drew (a row with no task_id)
        rollout = _Rollout(env, {**options, "task_id": env.task.task_id}, limits, self.clock())
        with self._lock:
            full = len(self._rollouts) >= self.max_sessions
            if not full:
                self._rollouts[sid] = rollout
        if full:
            env.close()
            raise self._full()
        return sid

    def _take(self, sid: str | None, *, pop: bool = False) -> _Rollout | None:
        """The live rollout ``sid`` (marked used now, or unregistered with ``pop``); ``None`` when unknown,
        verified or expired."""
        with self._lock:
            gone = self._expire_locked()
            rollout = (self._rollouts.pop(sid, None) if pop else self._rollouts.get(sid)) if sid else None
            if rollout is not None and not pop:
                rollout.last_used = self.clock()
                self._rollouts.move_to_end(sid or "")
        for r in gone:
            r.close()
        return rollout

    def call(self, sid: str | None, name: str, arguments: Any) -> str | None:
        """Run one tool call in the session's episode; the tool message the model sees (JSON text), or
        ``None`` for an unknown session.  ``arguments``: what the agent posted (an object, or the body's JSON
        text: a JSON string holding an object is read as the gym's parser reads ``arguments``, docs/cases.md
        C09; malformed JSON is the env's typed parse error, an invalid call)."""
        rollout = self._take(sid)
        if rollout is None:
            return None
        with rollout.lock:
            if rollout.closed:
                return None
            env = rollout.env
            if env.done:
                return json.dumps({"error": {"type": "episode_over", "message": "the episode has ended"}})
            obs, *_ = env.step({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}]})
        return str(obs[0]["content"]) if obs else ""

    def verify(self, sid: str | None, response: Any) -> EpisodeScore | None:
        """Score the rollout as ``envfactory rollout`` scores the same model responses, then close it;
        ``None`` for an unknown session.

        The episode is reset to the rollout's start and ``response`` replayed: each model response one step
        (:func:`assistant_steps`: its parallel calls together, ``arguments`` as the model wrote them), under
        the env's step limits; the closing reply ends the turn (an empty one when the last response still
        called tools), and a row of a whole multi-turn task is scored as it stands after that turn.  So a call the agent answered itself (an unknown tool, unparsable arguments) counts as the
        invalid call it is (``P_len``), and a rollout ``envfactory rollout`` would have truncated is truncated
        here at the same step."""
        rollout = self._take(sid, pop=True)
        if rollout is None:
            return None
        with rollout.lock:
            if rollout.closed:
                return None
            env = rollout.env
            try:
                env.max_steps, env.max_steps_per_turn = rollout.limits.max_steps, rollout.limits.max_steps_per_turn
                env.reset(options=rollout.options)
                steps = assistant_steps(response)
                for step in steps:
                    if env.done:
                        break
                    env.step(step)
                if not env.done and (not steps or steps[-1].get("tool_calls")):  # the reply ends the turn once
                    env.step({"role": "assistant", "content": ""})
                return env.last_score if env.done and env.last_score is not None else env.score()
            finally:
                rollout.closed = True
                env.close()

    def close(self) -> None:
        """Close every held rollout."""
        with self._lock:
            rollouts, self._rollouts = list(self._rollouts.values()), OrderedDict()
        for r in rollouts:
            r.close()


async def _json_body(request: Any) -> tuple[Any, str | None]:
    """The request's JSON body, or ``(None, why)`` when it is not JSON a server can read (malformed, not
    UTF-8, nested too deeply)."""
    raw = await request.body()
    try:
        return json.loads(raw), None
    except RecursionError:
        return None, "the body is nested too deeply"
    except ValueError as exc:
        return None, f"the body is not valid JSON ({str(exc)[:200]})"


def resources_app(env_id: str, *, host: str = "127.0.0.1", token: str | None = None,
                  max_sessions: int = DEFAULT_MAX_SESSIONS, ttl_s: float = DEFAULT_TTL_S,
                  allowed_origins: tuple[str, ...] = (), **env_kwargs: Any) -> Any:
    """A Starlette app serving ``env_id`` as a NeMo Gym resources server (module docstring): ``POST
    /seed_session``, ``POST /<tool>`` for each tool, ``POST /verify``, and ``GET /`` (liveness).

    Guards, as ``envfactory serve`` puts them on its routes (:mod:`gym_envfactory.server.middleware`): every
    route but ``GET /`` refuses a request with an ``Origin`` not in ``allowed_origins`` and, when ``host`` is
    loopback, a ``Host`` that is not (DNS rebinding), with HTTP 403; with a ``token``, a request without
    ``Authorization: Bearer <token>`` gets HTTP 401.  NeMo Gym 0.4's agents send no such header (its
    ``ServerClient`` adds none): serve them on loopback without a token; verifiers' NeMo Gym taskset sends
    ``task.headers``.

    Errors: a body that is not a JSON object (malformed, nested too deeply), or a row naming no valid episode,
    is HTTP 422 with ``{"detail": ...}``; a seed while ``max_sessions`` rollouts are held (none idle for
    ``ttl_s`` seconds) is HTTP 503; a tool or verify request without a live session's cookie is HTTP 400.  A
    bad tool call (a name that is no tool, malformed or invalid arguments, a domain error) is HTTP 200 with
    the typed error as the tool output, as the model must see it, and counts in the episode's ``P_len`` as
    in ``envfactory rollout``.

    Args:
        env_id: gym id or environment name.
        host: the address the server binds (the ``Host`` check applies when it is loopback).
        token: the bearer token every route but ``GET /`` requires (``None``: none; loopback only).
        max_sessions, ttl_s: :class:`NeMoGymSessions`.
        allowed_origins: ``Origin`` values let in (default none).
        env_kwargs: keywords of :class:`EnvFactoryEnv`.

    Raises:
        ModuleNotFoundError: Starlette is not installed (the ``server`` extra).
        UnknownEnvironmentError: no such environment.
        InsecureBindError: ``host`` is not loopback and no ``token`` is given.
    """
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from gym_envfactory.server.middleware import (
        BearerAuthMiddleware,
        OriginHostGuardMiddleware,
        require_token_off_loopback,
    )

    require_token_off_loopback(host, token, what="the NeMo Gym resources server",
                               how="pass --token-file PATH or set ENVFACTORY_TOKEN (NeMo Gym's agents send no "
                                   "token: serve them on 127.0.0.1)")
    sessions = NeMoGymSessions(env_id, max_sessions=max_sessions, ttl_s=ttl_s, **env_kwargs)
    no_session = {"detail": "no live session: POST /seed_session first and send its cookie (a session ends at "
                            f"/verify, or after {ttl_s:g} s without a request)"}

    async def seed(request: Request) -> Response:
        body, why = await _json_body(request)
        if not isinstance(body, dict):
            return JSONResponse({"detail": why or "the body must be a JSON object (a dataset row)"}, 422)
        try:
            sid = await run_in_threadpool(sessions.seed, body)
        except CapacityError as exc:
            return JSONResponse({"detail": str(exc)}, 503, headers={"Retry-After": "5"})
        except (ValueError, LookupError) as exc:
            return JSONResponse({"detail": str(exc)}, 422)
        resp = JSONResponse({})
        resp.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="lax")
        return resp

    async def verify(request: Request) -> Response:
        body, why = await _json_body(request)
        if not isinstance(body, dict):
            return JSONResponse({"detail": why or "the body must be a JSON object (the row plus response)"}, 422)
        score = await run_in_threadpool(sessions.verify, request.cookies.get(SESSION_COOKIE), body.get("response"))
        if score is None:
            return JSONResponse(no_session, 400)
        return JSONResponse({**body, **verify_fields(score)})

    async def tool(request: Request) -> Response:
        name = request.path_params["name"]
        # the body as the model's `arguments` text: the env parses it as envfactory rollout parses arguments
        # (a JSON string holding an object is that object, docs/cases.md C09; malformed JSON a parse error)
        arguments = (await request.body()).decode("utf-8", "surrogateescape")
        sid = request.cookies.get(SESSION_COOKIE)
        # any name runs in the episode: one that is no tool gets the env's typed unknown_tool error (an invalid call)
        text = await run_in_threadpool(sessions.call, sid, name, arguments)
        if text is None:
            return JSONResponse(no_session, 400)
        resp = Response(text, media_type="application/json")
        # NeMo Gym's simple agent keeps only the cookies of the latest response (Starlette's session middleware,
        # which NeMo Gym's own servers use, sets its cookie on every one): so do we
        resp.set_cookie(SESSION_COOKIE, str(sid), httponly=True, samesite="lax")
        return resp

    async def alive(request: Request) -> Response:
        return JSONResponse({"status": "ok", "env": sessions.spec.name})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            sessions.close()

    guarded = [Middleware(OriginHostGuardMiddleware, host=host, allowed_origins=tuple(allowed_origins)),
               Middleware(BearerAuthMiddleware, token=token)]
    app = Starlette(routes=[Route("/", alive, methods=["GET"]),
                            Route("/seed_session", seed, methods=["POST"], middleware=guarded),
                            Route("/verify", verify, methods=["POST"], middleware=guarded),
                            Route("/{name}", tool, methods=["POST"], middleware=guarded)],
                    lifespan=lifespan)
    app.state.sessions = sessions
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve one environment as a NeMo Gym resources server (blocking), or write its dataset rows::

        python -m gym_envfactory.training.nemo_gym HotelBooking --port 8000
        python -m gym_envfactory.training.nemo_gym HotelBooking --host 0.0.0.0 --token-file token.txt
        python -m gym_envfactory.training.nemo_gym HotelBooking --rows hotel.jsonl --split train

    A NeMo Gym config then names it as a resources server at that host and port (NeMo Gym does not start
    it: it is not a NeMo Gym package), and verifiers' taskset takes it as ``resources_url``.  Beyond
    loopback a bearer token is required (``--token-file``, ``$ENVFACTORY_TOKEN_FILE`` or
    ``$ENVFACTORY_TOKEN``); NeMo Gym 0.4's agents cannot send one, so serve them on loopback.
    """
    import argparse
    import os

    parser = argparse.ArgumentParser(prog="python -m gym_envfactory.training.nemo_gym", description=main.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", help="gym id or environment name")
    parser.add_argument("--host", default="127.0.0.1", help="bind address; beyond loopback a token is required")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--token", default=None,
                        help="bearer token for every route but GET / (default $ENVFACTORY_TOKEN; visible in `ps` "
                             "when given here: prefer --token-file)")
    parser.add_argument("--token-file", default=None,
                        help="read the bearer token from this file (first line; default $ENVFACTORY_TOKEN_FILE)")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="most rollouts held at once; a seed beyond is refused with HTTP 503")
    parser.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, help="idle seconds before a rollout expires")
    parser.add_argument("--rows", help="write the dataset rows (JSON Lines) to this file instead of serving")
    parser.add_argument("--split", help="only tasks of this split (with --rows)")
    parser.add_argument("--per-task", action="store_true", help="one row per task instead of one per user turn")
    parser.add_argument("--trust", action="store_true", help="run an untrusted package in this process")
    args = parser.parse_args(argv)
    if args.rows:
        rows = dataset_rows(args.env, split=args.split, per_turn=not args.per_task, trust=args.trust)
        with open(args.rows, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        print(f"wrote {len(rows)} rows to {args.rows}")
        return
    if args.max_sessions < 1:
        parser.error(f"--max-sessions must be >= 1, not {args.max_sessions}")
    if not args.ttl > 0:
        parser.error(f"--ttl must be > 0 seconds, not {args.ttl}")
    if args.token is not None and args.token_file is not None:
        parser.error("give --token or --token-file, not both")
    if args.token is not None:
        print("warning: a --token on the command line is visible to every user in `ps`; use --token-file PATH or "
              "$ENVFACTORY_TOKEN", file=sys.stderr)
    token = args.token
    token_file = args.token_file if token is None else None
    token_file = token_file or (os.environ.get("ENVFACTORY_TOKEN_FILE") if token is None else None)
    try:
        if token_file:
            token = read_token_file(token_file)
        token = token or os.environ.get("ENVFACTORY_TOKEN") or None
        app = resources_app(args.env, host=args.host, token=token, max_sessions=args.max_sessions, ttl_s=args.ttl,
                            trust=args.trust)
    except (ValueError, EnvFactoryError) as exc:  # a bad token file, an unknown environment, InsecureBindError
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
