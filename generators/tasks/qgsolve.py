"""Pass@k solving of candidate tasks by an LLM agent (arXiv 2605.18703, §3.4: a task is kept when the
agent can solve it).

Each attempt is one episode of :class:`~gym_envfactory.envs.env.EnvFactoryEnv` in its own session, on the
candidate task given in memory: :func:`task_environment` wraps the environment in a new
:class:`~gym_envfactory.environment.spec.EnvironmentSpec` (:meth:`~gym_envfactory.environment.spec.EnvironmentSpec.with_tasks`: same manifest, state model,
tools and initial states) whose task list is the candidate alone, so nothing is written to disk and the
runtime is not touched.  The agent is :meth:`LLMClient.chat` with the episode's tools (stage ``solve``;
one client per attempt, seeded ``seed + attempt``); conversational presets play the user with
:class:`~gym_envfactory.users.llm.LLMUser`.  An attempt solves the task when the episode's
final state is equivalent (:func:`gym_envfactory.reward.state_diff`, bookkeeping, free-text and set fields
as the reward uses them) to the ground-truth final state.  When the ground truth leaves the state as it
found it (a read-only chain, or ``freeze_card`` then ``unfreeze_card``), that test is passed by doing
nothing, so such an attempt must also make every ground-truth call (:func:`gym_envfactory.reward.match_calls`
over the attempt's valid calls, order free).

The first solving attempt becomes a *verified trajectory* (:func:`verified_trajectory`): its failed calls
(tool errors, invalid calls) and redundant ones (a read-only call repeating an earlier one's name,
arguments and result) are filtered out, and the filtered conversation is replayed through a fresh episode
(the recorded user messages, the kept assistant actions); it is kept only when the replay solves the task
too, as an ``envfactory rollout --out`` record (:meth:`EpisodeResult.to_json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import Task
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import EnvFactoryError, LLMOutputError
from gym_envfactory.llm.client import LLMClient
from gym_envfactory.replay import TaskReference
from gym_envfactory.reward import TurnRecord, match_calls, state_diff
from gym_envfactory.rollout.policies import Policy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.users import UserSource, replayed_user

__all__ = ["SOLVE_STAGE", "Attempt", "SolveResult", "task_environment", "wire_messages", "solve_attempt",
           "solve_pass_at_k", "states_equivalent", "leaves_state_unchanged", "calls_match",
           "filter_calls", "verified_trajectory"]

#: The accounting stage of the agent's requests.
SOLVE_STAGE = "solve"


def task_environment(spec: EnvironmentSpec, tasks: Sequence[Task]) -> EnvironmentSpec:
    """``spec`` with ``tasks`` as its only tasks (for episodes on in-memory tasks; not registered):
    :meth:`EnvironmentSpec.with_tasks`, the route every tasks file takes.

    Raises:
        SpecError: as :class:`EnvironmentSpec` (never for a spec that loaded).
    """
    return spec.with_tasks(list(tasks))


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


def leaves_state_unchanged(reference: TaskReference) -> bool:
    """Whether the ground truth ends where it started (its final state equivalent to the initial one),
    so that an agent doing nothing reaches it.  ``True`` when the initial state is unknown (a hand-built
    reference): then the calls are checked as well."""
    if reference.initial is None:
        return True
    return states_equivalent(reference.initial, reference)


def calls_match(records: Sequence[TurnRecord], reference: TaskReference) -> bool:
    """Whether the valid calls of an episode (``EnvFactoryEnv.records``) cover every ground-truth call
    of ``reference`` (:func:`match_calls` over the whole episode, order free; masked arguments ignored)."""
    predicted = [(name, args) for rec in records for name, args, bad in rec.calls if not bad]
    ground_truth = [c for turn in reference.turn_calls for c in turn]
    return all(m is not None for m in match_calls(predicted, ground_truth))


@dataclass
class Attempt:
    """One attempt: ``solved``, ``reward`` (the env's episode reward), ``steps``, ``messages``, ``error``
    (an agent reply that could not be used, the user simulator ending the conversation early, or the
    ground-truth calls not made on a task that leaves the state unchanged), ``failed_calls`` (ids of
    calls that returned an error or were invalid) and ``seed`` (the episode's reset seed)."""

    solved: bool
    reward: float
    steps: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    user_ended: bool = False
    failed_calls: list[str] = field(default_factory=list)
    seed: int = 0


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
        failed: list[str] = []
        while not (terminated or truncated):
            try:
                reply = await client.chat(wire_messages(env.messages), stage=SOLVE_STAGE, tools=env.tools)
            except LLMOutputError as exc:  # only with a schema; kept for safety
                return Attempt(False, 0.0, env.steps, list(env.messages), error=str(exc), seed=seed)
            action: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                action["tool_calls"] = reply.tool_calls
            n = len(env.messages)
            _, reward, terminated, truncated, info = await env.astep(action)
            sent = env.messages[n].get("tool_calls") or env.messages[n].get("parsed_tool_calls") or []
            failed += [str(tc.get("id")) for tc, r in zip(sent, info.get("tool_results", []), strict=False)
                       if not r.get("ok")]
        assert env.session is not None
        final = env.session.state()
        ended_early = terminated and env.turn < len(task.turns)
        solved = states_equivalent(final, reference) and not ended_early
        error = "user ended the conversation early" if ended_early else \
            (info.get("truncated_reason") if truncated else None)
        if solved and leaves_state_unchanged(reference) and not calls_match(env.records, reference):
            solved, error = False, "the ground truth leaves the state unchanged and its calls were not made"
        return Attempt(solved, float(reward), env.steps, list(env.messages), error=error, user_ended=ended_early,
                       failed_calls=failed, seed=seed)
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


# ------------------------------------------------------------------------------------ verified trajectory
def _arguments_key(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


def filter_calls(messages: Sequence[dict[str, Any]], failed: Sequence[str],
                 read_only: Callable[[str], bool]) -> list[dict[str, Any]]:
    """``messages`` without the failed calls (ids in ``failed``) and the redundant ones (a call of a
    ``read_only`` tool whose name, arguments and result repeat an earlier kept call's), each with its
    tool message; an assistant message left with no call is dropped whole (its text would otherwise end
    the user turn when replayed)."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    drop = set(failed)
    seen: set[tuple[str, str, Any]] = set()
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            cid, fn = tc.get("id"), tc.get("function") or {}
            if cid in drop or not read_only(str(fn.get("name"))):
                continue
            key = (str(fn.get("name")), _arguments_key(fn.get("arguments", {})), results.get(cid))
            if key in seen:
                drop.add(cid)
            seen.add(key)
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            kept = [tc for tc in m["tool_calls"] if tc.get("id") not in drop]
            if not kept:
                continue
            m = {**m, "tool_calls": kept}
        elif m.get("role") == "tool" and m.get("tool_call_id") in drop:
            continue
        out.append(m)
    return out


class _Replay(Policy):
    """Plays recorded assistant actions in order (then a bare reply, which ends the turn)."""

    def __init__(self, actions: Sequence[dict[str, Any]], name: str) -> None:
        super().__init__()
        self.actions, self.name, self.i = list(actions), name, 0

    def act(self, env: EnvFactoryEnv) -> Any:
        self.i += 1
        return self.actions[self.i - 1] if self.i <= len(self.actions) else ""


def _read_only_lookup(spec: EnvironmentSpec, task: Task) -> Callable[[str], bool]:
    tools = dict(spec.tools)
    for name in task.envs:
        if name != spec.name:
            try:
                tools.update(get_environment(name).tools)
            except EnvFactoryError:
                pass
    return lambda tool: tool in tools and bool(tools[tool].read_only)


def verified_trajectory(spec: EnvironmentSpec, task: Task, reference: TaskReference, attempt: Attempt, *,
                        policy: str = "querygen", max_steps: int = 32) -> dict[str, Any] | None:
    """The ``envfactory rollout --out`` record (:meth:`EpisodeResult.to_json`) of ``attempt`` (a solving
    one) with failed and redundant calls filtered out (:func:`filter_calls`): the filtered actions and the
    recorded user messages are replayed in a fresh episode of ``task`` (a task of ``spec``, e.g. from
    :func:`task_environment`), so the messages, tools and reward are the environment's own.  ``None`` when
    the replay does not solve the task as :func:`solve_attempt` judges it (or diverges from the record)."""
    messages = filter_calls(attempt.messages, attempt.failed_calls, _read_only_lookup(spec, task))
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    actions = wire_messages([m for m in messages if m.get("role") == "assistant"])
    env = EnvFactoryEnv(spec, task_id=task.task_id, user=replayed_user(users), max_steps=max_steps)
    try:
        replay = _Replay(actions, policy)
        result = run_episode(env, replay, task_id=task.task_id, seed=attempt.seed)
        assert env.session is not None
        final = env.session.state()
        if replay.i > len(actions) + 1 or result.truncated or env.turn < len(task.turns) \
                or not states_equivalent(final, reference) \
                or (leaves_state_unchanged(reference) and not calls_match(env.records, reference)):
            return None
        return result.to_json()
    finally:
        env.close()
