"""The Gymnasium multi-turn tool-use environment (docs/architecture.md, "The Gymnasium contract").

``gym.make("envfactory/HotelBooking-v0", **kwargs)`` builds :class:`EnvFactoryEnv`.  An episode is one
task: ``reset`` loads the task's initial state into a fresh :class:`~gym_envfactory.session.Session`
and returns the opening messages (system + first user turn); each ``step`` takes one assistant action,
executes its tool calls against the episode's own state and returns the tool messages.  An assistant
action with no tool call ends the user turn: the next user message (scripted from the task, or from a
pluggable user source) comes back, and after the last turn the episode terminates with the reward of
docs/reward.md.  Step limits truncate (and the episode is scored as it stands).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from types import FrameType
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import TimeLimit

from gym_envfactory.backends import Backend, acquire_backend, check_backend_serves, resolve_backend
from gym_envfactory.digest import reference_digest
from gym_envfactory.environment.arguments import scrub
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.states import task_environments
from gym_envfactory.environment.taskfiles import TasksSource, read_tasks, tasks_for
from gym_envfactory.environment.tasks import Task, Turn
from gym_envfactory.envs.options import BackendOptions, EpisodeLimits, PromptOptions, TaskSelection, fill
from gym_envfactory.envs.parsing import MAX_RAW_CHARS, ParseError, ToolCall, parse_action
from gym_envfactory.envs.spaces import AssistantActionSpace, MessagesSpace
from gym_envfactory.envs.vector_memory import MessagesSharedMemory  # noqa: F401 - registers async make_vec's hooks
from gym_envfactory.errors import DatasetError, SpecError, UnknownTaskError
from gym_envfactory.replay import TaskReference, task_reference
from gym_envfactory.reward import (
    EpisodeScore,
    RewardConfig,
    TurnRecord,
    TurnScore,
    score_episode,
    score_turn,
    turn_has_criteria,
)
from gym_envfactory.session import SessionProtocol, ToolResult
from gym_envfactory.users import UserSource, scripted_user

__all__ = ["EnvFactoryEnv", "UserSource", "scripted_user", "DEFAULT_SYSTEM_PROMPT", "TOOLS_NOTE_TEMPLATE", "tools_note"]

#: Keys ``reset(options=...)`` accepts.
RESET_OPTIONS = frozenset({"task_id", "split", "start_turn", "end_turn"})


def _turn_index(value: Any) -> int | None:
    """``value`` as a turn index, or ``None``: integers (numpy's too), never bools or strings."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _outer_time_limit(env: EnvFactoryEnv) -> int | None:
    """The ``max_episode_steps`` of a Gymnasium ``TimeLimit`` wrapping ``env``, found on the call stack
    of this ``reset`` (the unwrapped env is never told; ``gym.make(..., max_episode_steps=N)`` adds one).
    Knowing it, the env truncates itself at the same step, with the episode reward and the full score in
    ``info`` (vector envs copy infos, so nothing can be computed later)."""
    here = inspect.currentframe()  # _outer_time_limit ← reset ← the caller of reset
    frame: FrameType | None = here.f_back.f_back if here is not None and here.f_back is not None else None
    for _ in range(16):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, TimeLimit) and owner.unwrapped is env:
            steps = getattr(owner, "_max_episode_steps", None)
            return steps if isinstance(steps, int) and steps > 0 else None
        frame = frame.f_back
    return None


def ground_truth_reply(turn: Turn) -> str:
    """The closing reply a correct agent gives at the end of ``turn``: a question on a clarification
    turn, else the turn's expected outputs (docs/reward.md, "R_output").  Used by the oracle policy and
    for earlier turns played from the ground truth (``reset(options={"start_turn": ...})``)."""
    if turn.clarification:
        return "Could you give me the missing details so I can go ahead?"
    if turn.expected_outputs:
        return "Done. " + "; ".join(turn.expected_outputs) + "."
    return "Done."


DEFAULT_SYSTEM_PROMPT = (
    "You are an assistant that acts for the user through tools. Environment: {description}\n"
    "{clock}"
    "Call tools to look things up and make changes; never invent ids or results. If a required detail "
    "is missing or ambiguous, ask the user instead of guessing. When the request is handled, reply to the "
    "user without calling a tool."
)


#: The system note that opens a turn whose task adds tools (docs/authoring.md, "Tool sets per turn"):
#: one OpenAI tool schema per line inside ``<tools></tools>``, as the Hermes / Qwen tools block writes them,
#: so a model reading its tools from the prompt learns their signatures too.
TOOLS_NOTE_TEMPLATE = ("New tools are available from now on, in addition to the earlier ones. Their function "
                       "signatures are within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>")


