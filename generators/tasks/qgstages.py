"""QueryGen's LLM stages (arXiv 2605.18703, §3.4), one function and one JSON schema per stage.

Every stage sends a system prompt whose first line is ``QueryGen stage: <stage>`` (the accounting bucket
too) and gets JSON back through :meth:`LLMClient.chat` (schema check plus one repair round).  A stage that
validates what the model proposed against the environment (the initial state, the turn split) sends the
error text back and asks again, at most ``retries`` times.  Errors: :class:`StageError` (the stage gave
up; ``reason`` is the drop/fallback reason QueryGen counts), plus the LLM layer's ``LLMRequestError``.

Stages:

- :func:`gen_scenario` — scenario and user profile;
- :func:`gen_initial_state` — RFC 6902 patches to each environment's default initial state, validated by the
  state model (the patched state is what the chain is re-run on);
- :func:`gen_turns` — subgoal decomposition (turns of 1..``max_tools_per_turn`` ground-truth calls) and goal
  articulation (one user message per turn, expected outputs);
- :func:`gen_refinement` — calibrated refinement: implicit references, action compression, goal expansion and,
  in conversational presets, ambiguity introduction (a clarification turn whose answer the user knows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.states import resolve_state
from gym_envfactory.errors import DatasetError, LLMOutputError
from gym_envfactory.llm.client import LLMClient
from gym_envfactory.users.llm import STAGE_MARK

__all__ = ["Preset", "PRESETS", "REFINEMENTS", "StageError", "Scenario", "TurnPlan", "Clarification",
           "SCENARIO_SCHEMA", "STATE_SCHEMA", "TURNS_SCHEMA", "REFINE_SCHEMA",
           "gen_scenario", "gen_initial_state", "gen_turns", "gen_refinement", "check_turn_split", "stage_prompt"]

#: The refinement operations of §3.4, by name (what each asks the model to do).
REFINEMENTS: dict[str, str] = {
    "implicit_reference": "refer to results of earlier turns implicitly (\"the cheaper one\", \"that booking\") "
                          "instead of repeating ids the user would not know",
    "action_compression": "ask for several actions in one natural request where a turn has several calls",
    "ambiguity": "leave out one value the user must provide in one turn, so the assistant has to ask for it",
    "goal_expansion": "let the goal grow over the turns (\"while you're at it, also ...\")",
}


@dataclass(frozen=True)
class Preset:
    """What one QueryGen preset sets.

    Attributes:
        name: ``sft-conv``, ``sft-non-conv`` or ``rl-non-conv``.
        conversational: clarification turns are introduced (``ambiguity``) and pass@k solving plays the
            user with :class:`~gym_envfactory.users.llm.LLMUser`; otherwise the scripted
            user messages are used.
        refinements: the :data:`REFINEMENTS` asked for.
        max_tools_per_turn: the most ground-truth calls one turn may hold (1..5).
        solve_temperature: sampling temperature of the pass@k agent attempts.
        drop_all_solved: drop a task every attempt solved (no learning signal for group-relative RL).
        split: the ``split`` written on the tasks.
    """

    name: str
    conversational: bool
    refinements: tuple[str, ...]
    max_tools_per_turn: int
    solve_temperature: float = 0.7
    drop_all_solved: bool = False
    split: str = "train"

    def to_dict(self) -> dict[str, Any]:
        """The preset as JSON (written into the statistics)."""
        return {"name": self.name, "conversational": self.conversational, "refinements": list(self.refinements),
                "max_tools_per_turn": self.max_tools_per_turn, "solve_temperature": self.solve_temperature,
                "drop_all_solved": self.drop_all_solved, "split": self.split}


PRESETS: dict[str, Preset] = {
    # SFT dialogues: short turns, every refinement, a clarification turn where a value can be withheld
    "sft-conv": Preset("sft-conv", True, ("implicit_reference", "action_compression", "ambiguity", "goal_expansion"), 3),
    # SFT single-shot requests per turn: compressed turns, no clarification
    "sft-non-conv": Preset("sft-non-conv", False, ("implicit_reference", "action_compression", "goal_expansion"), 5),
    # RL prompts: every value stated (verifiable without a dialogue), no clarification, drop tasks all k solve
    "rl-non-conv": Preset("rl-non-conv", False, ("implicit_reference", "goal_expansion"), 5, solve_temperature=1.0,
                          drop_all_solved=True, split="train"),
}


class StageError(Exception):
    """A stage gave up on a chain; ``reason`` is the counted drop or fallback reason (e.g. ``state_invalid``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Scenario:
    """The scenario stage's answer: ``scenario`` (a sentence), ``user_profile`` (``{name, persona}``)."""

    scenario: str
    user_profile: dict[str, Any]


@dataclass
class TurnPlan:
    """One turn: the indices of its ground-truth calls (in chain order), its subgoal, user message and
    expected outputs (strings the reply must contain; only those found in the turn's results are kept)."""

    steps: list[int]
    subgoal: str
    user: str
    expected_outputs: list[str] = field(default_factory=list)


@dataclass
class Clarification:
    """Ambiguity introduction on turn ``turn``: ``ambiguous_user`` omits ``argument`` (whose value is
    ``value``); the next turn's user message ``answer`` supplies it."""

    turn: int
    argument: str
    value: Any
    ambiguous_user: str
    answer: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored in the task's provenance; :func:`~.user.known_values` reads it)."""
        return {"turn": self.turn, "argument": self.argument, "value": self.value, "answer": self.answer}


# ------------------------------------------------------------------------------------------- schemas
_STR = {"type": "string"}
SCENARIO_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["scenario", "user_profile"],
    "properties": {"scenario": {"type": "string", "minLength": 1},
                   "user_profile": {"type": "object", "required": ["name", "persona"],
                                    "properties": {"name": _STR, "persona": _STR}}}}
