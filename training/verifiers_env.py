"""verifiers adapter: the catalog as a verifiers environment (issue 28, part 3), for prime-rl and ``vf-eval``.

verifiers 0.4 (PrimeIntellect-ai/verifiers; its stack is ``verifiers.v1``) builds an environment from a
*taskset* (tasks with their tools and ``@reward`` / metric hooks), a *harness* (the agent program that calls
the model, e.g. ``null``: a plain chat loop with MCP tools) and a *runtime*.  ``vf.load_environment(EnvConfig)``
resolves the taskset by its id, and every rollout of a task gets its own trace and state.

This module is such a taskset, built on verifiers' own NeMo Gym taskset (``verifiers.v1.tasksets.nemo_gym``),
which drives any NeMo Gym resources server: :class:`EnvFactoryTaskset` yields one task per user turn of an
environment's tasks (:func:`~gym_envfactory.training.nemo_gym.dataset_rows`), and :class:`EnvFactoryEnv`
starts this package's resources server for the environment (:func:`~gym_envfactory.training.nemo_gym.resources_app`,
in a thread of this process) unless ``resources_url`` names a running one.  So:

- state isolation: each rollout seeds its own session (one :class:`~gym_envfactory.EnvFactoryEnv` episode,
  named by a cookie the rollout carries), its tool calls run there, and ``/verify`` scores and closes it;
- tools: the environment's own (names, descriptions, JSON schemas), served over MCP by verifiers' toolset;
- reward: one reward, ``nemo_gym``, of weight 1: the gym's episode reward (``R = α·R_traj + (1−α)·R_state −
  γ·P_len``, clipped; docs/reward.md), so verifiers' scalar equals the gym's; the components ``r_traj``,
  ``r_state``, ``r_output`` (when not vacuous), ``p_len`` and ``penalty`` are recorded as metrics of the
  trace (and whole in ``trace.info["nemo_gym"]["reward_components"]``).  They are not separate weighted
  rewards: the clip to [0, 1] and the renormalisation over non-vacuous components (docs/reward.md) make the
  gym's reward no fixed linear combination of them.

Use it with :func:`load_environment` (returns a ``verifiers.v1.Env``), or as taskset id ``envfactory``
once this module is imported (the import registers it under verifiers' taskset namespace, so
``vf.load_environment`` and ``verifiers.v1.cli.eval.runner.run_eval`` find it; the ``vf-eval`` command line
does not import it for you).  Rows are single user turns (turn ``t`` from the ground-truth state after turn
``t-1``), as NeMo Gym rows are: verifiers' harnesses play one user turn.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verifiers.v1.mcp import Toolset
from verifiers.v1.taskset import Taskset
from verifiers.v1.tasksets.nemo_gym import NeMoGymConfig, NeMoGymData, NeMoGymEnv, NeMoGymTask
from verifiers.v1.tasksets.nemo_gym.toolset import NeMoGymToolset

from gym_envfactory.errors import DatasetError
from gym_envfactory.training.nemo_gym import dataset_rows, resources_app

__all__ = ["EnvFactoryTaskset", "EnvFactoryEnv", "EnvFactoryTasksetConfig", "load_environment", "TASKSET_ID"]

#: The taskset id this module answers to in verifiers (``--env.taskset.id``) once imported.
TASKSET_ID = "envfactory"


class EnvFactoryTasksetConfig(NeMoGymConfig):
    """The taskset's config: verifiers' NeMo Gym taskset config (``tools``, ``task.resources_url``,
    ``task.headers``, ``task.request_timeout``) plus the environment to play.

    ``env``: gym id or environment name; ``split``: only tasks of this split; ``task_ids``: only these
    tasks; ``per_turn``: one task per user turn (default) or one per task (its first turn played);
    ``env_kwargs``: keywords of :class:`~gym_envfactory.EnvFactoryEnv` for the server's episodes
    (``reward``, ``backend``, ...); ``dataset``: rows to play instead (a NeMo Gym JSONL file,
    :func:`~gym_envfactory.training.nemo_gym.dataset_rows`' form); left empty, rows come from ``env``.
    """

    dataset: Path = Path()  # optional here: rows come from `env`
    env: str = "HotelBooking"
    split: str | None = None
    task_ids: list[str] | None = None
    per_turn: bool = True
    env_kwargs: dict[str, Any] = {}


class EnvFactoryTaskset(Taskset[NeMoGymTask, EnvFactoryTasksetConfig]):
    """One verifiers task per row of :func:`~gym_envfactory.training.nemo_gym.dataset_rows` (the prompt: the
    episode's opening messages; the row sent back to the resources server at seed and verify); the tools
    are served by verifiers' NeMo Gym toolset."""

    @classmethod
    def toolsets(cls, config: EnvFactoryTasksetConfig) -> list[Toolset]:
        """verifiers' NeMo Gym toolset: the rollout's tools over MCP, each call posted to the resources server."""
        return [NeMoGymToolset(config.tools)]

    def rows(self) -> list[dict[str, Any]]:
        """The rows this taskset plays (from ``dataset`` when set, else from ``env``).

        Raises:
            DatasetError: a line of ``dataset`` is not JSON, not an object, or lacks ``responses_create_params``
                (an object); the error names the file, the line (1-based) and the key.
        """
        return [row for _, row in self._sourced_rows()]

    def _sourced_rows(self) -> list[tuple[tuple[str | None, int | None], dict[str, Any]]]:
        """``((file, line), row)`` for each row (``(None, None)`` for rows made from ``env``)."""
        cfg = self.config
        if str(cfg.dataset) not in ("", "."):
            path = cfg.dataset.expanduser()
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise DatasetError(f"cannot read the dataset: {exc}", file=path) from None
            out: list[tuple[tuple[str | None, int | None], dict[str, Any]]] = []
            for n, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    raise DatasetError(f"not a JSON row: {str(exc)[:200]}", file=path, line=n) from None
                if not isinstance(row, dict):
                    raise DatasetError(f"a row must be a JSON object, got {type(row).__name__}", file=path, line=n)
                if not isinstance(row.get("responses_create_params"), dict):
                    raise DatasetError("missing or not an object (a NeMo Gym row: input, tools)", file=path, line=n,
                                       field="responses_create_params")
                if not isinstance(row.get("reset_options") or {}, dict):
                    raise DatasetError("not an object (task_id, start_turn, end_turn)", file=path, line=n,
                                       field="reset_options")
                out.append(((str(path), n), row))
            return out
        rows = dataset_rows(cfg.env, split=cfg.split, per_turn=cfg.per_turn, **cfg.env_kwargs)
        if cfg.task_ids is not None:
            keep = set(cfg.task_ids)
            rows = [r for r in rows if r["reset_options"]["task_id"] in keep]
        return [((None, None), r) for r in rows]

    def load(self) -> Iterator[NeMoGymTask]:
        """The tasks, named ``<task_id>`` or ``<task_id>:t<turn>`` (per-turn rows).

        Raises:
            ValueError: no rows (no tasks in the selection).
            DatasetError: a bad row (:meth:`rows`), or ``responses_create_params`` verifiers cannot read (file,
                line and key named).
        """
        from verifiers.v1.dialects.responses import ResponsesDialect

        dialect = ResponsesDialect()
        rows = self._sourced_rows()
        if not rows:
            raise ValueError(f"{self.config.env}: no tasks to play (split {self.config.split!r}, "
                             f"task_ids {self.config.task_ids!r})")
        for (file, line), row in rows:
            options = row.get("reset_options") or {}
            name = str(options.get("task_id"))
            if options.get("start_turn") is not None:
                name += f":t{options['start_turn']}"
            try:
                request = dialect.parse_request(row["responses_create_params"])
            except Exception as exc:  # noqa: BLE001 - verifiers' own validation errors, whatever their type
                first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                raise DatasetError(f"verifiers cannot read it: {first}", file=file, line=line,
                                   field="responses_create_params") from None
            yield NeMoGymTask(NeMoGymData(id=name, name=name, prompt=request.messages, row=row), self.config.task)


class EnvFactoryEnv(NeMoGymEnv):
    """verifiers' NeMo Gym env, with the environment's resources server started in this process (a uvicorn
    server on a free loopback port, in a daemon thread) when no ``resources_url`` is configured; stopped
    with the env."""

    _server: Any = None

    async def start(self) -> None:
        """Start the resources server (unless ``task.resources_url`` names one).

        Raises:
            RuntimeError: the server did not come up within 30 s.
        """
        import uvicorn

        config = self.taskset.config
        if config.task.resources_url is not None:
            return
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        app = resources_app(config.env, **config.env_kwargs)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="envfactory-nemo-gym",
                                  daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the envfactory resources server did not start")
            time.sleep(0.02)
        self._server = (server, thread, sock)
        config.task.resources_url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        """Stop the resources server this env started (its open sessions are closed)."""
        if self._server is None:
            return
        (server, thread, sock), self._server = self._server, None
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        self.taskset.config.task.resources_url = None


def load_environment(env: str = "HotelBooking", *, split: str | None = None, task_ids: list[str] | None = None,
                     per_turn: bool = True, env_kwargs: dict[str, Any] | None = None,
                     resources_url: str | None = None, harness: str = "null", runtime: str = "subprocess",
                     **config: Any) -> Any:
    """A ``verifiers.v1.Env`` over ``env``'s tasks (module docstring): ``vf.load_environment`` on an
    ``EnvConfig`` whose taskset is :class:`EnvFactoryTaskset`.

    Args:
        env: gym id or environment name.
        split, task_ids, per_turn, env_kwargs: :class:`EnvFactoryTasksetConfig`.
        resources_url: a running resources server for ``env`` (default: one started with the env).
        harness: the agent harness id (default ``null``: a chat loop with the tools over MCP).
        runtime: where the harness runs (verifiers' runtime type; default ``subprocess``, on this host).
        config: further ``EnvConfig`` fields, merged over these (nested dicts).

    Raises:
        ModuleNotFoundError: verifiers is not installed (the ``verifiers`` extra).
        pydantic.ValidationError: a bad config field.
    """
    import verifiers.v1 as vf

    data: dict[str, Any] = {
        "taskset": {"id": TASKSET_ID, "env": env, "split": split, "task_ids": task_ids, "per_turn": per_turn,
                    "env_kwargs": dict(env_kwargs or {}), "task": {"resources_url": resources_url}},
        "agent": {"harness": {"id": harness}, "runtime": {"type": runtime}},
    }
    _merge(data, config)
    return vf.load_environment(vf.resolve_env_config(data))


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def _register() -> None:
    """Make ``envfactory`` a taskset id verifiers resolves (``verifiers.v1.tasksets.envfactory`` is this
    module: verifiers looks a taskset id up there first, then as a top-level module)."""
    sys.modules.setdefault(f"verifiers.v1.tasksets.{TASKSET_ID}", sys.modules[__name__])


_register()
