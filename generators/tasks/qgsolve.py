"""Pass@k solving of candidate tasks by an LLM agent (arXiv 2605.18703, §3.4: a task is kept when the
agent can solve it).

Each attempt is one episode of :class:`~gym_envfactory.envs.env.EnvFactoryEnv` in its own session, on the
candidate task given in memory: :func:`task_environment` wraps the environment in a new
:class:`~gym_envfactory.environment.spec.EnvironmentSpec` (public constructor: same manifest, state model,
tools and initial states) whose task list is the candidate alone, so nothing is written to disk and the
runtime is not touched.  The agent is :meth:`LLMClient.chat` with the episode's tools (stage ``solve``;
one client per attempt, seeded ``seed + attempt``); conversational presets play the user with
:class:`~gym_envfactory.generators.tasks.user.LLMUser`.  An attempt solves the task when the episode's
final state is equivalent (:func:`gym_envfactory.reward.state_diff`, bookkeeping, free-text and set fields
as the reward uses them) to the ground-truth final state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import Task
from gym_envfactory.envs.env import EnvFactoryEnv, UserSource
from gym_envfactory.generators.errors import LLMOutputError
from gym_envfactory.generators.llm import LLMClient
from gym_envfactory.replay import TaskReference
from gym_envfactory.reward import state_diff

__all__ = ["SOLVE_STAGE", "Attempt", "SolveResult", "task_environment", "wire_messages", "solve_attempt",
           "solve_pass_at_k", "states_equivalent"]

#: The accounting stage of the agent's requests.
SOLVE_STAGE = "solve"


def task_environment(spec: EnvironmentSpec, tasks: Sequence[Task]) -> EnvironmentSpec:
    """``spec`` with ``tasks`` as its only tasks (for episodes on in-memory tasks; not registered).

    Raises:
        SpecError: as :class:`EnvironmentSpec` (never for a spec that loaded).
    """
    inline = None
    if spec.path is None:  # a code-defined environment keeps its states inline: carry them over
        inline = {n: json.loads(spec.initial_state_json(n)) for n in spec.initial_state_names()}
    return EnvironmentSpec(spec.manifest, spec.state_model, list(spec.tools.values()), path=spec.path,
                           initial_states=inline, tasks_source=list(tasks), scenarios_source=[])


def wire_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Episode messages in the strict OpenAI wire form: standard keys only, ``content: null`` on an
    assistant message that only calls tools."""
    out = []
    for m in messages:
        role = m.get("role")
        keep = {"role", "content", "tool_calls"} if role == "assistant" else \
            {"role", "content", "tool_call_id"} if role == "tool" else {"role", "content"}
        w = {k: v for k, v in m.items() if k in keep}
        if role == "assistant" and not w.get("content") and w.get("tool_calls"):
            w["content"] = None
        out.append(w)
    return out


def states_equivalent(actual: Any, reference: TaskReference) -> bool:
    """Whether ``actual`` (the form of :meth:`Session.state`) equals the reference's final state under
    the reward's state equivalence (docs/reward.md)."""
    return not state_diff(actual, reference.final_state, bookkeeping=reference.excluded_fields,
                          set_fields=reference.set_fields, limit=1)


@dataclass
class Attempt:
    """One attempt: ``solved``, ``reward`` (the env's episode reward), ``steps``, ``messages`` and ``error``
    (an agent reply that could not be used, or the user simulator ending the conversation early)."""

    solved: bool
    reward: float
    steps: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    user_ended: bool = False


@dataclass
class SolveResult:
    """The pass@k outcome: ``attempts`` in order and how many ``solved``."""

    attempts: list[Attempt]

    @property
    def solved(self) -> int:
        """The number of attempts that reached the ground-truth final state."""
        return sum(a.solved for a in self.attempts)


async def solve_attempt(spec: EnvironmentSpec, task: Task, reference: TaskReference, client: LLMClient, *,
                        user: UserSource | None = None, seed: int = 0, max_steps: int = 32) -> Attempt:
    """One episode of ``client``'s model on ``task`` (a task of ``spec``, e.g. from
    :func:`task_environment`), scored against ``reference``.  Never raises for the model's behaviour
    (unusable replies end the attempt unsolved); ``LLMRequestError`` passes through."""
    env = EnvFactoryEnv(spec, task_id=task.task_id, user=user, max_steps=max_steps)
    try:
        await env.areset(seed=seed)
        terminated = truncated = False
        info: dict[str, Any] = {}
        reward = 0.0
        while not (terminated or truncated):
            try:
                reply = await client.chat(wire_messages(env.messages), stage=SOLVE_STAGE, tools=env.tools)
            except LLMOutputError as exc:  # only with a schema; kept for safety
                return Attempt(False, 0.0, env.steps, list(env.messages), error=str(exc))
            action: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                action["tool_calls"] = reply.tool_calls
            _, reward, terminated, truncated, info = await env.astep(action)
        assert env.session is not None
        final = env.session.state()
        ended_early = terminated and env.turn < len(task.turns)
        solved = states_equivalent(final, reference) and not ended_early
        return Attempt(solved, float(reward), env.steps, list(env.messages),
                       error="user ended the conversation early" if ended_early else
                       (info.get("truncated_reason") if truncated else None), user_ended=ended_early)
    finally:
        env.close()


async def solve_pass_at_k(spec: EnvironmentSpec, task: Task, reference: TaskReference,
                          clients: Sequence[LLMClient], *, user: UserSource | None = None, seed: int = 0,
                          stop_early: bool = False) -> SolveResult:
    """Attempt ``task`` once per client in ``clients`` (k = ``len(clients)``), sequentially;
    ``stop_early`` stops at the first solved attempt."""
    attempts = []
    for i, client in enumerate(clients):
        a = await solve_attempt(spec, task, reference, client, user=user, seed=seed + i)
        attempts.append(a)
        if a.solved and stop_early:
            break
    return SolveResult(attempts)
