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
session, each tool call a step of that episode, and ``/verify`` ending the user turn with the final assistant
message of ``response`` and scoring the episode (docs/reward.md).  The reward is the gym's
(``R = α·R_traj + (1−α)·R_state − γ·P_len``, clipped to [0, 1]); ``reward_components`` holds ``r_traj``,
``r_state``, ``r_output`` (``None`` when vacuous), ``p_len`` (surplus plus invalid calls) and ``penalty``
(``min(γ·P_len, cap)``), also written as top-level fields for NeMo Gym's aggregate metrics.
:func:`dataset_rows` writes the JSONL rows NeMo Gym's datasets hold (``responses_create_params`` with the
opening messages and the tools in Responses format, plus ``reset_options``).

NeMo Gym's agents play one user turn (no simulated user between actions), so a row is one user turn:
``reset_options`` (``task_id``, ``start_turn``, ``end_turn``) plays that turn from the ground-truth state
after the turn before, as ``envfactory export rl --per turn`` rows do.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from gym_envfactory import EnvFactoryEnv, ToolCall, get_environment
from gym_envfactory.reward import EpisodeScore

__all__ = ["resources_app", "dataset_rows", "verify_fields", "responses_tools", "SESSION_COOKIE",
           "NeMoGymSessions", "main"]

#: The cookie that names a rollout's session (NeMo Gym's agents send back every cookie a resources server sets).
SESSION_COOKIE = "envfactory_nemo_session"


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


def _function_calls(response: Any) -> list[tuple[str, Any]]:
    """``(name, arguments)`` of every ``function_call`` item of a Responses object's ``output``."""
    items = response.get("output") if isinstance(response, Mapping) else None
    return [(str(i.get("name")), i.get("arguments")) for i in items or []
            if isinstance(i, Mapping) and i.get("type") == "function_call"]


def _final_text(response: Any) -> str:
    """The text of the last assistant message of a Responses object's ``output`` ("" if none)."""
    text = ""
    items = response.get("output") if isinstance(response, Mapping) else None
    for item in items or []:
        if isinstance(item, Mapping) and item.get("type") == "message" and item.get("role", "assistant") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                text = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return text


class NeMoGymSessions:
    """The rollouts a resources server holds: one :class:`EnvFactoryEnv` episode per session id, at most
    ``max_sessions`` (the oldest is closed first when a new one would pass the bound); thread-safe.

    Args:
        env_id: the environment (gym id or name).
        max_sessions: rollouts held at once (>= 1).
        env_kwargs: keywords of :class:`EnvFactoryEnv` (``reward``, ``backend``, ``tasks``, ...).
    """

    def __init__(self, env_id: str, *, max_sessions: int = 4096, **env_kwargs: Any) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.spec = get_environment(env_id)
        self.env_kwargs = env_kwargs
        self.max_sessions = max_sessions
        self._envs: OrderedDict[str, tuple[EnvFactoryEnv, threading.Lock]] = OrderedDict()
        self._received: dict[str, Counter[str]] = {}
        self._lock = threading.Lock()

    def seed(self, row: Mapping[str, Any]) -> str:
        """Start a rollout for ``row`` (its ``reset_options``, else its ``task_id``); returns its session id.

        Raises:
            ValueError, UnknownTaskError: the row names no valid episode.
        """
        options = row.get("reset_options") or ({"task_id": row["task_id"]} if row.get("task_id") else {})
        if not isinstance(options, Mapping):
            raise ValueError("reset_options must be an object (task_id, start_turn, end_turn)")
        env = EnvFactoryEnv(self.spec, **self.env_kwargs)
        try:
            env.reset(options={k: v for k, v in options.items() if v is not None} or None)
        except Exception:
            env.close()
            raise
        sid = secrets.token_urlsafe(16)
        with self._lock:
            self._envs[sid] = (env, threading.Lock())
            self._received[sid] = Counter()
            while len(self._envs) > self.max_sessions:
                old_sid, (old, _) = self._envs.popitem(last=False)
                self._received.pop(old_sid, None)
                old.close()
        return sid

    def _get(self, sid: str | None) -> tuple[EnvFactoryEnv, threading.Lock] | None:
        with self._lock:
            return self._envs.get(sid) if sid else None

    def call(self, sid: str | None, name: str, arguments: Any) -> str | None:
        """Run one tool call in the session's episode; the tool message the model sees (JSON text), or
        ``None`` for an unknown session."""
        entry = self._get(sid)
        if entry is None:
            return None
        env, lock = entry
        with lock:
            if env.done:
                return json.dumps({"error": {"type": "episode_over", "message": "the episode has ended"}})
            self._received[sid or ""][name] += 1
            obs, *_ = env.step(ToolCall(name, arguments if isinstance(arguments, dict) else {}))
        return str(obs[0]["content"]) if obs else ""

    def verify(self, sid: str | None, response: Any) -> EpisodeScore | None:
        """End the user turn with the last assistant message of ``response`` and score the episode (then
        close it); ``None`` for an unknown session.

        A ``function_call`` of ``response`` that never reached the server (an agent answers a call to a tool
        it does not know, or one whose arguments are not JSON, itself) is played here first, so it counts
        as the invalid call it is (``P_len``), as it would in ``envfactory rollout``."""
        with self._lock:
            entry = self._envs.pop(sid, None) if sid else None
            received = self._received.pop(sid or "", Counter())
        if entry is None:
            return None
        env, lock = entry
        with lock:
            try:
                for name, arguments in _function_calls(response):
                    if received[name] > 0:
                        received[name] -= 1
                    elif not env.done:  # as the model wrote it: the env parses it as envfactory rollout does
                        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                        env.step({"role": "assistant", "content": "", "tool_calls": [
                            {"id": "unreached", "type": "function", "function": {"name": name, "arguments": text}}]})
                if not env.done:
                    env.step({"role": "assistant", "content": _final_text(response)})
                return env.last_score if env.done and env.last_score is not None else env.score()
            finally:
                env.close()

    def close(self) -> None:
        """Close every held rollout."""
        with self._lock:
            envs, self._envs = list(self._envs.values()), OrderedDict()
        for env, _ in envs:
            env.close()