def tools_note(added: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The system message announcing ``added`` (OpenAI tool schemas) at the start of the turn that adds
    them (:data:`TOOLS_NOTE_TEMPLATE`); it comes right before that turn's user message."""
    text = "\n".join(json.dumps(t, ensure_ascii=False) for t in added)
    return {"role": "system", "content": TOOLS_NOTE_TEMPLATE.format(tools=text)}


#: The root field of an environment's state that holds its fixed clock (docs/authoring.md, "The state").
CLOCK_FIELD = "now"
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # not locale-dependent


def _canonical_states(states: Mapping[str, bytes]) -> Any:
    """Validated state bytes per environment → the form of ``Session.state()`` (one environment: its dict)."""
    parsed = {name: json.loads(raw) for name, raw in states.items()}
    return next(iter(parsed.values())) if len(parsed) == 1 else parsed


def clock_line(environments: Sequence[EnvironmentSpec], initial: Any) -> str:
    """The system prompt's date line for an episode starting from ``initial`` (the canonical state: one
    environment's dict, or ``{env_name: dict}`` for several): the first environment (primary first) whose
    state has a :data:`CLOCK_FIELD` holding an ISO date or datetime gives ``"Today is Tuesday 2026-12-01;
    the time is 09:00 (Europe/Berlin).\n"`` (its ``timezone`` field, when a string, in brackets).  Empty
    when no environment of the episode has a clock.  Tasks rarely state the year, so a policy needs it
    to turn "December 10" into a tool argument."""
    for env in environments:
        state = initial if len(environments) == 1 else (initial or {}).get(env.name)
        value = state.get(CLOCK_FIELD) if isinstance(state, Mapping) else None
        if not isinstance(value, str):
            continue
        try:
            day = date.fromisoformat(value)  # a date alone (datetime.fromisoformat would read it as midnight)
        except ValueError:
            pass
        else:
            return f"Today is {_WEEKDAYS[day.weekday()]} {day.isoformat()}.\n"
        try:
            now = datetime.fromisoformat(value)
        except ValueError:
            continue
        tz = state.get("timezone") if isinstance(state, Mapping) else None
        where = f" ({tz})" if isinstance(tz, str) and tz else ""
        return f"Today is {_WEEKDAYS[now.weekday()]} {now.date().isoformat()}; the time is {now:%H:%M}{where}.\n"
    return ""


def no_tasks_message(spec: EnvironmentSpec) -> str:
    """What ``reset()`` says for an environment without tasks: where tasks come from for its kind."""
    if spec.path is None:
        where = "define_environment(..., tasks=[...]) gives a code-defined environment its tasks"
    else:
        where = (f"add a tasks.jsonl to {spec.path} (docs/authoring.md, \"Tasks\"): `envfactory tasks add {spec.name} "
                 f"FILE` copies checked tasks in, and gym.make(..., tasks=FILE) plays a tasks file as it is")
    return (f"{spec.name} has no tasks, so reset() has no episode to start: {where}; "
            f"its tools still run in a Session (gym_envfactory.Session)")


class StepInfo(dict[str, Any]):
    """The ``info`` dict of :meth:`EnvFactoryEnv.step`.  At the episode's end it holds ``score``,
    ``reward_components`` and ``state_diff``; before that, reading ``info["score"]`` (or the other
    two) scores the episode as it stands, on demand.  So an outer limit the env cannot see
    (``gym.make(..., max_episode_steps=N)``'s ``TimeLimit``) still yields a score, at no cost to steps
    whose score nobody reads.  Pickles and copies as a plain dict (vector envs send infos between
    processes)."""

    __slots__ = ("_env", "_episode")

    def __init__(self, env: EnvFactoryEnv, data: dict[str, Any]) -> None:
        super().__init__(data)
        self._env: EnvFactoryEnv | None = env
        self._episode = env._episode

    def get(self, key: str, default: Any = None) -> Any:
        """``info.get("score")`` scores on demand like ``info["score"]``."""
        try:
            return self[key]
        except KeyError:
            return default

    def __missing__(self, key: str) -> Any:
        env = self._env
        if key not in ("score", "reward_components", "state_diff") or env is None:
            raise KeyError(key)
        if env.session is None or env._episode != self._episode:
            raise KeyError(f"{key}: the episode this info belongs to was reset or closed; read it before that")
        score = env.score()
        self._env = None
        self["score"] = score.to_dict()
        self["reward_components"] = score.reward_components()
        self["state_diff"] = [str(x) for x in score.state_diff]
        return self[key]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)


