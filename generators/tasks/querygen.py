"""QueryGen: runnable tool chains → verified multi-turn tasks (arXiv 2605.18703, §3.4).

Per chain (``sampler.Chain`` or its JSON form, docs/synthesis.md), in order:

1. the chain is checked on the default initial state (``check_chain``); a chain that does not run is
   dropped (``unsolvable_chain``) before any LLM call;
2. ``scenario``: scenario and user profile (:func:`~.qgstages.gen_scenario`);
3. ``state``: patches to the default initial state, validated by the state model with the error sent back
   (bounded retries); the chain is re-run on the patched state to get the executed ground truth; when the
   state never validates or the chain does not run on it, the default state is used (counted under
   ``state.fallbacks``);
4. failed/redundant steps are filtered: a read-only call identical to an earlier one is removed;
5. ``turns``: split into turns of 1..``max_tools_per_turn`` calls, one user message per turn;
   expected outputs are kept only when the turn's results contain them;
6. ``refine``: the preset's refinements (ambiguity → a clarification turn whose answer the user knows);
7. the task's ground truth is replayed (a failure drops it, ``replay_failed``);
8. pass@k solving (default k = 4) by an LLM agent in isolated sessions (:mod:`.qgsolve`); kept when some
   attempt's final state is equivalent to the ground-truth final state and, for a ground truth that
   leaves the state unchanged, the attempt made every ground-truth call (``unsolved`` otherwise;
   ``too_easy`` when the preset drops tasks every attempt solves);
9. the first solving attempt, failed and redundant calls filtered out and replayed, is the task's
   verified trajectory (:func:`~.qgsolve.verified_trajectory`; ``trajectory_unverified`` noted when the
   filtered replay does not solve it).

Kept tasks are deduplicated (same environments, initial state and ground truth), written to
``tasks.jsonl`` in the catalog format (docs/authoring.md) with ``provenance`` ``{kind: "querygen", model,
preset, chain_id, seed, date, ...}``, summarised in a statistics JSON (:func:`task_statistics`), and their
verified trajectories written beside them as ``envfactory rollout --out`` records (:func:`write_tasks`).

Resuming: with ``checkpoint_dir`` every finished chain (kept or dropped) is written to
``<checkpoint_dir>/<chain_id>.json`` and a re-run with the same chain, model and options
(:meth:`QueryGen.run_key`) loads it without any request; chains interrupted
mid-way replay their answered requests from the LLM cache (``LLMConfig.cache_dir``).  Chains that failed
on the endpoint (``llm_request_failed``) are not checkpointed, so a re-run retries them.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import EnvFactoryError, LLMRequestError
from gym_envfactory.generators.tasks.qgsolve import solve_pass_at_k, task_environment, verified_trajectory
from gym_envfactory.generators.tasks.qgstages import (
    PRESETS,
    Clarification,
    Preset,
    StageError,
    TurnPlan,
    gen_initial_state,
    gen_refinement,
    gen_scenario,
    gen_turns,
)
from gym_envfactory.llm.client import LLMClient, LLMConfig
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import contains_output
from gym_envfactory.users.llm import LLMUser

__all__ = ["QueryGen", "QueryGenOptions", "ChainOutcome", "Checker", "chain_json", "default_checker",
           "remove_redundant_calls", "dedupe_tasks", "task_statistics", "write_tasks", "get_preset"]

#: ``checker(chain, initial_states) -> ChainCheck`` (``sampler.check_chain``'s shape; attribute or key access).
Checker = Callable[[Any, "dict[str, Any] | None"], Any]


def get_preset(name: str | Preset) -> Preset:
    """The :class:`Preset` named ``name`` (``sft-conv``, ``sft-non-conv``, ``rl-non-conv``).

    Raises:
        ValueError: an unknown name.
    """
    if isinstance(name, Preset):
        return name
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose {', '.join(PRESETS)}") from None


def chain_json(chain: Any) -> dict[str, Any]:
    """A chain's JSON form (a pydantic ``Chain`` is dumped, a mapping copied)."""
    if hasattr(chain, "model_dump"):
        return dict(chain.model_dump(mode="json"))
    if isinstance(chain, Mapping):
        return json.loads(json.dumps(dict(chain), default=str))
    raise TypeError(f"a chain is a sampler.Chain or its JSON object, got {type(chain).__name__}")


