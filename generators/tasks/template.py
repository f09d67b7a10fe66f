"""The template writer: executed tool chains → instruction-style multi-turn tasks, no LLM needed (issue 27
part 2; docs/synthesis.md, "The template writer").

A chain that :func:`~.sampler.check_chain` ran end to end carries its executed ground truth (calls,
results, the initial state).  :func:`template_task` writes it as a task in the catalog format
(docs/authoring.md, "Tasks") from the tools' own names and descriptions and the executed arguments:

- a value the user would know (an id or name found in the initial state, a date, an amount, an enum
  choice, anything an earlier call was given) is stated in the user turn;
- a value an earlier call of the chain produced (a ``step`` input) is not stated: the turn says where it
  comes from ("the hotel id from the search hotels result"), and which item when the result holds
  several (by a field unique among the items, e.g. its name, else its position);
- a required value with no source (a string found neither in the state nor in earlier calls and
  results: a free-text note, a new email address) is withheld once per task: that turn becomes a
  clarification turn (``clarification: true``, the request without the value) followed by the user's
  answer turn that holds the ground truth, recorded in ``provenance.clarifications`` as QueryGen's
  ambiguity refinement records it (:class:`~.qgstages.Clarification`, read by the user simulator's
  :func:`~gym_envfactory.users.llm.known_values`);
- calls are grouped into turns of at most ``max_calls_per_turn`` (a turn often ends after a write, drawn
  from a seeded ``random.Random``), so chains of several calls give multi-turn tasks; a read-only call
  with a short scalar result asks for it and expects it in the reply (``expected_outputs``).

:func:`oracle_episode` plays the task with the oracle policy (its own ground truth) in a fresh episode;
:func:`generate_template_tasks` keeps a task only when that scores 1.0, keeps at most half of ``n``
read-only tasks (so at least half change the state), and marks every ``test_every``-th kept task of the
environment ``split: "test"``.  Tasks are labelled ``provenance.writer = "template"``, ``provenance.style =
"instruction"`` and tagged ``template``, ``instruction``: the paper's refinement stage (implicit
references, action compression, ambiguity, goal expansion; :mod:`.qgstages`) needs an LLM, which the
template writer does without.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import EnvFactoryError
from gym_envfactory.generators.tasks.querygen import ChainOutcome
from gym_envfactory.generators.tasks.sampler import Chain, ChainCheck, StepInput, is_id_like, output_values
from gym_envfactory.generators.tasks.solvable import SolvableSample, sample_solvable

__all__ = ["WRITER", "STYLE", "TemplateOptions", "TemplateResult", "template_task", "oracle_episode",
           "generate_template_tasks", "words"]

#: ``provenance.writer`` and the tag of tasks this module writes.
WRITER = "template"
#: ``provenance.style``: the requests are instructions (every needed value stated or pointed to).
STYLE = "instruction"


@dataclass
class TemplateOptions:
    """Options of :func:`generate_template_tasks`.

    Args:
        seed: seeds the chain sampler and the turn grouping.
        max_calls_per_turn: the most ground-truth calls in one turn.
        test_every: every ``test_every``-th kept task of an environment (1-based) gets ``split: "test"``
            (5: 20 %); 0 keeps every task in ``train``.
        budget: chain checks per environment (``None``: :func:`~.solvable.default_budget` of ``n``).
        variants: rounds of other fillings once the graph gives no new chain (:func:`~.solvable.sample_solvable`).
        max_read_only_share: the largest share of ``n`` that read-only tasks may take.
        date: the provenance date (ISO); default today (UTC).
    """

    seed: int = 0
    max_calls_per_turn: int = 3
    test_every: int = 5
    budget: int | None = None
    variants: int = 4
    max_read_only_share: float = 0.5
    date: str | None = None


@dataclass
class TemplateResult:
    """What :func:`generate_template_tasks` made for one environment: ``outcomes`` (kept tasks with their
    oracle trajectories, one dropped outcome per drop, for :func:`~.querygen.write_tasks`), ``sample``
    (the :class:`~.solvable.SolvableSample`: kept K of N and why) and ``tasks`` (the kept task dicts)."""

    env: str
    outcomes: list[ChainOutcome] = field(default_factory=list)
    sample: SolvableSample | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Per-environment statistics: the sample's (requested, kept, attempts, drop reasons) plus
        ``state_changing``, ``multi_turn``, ``clarification`` and ``splits`` counts of the kept tasks."""
        splits: dict[str, int] = {}
        for t in self.tasks:
            splits[t["split"]] = splits.get(t["split"], 0) + 1
        return {**(self.sample.to_dict() if self.sample else {}),
                "state_changing": sum("state-changing" in t.get("tags", []) for t in self.tasks),
                "multi_turn": sum(len(t["turns"]) > 1 for t in self.tasks),
                "clarification": sum("clarification" in t.get("tags", []) for t in self.tasks),
                "splits": dict(sorted(splits.items()))}