class EnvFactoryEnv(gym.Env):
    """A stateful, verifiable, multi-turn tool-use environment.

    Args:
        env: environment name (catalog or programmatic) or an :class:`EnvironmentSpec`.
        tasks: tasks to play in place of the environment's own (docs/synthesis.md, "Using a tasks
            file"): a tasks file path (``envfactory gen tasks`` writes them), a list of paths and task
            dicts, or a :class:`~gym_envfactory.environment.tasks.TaskSet`
            (:func:`~gym_envfactory.environment.taskfiles.read_tasks`).  A task without ``env`` is this
            environment's; tasks whose first environment is another are left out.  Checked here: a
            malformed line, an unknown environment or tool, a duplicate id is a ``DatasetError`` naming
            file, line and field, and so is a non-empty ``tasks`` holding no task of this environment.
        task_id: always use this task (``reset`` options may still override it).
        split: sample tasks from this split (``"train"``, ``"test"``); ``None`` = all tasks.
        task_ids: restrict sampling to these task ids.
        reward: :class:`RewardConfig` or a dict of its fields (``alpha``, ``gamma``, ...).
        reward_mode: ``"episode"`` (default; the episode reward at the final step, 0 before) or
            ``"turn"`` (each user turn's reward / number of turns that can score, when it ends; the
            return is the mean reward of those turns; docs/reward.md).
        max_steps: assistant actions per episode before truncation.
        max_steps_per_turn: assistant actions per user turn before truncation.
        max_calls_per_step: parallel calls executed per action; more are invalid calls.
        max_invalid_calls_per_step, max_invalid_calls_per_episode: how many calls that are not executed
            (malformed ones, and those beyond ``max_calls_per_step``) are recorded one by one, each with
            its action-log record and tool message: at most 16 per action and 128 per episode by
            default (0: none).  Those beyond either bound are summarised in one record and tool message
            per action (``"N more invalid calls ... were not recorded"``, raw arguments
            ``{"not_recorded": N}``) and each still counts as an invalid call in ``P_len``, whose
            penalty is capped (docs/reward.md, "P_len").  So a message of 10,000 junk ``<tool_call>``
            blocks costs time linear in its size, and the action log and the session snapshot stay
            bounded (at most ``max_steps * (max_calls_per_step + 1) + max_invalid_calls_per_episode``
            records, the text kept of each call not executed cut to 2,000 characters).
        user: a :data:`UserSource` (default :func:`scripted_user`).
        system_prompt: overrides the default; ``{description}`` (each environment's name and
            description) and ``{clock}`` (the date line of the episode's clock, :func:`clock_line`;
            empty for an environment without one) are filled in.
        render_mode: ``None`` or ``"ansi"``.
        backend: where sessions live: ``"inprocess"`` (the default for trusted packages), ``"isolated"``
            (the default for untrusted ones, provenance ``generated``/``imported``: a child with no inherited
            environment, an empty home, limits and no network), ``"subprocess"`` (a local server
            process), ``"docker"`` (the environment's container), ``"url"`` (a running server at ``url``),
            another name registered with :func:`~gym_envfactory.backends.register_backend`, or a
            :class:`~gym_envfactory.backends.Backend`.  Tasks and rewards are computed locally.
        trust: ``True`` runs an untrusted package like a trusted one (in this process by default, with
            this process's environment variables, files and network); without it ``backend="inprocess"``
            for one is an :class:`~gym_envfactory.errors.UntrustedPackageError`.
        url, token: the server for ``backend="url"``; the bearer token (default ``$ENVFACTORY_TOKEN``).
        backend_options: extra options of the backend (docker: ``image``, ``mem_limit`` ...).
        timeout: seconds a remote backend may take to start its server (subprocess, docker) and to
            answer each request (default 60); with ``gym.make("envfactory/HotelBooking-v0",
            backend="subprocess", timeout=10)`` a server that is not up within 10 s is a
            :class:`~gym_envfactory.errors.BackendError`.
        history: ``"parsed"`` (default) or ``"raw"`` (the text exactly as generated stays in the history).
        selection, limits, prompt: the same settings grouped (:mod:`gym_envfactory.envs.options`:
            :class:`TaskSelection`, :class:`EpisodeLimits`, :class:`PromptOptions`; ``backend`` also takes a
            :class:`BackendOptions`), with the same defaults; the flat keywords above fill them, and a group
            given together with one of its own flat keywords is a ``ValueError``.  Kept as
            ``self.selection``, ``self.limits``, ``self.prompt``, ``self.backend_spec``.

    Observation: list of new chat messages (OpenAI format).  Action: see
    :class:`~gym_envfactory.envs.spaces.AssistantActionSpace`.  ``info`` keys: ``task_id``, ``turn``,
    ``tools`` (at reset; on a step only when the turn it opens offers other tools than the turn before:
    a task's ``added_tools``), ``parsed_calls``, ``tool_results``, ``errors``, ``turn_ended``,
    ``turn_score``, and at the end ``score`` (every reward component, :meth:`EpisodeScore.to_dict`),
    ``reward_components`` and ``state_diff``.

    Tool sets per turn (docs/authoring.md, "Tool sets per turn"): a task's ``excluded_tools`` are
    never offered and a turn's ``added_tools`` only from that turn on; :attr:`tools` is the current
    turn's set, a system note (:func:`tools_note`) opens each turn that adds tools, and a call to a tool
    not offered is answered here, before any backend, as an ``unknown_tool`` invalid call.

    Raises:
        UnknownEnvironmentError, SpecError: bad environment.  BackendError, BackendUnavailableError: a
        remote backend that does not start within ``timeout`` or cannot be reached.  ValueError: bad
        limits or modes, or ``timeout`` given twice.  UnknownTaskError, DatasetError: at reset,
        for an unknown task or one whose ground truth does not replay (docs/cases.md C06); DatasetError
        also at construction for ``tasks`` that do not load.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    _forked: bool = False  # a fork (see fork_many) does not own the backend

    def __init__(
        self,
        env: str | EnvironmentSpec,
        *,
        tasks: TasksSource | None = None,
        task_id: str | None = None,
        split: str | None = None,
        task_ids: Sequence[str] | None = None,
        reward: RewardConfig | Mapping[str, Any] | None = None,
        reward_mode: str = "episode",
        max_steps: int | None = None,
        max_steps_per_turn: int | None = None,
        max_calls_per_step: int | None = None,
        max_invalid_calls_per_step: int | None = None,
        max_invalid_calls_per_episode: int | None = None,
        user: UserSource | None = None,
        system_prompt: str | None = None,
        render_mode: str | None = None,
        backend: str | Backend | BackendOptions | None = None,
        url: str | None = None,
        token: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        trust: bool | None = None,
        history: str | None = None,
        selection: TaskSelection | None = None,
        limits: EpisodeLimits | None = None,
        prompt: PromptOptions | None = None,
    ) -> None:
        # the flat keywords fill the option groups (envs/options.py); None = not given = the group's default
        self.prompt = fill(PromptOptions, prompt, "prompt", system_prompt=system_prompt, user=user, history=history)
        self.history = self.prompt.history
        self.environment: EnvironmentSpec = env if isinstance(env, EnvironmentSpec) else get_environment(env)
        #: whether the tasks played are the environment's own (a server can then look a task up by id)
        self.own_tasks = tasks is None
        if tasks is not None:
            given = read_tasks(tasks, env=self.environment)
            mine = tasks_for(given, self.environment.name)
            if given and not len(mine):
                raise DatasetError(f"none of the tasks given is {self.environment.name}'s (their environments: "
                                   f"{', '.join(given)})", field="env")
            self.environment = self.environment.with_tasks(mine)
        if reward_mode not in ("episode", "turn"):
            raise ValueError(f"reward_mode must be 'episode' or 'turn', got {reward_mode!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        limits = fill(EpisodeLimits, limits, "limits", max_steps=max_steps,
                      max_steps_per_turn=max_steps_per_turn, max_calls_per_step=max_calls_per_step,
                      max_invalid_calls_per_step=max_invalid_calls_per_step,
                      max_invalid_calls_per_episode=max_invalid_calls_per_episode)
        self.selection = fill(TaskSelection, selection, "selection", task_id=task_id, split=split, task_ids=task_ids)
        given_backend = backend if isinstance(backend, BackendOptions) else None
        self.backend_spec = fill(BackendOptions, given_backend, "backend", spelled={"options": "backend_options"},
                                 url=url, token=token, options=backend_options, timeout=timeout, trust=trust,
                                 backend=None if given_backend is not None else backend)
        self.tasks = self.environment.tasks
        self.fixed_task_id = self.selection.task_id
        if self.fixed_task_id is not None:
            self.tasks.get(self.fixed_task_id)  # fail early on an unknown id
        self.split = self.selection.split
        self.task_ids = list(self.selection.task_ids) if self.selection.task_ids is not None else None
        self.reward_config = RewardConfig.coerce(reward)
        self.reward_mode = reward_mode
        self.max_steps = limits.max_steps
        self.max_steps_per_turn = limits.max_steps_per_turn
        self.max_calls_per_step = limits.max_calls_per_step
        self.max_invalid_calls_per_step = limits.max_invalid_calls_per_step
        self.max_invalid_calls_per_episode = limits.max_invalid_calls_per_episode
        self._invalid_recorded = 0  # calls not executed but recorded one by one this episode
        self.user = self.prompt.user or scripted_user
        self.system_prompt = self.prompt.system_prompt
        self.render_mode = render_mode
        served = [self.environment.name] + sorted({n for t in self.tasks for n in t.envs} - {self.environment.name})
        spec = self.backend_spec
        # untrusted packages (EnvGen's, the importer's) run isolated unless trust=True (backends/pool.py)
        kind = resolve_backend(spec.backend, [self.environment, *(get_environment(n) for n in served[1:])], spec.trust)
        check_backend_serves(kind, [self.environment])
        packages = {self.environment.name: str(self.environment.path)} if self.environment.path is not None else None
        self.backend = acquire_backend(kind, envs=served, url=spec.url, token=spec.token, packages=packages,
                                       **spec.backend_kwargs())
        self.observation_space = MessagesSpace()
        self.action_space = AssistantActionSpace(list(self.environment.tools))
        self.session: SessionProtocol | None = None  # a Session, or a RemoteSession on a remote backend
        self.task: Task | None = None
        self.reference: TaskReference | None = None
        self.messages: list[dict[str, Any]] = []
        self.records: list[TurnRecord] = []
        self._turn_scores: list[TurnScore] = []  # scores of the turns that ended, reused by the episode score
        self.turn = 0
        self.steps = 0
        self.steps_in_turn = 0
        self.done = True
        self.last_score: EpisodeScore | None = None
        self.start_turn = 0
        self.end_turn = 0
        self._scored_turns = 0
        self._step_limit = self.max_steps
        self._episode = 0  # bumped by every reset: infos of an earlier episode stop scoring
        self._copies_next = 0  # forks the next reset's session is made with (make_group; Backend.makes_copies)
        self._thread_lock = threading.Lock()
        self._rendered = 0
        self._tool_sets: tuple[tuple[str, ...], ...] | None = None  # names offered per task turn; None: all
        self._available: frozenset[str] = frozenset()  # names offered in the current turn (with _tool_sets)

    # ------------------------------------------------------------------ helpers
    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        tid = options.get("task_id")
        if tid is None:
            tid = self.fixed_task_id
        if tid is not None:
            return self.tasks.get(tid)
        split = options.get("split", self.split)
        pool = [t for t in self.tasks.ids(split) if self.task_ids is None or t in self.task_ids]
        if not len(self.tasks):
            raise UnknownTaskError(no_tasks_message(self.environment))
        if not pool:
            raise UnknownTaskError(f"{self.environment.name}: no task to sample (split={split!r}, task_ids={self.task_ids})")
        return self.tasks.get(pool[int(self.np_random.integers(len(pool)))])

    @property
    def limits(self) -> EpisodeLimits:
        """The step and call limits in force, as an :class:`EpisodeLimits` read from the env's attributes
        (``max_steps`` and the others), so the two never disagree when one is set after construction."""
        return EpisodeLimits(self.max_steps, self.max_steps_per_turn, self.max_calls_per_step,
                             self.max_invalid_calls_per_step, self.max_invalid_calls_per_episode)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-format tool schemas offered in the current turn of the episode (every tool of its
        task's environments, less the task's ``excluded_tools`` and the tools later turns add)."""
        if self.session is None:
            return self.environment.openai_tools()
        return self._schemas(self._turn_tools(self.turn))

    @property
    def opening_tools(self) -> list[dict[str, Any]]:
        """The tool schemas offered in the task's turn 0: those a system prompt lists when tools are
        written into it (``tool_format="prompt"``; SFT records), the later additions following as
        system notes in the conversation (:func:`tools_note`)."""
        if self.session is None:
            return self.environment.openai_tools()
        return self._schemas(self._turn_tools(0))

    def _turn_tools(self, turn: int) -> Sequence[str]:
        """The tool names offered in task turn ``turn`` (clamped to the task's turns)."""
        assert self.session is not None
        if self._tool_sets is None:
            return list(self.session.tools)
        return self._tool_sets[min(max(turn, 0), len(self._tool_sets) - 1)]

    def _schemas(self, names: Sequence[str]) -> list[dict[str, Any]]:
        assert self.session is not None
        tools = self.session.tools
        return [tools[n].openai_schema() for n in names]

    def added_tools(self, turn: int) -> list[dict[str, Any]]:
        """The tool schemas task turn ``turn`` (0-based) of the current episode offers that the turn
        before did not (its ``added_tools``); empty for turn 0, a turn adding none, or no episode."""
        if self.session is None or self._tool_sets is None or turn <= 0 or turn >= len(self._tool_sets):
            return []
        before = set(self._tool_sets[turn - 1])
        return self._schemas([n for n in self._tool_sets[turn] if n not in before])

    def _tools_note(self, turn: int) -> dict[str, Any] | None:
        """The system note opening ``turn`` when it offers tools the turn before did not, else ``None``."""
        added = self.added_tools(turn)
        return tools_note(added) if added else None

    def _unavailable_call(self, call: ToolCall, call_id: str) -> ToolResult:
        """A call to a tool the current turn does not offer: logged as an invalid call (state untouched,
        nothing sent to the tool), answered as an unknown tool naming only the tools offered, so an
        excluded tool stays as invisible as one that does not exist."""
        assert self.session is not None
        offered = ", ".join(self._turn_tools(self.turn))
        message = f"unknown tool {scrub(call.name)!r}; available tools: {offered}"
        return self.session.record_invalid(call.name, call.arguments, message, call_id=call_id, tag=self.turn,
                                           error_type="unknown_tool")

    def _system_message(self, task: Task, environments: Sequence[EnvironmentSpec], initial: Any) -> str:
        """The episode's system prompt: the task's own ``system``, else the prompt with ``{description}``
        (each environment's name and description) and ``{clock}`` (the date line of the episode's
        initial state, :func:`clock_line`) filled in."""
        if task.system:
            return task.system
        desc = " / ".join(e.name if e.description.strip() in ("", e.name) else f"{e.name}: {e.description}"
                          for e in environments)
        return (self.system_prompt or DEFAULT_SYSTEM_PROMPT).format(description=desc,
                                                                    clock=clock_line(environments, initial))

    def _ground_truth_history(self, task: Task, reference: TaskReference, start: int) -> list[dict[str, Any]]:
        """The messages of turns before ``start`` as a correct agent would have produced them: the tools
        note of a turn that adds tools, the user message, one assistant message per ground-truth call
        with its result, the closing reply."""
        out: list[dict[str, Any]] = []
        for t in range(start):
            note = self._tools_note(t)
            if note is not None:
                out.append(note)
            out.append({"role": "user", "content": task.turns[t].user})
            for i, call in enumerate(reference.turn_calls[t]):
                call_id = f"call_gt{t}_{i}"
                args = json.dumps(call.arguments, ensure_ascii=False)
                out.append({"role": "assistant", "content": "", "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": args}}]})
                out.append({"role": "tool", "tool_call_id": call_id, "name": call.name,
                            "content": json.dumps(call.result, ensure_ascii=False)})
            out.append({"role": "assistant", "content": ground_truth_reply(task.turns[t])})
        return out

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start an episode on a fresh session (Gymnasium ``Env.reset``; docs/architecture.md, "The
        Gymnasium contract").

        ``options``: ``task_id`` (else the constructor's ``task_id``, else a task drawn with the seeded
        RNG), ``split``, and a turn window ``start_turn``/``end_turn`` (play turns ``start_turn ..
        end_turn-1`` from the ground-truth state after the turn before; earlier turns appear in the
        conversation as a correct agent played them).  Returns the opening messages, and ``info`` with
        ``task_id``, ``split``, ``envs``, ``turn``, ``n_turns``, ``start_turn``, ``end_turn`` and
        ``tools`` (OpenAI format).

        Raises:
            TypeError: ``options`` is not a dict.
            ValueError: an unknown option, or a turn window outside the task.
            UnknownTaskError: no such task, or none to sample.
            DatasetError: the task's ground truth does not replay (docs/cases.md C06).
        """
        super().reset(seed=seed)
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a dict (task_id, split, start_turn, end_turn), got {type(options).__name__}")
        options = dict(options or {})
        unknown = set(options) - RESET_OPTIONS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; options are {sorted(RESET_OPTIONS)}")
        self.done = True  # until this reset completes, the env holds no steppable episode
        self._episode += 1
        task = self._pick_task(options)
        n = len(task.turns)
        start, end = _turn_index(options.get("start_turn", 0)), _turn_index(options.get("end_turn", n))
        if start is None or end is None or not 0 <= start < end <= n:
            raise ValueError(f"task {task.task_id} has {n} turn(s): start_turn and end_turn must be integers with "
                             f"0 <= start_turn < end_turn <= {n}, got start_turn={options.get('start_turn', 0)!r}, "
                             f"end_turn={options.get('end_turn', n)!r}")
        environments = task_environments(self.environment, task)
        full = task_reference(self.environment, task, self.tasks)
        reference = full.window(start, end, environments)
        reference.share_start(environments)  # in process: the episode starts on the reference's own records
        if self.session is not None:
            self.session.close()
        copies, self._copies_next = self._copies_next, 0
        self.session = self.backend.create_session(environments, reference.initial_state,
                                                   task.task_id if start == 0 and self.own_tasks else None,
                                                   **({"copies": copies} if copies and getattr(self.backend, "makes_copies", False) else {}))
        self.task, self.reference = task, reference
        self.start_turn, self.end_turn = start, end
        self._tool_sets = None
        if task.has_tool_sets:
            names = list(self.session.tools)
            self._tool_sets = tuple(tuple(task.tools_at(t, names)) for t in range(n))
            self._available = frozenset(self._tool_sets[start])
        if self.reward_mode == "turn":  # only turn mode needs it; it compares states, so not on every reset
            self._scored_turns = sum(1 for i in range(end - start) if turn_has_criteria(reference, i, self.reward_config))
        limit = _outer_time_limit(self)  # gym.make(max_episode_steps=N) wraps the env in a TimeLimit
        self._step_limit = min(self.max_steps, limit) if limit else self.max_steps
        initial = reference.initial if reference.initial is not None else _canonical_states(reference.initial_state)
        self.messages = [{"role": "system", "content": self._system_message(task, environments, initial)}]
        self.messages += self._ground_truth_history(task, full, start)
        note = self._tools_note(start)
        if note is not None:
            self.messages.append(note)
        first = self.user([] if start == 0 else list(self.messages), task, start) or task.turns[start].user
        self.messages.append({"role": "user", "content": first})
        self.records = [TurnRecord()]
        self._turn_scores = []
        self.turn, self.steps, self.steps_in_turn = start, 0, 0
        self._invalid_recorded = 0
        self.done = False
        self.last_score = None
        self._rendered = 0
        info = {
            "task_id": task.task_id,
            "split": task.split,
            "envs": [e.name for e in environments],
            "turn": start,
            "n_turns": n,
            "start_turn": start,
            "end_turn": end,
            "tools": self.tools,
        }
        return [dict(m) for m in self.messages], info

    def step(self, action: Any) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        """Run one assistant action (Gymnasium ``Env.step``): execute its tool calls (at most
        ``max_calls_per_step``; malformed ones become invalid calls, recorded one by one up to
        ``max_invalid_calls_per_step`` / ``max_invalid_calls_per_episode``, the rest in one summary
        record), or, with no call attempted, end the user turn and bring the next user message.

        Returns ``(observation, reward, terminated, truncated, info)``: the new tool and user messages;
        the reward (``reward_mode="episode"``: the episode reward at the last step, 0 before; ``"turn"``:
        each ended turn's reward / number of turns; docs/reward.md); ``terminated`` once the last turn
        ends, ``truncated`` at ``max_steps`` or ``max_steps_per_turn``.  See the class for ``info``.

        Raises:
            ResetNeeded: the episode is over or was never started.
            BackendUnavailableError: a remote backend was lost (the episode's bookkeeping is untouched).
        """
        if self.done or self.session is None or self.task is None:
            raise ResetNeeded("the episode is over (or was never started): call reset() first")
        parsed = parse_action(action)
        rec = self.records[self.turn - self.start_turn]
        tool_calls: list[dict[str, Any]] = []
        tool_msgs: list[dict[str, Any]] = []
        results = []
        step_no = self.steps + 1
        # calls not executed (malformed, or beyond max_calls_per_step) are recorded one by one up to the
        # bounds, the rest summarised: a message of 10,000 junk blocks must not flood the log
        budget = max(0, min(self.max_invalid_calls_per_step, self.max_invalid_calls_per_episode - self._invalid_recorded))
        recorded = unrecorded = 0
        for k, item in enumerate(parsed.items):
            if isinstance(item, ParseError) or k >= self.max_calls_per_step:
                if recorded >= budget:
                    unrecorded += 1
                    continue
                recorded += 1
            call_id = item.id or f"call_{step_no}_{k}"
            args_text = json.dumps(item.arguments, ensure_ascii=False) if isinstance(item, ToolCall) else item.raw
            if k >= self.max_calls_per_step:
                name = (item.name or "invalid_tool_call")[:200]
                # the log keeps at most MAX_RAW_CHARS of a call it did not run, as it does for a parse error
                raw: Any = (item.raw if isinstance(item, ParseError) else
                            item.arguments if len(args_text) <= MAX_RAW_CHARS else args_text[:MAX_RAW_CHARS])
                res = self.session.record_invalid(name, raw, f"more than {self.max_calls_per_step} parallel calls in one message; this call was not executed", call_id=call_id, tag=self.turn)
            elif isinstance(item, ParseError):
                res = self.session.record_invalid(item.name or "invalid_tool_call", item.raw, item.message, call_id=call_id, tag=self.turn)
            elif not self._runs(item, k):
                res = self._unavailable_call(item, call_id)  # refused here: never reaches a backend
            else:
                res = self.session.call(item.name, item.arguments, call_id=call_id, tag=self.turn)
            results.append(res)
            tool_calls.append({"id": call_id, "type": "function", "function": {"name": res.name, "arguments": args_text}})
            tool_msgs.append({"role": "tool", "tool_call_id": call_id, "name": res.name, "content": res.to_text()})
        if unrecorded:
            call_id = f"call_{step_no}_unrecorded"
            summary = {"not_recorded": unrecorded}
            res = self.session.record_invalid(
                "invalid_tool_call", summary,
                f"{unrecorded} more invalid calls in this message (malformed, or beyond {self.max_calls_per_step} parallel "
                f"calls) were not recorded; each still counts as an invalid call (at most "
                f"{self.max_invalid_calls_per_step} per message and {self.max_invalid_calls_per_episode} per episode "
                f"are recorded one by one)", call_id=call_id, tag=self.turn, not_recorded=unrecorded)
            results.append(res)
            tool_calls.append({"id": call_id, "type": "function", "function": {"name": res.name, "arguments": json.dumps(summary)}})
            tool_msgs.append({"role": "tool", "tool_call_id": call_id, "name": res.name, "content": res.to_text()})
        # Every call ran (a lost backend raises above and leaves the episode's bookkeeping untouched).
        self.steps += 1
        self.steps_in_turn += 1
        self._invalid_recorded += recorded
        rec.calls.extend((r.name, r.arguments, r.is_invalid_call) for r in results)
        if unrecorded > 1:  # the summary stands for every call it did not record: each counts in P_len
            rec.calls.extend([("invalid_tool_call", None, True)] * (unrecorded - 1))
        raw_text = scrub(action) if isinstance(action, str) else None
        if self.history == "raw" and raw_text is not None:
            # token-faithful: the text exactly as generated stays in the history (reasoning and
            # <tool_call> blocks included); the parsed calls ride beside it for logs and trainers
            assistant: dict[str, Any] = {"role": "assistant", "content": raw_text}
            if tool_calls:
                assistant["parsed_tool_calls"] = tool_calls
        else:
            assistant = {"role": "assistant", "content": scrub(parsed.content)}
            if tool_calls:
                assistant["tool_calls"] = tool_calls
            if raw_text is not None and raw_text != assistant["content"]:
                assistant["raw"] = raw_text
        if parsed.content:
            rec.text = f"{rec.text}\n{parsed.content}" if rec.text else parsed.content
        self.messages.append(assistant)
        self.messages.extend(tool_msgs)
        obs: list[dict[str, Any]] = [dict(m) for m in tool_msgs]  # the caller may mutate them
        reward = 0.0
        terminated = truncated = False
        info: dict[str, Any] = StepInfo(self, {
            "task_id": self.task.task_id,
            "turn": self.turn,
            "parsed_calls": [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in parsed.calls],
            "tool_results": [r.to_dict() for r in results],
            "errors": [{"type": r.error_type, "name": r.name, "message": r.error} for r in results if not r.ok],
            "turn_ended": False,
        })
        if not parsed.attempted_calls:
            reward += self._end_turn(info)
            nxt = self.user(self.messages, self.task, self.turn) if self.turn < self.end_turn else None
            if nxt is None:
                terminated = True
            else:
                note = self._tools_note(self.turn)
                if note is not None:  # the new turn offers more tools: say so, and hand the new set over
                    assert self._tool_sets is not None
                    self._available = frozenset(self._tool_sets[self.turn])
                    self.messages.append(note)
                    obs.append(dict(note))
                    info["tools"] = self.tools
                user_msg = {"role": "user", "content": nxt}
                self.messages.append(user_msg)
                obs.append(dict(user_msg))
                self.records.append(TurnRecord(start=self.records[-1].state))  # the turn starts where the last ended
        if not terminated and (self.steps >= self._step_limit or self.steps_in_turn >= self.max_steps_per_turn):
            truncated = True
            info["truncated_reason"] = "max_steps" if self.steps >= self._step_limit else "max_steps_per_turn"
            if not info["turn_ended"]:
                reward += self._end_turn(info)
        if terminated or truncated:
            # the turn that just ended read the state already, and no call has run since
            score = self._score(self.records[-1].state if info["turn_ended"] else None)
            self.last_score = score
            if self.reward_mode == "episode":
                reward = score.reward
            info["score"] = score.to_dict()
            info["reward_components"] = score.reward_components()
            info["state_diff"] = [str(d) for d in score.state_diff]
            self.done = True
        return obs, float(reward), terminated, truncated, info

    def _runs(self, item: Any, k: int) -> bool:
        """Whether item ``k`` of a parsed action runs as a tool call on the session (what :meth:`step`
        does with it; the one predicate :meth:`plan_requests` shares)."""
        return (isinstance(item, ToolCall) and k < self.max_calls_per_step
                and (self._tool_sets is None or item.name in self._available))

    def plan_requests(self, action: Any) -> tuple[list[tuple[str, Any, str, Any]], tuple[tuple[str, ...], tuple[str, ...]] | None] | None:
        """What ``step(action)`` will ask of its session, in order, when that is known in advance: the tool
        calls ``[(name, arguments, call_id, tag)]`` and, when the step ends a turn whose state the reward
        reads by digest (docs/reward.md, "Scoring on the server"), the digest's ``(excluded, set_fields)``
        (else ``None``).  ``None`` when the action holds anything else (a malformed or surplus call, a
        tool the turn does not offer), or the episode is over.  :class:`~gym_envfactory.envs.groups.RolloutGroup`
        sends a group's plans in one frame (issue 24, part 3); the step then takes the answers in order."""
        if self.done or self.session is None or self.task is None:
            return None
        parsed = parse_action(action)
        step_no = self.steps + 1
        calls: list[tuple[str, Any, str, Any]] = []
        for k, item in enumerate(parsed.items):
            if not isinstance(item, ToolCall) or not self._runs(item, k):
                return None
            calls.append((item.name, item.arguments, item.id or f"call_{step_no}_{k}", self.turn))
        ends_turn = (not parsed.attempted_calls or self.steps + 1 >= self._step_limit
                     or self.steps_in_turn + 1 >= self.max_steps_per_turn)
        ref = self.reference
        digest = ((tuple(ref.excluded_fields), tuple(ref.set_fields)) if ends_turn and ref is not None and ref.n_turns
                  and getattr(self.session, "digest", None) is not None else None)
        return calls, digest

    def _end_turn(self, info: dict[str, Any]) -> float:
        assert self.session is not None and self.task is not None and self.reference is not None
        rec = self.records[self.turn - self.start_turn]
        rec.state = self._read_state(self.turn - self.start_turn)
        reward = 0.0
        if self.turn < self.end_turn:
            ts = score_turn(self.turn - self.start_turn, rec, self.reference, self.reward_config)
            self._turn_scores.append(dataclasses.replace(ts))  # the episode score reuses it (a finished turn)
            ts.turn = self.turn  # the task's turn index, whatever turn the episode started at
            info["turn_score"] = ts.to_dict()
            if self.reward_mode == "turn":
                reward = ts.reward / max(1, self._scored_turns)
        info["turn_ended"] = True
        self.turn += 1
        self.steps_in_turn = 0
        return reward

    def _read_state(self, turn: int | None = None) -> Any:
        """The session's state for scoring: a :class:`~gym_envfactory.environment.cow.FrozenState` from an
        in-process session whose state models are plain (no serialisation; compared by record identity);
        at the end of turn ``turn`` (the reference's index) of a remote session, the reference's own state
        when the server's digest says the session holds one the reward calls equal (:meth:`_by_digest`);
        else :meth:`Session.state`."""
        assert self.session is not None
        frozen = getattr(self.session, "frozen_state", None)
        if frozen is not None and getattr(self.session, "frozen_in_place", False):
            try:
                return frozen()
            except SpecError:  # a state that does not load: its canonical form is still what it holds
                pass
        if turn is not None:
            stand_in = self._by_digest(turn)
            if stand_in is not None:
                return stand_in
        return self.session.state()

    def _by_digest(self, turn: int) -> Any:
        """Score where the state lives (docs/reward.md, "Scoring on the server"): ask a session that offers
        ``digest`` (a remote one) for the digest of its state with the reward's exclusions and compare it
        with the reference's states after turn ``turn`` and before it (computed here once per reference).
        Equal digests mean a state the reward calls equal to that reference state (:mod:`gym_envfactory.digest`),
        so that state stands in for the session's: every verdict and difference report is what the
        session's own state would give, and no state crosses the wire.  ``None``: read the state."""
        digest = getattr(self.session, "digest", None)
        ref = self.reference
        if digest is None or ref is None or not ref.n_turns:
            return None
        got = digest(ref.excluded_fields, ref.set_fields)
        if got is None:
            return None
        last = min(turn, ref.n_turns - 1)  # a turn beyond the task is expected to leave the final state
        for t in (last, last - 1):
            if t >= 0 and reference_digest(ref, t) == got:
                return ref.turn_frozen[t] if ref.turn_frozen is not None else ref.turn_states[t]
        return None

    def _score(self, final_state: Any = None) -> EpisodeScore:
        """Score the episode on copies of the state (never mutates the session, docs/cases.md C05).
        ``final_state``: the state just read at the end of the last turn, to avoid reading it twice."""
        assert self.session is not None and self.reference is not None
        final = final_state if final_state is not None else self._read_state()
        records = self.records
        if records and records[-1].state is None and self.turn < self.end_turn:
            # scored mid-turn: judge the unfinished turn on the state as it stands (as if it ended now)
            last = records[-1]
            records = [*records[:-1], TurnRecord(calls=last.calls, text=last.text, state=final, start=last.start,
                                                  not_recorded=last.not_recorded)]
        return score_episode(records, self.reference, final, self.reward_config, turn_scores=self._turn_scores)

    async def areset(self, *, seed: int | None = None,
                     options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """:meth:`reset` for asyncio code (VeRL's async agent loop, thousands of rollouts per process):
        the work runs in a worker thread, so the event loop is never blocked.  Same results and errors."""
        return await asyncio.to_thread(self._locked, self.reset, seed=seed, options=options)

    async def astep(self, action: Any) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        """:meth:`step` for asyncio code, in a worker thread (see :meth:`areset`).  Calls on one env are
        serialised (an overlapping ``astep`` waits for the one before it).  Cancelling the awaiting task
        does not undo or stop a step already running in its thread: the env still advances."""
        return await asyncio.to_thread(self._locked, self.step, action)

    def _locked(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._thread_lock:
            return fn(*args, **kwargs)

    def resume(self, snapshot: bytes, backend: Any = None) -> None:
        """Continue the current episode on a new session restored from ``snapshot`` (a
        :meth:`Session.snapshot` taken earlier), optionally on another backend — e.g. after the
        container serving the episode died.  Conversation, turn and reward bookkeeping are kept."""
        if self.task is None or self.reference is None:
            raise ResetNeeded("call reset() before resume()")
        if backend is not None:
            if not getattr(self, "_forked", False):
                self.backend.release()
            self.backend = backend
        environments = task_environments(self.environment, self.task)
        self.session = self.backend.restore_session(environments, snapshot)

    def score(self) -> EpisodeScore:
        """The reward of the episode so far, as if it ended now (read-only)."""
        if self.session is None or self.task is None:
            raise ResetNeeded("call reset() first")
        return self._score()

    def render(self) -> str | None:
        """With ``render_mode="ansi"``, the messages since the last render as ``[role] text`` lines (tool
        calls inline); ``None`` otherwise."""
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self.messages[self._rendered:]:
            body = m.get("content") or ""
            if m.get("tool_calls"):
                body += " " + " ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m["tool_calls"])
            lines.append(f"[{m['role']}] {body}".rstrip())
        self._rendered = len(self.messages)
        return "\n".join(lines)

    def close(self) -> None:
        """Close the session and release the backend (a fork leaves it to the env it came from); the
        env needs :meth:`reset` before the next step."""
        if self.session is not None:
            self.session.close()
            self.session = None
        self.done = True
        if not getattr(self, "_forked", False) and getattr(self, "backend", None) is not None:
            self.backend.release()
        super().close()

    # ------------------------------------------------------------------ GRPO groups
    def fork(self) -> EnvFactoryEnv:
        """An independent copy of this episode at its current point (state, conversation, counters,
        RNG).  Steps on the fork never affect this env."""
        return self.fork_many(1)[0]

    def fork_many(self, k: int) -> list[EnvFactoryEnv]:
        """``k`` independent copies of the current episode (a GRPO group), sharing one serialisation
        of the state."""
        if self.session is None:
            raise ResetNeeded("call reset() before forking")
        sessions = self.session.fork_many(k)
        out = []
        for s in sessions:
            clone = copy.copy(self)
            clone.session = s
            clone.messages = copy.deepcopy(self.messages)
            clone.records = copy.deepcopy(self.records)
            clone._turn_scores = list(self._turn_scores)  # finished turns' scores: never mutated, shared
            clone._np_random = copy.deepcopy(self._np_random)
            clone._forked = True  # the backend stays owned by the env it was forked from
            out.append(clone)
        return out