def default_checker(chain: Any, initial_states: dict[str, Any] | None) -> Any:
    """``sampler.check_chain`` (imported on first use; a JSON chain is parsed with ``sampler.Chain``)."""
    from gym_envfactory.generators.tasks import sampler

    if isinstance(chain, Mapping):
        chain = sampler.Chain.model_validate(dict(chain))
    return sampler.check_chain(chain, initial_states=initial_states)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def remove_redundant_calls(calls: Sequence[Mapping[str, Any]], specs: Mapping[str, EnvironmentSpec]) -> list[int]:
    """Indices of ``calls`` to keep: a read-only call identical (environment, name, arguments) to an
    earlier one is redundant (its result is already known)."""
    keep, seen = [], set()
    for i, c in enumerate(calls):
        spec = specs.get(c.get("env", "")) or next(iter(specs.values()))
        tool = spec.tools.get(c["name"])
        key = json.dumps([c.get("env"), c["name"], c.get("arguments", {})], sort_keys=True, default=str)
        if tool is not None and tool.read_only and key in seen:
            continue
        seen.add(key)
        keep.append(i)
    return keep


@dataclass
class QueryGenOptions:
    """Options of a QueryGen run.

    Args:
        preset: a preset name or :class:`Preset` (see ``PRESETS``).
        k: pass@k attempts per task (>= 1; >= 2 for a preset that drops tasks every attempt solves).
        seed: run seed: prompts carry ``seed + chain index``; attempt ``i`` samples with seed ``seed + i``.
        state_retries: extra ``state`` rounds after a state that does not validate.
        turn_retries: extra ``turns`` rounds after an invalid split.
        checkpoint_dir: per-chain outcomes (resume); ``None`` disables.
        user_max_turns: the user simulator's hard cap on turns.
        concurrency: chains processed at once.
        date: the provenance date (ISO); default today (UTC).
        max_state_chars: how much of the default state the ``state`` prompt shows.

    Raises:
        ValueError: ``k < 1``, an unknown preset, or ``k < 2`` with ``rl-non-conv`` (``drop_all_solved``).
    """

    preset: str | Preset = "sft-conv"
    k: int = 4
    seed: int = 0
    state_retries: int = 2
    turn_retries: int = 1
    checkpoint_dir: Path | None = None
    user_max_turns: int = 12
    concurrency: int = 2
    date: str | None = None
    max_state_chars: int = 6000

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        preset = get_preset(self.preset)
        if preset.drop_all_solved and self.k < 2:
            raise ValueError(f"preset {preset.name} drops tasks every attempt solves: with k={self.k} it would "
                             "drop every solved task; use k >= 2")