# ------------------------------------------------------------------------------------------- wording
def words(name: str) -> str:
    """A parameter or tool name as words: ``hotel_id`` → ``hotel id``, ``checkIn`` → ``check in``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ").replace("-", " ")
    return " ".join(spaced.lower().split())


def _value(v: Any) -> str:
    if isinstance(v, str):
        return f"'{v}'"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(_value(x) for x in v) if v else "none"
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False, sort_keys=True)
    return str(v)


def _action(spec: EnvironmentSpec, name: str) -> str:
    """What a tool does, from its description's first sentence (else its name as words), plus its name."""
    tool = spec.tools[name]
    first = (tool.description or "").strip().split("\n\n")[0].replace("\n", " ")
    first = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0].rstrip(".!? ").strip()
    if not first or len(first) > 120:
        first = words(name).capitalize()
    return f"{first[0].upper()}{first[1:]} (`{name}`)"


def _ordinal(i: int) -> str:
    n = i + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _which(result: Any, path: str, value: Any) -> str:
    """Which item of ``result`` at ``path`` holds ``value``: "" when it is the only value there, else
    ``(the one whose <field> is <v>)`` by a short non-id field unique among the items, else its position."""
    target = value[0] if isinstance(value, list) and len(value) == 1 else value
    values = output_values(result, path)
    distinct = [v for j, v in enumerate(values) if v not in values[:j]]
    if len(distinct) <= 1:
        return ""
    parent, _, key = path.rpartition(".")
    items = output_values(result, parent) if key and not key.endswith("[]") else values
    if key and not key.endswith("[]"):
        idx = next((j for j, it in enumerate(items) if isinstance(it, dict) and it.get(key) == target), None)
    else:
        idx = next((j for j, it in enumerate(items) if it == target), None)
    if idx is None:
        return ""
    item = items[idx]
    if isinstance(item, dict):
        keys = sorted((k for k in item if k != key and not is_id_like(k)),
                      key=lambda k: (not any(w in k.lower() for w in ("name", "title")), list(item).index(k)))
        for k in keys:
            v = item[k]
            if isinstance(v, str | int | float) and not isinstance(v, bool) and len(str(v)) <= 60 \
                    and sum(isinstance(it, dict) and it.get(k) == v for it in items) == 1:
                return f" (the one whose {words(k)} is {_value(v)})"
    return f" (the {_ordinal(idx)} one listed)"


def _world(initial: Any, calls: Sequence[Mapping[str, Any]], results: Sequence[Any]) -> set[str]:
    """Every scalar (and mapping key) of the initial states, the earlier calls' arguments and results, as text."""
    out: set[str] = set()
    stack: list[Any] = [initial, [c.get("arguments", {}) for c in calls], list(results)]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            out.update(str(k) for k in cur)
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
        elif cur is not None:
            out.add(str(cur))
    return out


def _no_source(value: Any, schema: Mapping[str, Any], world: set[str]) -> bool:
    """A string the user must choose (found nowhere in the state or earlier calls/results, whole or as
    part of a longer text; not an enum choice or a date): the value a clarification turn withholds."""
    if not isinstance(value, str) or "enum" in schema or schema.get("format") in ("date", "date-time"):
        return False
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ][\d:.]+)?", value):
        return False
    if value in world:
        return False
    # a word of a name or title (a search term drawn from the state) is known too
    return len(value) < 3 or value.lower() not in "\n".join(w for w in world if len(w) >= len(value)).lower()


def split_turns(calls: Sequence[Mapping[str, Any]], read_only: Sequence[bool], rng: random.Random,
                max_calls: int) -> list[list[int]]:
    """Call indices grouped into consecutive turns of 1..``max_calls`` calls: a turn ends at the cap, or
    after a write with probability 0.6, or after a read with probability 0.25 (``rng`` draws)."""
    turns: list[list[int]] = [[]]
    for i in range(len(calls)):
        turns[-1].append(i)
        last = i == len(calls) - 1
        if not last and (len(turns[-1]) >= max_calls or rng.random() < (0.25 if read_only[i] else 0.6)):
            turns.append([])
    return turns


