"""The gym as a VeRL agent loop (VeRL 0.9.x, ``verl.experimental.agent_loop``; arXiv 2605.18703 §3.5).

VeRL's ``AgentLoopWorker`` instantiates one agent loop per trajectory and awaits
``run(sampling_params, **row)``.  :class:`EnvFactoryAgentLoop` plays the row's episode:

1. builds an :class:`~gym_envfactory.EnvFactoryEnv` (``history="raw"``) on the configured backend and
   resets it with the row's ``extra_info.reset_options`` (an ``envfactory export rl`` row);
2. tokenises the opening messages and the episode's tool schemas (compact by default:
   :func:`~gym_envfactory.training.verl.prompts.prompt_tools`) with VeRL's Continuous Token builder, so the
   model sees the template's own tool rendering, and refuses a prompt longer than ``rollout.prompt_length``
   (:class:`~gym_envfactory.training.verl.prompts.PromptTooLongError`, naming the row) where VeRL would
   left-truncate it;
3. loops: ``server_manager.generate`` → the generated ids appended as they are (``response_mask`` 1)
   → the decoded text stepped in the gym (``astep``: off the event loop) → the new tool results and the
   next scripted user message appended with ``response_mask`` 0 (``ct_merge_context_msg``), until the
   episode ends, the step limit (``multi_turn.max_assistant_turns``) or ``response_length`` is reached;
4. returns an ``AgentLoopOutput`` whose ``reward_score`` is the gym's episode reward (scored as it
   stands if cut), with ``reward_extra_info`` holding ``r_traj``, ``r_state``, ``r_output``, ``p_len``,
   ``penalty``, ``matched``, ``n_ground_truth``, ``invalid``, ``truncated`` and ``env_steps`` (one
   fixed key set, as VeRL stacks them per batch).

Configure it through the agent loop YAML (keys become constructor keywords): ``backend`` (inprocess,
url, docker), ``url``, ``token``, ``token_file`` (first line: the token, kept out of VeRL's printed
config), ``tool_schemas`` (``compact`` or ``full``), ``user`` (``"module:function"``, a
:data:`~gym_envfactory.users.UserSource` resolved by :func:`~gym_envfactory.users.import_user`, e.g. a
simulated user) and ``env_kwargs`` (any other
:class:`EnvFactoryEnv` keyword: ``reward``, ``max_steps_per_turn`` ...).  The shipped YAML reads backend,
url and token file from ``ENVFACTORY_BACKEND``, ``ENVFACTORY_URL``, ``ENVFACTORY_TOKEN_FILE`` in the Ray
worker (``run_grpo.sh`` carries them there: :mod:`~gym_envfactory.training.verl.launch`);
``backend="url"`` without a url is refused when the loop is built, never run in-process instead.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.errors import BackendError
from gym_envfactory.reward import REWARD_COMPONENTS
from gym_envfactory.training.verl import AGENT_NAME
from gym_envfactory.training.verl.prompts import TOOL_SCHEMAS, check_prompt_fits, prompt_tools
from gym_envfactory.users import import_user

__all__ = ["EnvFactoryAgentLoop", "REWARD_EXTRA_KEYS"]

logger = logging.getLogger(__name__)

#: Keys of ``reward_extra_info`` (every trajectory has all of them; ``None`` components become NaN).
REWARD_EXTRA_KEYS = (*(k for k in REWARD_COMPONENTS if k not in ("reward", "vacuous")), "matched", "n_ground_truth",
                     "invalid", "truncated", "env_steps")


@register(AGENT_NAME)
class EnvFactoryAgentLoop(AgentLoopBase):
    """A VeRL agent loop over gym_envfactory episodes (module docstring).

    Args (besides VeRL's own): backend, url, token: where sessions live (``EnvFactoryEnv``'s; an empty
    string counts as unset); token_file: a file whose first line is the token (used when ``token`` is
    unset); tool_schemas: ``"compact"`` or ``"full"`` (:func:`~.prompts.prompt_tools`); user:
    ``"module:function"`` of a user source; env_kwargs: other ``EnvFactoryEnv`` keywords; tools: VeRL's
    tool list (ignored: the environment's tools are the episode's).

    Raises: BackendError (construction) when ``backend="url"`` has no url in this worker (the message
    names the host and ``ENVFACTORY_URL``); ValueError for an unknown ``tool_schemas``.  From ``run``:
    KeyError when the row has no ``extra_info.reset_options`` and no ``task_id``; PromptTooLongError when
    the opening prompt with its tools exceeds ``rollout.prompt_length``; UnknownTaskError/ValueError for a
    bad episode; BackendUnavailableError when a remote backend is lost.
    """

    def __init__(self, *args: Any, tools: Any = None, backend: str = "inprocess", url: str | None = None,
                 token: str | None = None, token_file: str | None = None, tool_schemas: str = "compact",
                 user: str | None = None, env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        self.max_steps = int(multi_turn.get("max_assistant_turns") or 16)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        if tool_schemas not in TOOL_SCHEMAS:
            raise ValueError(f"tool_schemas must be one of {TOOL_SCHEMAS}, got {tool_schemas!r}")
        self.tool_schemas = tool_schemas
        backend, url, token = (backend or "inprocess"), (url or None), (token or None)
        if backend == "url" and not url:
            raise BackendError(
                f"the agent loop was asked for backend='url' (ENVFACTORY_BACKEND=url) but this Ray worker "
                f"(host {socket.gethostname()}) has no server url: ENVFACTORY_URL did not reach it. Set it where "
                f"you launch (run_grpo.sh carries ENVFACTORY_* to every worker via ray_kwargs.ray_init.runtime_env) "
                f"or set url in the agent loop YAML; refusing to run sessions in-process instead")
        if token is None and token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip() or None
        self.env_kwargs: dict[str, Any] = {"backend": backend, "url": url, "token": token,
                                           **dict(env_kwargs or {})}
        if user:
            self.env_kwargs["user"] = import_user(user)

    def _make_env(self, env_id: str) -> EnvFactoryEnv:
        kwargs = {k: v for k, v in self.env_kwargs.items() if v is not None}
        return EnvFactoryEnv(env_id, history="raw", max_steps=self.max_steps, **kwargs)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play one episode (module docstring); ``kwargs`` is the dataset row (``extra_info``, ``data_source``)."""
        extra = kwargs.get("extra_info") or {}
        options = dict(extra.get("reset_options") or {})
        if not options and extra.get("task_id"):
            options = {"task_id": extra["task_id"]}
        if not options:
            raise KeyError("the row has no extra_info.reset_options (rows of `envfactory export rl`) and no task_id")
        options = {k: (int(v) if k in ("start_turn", "end_turn") else v) for k, v in options.items() if v is not None}
        env_id = str(extra.get("env") or kwargs.get("data_source"))
        env = await asyncio.to_thread(self._make_env, env_id)
        metrics: dict[str, float] = {}
        request_id = uuid4().hex
        try:
            obs, info = await env.areset(options=options)
            tools = prompt_tools(info["tools"], self.tool_schemas)
            messages = [dict(m) for m in obs]
            # built here, not with ct_build_initial_tokens, which left-truncates an overlong prompt
            prompt_ids = await asyncio.to_thread(self.continuous_token_builder.build_initial_tokens, messages,
                                                 tools=tools)
            check_prompt_fits(len(prompt_ids), self.prompt_length,
                              {"task_id": options.get("task_id"), "index": extra.get("index"),
                               "env": env_id, "turn": options.get("start_turn")})
            response_mask: list[int] = []
            logprobs: list[float] | None = None
            steps, cut = 0, False
            while True:
                with simple_timer("generate_sequences", metrics):
                    out = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                             sampling_params=sampling_params)
                if out.log_probs and logprobs is None:
                    logprobs = [0.0] * len(response_mask)
                merged, response_mask, logprobs = await self.ct_merge_assistant_token(
                    prompt_ids, list(out.token_ids), response_mask, logprobs,
                    assistant_logprobs=list(out.log_probs) if out.log_probs else None)
                prompt_ids = merged.token_ids
                text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                with simple_timer("tool_calls", metrics):
                    obs, _, terminated, truncated, info = await env.astep(text)
                steps += 1
                messages.append({"role": "assistant", "content": text})
                if terminated or truncated:
                    cut = truncated
                    break
                if len(response_mask) >= self.response_length:
                    cut = True
                    break
                previous = list(messages)
                messages += [dict(m) for m in obs]
                merged, response_mask, logprobs = await self.ct_merge_context_msg(
                    previous, messages, prompt_ids, response_mask, logprobs, tools=tools)
                prompt_ids = merged.token_ids
                if len(response_mask) >= self.response_length:
                    cut = True
                    break
            score = env.last_score if env.done and env.last_score is not None else await asyncio.to_thread(env.score)
        finally:
            await asyncio.to_thread(env.close)
        n = len(response_mask)
        response_ids = prompt_ids[len(prompt_ids) - n:] if n else []
        prompt_only = prompt_ids[:len(prompt_ids) - n]
        components = score.to_dict()
        extra_info = {k: components.get(k) for k in REWARD_EXTRA_KEYS[:-2]}
        extra_info = {k: (float("nan") if v is None else float(v)) for k, v in extra_info.items()}
        extra_info.update(truncated=float(cut), env_steps=float(steps))
        return AgentLoopOutput(
            prompt_ids=prompt_only,
            response_ids=response_ids[: self.response_length],
            response_mask=response_mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=float(score.reward),
            num_turns=len(messages),
            metrics=metrics,
            extra_fields={"reward_extra_info": extra_info, "turn_scores": [t.reward for t in score.turns],
                          "tool_rewards": [], "envfactory_task_id": options.get("task_id")},
        )