@dataclass
class ChainOutcome:
    """What became of one chain: ``status`` ``kept`` (with ``task``, the catalog JSON, and
    ``trajectory``, its verified trajectory as an ``envfactory rollout --out`` record or ``None``) or
    ``dropped`` (with ``reason`` and ``detail``); ``notes`` counts fallbacks and rejections along the way."""

    chain_id: str
    status: str
    task: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    solved: int | None = None
    k: int | None = None
    resumed: bool = False
    trajectory: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the checkpoint file)."""
        return {"format": "querygen-checkpoint/1", "chain_id": self.chain_id, "status": self.status,
                "task": self.task, "reason": self.reason, "detail": self.detail, "notes": self.notes,
                "solved": self.solved, "k": self.k, "trajectory": self.trajectory}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChainOutcome:
        """Inverse of :meth:`to_dict` (``resumed`` set)."""
        return cls(chain_id=d["chain_id"], status=d["status"], task=d.get("task"), reason=d.get("reason"),
                   detail=d.get("detail", ""), notes=list(d.get("notes", [])), solved=d.get("solved"),
                   k=d.get("k"), resumed=True, trajectory=d.get("trajectory"))


def _drop(chain_id: str, reason: str, detail: str = "", notes: list[str] | None = None) -> ChainOutcome:
    return ChainOutcome(chain_id, "dropped", reason=reason, detail=detail[:500], notes=list(notes or []))


def _safe_name(chain_id: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", chain_id)[:80]
    return f"{base}-{hashlib.sha256(chain_id.encode()).hexdigest()[:8]}"


class QueryGen:
    """Chains → verified tasks (see the module docstring).

    Args:
        config: the model used for every stage, the agent and the user simulator.
        options: :class:`QueryGenOptions`.
        checker: ``check_chain`` (default: the sampler's, imported lazily).
        progress: called with each :class:`ChainOutcome` as chains finish.
        client: an :class:`LLMClient` for the stages (default: one made from ``config``).

    Raises:
        ValueError: an unknown preset or bad options.
    """

    def __init__(self, config: LLMConfig, options: QueryGenOptions | None = None, *, checker: Checker | None = None,
                 progress: Callable[[ChainOutcome], None] | None = None, client: LLMClient | None = None) -> None:
        self.config = config
        self.options = options or QueryGenOptions()
        self.preset = get_preset(self.options.preset)
        self.checker: Checker = checker or default_checker
        self.progress = progress
        self.client = client or LLMClient(config)
        base_seed = config.seed if config.seed is not None else 0
        self.solvers = [LLMClient(replace(config, seed=base_seed + self.options.seed + i,
                                          temperature=self.preset.solve_temperature)) for i in range(self.options.k)]
        self.user_client = LLMClient(config)
        self.users: list[LLMUser] = []
        self.date = self.options.date or dt.datetime.now(dt.UTC).date().isoformat()
        if self.options.checkpoint_dir is not None:
            Path(self.options.checkpoint_dir).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------------------ accounting
    @property
    def usage_by_stage(self) -> dict[str, dict[str, int]]:
        """LLM usage per stage over every client of the run (stages, agent attempts, user simulator)."""
        total: dict[str, dict[str, int]] = {}
        for c in (self.client, self.user_client, *self.solvers):
            for stage, counts in c.usage_by_stage.items():
                acc = total.setdefault(stage, {})
                for k, v in counts.items():
                    acc[k] = acc.get(k, 0) + v
        return total

    @property
    def user_stats(self) -> dict[str, int]:
        """The user simulators' counters summed (``requests``, ``fallbacks``, ``done``, ``capped``)."""
        out: Counter[str] = Counter()
        for u in self.users:
            out.update(u.stats)
        return dict(out)

    # ------------------------------------------------------------------------------------ checkpoints
    def _checkpoint_path(self, chain_id: str) -> Path | None:
        d = self.options.checkpoint_dir
        return Path(d) / f"{_safe_name(chain_id)}.json" if d is not None else None

    def run_key(self, chain: Mapping[str, Any]) -> str:
        """What a checkpoint of ``chain`` (its JSON form) is only valid for: sha256 of the chain, the model
        and sampling settings, the preset and the options that change the outcome.  A checkpoint written
        under another key (another preset, model, k, seed, or other steps under the same chain id) is
        not resumed."""
        c, o = self.config, self.options
        key = {"chain": chain, "model": c.model, "temperature": c.temperature, "seed": c.seed,
               "max_tokens": c.max_tokens, "preset": self.preset.to_dict(), "k": o.k, "run_seed": o.seed,
               "state_retries": o.state_retries, "turn_retries": o.turn_retries,
               "user_max_turns": o.user_max_turns, "max_state_chars": o.max_state_chars}
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()

    def _load_checkpoint(self, chain_id: str, run_key: str) -> ChainOutcome | None:
        path = self._checkpoint_path(chain_id)
        if path is None or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") == "querygen-checkpoint/1" and data.get("chain_id") == chain_id \
                    and data.get("run") == run_key:
                return ChainOutcome.from_dict(data)
        except (OSError, ValueError, KeyError):
            pass
        return None

    def _save_checkpoint(self, outcome: ChainOutcome, run_key: str) -> None:
        path = self._checkpoint_path(outcome.chain_id)
        if path is None:
            return
        fd, tmp = tempfile.mkstemp(prefix=".qg-", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({**outcome.to_dict(), "run": run_key}, fh, ensure_ascii=False, sort_keys=True)
        os.replace(tmp, path)

    # ------------------------------------------------------------------------------------ one chain
    def _check(self, chain: Any, states: dict[str, Any] | None) -> tuple[Any, str | None]:
        try:
            check = self.checker(chain, states)
        except (EnvFactoryError, ValueError, KeyError, TypeError) as exc:
            return None, f"{type(exc).__name__}: {exc}"
        if not _get(check, "ok", False):
            return check, str(_get(check, "reason") or "the chain does not run")
        return check, None

    async def run_chain(self, chain: Any, index: int = 0) -> ChainOutcome:
        """Process one chain (``index``: its position, which seeds its prompts).  Never raises for bad
        model output or an unusable chain: those are dropped with a reason.  ``LLMRequestError`` becomes
        a ``llm_request_failed`` drop."""
        cj = chain_json(chain)
        chain_id = str(cj.get("chain_id") or f"chain-{index}")
        run_key = self.run_key(cj)
        cached = self._load_checkpoint(chain_id, run_key)
        if cached is not None:
            return cached
        try:
            outcome = await self._run_chain(chain, cj, chain_id, index)
        except LLMRequestError as exc:
            return _drop(chain_id, "llm_request_failed", str(exc))
        self._save_checkpoint(outcome, run_key)
        return outcome

    async def _run_chain(self, chain: Any, cj: dict[str, Any], chain_id: str, index: int) -> ChainOutcome:
        seed = self.options.seed + index
        notes: list[str] = []
        env_names = list(cj.get("envs") or dict.fromkeys(s.get("env") for s in cj.get("steps", [])))
        try:
            specs = [get_environment(n) for n in env_names]
        except EnvFactoryError as exc:
            return _drop(chain_id, "unknown_environment", str(exc))
        if not specs:
            return _drop(chain_id, "unsolvable_chain", "the chain names no environment")
        by_name = {s.name: s for s in specs}
        check, problem = await asyncio.to_thread(self._check, chain, None)
        if problem is not None:
            return _drop(chain_id, "unsolvable_chain", problem)
        try:
            scenario = await gen_scenario(self.client, cj, specs, seed=seed)
        except StageError as exc:
            return _drop(chain_id, exc.reason, exc.detail)
        patches: dict[str, list[dict[str, Any]]] = {}
        try:
            patches, states = await gen_initial_state(self.client, cj, specs, scenario, seed=seed,
                                                      retries=self.options.state_retries,
                                                      state_chars=self.options.max_state_chars)
            if patches:
                check2, problem = await asyncio.to_thread(self._check, chain, states)
                if problem is None:
                    check = check2
                else:
                    notes.append("state_fallback:state_chain_failed")
                    patches = {}
        except StageError as exc:
            notes.append(f"state_fallback:{exc.reason}")
        notes.append("state:generated" if patches else "state:default")
        calls = copy.deepcopy([dict(c) for c in _get(check, "calls", [])])  # the task must not share the checker's dicts
        if not calls:
            return _drop(chain_id, "unsolvable_chain", "the check executed no calls", notes)
        results = list(_get(check, "results", None) or [None] * len(calls))
        keep = remove_redundant_calls(calls, by_name)
        if len(keep) < len(calls):
            notes.append(f"redundant_calls_removed:{len(calls) - len(keep)}")
        steps = cj.get("steps", [])
        calls = [calls[i] for i in keep]
        results = [results[i] if i < len(results) else None for i in keep]
        fchain = {**cj, "steps": [steps[i] if i < len(steps) else {} for i in keep]}
        try:
            plans = await gen_turns(self.client, calls, results, scenario, max_tools=self.preset.max_tools_per_turn,
                                    seed=seed, retries=self.options.turn_retries)
        except StageError as exc:
            return _drop(chain_id, exc.reason, exc.detail, notes)
        for p in plans:
            text = json.dumps([results[i] for i in p.steps], ensure_ascii=False, default=str)
            p.expected_outputs = [s for s in p.expected_outputs if contains_output(text, s)]
        try:
            messages, clar, more = await gen_refinement(self.client, plans, calls, fchain, self.preset, seed=seed)
            notes += more
        except StageError as exc:
            messages, clar = [p.user for p in plans], None
            notes.append(exc.reason)
        task = self._build_task(chain_id, specs, patches, plans, calls, messages, clar, scenario.scenario,
                                scenario.user_profile, seed)
        return await self._verify(chain_id, task, specs[0], notes)

    def _build_task(self, chain_id: str, specs: Sequence[EnvironmentSpec], patches: Mapping[str, list[Any]],
                    plans: Sequence[TurnPlan], calls: Sequence[Mapping[str, Any]], messages: Sequence[str],
                    clar: Clarification | None, scenario: str, profile: dict[str, Any], seed: int) -> dict[str, Any]:
        turns: list[dict[str, Any]] = []
        clar_rows = []
        for k, plan in enumerate(plans):
            gt = [{"name": calls[i]["name"], "arguments": calls[i].get("arguments", {})} for i in plan.steps]
            if clar is not None and clar.turn == k:
                clar_rows.append({**clar.to_dict(), "turn": len(turns)})
                turns.append({"user": clar.ambiguous_user, "clarification": True})
                turns.append({"user": clar.answer, "ground_truth": gt, "expected_outputs": plan.expected_outputs})
            else:
                turns.append({"user": messages[k], "ground_truth": gt, "expected_outputs": plan.expected_outputs})
        primary = specs[0]
        if not patches:
            initial: Any = primary.manifest.default_initial_state if len(specs) == 1 else None
        elif len(specs) == 1:
            initial = {"name": primary.manifest.default_initial_state, "patches": patches[primary.name]}
        else:
            initial = {n: {"name": next(s for s in specs if s.name == n).manifest.default_initial_state, "patches": p}
                       for n, p in patches.items()}
        env: Any = primary.name if len(specs) == 1 else [s.name for s in specs]
        provenance = {"kind": "querygen", "model": self.config.model, "preset": self.preset.name,
                      "chain_id": chain_id, "seed": seed, "date": self.date, "scenario": scenario,
                      "user_profile": profile, "refinements": list(self.preset.refinements),
                      "state": "generated" if patches else "default"}
        if clar_rows:
            provenance["clarifications"] = clar_rows
        return {"task_id": f"qg-{chain_id}", "env": env, "split": self.preset.split, "initial_state": initial,
                "turns": turns, "provenance": provenance,
                "tags": ["querygen", self.preset.name] + (["clarification"] if clar_rows else [])}

    async def _verify(self, chain_id: str, task_obj: dict[str, Any], spec: EnvironmentSpec,
                      notes: list[str]) -> ChainOutcome:
        try:
            tasks = TaskSet.from_objects(spec.name, [task_obj])
            task = tasks.get(task_obj["task_id"])
            reference = task_reference(spec, task, tasks)
        except EnvFactoryError as exc:
            return _drop(chain_id, "replay_failed", str(exc), notes)
        env_spec = task_environment(spec, [task])
        user = None
        if self.preset.conversational:
            user = LLMUser(client=self.user_client, max_turns=self.options.user_max_turns)
            self.users.append(user)
        result = await solve_pass_at_k(env_spec, task, reference, self.solvers, user=user, seed=self.options.seed)
        k = len(result.attempts)
        if result.solved == 0:
            early = all(a.user_ended for a in result.attempts)
            out = _drop(chain_id, "user_ended_early" if early else "unsolved",
                        "; ".join(sorted({a.error or "final state differs" for a in result.attempts})), notes)
            out.solved, out.k = 0, k
            return out
        if self.preset.drop_all_solved and result.solved == k:
            out = _drop(chain_id, "too_easy", f"all {k} attempts solved it", notes)
            out.solved, out.k = k, k
            return out
        task_obj["provenance"]["pass_at_k"] = {"k": k, "solved": result.solved}
        first = next(a for a in result.attempts if a.solved)
        trajectory = await asyncio.to_thread(verified_trajectory, env_spec, task, reference, first,
                                             policy=f"querygen:{self.config.model}")
        if trajectory is None:
            notes.append("trajectory_unverified")
        return ChainOutcome(chain_id, "kept", task=task_obj, notes=notes, solved=result.solved, k=k,
                            trajectory=trajectory)

    # ------------------------------------------------------------------------------------ many chains
    async def generate(self, chains: Iterable[Any]) -> list[ChainOutcome]:
        """Process ``chains`` (at most ``options.concurrency`` at once); outcomes in chain order."""
        sem = asyncio.Semaphore(max(1, self.options.concurrency))

        async def one(i: int, chain: Any) -> ChainOutcome:
            async with sem:
                out = await self.run_chain(chain, i)
            if self.progress is not None:
                self.progress(out)
            return out

        try:
            return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(chains))))
        finally:
            for c in (self.client, self.user_client, *self.solvers):
                await c.aclose()


