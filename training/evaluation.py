"""Held-out evaluation of a policy on per-turn rows, and the paired bootstrap that says whether one
policy beats another beyond noise.

:func:`evaluate_rows` plays one episode per row (``envfactory export rl`` rows) with a generator you
supply (e.g. :func:`~gym_envfactory.training.episodes.hf_generate`, greedy, with ``reuse_cache``),
batching rows of similar prompt lengths (any environments together), and returns the per-row rewards in the order of the rows, so
two policies evaluated on the same rows give paired samples.

:func:`paired_bootstrap` resamples rows with replacement (Efron & Tibshirani, *An Introduction to the
Bootstrap*, 1993, ch. 13, percentile interval) and reports the mean paired difference with a
one-sided 95 % lower bound and a two-sided 95 % interval.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from gym_envfactory import EnvFactoryEnv

__all__ = ["evaluate_rows", "paired_bootstrap"]


def evaluate_rows(generate: Any, tokenizer: Any, rows: Sequence[Mapping[str, Any]],
                  env_factory: Callable[[str], EnvFactoryEnv], *, max_steps: int, max_new_tokens: int,
                  max_completion_tokens: int = 2048, batch: int = 16,
                  tools: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
                  stop_on_repeat: bool = True) -> dict[str, Any]:
    """One episode per row; returns ``{"reward": mean, "episodes": n, "with_valid_call": share of
    episodes with at least one valid tool call, "rewards": [per row, in row order], "texts": [the
    generated actions per row]}``.

    Args:
        generate: ``generate(sequences, max_new_tokens) -> new ids`` (``episodes.Generate``).
        tokenizer: the policy's tokenizer (its template renders tools).
        rows: ``envfactory export rl`` rows (``extra_info.env`` and ``extra_info.reset_options``).
        env_factory: ``env_factory(env_id)`` makes a fresh environment (e.g. with the recipe's system prompt).
        max_steps, max_new_tokens, max_completion_tokens, tools, stop_on_repeat: as in
            ``episodes.play_episodes`` (``stop_on_repeat`` on by default here: a greedy policy that repeats
            an action of the turn would repeat it until ``max_steps``).
        batch: episodes generated together (rows sorted by prompt length: padding to the longest prompt
            of a batch is paid in the prefill).

    Raises:
        UnknownTaskError, ValueError: a row names no valid episode.
    """
    from gym_envfactory.training.episodes import play_episodes

    def env_of(i: int) -> str:
        return str(rows[i]["extra_info"]["env"])

    order = sorted(range(len(rows)), key=lambda i: len(json.dumps(rows[i]["prompt"])))
    rewards: list[float] = [0.0] * len(rows)
    texts: list[list[str]] = [[] for _ in rows]
    called = 0
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        eps = play_episodes(generate, tokenizer, [partial(env_factory, env_of(j)) for j in idx],
                            [rows[j]["extra_info"]["reset_options"] for j in idx], max_steps=max_steps,
                            max_new_tokens=max_new_tokens, max_completion_tokens=max_completion_tokens, tools=tools,
                            stop_on_repeat=stop_on_repeat)
        for j, ep in zip(idx, eps, strict=True):
            rewards[j], texts[j] = ep.reward, ep.texts
            called += any(invalid is False for rec in ep.env.records for *_, invalid in rec.calls)
    return {"reward": sum(rewards) / max(1, len(rewards)), "episodes": len(rewards),
            "with_valid_call": called / max(1, len(rewards)), "rewards": rewards, "texts": texts}


def paired_bootstrap(before: Sequence[float], after: Sequence[float], *, resamples: int = 10_000,
                     seed: int = 0) -> dict[str, float]:
    """Bootstrap of the mean paired difference ``after - before`` over rows.

    Args:
        before, after: per-row scores of two policies on the same rows, same order.
        resamples: bootstrap resamples.
        seed: seeds the resampling.

    Returns:
        ``{"mean_diff", "lower_95_one_sided" (5th percentile), "ci95_low", "ci95_high" (2.5th and
        97.5th percentiles), "p_not_better" (share of resamples with a mean difference <= 0), "rows",
        "better", "worse", "same"}``.

    Raises:
        ValueError: the two lists differ in length or are empty, or ``resamples`` < 1.
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"need two non-empty lists of equal length, got {len(before)} and {len(after)}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    diffs = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))

    def pct(q: float) -> float:
        return means[min(resamples - 1, max(0, int(q * resamples)))]

    return {"mean_diff": sum(diffs) / n, "lower_95_one_sided": pct(0.05), "ci95_low": pct(0.025),
            "ci95_high": pct(0.975), "p_not_better": sum(1 for m in means if m <= 0) / resamples, "rows": n,
            "better": sum(1 for d in diffs if d > 1e-12), "worse": sum(1 for d in diffs if d < -1e-12),
            "same": sum(1 for d in diffs if abs(d) <= 1e-12)}