def resources_app(env_id: str, *, max_sessions: int = 4096, **env_kwargs: Any) -> Any:
    """A Starlette app serving ``env_id`` as a NeMo Gym resources server (module docstring): ``POST
    /seed_session``, ``POST /<tool>`` for each tool, ``POST /verify``, and ``GET /`` (liveness).

    Errors: a body that is not a JSON object, or a row naming no valid episode, is HTTP 422 with
    ``{"detail": ...}``; a tool or verify request without a seeded session's cookie is HTTP 400.  A bad tool
    call (a name that is no tool, invalid arguments, a domain error) is HTTP 200 with the typed error as the
    tool output, as the model must see it, and counts in the episode's ``P_len`` as in ``envfactory rollout``.

    Raises:
        ModuleNotFoundError: Starlette is not installed (the ``server`` extra).
        UnknownEnvironmentError: no such environment.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sessions = NeMoGymSessions(env_id, max_sessions=max_sessions, **env_kwargs)

    async def body_of(request: Request) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def seed(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        body = await body_of(request)
        if body is None:
            return JSONResponse({"detail": "the body must be a JSON object (a dataset row)"}, 422)
        try:
            sid = await run_in_threadpool(sessions.seed, body)
        except (ValueError, LookupError) as exc:
            return JSONResponse({"detail": str(exc)}, 422)
        resp = JSONResponse({})
        resp.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="lax")
        return resp

    async def verify(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        body = await body_of(request)
        if body is None:
            return JSONResponse({"detail": "the body must be a JSON object (the row plus response)"}, 422)
        score = await run_in_threadpool(sessions.verify, request.cookies.get(SESSION_COOKIE), body.get("response"))
        if score is None:
            return JSONResponse({"detail": "no seeded session: POST /seed_session first and send its cookie"}, 400)
        return JSONResponse({**body, **verify_fields(score)})

    async def tool(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        name = request.path_params["name"]
        try:
            arguments = await request.json()
        except ValueError:
            arguments = None
        sid = request.cookies.get(SESSION_COOKIE)
        # any name runs in the episode: one that is no tool gets the env's typed unknown_tool error (an invalid call)
        text = await run_in_threadpool(sessions.call, sid, name, arguments)
        if text is None:
            return JSONResponse({"detail": "no seeded session: POST /seed_session first and send its cookie"}, 400)
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

    app = Starlette(routes=[Route("/", alive, methods=["GET"]),
                            Route("/seed_session", seed, methods=["POST"]),
                            Route("/verify", verify, methods=["POST"]),
                            Route("/{name}", tool, methods=["POST"])],
                    lifespan=lifespan)
    app.state.sessions = sessions
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve one environment as a NeMo Gym resources server (blocking), or write its dataset rows::

        python -m gym_envfactory.training.nemo_gym HotelBooking --port 8000
        python -m gym_envfactory.training.nemo_gym HotelBooking --rows hotel.jsonl --split train

    A NeMo Gym config then names it as a resources server at that host and port (NeMo Gym does not start
    it: it is not a NeMo Gym package), and verifiers' taskset takes it as ``resources_url``.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gym_envfactory.training.nemo_gym", description=main.__doc__)
    parser.add_argument("env", help="gym id or environment name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
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
    import uvicorn

    uvicorn.run(resources_app(args.env, trust=args.trust), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