def _task_key(task: Mapping[str, Any]) -> str:
    gt = [[(c["name"], c.get("arguments", {})) for c in t.get("ground_truth", [])] for t in task["turns"]]
    return json.dumps([task.get("env"), task.get("initial_state"), gt], sort_keys=True, default=str)


def _dedupe(tasks: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """``(index, unique task id)`` of each task kept by :func:`dedupe_tasks`, in order."""
    seen: set[str] = set()
    ids: set[str] = set()
    out = []
    for i, t in enumerate(tasks):
        key = _task_key(t)
        if key in seen:
            continue
        seen.add(key)
        tid, n = t["task_id"], 1
        while tid in ids:
            n += 1
            tid = f"{t['task_id']}-{n}"
        ids.add(tid)
        out.append((i, tid))
    return out


def dedupe_tasks(tasks: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Drop tasks whose environments, initial state and ground truth (turn by turn) repeat an earlier
    task's; also makes task ids unique (``-2``, ``-3`` suffixes).  Returns ``(kept, n_duplicates)``."""
    tasks = list(tasks)
    kept = _dedupe(tasks)
    return [{**tasks[i], "task_id": tid} for i, tid in kept], len(tasks) - len(kept)


def _summary(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"mean": 0.0, "min": 0, "max": 0, "histogram": {}}
    hist = Counter(int(v) for v in values)
    return {"mean": round(sum(values) / len(values), 3), "min": min(values), "max": max(values),
            "histogram": {str(k): hist[k] for k in sorted(hist)}}


def task_statistics(outcomes: Sequence[ChainOutcome], tasks: Sequence[Mapping[str, Any]], *, duplicates: int = 0,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's statistics (paper §3.4, Table-style): ``chains``, ``tasks``, ``turns_per_task``,
    ``steps_per_turn`` (calls per non-clarification turn), ``calls`` (total and per task),
    ``clarification_share`` (tasks with a clarification turn) and ``clarification_turn_share`` (turns),
    ``drop_reasons``, ``state`` (generated/default/fallback counts), ``notes`` and ``pass_at_k``
    (histogram of solved attempts of kept tasks), plus ``extra``."""
    turns = [len(t["turns"]) for t in tasks]
    steps = [len(u.get("ground_truth", [])) for t in tasks for u in t["turns"] if not u.get("clarification")]
    n_clar_turns = sum(1 for t in tasks for u in t["turns"] if u.get("clarification"))
    with_clar = sum(1 for t in tasks if any(u.get("clarification") for u in t["turns"]))
    drops = Counter(o.reason for o in outcomes if o.status == "dropped")
    if duplicates:
        drops["duplicate"] += duplicates
    notes: Counter[str] = Counter()
    state: Counter[str] = Counter()
    for o in outcomes:
        for n in o.notes:
            if n.startswith("state:"):
                state[n.split(":", 1)[1]] += 1
            elif n.startswith("state_fallback:"):
                state["fallback:" + n.split(":", 1)[1]] += 1
            elif n.startswith("redundant_calls_removed:"):
                notes["redundant_calls_removed"] += int(n.split(":", 1)[1])
            else:
                notes[n] += 1
    solved = Counter(o.solved for o in outcomes if o.status == "kept" and o.solved is not None)
    calls = sum(steps)
    stats: dict[str, Any] = {
        "chains": len(outcomes),
        "tasks": len(tasks),
        "kept_share": round(len(tasks) / len(outcomes), 3) if outcomes else 0.0,
        "turns_per_task": _summary(turns),
        "steps_per_turn": _summary(steps),
        "calls": {"total": calls, "per_task": round(calls / len(tasks), 3) if tasks else 0.0},
        "clarification_share": round(with_clar / len(tasks), 3) if tasks else 0.0,
        "clarification_turn_share": round(n_clar_turns / sum(turns), 3) if turns else 0.0,
        "drop_reasons": dict(sorted(drops.items())),
        "state": dict(sorted(state.items())),
        "notes": dict(sorted(notes.items())),
        "pass_at_k": {str(k): solved[k] for k in sorted(solved)},
        "resumed_chains": sum(o.resumed for o in outcomes),
    }
    stats.update(extra or {})
    return stats


def write_tasks(outcomes: Sequence[ChainOutcome], out: Path, stats_path: Path | None = None, *,
                extra: Mapping[str, Any] | None = None, trajectories_path: Path | None = None) -> dict[str, Any]:
    """Deduplicate the kept tasks, replay each one's ground truth once more from the written form (a
    failure drops it, ``replay_failed``), write ``out`` (JSON Lines, one task per line), the verified
    trajectories of the written tasks (default ``<out stem>.trajectories.jsonl``, one
    ``envfactory rollout --out`` record per line, task ids as written; ``envfactory export sft
    --from-trajectories`` reads it) and the statistics JSON (default ``<out stem>.stats.json``).  Returns
    the statistics (with ``stats_path``, ``trajectories_path``).

    Raises:
        OSError: the files cannot be written.
    """
    candidates = [o for o in outcomes if o.status == "kept" and o.task is not None]
    kept_ix = _dedupe([o.task or {} for o in candidates])
    dups = len(candidates) - len(kept_ix)
    kept = [{**(candidates[i].task or {}), "task_id": tid} for i, tid in kept_ix]
    trajectory_of = {tid: candidates[i].trajectory for i, tid in kept_ix}
    final: list[dict[str, Any]] = []
    outcomes = list(outcomes)
    for t in kept:
        env = t["env"] if isinstance(t["env"], str) else t["env"][0]
        try:
            spec = get_environment(env)
            ts = TaskSet.from_objects(env, [t])
            task_reference(spec, ts.get(t["task_id"]), ts)
        except EnvFactoryError as exc:
            cid = t["provenance"].get("chain_id")
            outcomes = [_drop(o.chain_id, "replay_failed", str(exc), o.notes) if o.chain_id == cid and o.status == "kept"
                        else o for o in outcomes]
            continue
        final.append(t)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for t in final:
            fh.write(json.dumps(t, ensure_ascii=False, default=str) + "\n")
    tp = trajectories_path or out.with_name(out.stem + ".trajectories.jsonl")
    n_traj = 0
    with tp.open("w", encoding="utf-8") as fh:
        for t in final:
            record = trajectory_of.get(t["task_id"])
            if record is not None:
                fh.write(json.dumps({**record, "task_id": t["task_id"]}, ensure_ascii=False, default=str) + "\n")
                n_traj += 1
    stats = task_statistics(outcomes, final, duplicates=dups, extra={"trajectories": n_traj, **(extra or {})})
    sp = stats_path or out.with_name(out.stem + ".stats.json")
    sp.write_text(json.dumps(stats, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    stats["stats_path"], stats["trajectories_path"] = str(sp), str(tp)
    return stats
