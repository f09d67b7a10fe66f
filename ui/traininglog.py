"""Reading training logs for the training-curve page (``envfactory ui --training-log FILE``; docs/ui.md).

Three forms, told apart by their content:

- **JSON Lines** (what ``gym_envfactory.training.log.TrainingLog`` appends, one line per logged
  step): an object with ``step`` (a number) and metrics (``reward``, the reward's components ``r_traj``,
  ``r_state``, ``r_output``, ``penalty``, ``loss``, anything numeric TRL logs), optionally ``phase``
  (``sft``, ``grpo``...).  Values that are not finite numbers are left out;
- the recipe's result JSON (``docs/results/recipe-smollm2.json``): its ``steps`` list, same objects;
- a transformers ``trainer_state.json``: its ``log_history`` list (``step`` as written there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_envfactory.errors import DatasetError
from gym_envfactory.ui.browse import finite_number

__all__ = ["TrainingPoint", "TrainingCurves", "read_training_log", "REWARD_METRICS"]

#: Metrics drawn together on the reward chart (a 0-1 scale; ``env_reward`` is the episodes' own reward that
#: training.log.TrainingLog observes); TRL's ``rewards/<function>/mean`` join them.
REWARD_METRICS = ("reward", "env_reward", "r_traj", "r_state", "r_output", "penalty")


@dataclass
class TrainingPoint:
    """One logged step: ``phase`` (``""`` when the log names none), ``step`` and its numeric metrics."""

    phase: str
    step: float
    metrics: dict[str, float]


@dataclass
class TrainingCurves:
    """A read training log: its points in file order, and the form it was read as (``jsonl``, ``recipe``, ``trainer_state``)."""

    path: Path
    form: str
    points: list[TrainingPoint] = field(default_factory=list)

    def phases(self) -> list[str]:
        """The phases in order of first appearance."""
        return list(dict.fromkeys(p.phase for p in self.points))

    def series(self, phase: str, metric: str) -> list[tuple[float, float]]:
        """``(step, value)`` of ``metric`` in ``phase``, in file order."""
        return [(p.step, p.metrics[metric]) for p in self.points if p.phase == phase and metric in p.metrics]

    def metrics(self, phase: str) -> list[str]:
        """The metrics logged in ``phase``, in order of first appearance."""
        return list(dict.fromkeys(k for p in self.points if p.phase == phase for k in p.metrics))


def _point(obj: Any, path: Path, line: int | None, entry: str) -> TrainingPoint | None:
    """The point of one entry (``line`` of a JSONL file, or ``entry`` such as ``steps[3]``), ``None`` for an
    object without ``step`` (a header, trainer_state's closing summary)."""
    if not isinstance(obj, dict):
        raise DatasetError("a training log entry must be a JSON object", file=str(path), line=line, field=entry or None)
    if "step" not in obj:
        return None
    step = finite_number(obj["step"])
    if step is None:
        raise DatasetError(f"step must be a finite number, got {str(obj['step'])[:40]}", file=str(path), line=line,
                           field=f"{entry}.step" if entry else "step")
    phase = obj.get("phase", "")
    metrics = {str(k): f for k, v in obj.items() if k not in ("step", "phase") and (f := finite_number(v)) is not None}
    return TrainingPoint(str(phase) if phase is not None else "", step, metrics)


def read_training_log(path: str | Path) -> TrainingCurves:
    """The points of a training log in any of the module's three forms.

    Raises:
        DatasetError: the file cannot be read, is neither JSON Lines nor one of the JSON documents, or an
            entry is not an object or has a ``step`` that is not a finite number (naming the file, the line
            or entry, and the field).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read the training log: {getattr(exc, 'strerror', None) or exc}", file=str(p)) from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        for key, form in (("steps", "recipe"), ("log_history", "trainer_state")):
            if isinstance(doc.get(key), list):
                log = TrainingCurves(p, form)
                for i, obj in enumerate(doc[key]):
                    if (pt := _point(obj, p, None, f"{key}[{i}]")) is not None:
                        log.points.append(pt)
                if not log.points:
                    raise DatasetError(f"no logged step in {key!r} (objects with a numeric 'step')", file=str(p))
                return log
    log = TrainingCurves(p, "jsonl")
    lines = text.split("\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if n == len(lines) and n > 1:
                break  # a writer still appending its last line
            raise DatasetError(f"not JSON: {exc} (a training log is JSON Lines with a 'step' per line, the "
                               "recipe's result JSON or a trainer_state.json)", file=str(p), line=n) from None
        if (pt := _point(obj, p, n, "")) is not None:
            log.points.append(pt)
    if not log.points:
        raise DatasetError("no logged step (an object with a numeric 'step')", file=str(p))
    return log