# ------------------------------------------------------------------------------------------- one task
def template_task(chain: Chain, check: ChainCheck, spec: EnvironmentSpec, *, task_id: str, seed: int,
                  options: TemplateOptions | None = None, date: str | None = None) -> dict[str, Any]:
    """The instruction-style task of ``chain`` executed as ``check`` (``check.ok``; calls of ``spec``,
    which is the chain's one environment, from its default initial state).  See the module docstring for
    what is stated, pointed to and withheld.

    Returns:
        A task dict in the catalog format (``task_id``, ``env``, ``split: "train"``, ``initial_state``,
        ``turns``, ``provenance`` with ``kind``/``writer`` ``template``, ``style`` ``instruction``, chain id,
        seed, date and any ``clarifications``, ``tags``).

    Raises:
        ValueError: ``check`` did not run the chain, or the chain spans several environments.
    """
    opts = options or TemplateOptions()
    if not check.ok or not check.calls:
        raise ValueError(f"chain {chain.chain_id} did not run: {check.reason}")
    if len(chain.envs) != 1 or chain.envs[0] != spec.name:
        raise ValueError(f"the template writer writes one environment's chains; {chain.chain_id} spans {chain.envs}")
    calls, results = check.calls, check.results
    initial = check.initial_states.get(spec.name)
    read_only = [spec.tools[c["name"]].read_only for c in calls]
    rng = random.Random(f"{seed}:{chain.chain_id}")
    groups = split_turns(calls, read_only, rng, opts.max_calls_per_turn)
    steps = chain.steps
    sentences: list[str] = []
    outputs: list[str | None] = []
    withheld: tuple[int, str, Any] | None = None  # (call index, parameter, value): at most one per task
    for i, call in enumerate(calls):
        tool = spec.tools[call["name"]]
        props = tool.input_schema.get("properties", {})
        inputs = steps[i].inputs if i < len(steps) else {}
        world = _world(initial, calls[:i], results[:i])
        stated: list[str] = []
        for param, value in call.get("arguments", {}).items():
            src = inputs.get(param)
            if isinstance(src, StepInput) and src.step < i:
                producer = calls[src.step]["name"]
                stated.append(f"{words(param)}: the one from the {words(producer)} result"
                              + _which(results[src.step], src.output, value))
            elif withheld is None and _no_source(value, props.get(param, {}), world):
                withheld = (i, param, value)
            else:
                stated.append(f"{words(param)}: {_value(value)}")
        sentence = _action(spec, call["name"])
        if stated:
            sentence += " with " + ", ".join(stated)
        result = results[i] if i < len(results) else None
        wanted = None
        if tool.read_only and isinstance(result, str | int | float) and not isinstance(result, bool) \
                and 0 < len(str(result)) <= 60:
            wanted = str(result)
            sentence += ", and tell me what it returns"
        sentences.append(sentence + ".")
        outputs.append(wanted)
    if withheld is not None:  # the withheld call opens its turn: the calls before it stay answerable
        for g, group in enumerate(groups):
            if withheld[0] in group and group[0] != withheld[0]:
                cut = group.index(withheld[0])
                groups[g:g + 1] = [group[:cut], group[cut:]]
                break
    turns: list[dict[str, Any]] = []
    clarifications: list[dict[str, Any]] = []
    for group in groups:
        text = sentences[group[0]] if len(group) == 1 else \
            "Please do this in order: " + " ".join(f"{k}. {sentences[i]}" for k, i in enumerate(group, 1))
        gt = [{"name": calls[i]["name"], "arguments": calls[i].get("arguments", {})} for i in group]
        expected = [o for i in group if (o := outputs[i]) is not None]
        if withheld is not None and withheld[0] in group:
            _, param, value = withheld
            answer = f"The {words(param)} is {_value(value)}."
            clarifications.append({"turn": len(turns), "argument": param, "value": value, "answer": answer})
            turns.append({"user": text, "clarification": True})
            turns.append({"user": answer, "ground_truth": gt, "expected_outputs": expected})
        else:
            turns.append({"user": text, "ground_truth": gt, "expected_outputs": expected})
    for t in turns:
        if not t.get("expected_outputs"):
            t.pop("expected_outputs", None)
    changing = not all(read_only)
    provenance: dict[str, Any] = {
        "kind": WRITER, "writer": WRITER, "style": STYLE, "chain_id": chain.chain_id, "seed": seed,
        "date": date or dt.datetime.now(dt.UTC).date().isoformat(), "state": "default"}
    if clarifications:
        provenance["clarifications"] = clarifications
    tags = [WRITER, STYLE, "state-changing" if changing else "read-only"] + (["clarification"] if clarifications else [])
    return {"task_id": task_id, "env": spec.name, "split": "train",
            "initial_state": spec.manifest.default_initial_state, "turns": turns, "provenance": provenance,
            "tags": tags}