_OP = {"type": "object", "required": ["op", "path"],
       "properties": {"op": {"enum": ["add", "remove", "replace", "move", "copy", "test"]}, "path": _STR}}
STATE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["patches"],
    "properties": {"patches": {"type": "object", "additionalProperties": {"type": "array", "items": _OP}}}}
TURNS_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["turns"],
    "properties": {"turns": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["steps", "user"],
        "properties": {"steps": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                       "subgoal": _STR, "user": {"type": "string", "minLength": 1},
                       "expected_outputs": {"type": "array", "items": _STR}}}}}}
REFINE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["turns"],
    "properties": {"turns": {"type": "array", "items": {"type": "object", "required": ["user"],
                                                          "properties": {"user": {"type": "string", "minLength": 1}}}},
                   "clarification": {"anyOf": [{"type": "null"}, {
                       "type": "object", "required": ["turn", "argument", "ambiguous_user", "answer"],
                       "properties": {"turn": {"type": "integer", "minimum": 0}, "argument": _STR,
                                      "ambiguous_user": {"type": "string", "minLength": 1},
                                      "answer": {"type": "string", "minLength": 1}}}]}}}


def stage_prompt(stage: str, body: str) -> str:
    """A stage's system prompt: ``QueryGen stage: <stage>`` on the first line, then ``body``."""
    return f"{STAGE_MARK}{stage}\n{body}"


