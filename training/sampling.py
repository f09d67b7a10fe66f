"""Dynamic sampling for GRPO (DAPO, arXiv 2503.14476 §3.2; the "train only on rows with 0 < pass@k < 1"
practice): a group whose ``k`` samples all earn the same reward has zero advantage everywhere, so the
step it takes is wasted compute.  :class:`DynamicSampler` keeps, per training row, what the current
policy last earned on it and hands out rows whose last group had reward variance first, explores rows
not yet tried next, and re-checks flat rows (all samples equal: solved or hopeless for now) only after a
cool-down of ``recheck_after`` draws, since the policy moves.

:func:`dynamic_rollout_function` is a TRL ``rollout_func`` (``GRPOTrainer(rollout_func=...)``) built on
it: the prompts TRL hands over are slots (one per group of ``num_generations`` consecutive
completions, TRL's grouping); each slot plays a row the sampler chooses, ``num_generations`` episodes
of it (:func:`~gym_envfactory.training.episodes.play_episodes`), and a slot whose group comes back flat
is played again with another row, up to ``max_tries`` times (DAPO's ``max_num_gen_batches``).  The
returned prompt and completion tokens are those of the rows actually played, so the policy-gradient
step is consistent; only TRL's logged prompt text names the slot's original row.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gym_envfactory import EnvFactoryEnv

__all__ = ["DynamicSampler", "RowStats", "dynamic_rollout_function"]


@dataclass
class RowStats:
    """What the sampler knows of one row: ``rewards`` of its last group (empty: never played), the draw
    number it was last played at, and how many groups it has had."""

    rewards: list[float] = field(default_factory=list)
    last_draw: int = -1
    groups: int = 0

    @property
    def has_signal(self) -> bool:
        """The last group's rewards were not all equal (GRPO gets a non-zero advantage from it)."""
        return len(self.rewards) > 1 and max(self.rewards) - min(self.rewards) > 1e-9

    @property
    def pass_rate(self) -> float | None:
        """Mean reward of the last group (the row's pass@k estimate for [0, 1] rewards); None if unplayed."""
        return sum(self.rewards) / len(self.rewards) if self.rewards else None


class DynamicSampler:
    """Chooses the rows GRPO trains on from the policy's own recent results.

    Order of preference for each draw: (1) rows whose last group had signal and were not played in the
    last ``reuse_gap`` draws, least recently played first; (2) rows never played, in a seeded random
    order; (3) flat rows whose cool-down (``recheck_after`` draws since they were played) is over, least
    recently played first; (4) any row with signal, least recently played first; (5) any row.  Every
    ``explore_every``-th draw skips (1), so exploring new rows and re-checking flat ones never stops
    while rows with signal remain (GRPO would otherwise keep training on a handful of rows).

    Args:
        n_rows: number of rows (rows are named by index 0..n_rows-1).
        recheck_after: draws before a flat row may be drawn again.
        reuse_gap: draws before a row with signal is preferred again (spreads training over rows).
        explore_every: every this many draws, one explores (0: never).
        seed: seeds the order in which unplayed rows are explored.

    Raises:
        ValueError: ``n_rows`` < 1 or a negative gap.
    """

    def __init__(self, n_rows: int, *, recheck_after: int = 64, reuse_gap: int = 4, explore_every: int = 2,
                 seed: int = 0) -> None:
        if n_rows < 1 or recheck_after < 0 or reuse_gap < 0 or explore_every < 0:
            raise ValueError(f"need n_rows >= 1 and non-negative gaps, got {n_rows}, {recheck_after}, {reuse_gap}, "
                             f"{explore_every}")
        self.stats = [RowStats() for _ in range(n_rows)]
        self.recheck_after, self.reuse_gap, self.explore_every = recheck_after, reuse_gap, explore_every
        self._unplayed = list(range(n_rows))
        random.Random(seed).shuffle(self._unplayed)
        self.draws = 0
        self.history: list[dict[str, Any]] = []

    def draw(self, exclude: Sequence[int] = ()) -> int:
        """The next row to play (an index), not one of ``exclude`` when another exists."""
        banned = set(exclude)
        now = self.draws
        self.draws += 1

        def lru(cands: list[int]) -> int | None:
            cands = [i for i in cands if i not in banned]
            return min(cands, key=lambda i: self.stats[i].last_draw) if cands else None

        signal = [i for i, s in enumerate(self.stats) if s.groups and s.has_signal]
        explore = self.explore_every > 0 and now % self.explore_every == self.explore_every - 1
        choice = None if explore else lru([i for i in signal if now - self.stats[i].last_draw > self.reuse_gap])
        if choice is None:
            # never-played rows in their seeded order; one drawn but not yet recorded (in flight, or its play
            # failed) goes behind the others, so one step's slots get different rows and none is lost
            fresh = [i for i in self._unplayed if i not in banned]
            choice = min(fresh, key=lambda i: self.stats[i].last_draw) if fresh else None
        if choice is None:
            choice = lru([i for i, s in enumerate(self.stats)
                          if s.groups and not s.has_signal and now - s.last_draw > self.recheck_after])
        if choice is None:
            choice = lru(signal)
        if choice is None:
            choice = lru(list(range(len(self.stats)))) or 0
        self.stats[choice].last_draw = now
        return choice

    def record(self, row: int, rewards: Sequence[float]) -> bool:
        """Store the rewards of a group played on ``row``; returns whether it had signal."""
        s = self.stats[row]
        if row in self._unplayed:  # leaves the unplayed list only once played (a drawn row whose play failed stays)
            self._unplayed.remove(row)
        s.rewards = [float(r) for r in rewards]
        s.groups += 1
        self.history.append({"draw": s.last_draw, "row": row, "mean": s.pass_rate, "signal": s.has_signal})
        return s.has_signal

    def summary(self) -> dict[str, int]:
        """Counts of rows by what is known of them: ``unplayed``, ``signal``, ``flat_zero`` (all samples
        earned 0), ``flat_one`` (all earned 1), ``flat_other`` (all equal, in between)."""
        out = {"unplayed": 0, "signal": 0, "flat_zero": 0, "flat_one": 0, "flat_other": 0}
        for s in self.stats:
            if not s.groups:
                out["unplayed"] += 1
            elif s.has_signal:
                out["signal"] += 1
            elif s.rewards and s.rewards[0] <= 0.0:
                out["flat_zero"] += 1
            elif s.rewards and s.rewards[0] >= 1.0:
                out["flat_one"] += 1
            else:
                out["flat_other"] += 1
        return out