def oracle_episode(spec: EnvironmentSpec, task_obj: Mapping[str, Any]) -> tuple[Any, str | None]:
    """Play ``task_obj`` (a task dict of ``spec``) with the oracle policy in a fresh in-process episode
    (``trust=True``: :func:`~.sampler.check_chain` already ran the same code in this process).

    Returns:
        ``(EpisodeResult or None, why it is not kept or None)``: the ground truth does not replay, or the
        oracle scores below 1.0 (the reward's components named).
    """
    from gym_envfactory.envs.env import EnvFactoryEnv
    from gym_envfactory.rollout.policies import OraclePolicy
    from gym_envfactory.rollout.runner import run_episode

    try:
        tasks = TaskSet.from_objects(spec.name, [dict(task_obj)])
        env = EnvFactoryEnv(spec.with_tasks(tasks), task_id=str(task_obj["task_id"]), trust=True)
    except EnvFactoryError as exc:
        return None, f"replay_failed: {exc}"
    try:
        result = run_episode(env, OraclePolicy(), task_id=str(task_obj["task_id"]))
    except EnvFactoryError as exc:
        return None, f"replay_failed: {exc}"
    finally:
        env.close()
    if result.reward < 1.0:
        return result, f"oracle below 1.0 ({result.reward:.3f})"
    return result, None


# ------------------------------------------------------------------------------------------- many
def _gt_key(task: Mapping[str, Any]) -> str:
    gt = [[(c["name"], c.get("arguments", {})) for c in t.get("ground_truth", [])] for t in task["turns"]]
    return json.dumps([task.get("env"), task.get("initial_state"), gt], sort_keys=True, default=str)


def generate_template_tasks(G: nx.DiGraph, env: str, n: int, options: TemplateOptions | None = None, *,
                            progress: Callable[[int], None] | None = None) -> TemplateResult:
    """Up to ``n`` verified instruction-style tasks of environment ``env`` from chains of the tool graph
    ``G`` drawn inside ``env`` (:func:`~.solvable.sample_solvable`, with ``options.variants`` rounds of
    other fillings): each written by :func:`template_task`, kept when :func:`oracle_episode` scores 1.0,
    when it repeats no kept task's ground truth, and while read-only tasks stay within
    ``max_read_only_share`` of ``n``.  ``progress(kept)`` is called after each kept task.

    Returns:
        A :class:`TemplateResult`; its ``sample.summary()`` says ``kept K of N`` and why others were dropped.

    Raises:
        EnvFactoryError: an unknown environment.  ValueError: ``n < 0``.
    """
    opts = options or TemplateOptions()
    spec = get_environment(env)
    date = opts.date or dt.datetime.now(dt.UTC).date().isoformat()
    out = TemplateResult(env=spec.name)
    keys: set[str] = set()
    read_only_cap = int(n * opts.max_read_only_share)
    read_only_kept = 0

    def accept(chain: Chain, check: ChainCheck) -> str | None:
        nonlocal read_only_kept
        changing = any(not spec.tools[c["name"]].read_only for c in check.calls)
        if not changing and read_only_kept >= read_only_cap:
            return f"read-only beyond {opts.max_read_only_share:.0%} of n"
        task_id = f"tpl-{spec.name}-{chain.chain_id}"
        task = template_task(chain, check, spec, task_id=task_id, seed=opts.seed, options=opts, date=date)
        key = _gt_key(task)
        if key in keys:
            return "same ground truth as a kept task"
        episode, why = oracle_episode(spec, task)
        if why is not None:
            return why.split(":", 1)[0] if why.startswith("replay_failed") else why
        keys.add(key)
        read_only_kept += not changing
        trajectory = episode.to_json() if episode is not None else None
        out.tasks.append(task)
        out.outcomes.append(ChainOutcome(chain.chain_id, "kept", task=task, trajectory=trajectory))
        if progress is not None:
            progress(len(out.tasks))
        return None

    out.sample = sample_solvable(G, n, seed=opts.seed, envs=[spec.name], budget=opts.budget, variants=opts.variants,
                                 accept=accept, min_tools=1, max_tools=4, max_envs=1)
    for i, task in enumerate(out.tasks):
        if opts.test_every and (i + 1) % opts.test_every == 0:
            task["split"] = "test"
    for reason, count in sorted(out.sample.drops.items()):
        out.outcomes += [ChainOutcome(f"{spec.name}:dropped", "dropped", reason=reason) for _ in range(count)]
    return out