def _dump(obj: Any, limit: int) -> str:
    text = json.dumps(obj, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + " …(truncated)"


def _tools_text(specs: Sequence[EnvironmentSpec], names: set[str]) -> str:
    lines = []
    for spec in specs:
        for t in spec.tools.values():
            if t.name in names:
                lines.append(f"- {spec.name}.{t.name}: {t.description.strip().splitlines()[0] if t.description else ''}")
    return "\n".join(lines)


async def _ask(client: LLMClient, stage: str, system: str, user: str, schema: dict[str, Any]) -> Any:
    try:
        reply = await client.chat([{"role": "system", "content": stage_prompt(stage, system)},
                                   {"role": "user", "content": user}], stage=stage, json_schema=schema)
    except LLMOutputError as exc:
        raise StageError(f"{stage}_invalid_json", exc.error) from None
    return reply.data


# ------------------------------------------------------------------------------------------- stages
async def gen_scenario(client: LLMClient, chain: Mapping[str, Any], specs: Sequence[EnvironmentSpec],
                       *, seed: int) -> Scenario:
    """Stage ``scenario``: a scenario and a user profile for ``chain`` (its JSON form).

    Raises:
        StageError: ``scenario_invalid_json``.  LLMRequestError: the endpoint failed.
    """
    names = {s["name"] for s in chain.get("steps", [])}
    system = ("You write realistic scenarios for tool-use tasks. Given a chain of tool calls, invent who the user "
              "is and why they need these actions. Reply with JSON {\"scenario\": str, \"user_profile\": "
              "{\"name\": str, \"persona\": str}}.")
    user = f"Seed {seed}. Environments: {', '.join(s.name for s in specs)}.\nTools in order:\n" + _tools_text(specs, names) \
        + "\nChain: " + _dump([s["tool"] for s in chain.get("steps", [])], 2000)
    data = await _ask(client, "scenario", system, user, SCENARIO_SCHEMA)
    return Scenario(scenario=data["scenario"], user_profile=dict(data["user_profile"]))


async def gen_initial_state(client: LLMClient, chain: Mapping[str, Any], specs: Sequence[EnvironmentSpec],
                            scenario: Scenario, *, seed: int, retries: int = 2,
                            state_chars: int = 6000) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Stage ``state``: RFC 6902 patches to each environment's default initial state that fit the
    scenario, validated by the environment's state model.  A patch that fails or a state that does not
    validate goes back to the model with the error text, at most ``retries`` more times.

    Returns:
        ``(patches, states)``: ``{env: [ops]}`` (only environments with patches) and ``{env: state dict}``
        (every environment of ``specs``; unpatched ones at their default).

    Raises:
        StageError: ``state_invalid_json`` or ``state_invalid`` (never validated).  LLMRequestError.
    """
    by_name = {s.name: s for s in specs}
    defaults = {s.name: json.loads(s.initial_state_json()) for s in specs}
    system = ("You prepare the database a task starts from. Given each environment's default initial state, "
              "reply with JSON {\"patches\": {<environment name>: [RFC 6902 JSON Patch operations]}} that adapt "
              "it to the scenario (e.g. add the user's own records); keep ids consistent, keep patches small; "
              "an empty list keeps the default. The state must stay valid for its schema.")
    user = (f"Seed {seed}. Scenario: {scenario.scenario}\nUser: {_dump(scenario.user_profile, 1000)}\n"
            f"Chain: {_dump([s['tool'] for s in chain.get('steps', [])], 2000)}\n"
            + "\n".join(f"Default state of {n}: {_dump(d, state_chars)}" for n, d in defaults.items()))
    messages = [{"role": "system", "content": stage_prompt("state", system)}, {"role": "user", "content": user}]
    last_error = ""
    for _ in range(retries + 1):
        try:
            reply = await client.chat(messages, stage="state", json_schema=STATE_SCHEMA)
        except LLMOutputError as exc:
            raise StageError("state_invalid_json", exc.error) from None
        data = reply.data
        if not isinstance(data, dict):  # the schema asks for an object; a schema-valid reply is one
            raise StageError("state_invalid_json", f"expected a JSON object, got {type(data).__name__}")
        patches: dict[str, list[dict[str, Any]]] = {n: list(p) for n, p in data["patches"].items() if p}
        error = None
        states = dict(defaults)
        for env_name, ops in patches.items():
            spec = by_name.get(env_name)
            if spec is None:
                error = f"unknown environment {env_name!r}; patch only {sorted(by_name)}"
                break
            try:
                states[env_name] = json.loads(resolve_state(
                    spec, {"name": spec.manifest.default_initial_state, "patches": ops}, task_form=True))
            except DatasetError as exc:
                error = f"{env_name}: {exc}"
                break
        if error is None:
            return patches, states
        last_error = error
        messages = [*messages, {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"That state is invalid: {error}\nReply with corrected JSON only."}]
    raise StageError("state_invalid", last_error)


def check_turn_split(turns: Sequence[Sequence[int]], n_calls: int, max_tools: int) -> str | None:
    """Why ``turns`` (call indices per turn) is not a split of ``n_calls`` calls into consecutive turns of
    1..``max_tools`` calls in chain order (``None`` when it is)."""
    flat = [i for t in turns for i in t]
    if flat != list(range(n_calls)):
        return f"the steps of all turns, in order, must be exactly 0..{n_calls - 1} (each call once, in chain order); got {flat}"
    for k, t in enumerate(turns):
        if not 1 <= len(t) <= max_tools:
            return f"turn {k} has {len(t)} calls; each turn needs 1 to {max_tools}"
    return None


async def gen_turns(client: LLMClient, calls: Sequence[Mapping[str, Any]], results: Sequence[Any],
                    scenario: Scenario, *, max_tools: int, seed: int, retries: int = 1) -> list[TurnPlan]:
    """Stage ``turns``: subgoal decomposition and goal articulation over the executed ground-truth
    ``calls`` (``[{"env", "name", "arguments"}]``) and their ``results``.  An invalid split goes back to
    the model with the error, at most ``retries`` more times.

    Raises:
        StageError: ``turns_invalid_json`` or ``turns_invalid`` (no valid split).  LLMRequestError.
    """
    system = (f"You turn a sequence of executed tool calls into a multi-turn user conversation. Split the calls "
              f"into consecutive turns of 1 to {max_tools} calls (each call exactly once, in order); for each turn "
              "give its subgoal, the user's message asking for it (natural, states every value the assistant needs "
              "that it cannot look up) and expected_outputs: short strings from the results the assistant's reply "
              "must contain. Reply with JSON {\"turns\": [{\"steps\": [int], \"subgoal\": str, \"user\": str, "
              "\"expected_outputs\": [str]}]}.")
    listing = "\n".join(f"{i}. {c['name']}({_dump(c.get('arguments', {}), 600)}) -> {_dump(r, 600)}"
                        for i, (c, r) in enumerate(zip(calls, results, strict=False)))
    user = f"Seed {seed}. Scenario: {scenario.scenario}\nUser: {_dump(scenario.user_profile, 600)}\nCalls:\n{listing}"
    messages = [{"role": "system", "content": stage_prompt("turns", system)}, {"role": "user", "content": user}]
    last = ""
    for _ in range(retries + 1):
        try:
            reply = await client.chat(messages, stage="turns", json_schema=TURNS_SCHEMA)
        except LLMOutputError as exc:
            raise StageError("turns_invalid_json", exc.error) from None
        data = reply.data
        if not isinstance(data, dict):  # the schema asks for an object; a schema-valid reply is one
            raise StageError("turns_invalid_json", f"expected a JSON object, got {type(data).__name__}")
        turns = data["turns"]
        problem = check_turn_split([t["steps"] for t in turns], len(calls), max_tools)
        if problem is None:
            return [TurnPlan(steps=list(t["steps"]), subgoal=t.get("subgoal", ""), user=t["user"],
                             expected_outputs=[str(x) for x in t.get("expected_outputs", []) if str(x).strip()])
                    for t in turns]
        last = problem
        messages = [*messages, {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"That split is invalid: {problem}\nReply with corrected JSON only."}]
    raise StageError("turns_invalid", last)


def _user_inputs(plan: TurnPlan, calls: Sequence[Mapping[str, Any]], chain: Mapping[str, Any]) -> dict[str, Any]:
    """The user-provided argument values of a turn's calls (chain inputs with ``source: user``)."""
    steps = chain.get("steps", [])
    out: dict[str, Any] = {}
    for i in plan.steps:
        inputs = steps[i].get("inputs", {}) if i < len(steps) else {}
        for arg, value in calls[i].get("arguments", {}).items():
            if (inputs.get(arg) or {}).get("source") == "user" and isinstance(value, (str, int, float)) \
                    and not isinstance(value, bool):
                out.setdefault(arg, value)
    return out


async def gen_refinement(client: LLMClient, plans: Sequence[TurnPlan], calls: Sequence[Mapping[str, Any]],
                         chain: Mapping[str, Any], preset: Preset, *, seed: int) -> tuple[list[str], Clarification | None, list[str]]:
    """Stage ``refine``: rewrite the user messages with the preset's :data:`REFINEMENTS`; in a
    conversational preset also propose one clarification (a withheld user-provided value).

    Returns:
        ``(messages, clarification, notes)``: one user message per turn (the articulated ones when the
        answer does not fit), the accepted :class:`Clarification` or ``None``, and notes
        (``refine_rejected``, ``clarification_rejected``) for the statistics.

    Raises:
        StageError: ``refine_invalid_json``.  LLMRequestError.
    """
    wanted = [r for r in preset.refinements if preset.conversational or r != "ambiguity"]
    candidates = {k: _user_inputs(p, calls, chain) for k, p in enumerate(plans)}
    system = ("You refine the user messages of a multi-turn tool-use task without changing what must be done. "
              "Apply: " + "; ".join(REFINEMENTS[r] for r in wanted) + ". Keep one message per turn, every needed "
              "value exact. Reply with JSON {\"turns\": [{\"user\": str}], \"clarification\": "
              + ("{\"turn\": int, \"argument\": str, \"ambiguous_user\": <that turn's message without the value>, "
                 "\"answer\": <the user's reply giving the value when asked>} or null}." if "ambiguity" in wanted
                 else "null}."))
    user = f"Seed {seed}. Turns:\n" + "\n".join(
        f"{k}. subgoal: {p.subgoal} | message: {p.user} | user-provided values: {_dump(candidates[k], 400)}"
        for k, p in enumerate(plans))
    data = await _ask(client, "refine", system, user, REFINE_SCHEMA)
    notes: list[str] = []
    messages = [p.user for p in plans]
    if len(data["turns"]) == len(plans):
        messages = [t["user"] for t in data["turns"]]
    else:
        notes.append("refine_rejected")
    clar = None
    raw = data.get("clarification")
    if raw and "ambiguity" in wanted:
        k, arg = raw["turn"], raw["argument"]
        value = candidates.get(k, {}).get(arg)
        text = str(value) if value is not None else None
        if text is None or text not in raw["answer"] or text in raw["ambiguous_user"]:
            notes.append("clarification_rejected")
        else:
            clar = Clarification(turn=k, argument=arg, value=value, ambiguous_user=raw["ambiguous_user"],
                                 answer=raw["answer"])
    return messages, clar, notes
