"""A training log as JSON Lines: one line per logged step, for ``envfactory ui --training-log`` (docs/ui.md,
"Training curves") or any plotting tool.

Each line is an object ``{"step": int, "phase": str, <metric>: number, ...}``: what the trainer logs at
that step (TRL's GRPO: ``reward``, ``reward_std``, ``loss``, ``kl``, ``rewards/<function>/mean`` ...) and,
when the episodes' reward components were observed (:meth:`TrainingLog.observe`, or a rollout function
wrapped by :meth:`TrainingLog.wrap_rollout`), their means since the previous line: ``r_traj``,
``r_state``, ``r_output``, ``penalty`` and the episodes' ``env_reward`` (paper §3.5; a vacuous component,
``None``, is left out of its mean).  Lines are appended and flushed one at a time, so a page that re-reads
the file shows a running job's newest steps.

Usage with TRL (``transformers.TrainerCallback`` under the hood)::

    log = TrainingLog("runs/train-log.jsonl")
    trainer = GRPOTrainer(..., rollout_func=log.wrap_rollout(rollout_function(rows)), callbacks=[log.callback("grpo")])
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["TrainingLog", "COMPONENTS"]

#: Reward components averaged per logged step (keys of ``EpisodeScore.to_dict()``).
COMPONENTS = ("r_traj", "r_state", "r_output", "penalty")


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


class TrainingLog:
    """Appends logged steps to ``path`` (JSON Lines; the folder is created).

    Args:
        path: the log file; appended to, never truncated (a resumed run goes on in the same file).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def observe(self, components: Iterable[Mapping[str, Any]]) -> None:
        """Add episodes' reward components (``EpisodeScore.to_dict()`` each) to the means the next line carries."""
        for c in components:
            for key, name in [*((k, k) for k in COMPONENTS), ("reward", "env_reward")]:
                f = _finite(c.get(key))
                if f is not None:
                    self._sums[name] = self._sums.get(name, 0.0) + f
                    self._counts[name] = self._counts.get(name, 0) + 1

    def write(self, step: int | float, phase: str = "", metrics: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Append one line: ``step``, ``phase``, the finite numbers of ``metrics`` and the observed
        components' means (then forgotten).  Returns the line's object."""
        line: dict[str, Any] = {"step": step, "phase": phase}
        line.update({str(k): f for k, v in (metrics or {}).items() if (f := _finite(v)) is not None})
        line.update({k: self._sums[k] / n for k, n in self._counts.items() if n})
        self._sums.clear()
        self._counts.clear()
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        return line

    def wrap_rollout(self, rollout: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        """``rollout`` (a TRL ``rollout_func`` such as :func:`~gym_envfactory.training.trl.rollout_function`'s)
        that also observes its episodes' ``envfactory_components``."""

        def logged(*args: Any, **kwargs: Any) -> dict[str, Any]:
            out = rollout(*args, **kwargs)
            self.observe(out.get("envfactory_components") or [])
            return out

        return logged

    def callback(self, phase: str = "") -> Any:
        """A ``transformers.TrainerCallback`` writing a line per ``on_log`` (the trainer's ``global_step``).

        Raises:
            ImportError: transformers is not installed (the ``train-trl`` extra).
        """
        from transformers import TrainerCallback

        log = self

        class _Callback(TrainerCallback):
            def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
                       **kwargs: Any) -> None:
                log.write(int(state.global_step), phase, logs or {})

        return _Callback()