def _options(row: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    extra = row.get("extra_info") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    options = {k: v for k, v in dict(extra.get("reset_options") or {}).items() if v is not None}
    return str(extra.get("env") or row.get("data_source")), options


def dynamic_rollout_function(rows: Sequence[Mapping[str, Any]], sampler: DynamicSampler, *, max_steps: int = 8,
                             max_new_tokens: int = 128, max_tries: int = 3,
                             tools: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
                             env_kwargs: Mapping[str, Any] | None = None,
                             on_group: Callable[[int, list[float]], None] | None = None,
                             stop_on_repeat: bool = False) -> Any:
    """A TRL ``rollout_func`` with dynamic sampling (module docstring).

    Args:
        rows: the training rows (``envfactory export rl`` rows: ``extra_info.reset_options``, ``env``).
        sampler: a :class:`DynamicSampler` over ``len(rows)`` rows (its state persists between steps).
        max_steps, max_new_tokens: per episode / per action, as in ``play_episodes``.
        max_tries: plays per slot at most (a flat group is replaced while tries remain).
        tools: maps OpenAI tool schemas to those put in the prompt (e.g. ``episodes.compact_tools``).
        env_kwargs: keywords of :class:`EnvFactoryEnv` (``system_prompt``, ``backend``, ``reward`` ...).
        on_group: called with ``(row index, rewards)`` for every group played (logging).
        stop_on_repeat: end an episode once the policy repeats an action of its turn, as
            ``play_episodes`` (the repeat is stepped and scored).  Train with the rule the evaluation
            uses (``evaluate_rows`` has it on) and a looping sample stops costing generation.

    Returns:
        ``rollout(prompts, trainer) -> dict`` with TRL's keys (``prompt_ids``, ``completion_ids``,
        ``logprobs`` None, ``env_mask``) plus ``envfactory_reward``, ``envfactory_components``,
        ``envfactory_turn_rewards`` and ``envfactory_turn_spans`` (per user turn played: its reward and its
        ``[begin, end)`` in ``completion_ids``, as ``rollout_function``) and ``envfactory_row`` (the row
        index each completion played), one entry per prompt.

    Raises:
        ValueError: ``sampler`` is not over ``len(rows)`` rows, or ``max_tries`` < 1 (when built); the
            number of prompts is not a multiple of the trainer's ``num_generations`` (when called).
    """
    from gym_envfactory.training.episodes import hf_generate, play_episodes, rollout_output

    if len(sampler.stats) != len(rows):
        raise ValueError(f"the sampler covers {len(sampler.stats)} rows, not the {len(rows)} given")
    if max_tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    entries = [_options(r) for r in rows]
    kwargs = dict(env_kwargs or {})

    def play(generate: Any, tokenizer: Any, picks: list[int], g: int, cap: int) -> list[list[Any]]:
        """``g`` episodes of each picked row, batched per environment; a list of groups."""
        flat = [r for r in picks for _ in range(g)]
        played = play_episodes(generate, tokenizer, [partial(EnvFactoryEnv, entries[r][0], **kwargs) for r in flat],
                               [entries[r][1] for r in flat], max_steps=max_steps, max_new_tokens=max_new_tokens,
                               max_completion_tokens=cap, tools=tools, stop_on_repeat=stop_on_repeat)
        return [played[s * g:(s + 1) * g] for s in range(len(picks))]

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        g = int(trainer.num_generations)
        if len(prompts) % g:
            raise ValueError(f"{len(prompts)} prompts is not a multiple of num_generations={g}")
        tokenizer = getattr(trainer.processing_class, "tokenizer", None) or trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        cap = args.max_completion_length or 1024
        n_slots = len(prompts) // g
        picks = [sampler.draw() for _ in range(n_slots)]
        groups: list[list[Any]] = [[] for _ in range(n_slots)]
        chosen = list(picks)
        pending = list(range(n_slots))
        for attempt in range(max_tries):
            generate = hf_generate(model, tokenizer, temperature=args.temperature, top_p=args.top_p or 1.0,
                                   reuse_cache=True)
            results = play(generate, tokenizer, [picks[s] for s in pending], g, cap)
            retry = []
            for s, group in zip(pending, results, strict=True):
                rewards = [ep.reward for ep in group]
                signal = sampler.record(picks[s], rewards)
                if on_group is not None:
                    on_group(picks[s], rewards)
                groups[s], chosen[s] = group, picks[s]
                if not signal and attempt + 1 < max_tries:
                    retry.append(s)
            pending = retry
            if not pending:
                break
            for s in pending:
                picks[s] = sampler.draw(exclude=chosen)
        played = [ep for group in groups for ep in group]
        return {**rollout_output(played), "envfactory_row": [chosen[s] for s in range(n_slots) for _ in range(g)]}

    return rollout
