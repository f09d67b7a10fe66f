"""The gym as a VeRL agent loop (VeRL 0.9.x, ``verl.experimental.agent_loop``; arXiv 2605.18703 §3.5).

VeRL's ``AgentLoopWorker`` instantiates one agent loop per trajectory and awaits
``run(sampling_params, **row)``.  :class:`EnvFactoryAgentLoop` plays the row's episode:

1. builds an :class:`~gym_envfactory.EnvFactoryEnv` (``history="raw"``) on the configured backend and
   resets it with the row's ``extra_info.reset_options`` (an ``envfactory export rl`` row);
2. tokenises the opening messages and the episode's tool schemas with VeRL's Continuous Token builder
   (``ct_build_initial_tokens``), so the model sees the template's own tool rendering;
3. loops: ``server_manager.generate`` → the generated ids appended as they are (``response_mask`` 1)
   → the decoded text stepped in the gym (``astep``: off the event loop) → the new tool results and the
   next scripted user message appended with ``response_mask`` 0 (``ct_merge_context_msg``), until the
   episode ends, the step limit (``multi_turn.max_assistant_turns``) or ``response_length`` is reached;
4. returns an ``AgentLoopOutput`` whose ``reward_score`` is the gym's episode reward (scored as it
   stands if cut), with ``reward_extra_info`` holding ``r_traj``, ``r_state``, ``r_output``, ``p_len``,
   ``penalty``, ``matched``, ``n_ground_truth``, ``invalid``, ``truncated`` and ``env_steps`` (one
   fixed key set, as VeRL stacks them per batch).

Configure it through the agent loop YAML (keys become constructor keywords): ``backend`` (inprocess,
url, docker), ``url``, ``token``, ``user`` (``"module:function"``, a
:data:`~gym_envfactory.users.UserSource` resolved by :func:`~gym_envfactory.users.import_user`, e.g. a
simulated user) and ``env_kwargs`` (any other
:class:`EnvFactoryEnv` keyword: ``reward``, ``max_steps_per_turn`` ...).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.reward import REWARD_COMPONENTS
from gym_envfactory.training.verl import AGENT_NAME
from gym_envfactory.users import import_user

__all__ = ["EnvFactoryAgentLoop", "REWARD_EXTRA_KEYS"]

logger = logging.getLogger(__name__)

#: Keys of ``reward_extra_info`` (every trajectory has all of them; ``None`` components become NaN).
REWARD_EXTRA_KEYS = (*(k for k in REWARD_COMPONENTS if k not in ("reward", "vacuous")), "matched", "n_ground_truth",
                     "invalid", "truncated", "env_steps")


@register(AGENT_NAME)
class EnvFactoryAgentLoop(AgentLoopBase):
    """A VeRL agent loop over gym_envfactory episodes (module docstring).

    Args (besides VeRL's own): backend, url, token: where sessions live (``EnvFactoryEnv``'s);
    user: ``"module:function"`` of a user source; env_kwargs: other ``EnvFactoryEnv`` keywords;
    tools: VeRL's tool list (ignored: the environment's tools are the episode's).

    Raises (from ``run``): KeyError when the row has no ``extra_info.reset_options`` and no ``task_id``;
    UnknownTaskError/ValueError for a bad episode; BackendUnavailableError when a remote backend is lost.
    """

    def __init__(self, *args: Any, tools: Any = None, backend: str = "inprocess", url: str | None = None,
                 token: str | None = None, user: str | None = None, env_kwargs: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        self.max_steps = int(multi_turn.get("max_assistant_turns") or 16)
        self.response_length = int(self.rollout_config.response_length)
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
            tools = info["tools"]
            messages = [dict(m) for m in obs]
            prompt_ids = await self.ct_build_initial_tokens(messages, tools=tools)
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
