"""The composite reward (docs/reward.md; EnvFactory paper §4, Eq. for robust RL):

    R = α·R_traj + (1−α)·R_state − γ·P_len,   clipped to [0, 1]

- ``R_state``: canonical equivalence of the final domain state with the ground-truth final state (1 or
  0), bookkeeping fields excluded, numbers by value, lists ordered unless declared sets; the
  difference report lists paths.  When the ground truth changes nothing (a read-only task), an
  unchanged state is vacuous (doing nothing must not earn it) and a changed one scores 0.
- ``R_traj``: multiset matching of predicted against ground-truth calls, per turn; each ground-truth
  call is consumed at most once (docs/cases.md C01); independent calls match in any order; masked arguments are
  ignored; arguments compare after the tools' own validation (docs/cases.md C08/C09).
- ``P_len``: surplus calls (valid calls beyond the number of ground-truth calls of the turn) plus
  invalid calls (parse errors, unknown tools, invalid arguments); tool calls on a clarification turn
  are surplus (docs/cases.md C12).  The penalty is ``min(γ·P_len, penalty_cap)``.
- ``R_output`` (optional, weight ``output_weight``, default 0): required outputs found in the assistant's
  replies at token boundaries (docs/cases.md C10).

Each component is a :class:`RewardComponent` (:data:`COMPONENTS`: ``RTraj``, ``RState``, ``ROutput``,
``PLen``; ``RewardConfig.components`` adds more) scoring a turn and an episode; :func:`score_turn` and
:func:`score_episode` compose them.  :data:`REWARD_COMPONENTS` names the headline keys, written once.
Components enter with weights ``α``, ``1−α``, ``output_weight``.  A component with no criteria in a
task (no ground-truth calls; no expected outputs) is *vacuous*: reported as such and left out, the
remaining weights renormalised; it never counts as 1.0 (docs/cases.md C11).  If every weighted component is
vacuous the task score is 0.0.
"""

from __future__ import annotations

import dataclasses
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from gym_envfactory.environment.cow import FrozenState
from gym_envfactory.replay import ReferenceCall, TaskReference
from gym_envfactory.state_compare import (
    StateDiff,
    canonical_number,
    changes_diff,
    state_changes,
    state_diff,
    state_text,
    values_equal,
)

__all__ = [
    "RewardConfig",
    "StateDiff",
    "state_diff",
    "state_text",
    "values_equal",
    "canonical_number",
    "match_calls",
    "contains_output",
    "TurnRecord",
    "TurnScore",
    "EpisodeScore",
    "score_turn",
    "score_episode",
    "turn_has_criteria",
    "RewardComponent",
    "ComponentResult",
    "EpisodeView",
    "RTraj",
    "RState",
    "ROutput",
    "PLen",
    "COMPONENTS",
    "REWARD_COMPONENTS",
    "TURN_STATE_MODES",
    "AlphaSchedule",
    "reward_from_components",
    "state_changes",
    "changes_diff",
]


def _finite(name: str, v: Any) -> None:
    """Raise ``ValueError`` unless ``v`` is a finite int or float (never a bool)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights.  ``alpha`` ∈ [0, 1] (paper: 0.5 best); ``gamma`` per penalised call;
    ``penalty_cap`` bounds ``γ·P_len``; ``output_weight`` ≥ 0 enables ``R_output``.

    ``turn_state``: how a turn's ``R_state`` is judged (:data:`TURN_STATE_MODES`; docs/reward.md, "Turn
    verdicts: cumulative or delta"): ``"cumulative"`` (default) compares the state at the end of the turn
    with the ground-truth state after it; ``"delta"`` compares what the turn itself changed (from the
    agent's own state at its start) with what the ground-truth turn changed.  It changes the turn scores
    only: the episode's ``R_state`` is the mean of the cumulative verdicts either way.

    ``components``: :class:`RewardComponent` instances scored besides the built-in ones
    (:data:`COMPONENTS`); ``weights``: ``{weight_key: weight ≥ 0}`` for them (a component whose key is
    missing weighs 0: reported, not counted).  A dict is kept as sorted ``(key, weight)`` pairs and a list
    of components as a tuple, so the config stays hashable (docs/reward.md, "Adding a reward component").

    Raises:
        ValueError: weights out of range; a component that is not a :class:`RewardComponent`, or whose
            name is taken (a built-in component's, another score field's, or another component's).
    """

    alpha: float = 0.5
    gamma: float = 0.05
    penalty_cap: float = 0.5
    output_weight: float = 0.0
    components: tuple[RewardComponent, ...] = ()
    weights: Mapping[str, float] | tuple[tuple[str, float], ...] = ()
    turn_state: str = "cumulative"

    def __post_init__(self) -> None:
        for name in _CONFIG_WEIGHTS:
            _finite(name, getattr(self, name))
        if self.turn_state not in TURN_STATE_MODES:
            raise ValueError(f"turn_state must be one of {', '.join(map(repr, TURN_STATE_MODES))}, got {self.turn_state!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.gamma < 0 or self.penalty_cap < 0 or self.output_weight < 0:
            raise ValueError("gamma, penalty_cap and output_weight must be >= 0")
        comps = tuple(self.components)
        taken = set(_RESERVED_NAMES)
        for c in comps:
            if not isinstance(c, RewardComponent):
                raise ValueError(f"components must be RewardComponent instances, got {type(c).__name__}")
            if c.name in taken:
                raise ValueError(f"reward component name {c.name!r} is taken (built-in names and score fields: "
                                 f"{', '.join(_RESERVED_NAMES)}; and each component's name is its own)")
            taken.add(c.name)
        pairs = self.weights.items() if isinstance(self.weights, Mapping) else self.weights
        weights = tuple(sorted((str(k), v) for k, v in pairs))
        for k, v in weights:
            if k in _CONFIG_WEIGHTS:
                raise ValueError(f"weights[{k!r}] would shadow the config field {k!r}: set it as RewardConfig({k}=...)")
            _finite(f"weights[{k!r}]", v)
            if v < 0:
                raise ValueError(f"weights[{k!r}] must be >= 0, got {v}")
        object.__setattr__(self, "components", comps)
        object.__setattr__(self, "weights", weights)

    def weight(self, key: str) -> float:
        """The weight named ``key``: one of the config's fields (``alpha``, ``gamma``, ``penalty_cap``,
        ``output_weight``), else ``weights[key]``, else 0.0."""
        if key in _CONFIG_WEIGHTS:
            return float(getattr(self, key))
        pairs = self.weights.items() if isinstance(self.weights, Mapping) else self.weights
        return next((float(w) for k, w in pairs if k == key), 0.0)

    def with_alpha(self, alpha: float) -> RewardConfig:
        """This config with ``alpha`` replaced (an :class:`AlphaSchedule` step); the same config when equal.

        Raises:
            ValueError: ``alpha`` not a finite number in [0, 1].
        """
        return self if alpha == self.alpha else dataclasses.replace(self, alpha=alpha)

    @classmethod
    def coerce(cls, value: RewardConfig | Mapping[str, Any] | None) -> RewardConfig:
        """A config from ``None`` (the defaults), a config (returned as is) or a dict of its fields.

        Raises:
            TypeError: an unknown field.
            ValueError: weights out of range.
        """
        if value is None:
            return cls()
        if isinstance(value, RewardConfig):
            return value
        return cls(**dict(value))


#: The numeric fields of :class:`RewardConfig`.
_CONFIG_WEIGHTS = ("alpha", "gamma", "penalty_cap", "output_weight")

#: The values of ``RewardConfig.turn_state``: the default first (docs/reward.md, "Turn verdicts").
TURN_STATE_MODES = ("cumulative", "delta")


@dataclass(frozen=True)
class AlphaSchedule:
    """``α`` moved linearly from ``start`` to ``end`` over ``steps`` training steps, then held there
    (docs/training.md, "α schedule").  EnvFactory's published training code can move the trajectory weight
    from 0.9 to 0.1 over training; the gym's default is a fixed ``α = 0.5`` (no schedule).

    ``alpha_at(step)`` is ``start`` at step 0 (and before), ``end`` from ``steps`` on; ``config_at(step,
    base)`` is ``base`` (a :class:`RewardConfig`, a dict of its fields or ``None``) with that ``α``.

    Raises:
        ValueError: ``steps`` not an int ≥ 1, or ``start`` / ``end`` not finite numbers in [0, 1].
    """

    steps: int
    start: float = 0.9
    end: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        for name in ("start", "end"):
            v = getattr(self, name)
            _finite(name, v)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")

    def alpha_at(self, step: int) -> float:
        """``α`` at training step ``step`` (0-based, e.g. a trainer's ``global_step``), clamped to the ends."""
        frac = min(max(step, 0), self.steps) / self.steps
        return float(self.start + (self.end - self.start) * frac)

    def config_at(self, step: int, base: RewardConfig | Mapping[str, Any] | None = None) -> RewardConfig:
        """``base`` (default: the default config) with ``alpha = alpha_at(step)``."""
        return RewardConfig.coerce(base).with_alpha(self.alpha_at(step))


# ---------------------------------------------------------------------------- trajectory matching


def _strip_masked(args: Mapping[str, Any], masked: Iterable[str]) -> dict[str, Any]:
    m = set(masked)
    return {k: v for k, v in args.items() if k not in m}


def match_calls(
    predicted: Sequence[tuple[str, Mapping[str, Any] | None]],
    ground_truth: Sequence[ReferenceCall | tuple[str, Mapping[str, Any], Sequence[str]]],
) -> list[int | None]:
    """Multiset matching (docs/cases.md C01): for each ground-truth call (a :class:`ReferenceCall` or a
    ``(name, args, masked)`` tuple) the index of the predicted call ``(name, normalised args or None)``
    consuming it, or ``None``.

    Each predicted call is consumed at most once and order is free.  A maximum bipartite matching
    (augmenting paths; calls per turn are few) — greedy is not enough once ground-truth calls of the
    same tool mask different arguments.
    """
    edges: list[list[int]] = []
    for g in ground_truth:
        g_name, g_args, masked = (g.name, g.arguments, g.masked) if isinstance(g, ReferenceCall) else g
        want = _strip_masked(g_args, masked)
        edges.append([i for i, (p_name, p_args) in enumerate(predicted)
                      if p_name == g_name and p_args is not None and values_equal(_strip_masked(p_args, masked), want)])
    owner: dict[int, int] = {}  # predicted index -> ground-truth index

    def augment(g: int, seen: set[int]) -> bool:
        for p in edges[g]:
            if p in seen:
                continue
            seen.add(p)
            if p not in owner or augment(owner[p], seen):
                owner[p] = g
                return True
        return False

    for gi in range(len(ground_truth)):
        augment(gi, set())
    out: list[int | None] = [None] * len(ground_truth)
    for p, gi in owner.items():
        out[gi] = p
    return out


# ---------------------------------------------------------------------------- outputs

_NUM_RE = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])(?!\.\d)")
_NUMERIC_NEEDLE = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")


def contains_output(text: str, needle: str) -> bool:
    """``needle`` occurs in ``text`` at token boundaries (docs/cases.md C10).

    Numbers compare by value among the numbers of the text (``"10"`` matches ``"Your total is 10."``
    and ``"10.00"``, not ``"100 nights"`` or ``"1.10"``); other strings match case-insensitively,
    not inside a longer word or number.
    """
    n = needle.strip()
    if not n:
        return False
    if _NUMERIC_NEEDLE.match(n):
        want = float(n.replace(",", ""))
        return any(float(m.group(0).replace(",", "")) == want for m in _NUM_RE.finditer(text))
    rx = re.compile(r"(?<![\w])(?<!\d[.,])" + re.escape(n) + r"(?![\w])(?![.,]\d)", re.IGNORECASE)
    return rx.search(text) is not None


# ---------------------------------------------------------------------------- scoring


@dataclass
class TurnRecord:
    """What the policy did in one user turn.

    ``calls``: ``(name, normalised args or None, invalid)`` for every attempted call in order
    (``invalid`` = parse error / unknown tool / invalid arguments); ``text``: the assistant's replies
    concatenated; ``state``: the canonical state at the end of the turn (``None`` if not reached);
    ``start``: the state when the turn began, read only by ``turn_state="delta"`` (``None``: the previous
    record's ``state`` in :func:`score_episode`, and for turn 0 the reference's start state);
    ``not_recorded``: invalid calls of the turn not listed in ``calls`` (an env's summary record stands
    for them), each counted in ``P_len`` as an invalid call: a count, never expanded into ``calls``.
    """

    calls: list[tuple[str, dict[str, Any] | None, bool]] = field(default_factory=list)
    text: str = ""
    state: Any = None
    start: Any = None
    not_recorded: int = 0


@dataclass
class TurnScore:
    """One turn's components; ``missed`` names the ground-truth calls no predicted call matched."""

    turn: int
    r_traj: float | None
    r_state: float | None
    r_output: float | None
    matched: int
    n_ground_truth: int
    surplus: int
    invalid: int
    penalty: float
    reward: float
    vacuous: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    extra: dict[str, float | None] = field(default_factory=dict)  # RewardConfig.components' values, by name

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict (``info["turn_score"]``); ``extra`` components beside the
        built-in ones, under their names."""
        d = {"turn": self.turn, "r_traj": self.r_traj, "r_state": self.r_state, "r_output": self.r_output,
             "matched": self.matched, "n_ground_truth": self.n_ground_truth, "surplus": self.surplus,
             "invalid": self.invalid, "penalty": self.penalty, "reward": self.reward,
             "vacuous": list(self.vacuous), "missed": list(self.missed)}
        if self.extra:
            d.update(self.extra)
        return d


@dataclass
class EpisodeScore:
    """Episode reward and every component (docs/reward.md).  ``None`` components are vacuous/disabled."""

    reward: float
    r_traj: float | None
    r_state: float | None
    r_output: float | None
    p_len: int
    penalty: float
    matched: int
    n_ground_truth: int
    surplus: int
    invalid: int
    vacuous: list[str]
    missed: list[str]
    state_diff: list[StateDiff]
    turns: list[TurnScore]
    config: RewardConfig
    extra: dict[str, float | None] = field(default_factory=dict)  # RewardConfig.components' values, by name

    def reward_components(self) -> dict[str, Any]:
        """The headline components (``info["reward_components"]``): :data:`REWARD_COMPONENTS` in that
        order, then the config's extra components by name."""
        d = {k: getattr(self, k) for k in REWARD_COMPONENTS}
        d["vacuous"] = list(self.vacuous)
        if self.extra:
            d.update(self.extra)
        return d

    def to_dict(self) -> dict[str, Any]:
        """Every component as a JSON-ready dict (``info["score"]``): state differences as
        ``{path, expected, actual}``, per-turn scores, and the config's weights (``weights`` and the
        extra components' values under their names only when the config has extra components)."""
        c = self.config
        d: dict[str, Any] = {
            "reward": self.reward,
            "r_traj": self.r_traj,
            "r_state": self.r_state,
            "r_output": self.r_output,
            "p_len": self.p_len,
            "penalty": self.penalty,
            "matched": self.matched,
            "n_ground_truth": self.n_ground_truth,
            "surplus": self.surplus,
            "invalid": self.invalid,
            "vacuous": list(self.vacuous),
            "missed": list(self.missed),
            "state_diff": [{"path": d.path, "expected": d.expected, "actual": d.actual} for d in self.state_diff],
            "turns": [t.to_dict() for t in self.turns],
            "config": {"alpha": c.alpha, "gamma": c.gamma, "penalty_cap": c.penalty_cap,
                       "output_weight": c.output_weight, "turn_state": c.turn_state},
        }
        if c.components:
            d["config"]["components"] = [comp.name for comp in c.components]
        if c.weights:
            d["config"]["weights"] = dict(c.weights)
        if self.extra:
            d.update(self.extra)
        return d


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _expected(reference: TaskReference, turn: int, actual: Any) -> Any:
    """The ground-truth state after ``turn`` in the form that compares fastest with ``actual``: the
    reference's frozen state when ``actual`` is frozen too (record identity), else its canonical dict."""
    if isinstance(actual, FrozenState) and reference.turn_frozen is not None:
        return reference.turn_frozen[turn]
    return reference.turn_states[turn]


def _turn_text(reference: TaskReference, turn: int) -> str | None:
    """The JSON text of the ground-truth state after ``turn`` (memoised on the reference)."""
    key = ("text", turn)
    if key not in reference.memo:
        reference.memo[key] = state_text(reference.turn_states[turn])
    return reference.memo[key]


def _state_score(actual: Any, expected: Any, changed: bool, bookkeeping: Sequence[str], set_fields: Sequence[str],
                 limit: int = 50, expected_text: str | None = None) -> tuple[float | None, list[StateDiff]]:
    """``R_state`` and the difference report.

    When the ground truth leaves the state unchanged (``changed`` is False: a read-only task or turn),
    an unchanged final state is no evidence of success — doing nothing would earn it — so ``R_state``
    is vacuous; a changed state still scores 0.  Otherwise 1.0 iff equivalent.
    """
    diff = state_diff(actual, expected, bookkeeping=bookkeeping, set_fields=set_fields, limit=limit,
                      expected_text=expected_text)
    if diff:
        return 0.0, diff
    if not changed:
        return None, diff
    return 1.0, diff


def _ground_truth_changes(reference: TaskReference, first: int, last: int) -> bool:
    """Whether the ground truth changes the state from before turn ``first`` to after turn ``last``
    (memoised on the reference: a pure function of it).  True when the state before ``first`` is
    unknown (turn 0 of a reference built without an initial state: no no-change rule)."""
    if first == 0 and reference.initial is None:
        return True
    key = ("changes", first, last)
    hit = reference.memo.get(key)
    if hit is None:
        hit = reference.memo[key] = bool(state_diff(
            reference.turn_states[last], reference.state_before(first), bookkeeping=reference.excluded_fields,
            set_fields=reference.set_fields, limit=1))
    return hit


_UNKNOWN: Any = object()  # a delta verdict that cannot be given (a start state unknown): judge cumulatively


def _turn_changes(reference: TaskReference, turn: int) -> dict[str, Any] | None:
    """What the ground truth's turn ``turn`` changed (:func:`state_changes` from the state before it to the
    state after it; memoised on the reference), or ``None`` when the state before it is unknown."""
    key = ("turn_changes", turn)
    if key not in reference.memo:
        frozen, start = reference.turn_frozen, reference.start_frozen
        if frozen is not None and (turn > 0 or start is not None):
            before, after = (frozen[turn - 1] if turn else start), frozen[turn]
        else:
            before, after = reference.state_before(turn), reference.turn_states[turn]
        reference.memo[key] = None if before is None else state_changes(
            before, after, bookkeeping=reference.excluded_fields, set_fields=reference.set_fields)
    return reference.memo[key]


def _delta_verdict(turn: int, record: TurnRecord, reference: TaskReference) -> Any:
    """``turn_state="delta"``: 1.0 when the turn changed what the ground-truth turn changed (same paths,
    equivalent new values), 0.0 otherwise, ``None`` when neither changed anything (the no-change rule);
    :data:`_UNKNOWN` when the turn's start state or the ground truth's state before the turn is unknown."""
    expected = _turn_changes(reference, turn)
    start = record.start
    if start is None and turn == 0:  # the episode starts where the reference does
        frozen = isinstance(record.state, FrozenState) and reference.start_frozen is not None
        start = reference.start_frozen if frozen else reference.initial
    if expected is None or start is None:
        return _UNKNOWN
    actual = state_changes(start, record.state, bookkeeping=reference.excluded_fields,
                           set_fields=reference.set_fields)
    if changes_diff(actual, expected, bookkeeping=reference.excluded_fields, set_fields=reference.set_fields,
                    limit=1):
        return 0.0
    return 1.0 if expected else None


# ---------------------------------------------------------------------------- components


_NO_DETAILS: Mapping[str, Any] = MappingProxyType({})


class ComponentResult(NamedTuple):
    """What one :class:`RewardComponent` says about a turn or an episode: ``value`` (a score term: in
    [0, 1]; a penalty: a count or cost ≥ 0; ``None``: *vacuous*, left out and the other weights
    renormalised, docs/reward.md) and ``details``, its own figures (``R_traj``: ``matched``,
    ``n_ground_truth``, ``missed``; ``P_len``: ``surplus``, ``invalid``; an episode's ``R_state``: ``state_diff``)."""

    value: float | None
    details: Mapping[str, Any] = _NO_DETAILS

    @property
    def vacuous(self) -> bool:
        """True when the component has no criteria here (``value is None``)."""
        return self.value is None


class EpisodeView(NamedTuple):
    """What :meth:`RewardComponent.score_episode` reads: the episode's ``records`` (one per user turn
    reached, possibly more than the task's turns), the task's ``reference``, the ``final_state``
    (canonical or frozen) and ``turns``, the :class:`TurnScore` of each task turn reached, in order."""

    records: Sequence[TurnRecord]
    reference: TaskReference
    final_state: Any
    turns: Sequence[TurnScore]

    @property
    def extra_records(self) -> Sequence[TurnRecord]:
        """Records beyond the task's last turn (a custom user source kept the episode going)."""
        return self.records[len(self.reference.turn_calls):]


class RewardComponent(ABC):
    """One term of the reward (docs/reward.md, "Adding a reward component"), after OpenEnv's rubrics
    and tau2-bench's per-component evaluators: a ``name`` (its key in ``info["score"]``,
    ``info["turn_score"]`` and ``info["reward_components"]``), a ``weight_key`` (the
    :class:`RewardConfig` field or ``RewardConfig.weights`` key weighing it) and :meth:`score_turn`
    returning a :class:`ComponentResult`.

    A score term (``penalty = False``) enters ``Σ w·value / Σ w`` over the non-vacuous terms with
    ``w > 0``; a penalty (``penalty = True``) enters ``min(Σ w·value, penalty_cap)``, subtracted.
    Components are stateless and pure: they read the record and the reference, never a session
    (docs/cases.md C05).
    """

    name: str
    weight_key: str
    penalty: bool = False

    def weight(self, cfg: RewardConfig) -> float:
        """This component's weight under ``cfg`` (default: ``cfg.weight(self.weight_key)``)."""
        return cfg.weight(self.weight_key)

    @abstractmethod
    def score_turn(self, turn: int, record: TurnRecord, reference: TaskReference) -> ComponentResult:
        """The component for task turn ``turn`` (0-based) of ``reference``, given what the policy did
        in it (``record``; ``record.state`` is ``None`` when the state was not read)."""

    def score_episode(self, episode: EpisodeView) -> ComponentResult:
        """The component for the whole episode.  Default: over the turns reached, the mean of this
        component's non-vacuous turn values for a score term (vacuous if none), their sum for a penalty."""
        values = [v for ts in episode.turns if (v := ts.extra.get(self.name)) is not None]
        if self.penalty:
            return ComponentResult(sum(values))
        return ComponentResult(sum(values) / len(values) if values else None)


class RTraj(RewardComponent):
    """``R_traj``: multiset matching of the well-formed calls against the ground-truth calls
    (docs/reward.md, "R_traj"; docs/cases.md C01): ``matched / number of ground-truth calls``, vacuous
    without ground-truth calls.  Details: ``matched``, ``n_ground_truth``, ``missed`` (tool names; for an
    episode ``t<turn>:<tool>``, turns not reached included).  Weight: ``alpha``."""

    name = "r_traj"
    weight_key = "alpha"

    def score_turn(self, turn: int, record: TurnRecord, reference: TaskReference) -> ComponentResult:
        """Matched share of turn ``turn``'s ground-truth calls."""
        gt = reference.turn_calls[turn]
        matches = match_calls([(n, a) for n, a, bad in record.calls if not bad], gt)
        matched = sum(1 for m in matches if m is not None)
        missed = [g.name for g, m in zip(gt, matches, strict=True) if m is None]
        return ComponentResult(matched / len(gt) if gt else None,
                               {"matched": matched, "n_ground_truth": len(gt), "missed": missed})

    def score_episode(self, episode: EpisodeView) -> ComponentResult:
        """Matched share of all the task's ground-truth calls (those of turns not reached unmatched)."""
        turns, calls = episode.turns, episode.reference.turn_calls
        matched = sum(ts.matched for ts in turns)
        n_gt = sum(len(c) for c in calls)
        missed = [f"t{t}:{m}" for t, ts in enumerate(turns) for m in ts.missed]
        missed += [f"t{t}:{g.name}" for t in range(len(turns), len(calls)) for g in calls[t]]
        return ComponentResult(matched / n_gt if n_gt else None,
                               {"matched": matched, "n_ground_truth": n_gt, "missed": missed})


class RState(RewardComponent):
    """``R_state``: canonical equivalence with the ground-truth state, turn by turn (docs/reward.md,
    "R_state"): 1.0 or 0.0 per turn, vacuous when the ground truth changes nothing there and neither did
    the agent (or the state was not read); the episode's value is the mean of the turn verdicts, turns
    not reached counting 0 where their ground truth changes the state.  Episode details: ``state_diff``
    (final state against the ground-truth final state).  Weight: ``1 − alpha``.

    ``turn_state="delta"`` (``RewardConfig.turn_state``) judges each turn on what it changed instead
    (docs/reward.md, "Turn verdicts: cumulative or delta"); the episode's value stays the mean of the
    cumulative verdicts.

    Raises:
        ValueError: ``turn_state`` not one of :data:`TURN_STATE_MODES`.
    """

    name = "r_state"
    weight_key = "alpha"

    def __init__(self, turn_state: str = "cumulative") -> None:
        if turn_state not in TURN_STATE_MODES:
            raise ValueError(f"turn_state must be one of {TURN_STATE_MODES}, got {turn_state!r}")
        self.turn_state = turn_state

    def weight(self, cfg: RewardConfig) -> float:
        """``1 − alpha``."""
        return 1.0 - cfg.alpha

    def score_turn(self, turn: int, record: TurnRecord, reference: TaskReference) -> ComponentResult:
        """The state at the end of turn ``turn`` against the ground-truth state after it (cumulative), or
        the turn's changes against the ground-truth turn's changes (delta; cumulative where the turn's
        start state or the ground truth's state before the turn is unknown)."""
        if record.state is None:
            return ComponentResult(None)
        if self.turn_state == "delta":
            value = _delta_verdict(turn, record, reference)
            if value is not _UNKNOWN:
                return ComponentResult(value)
        return ComponentResult(_state_score(record.state, _expected(reference, turn, record.state),
                                            _ground_truth_changes(reference, turn, turn),
                                            reference.excluded_fields, reference.set_fields, limit=1,
                                            expected_text=_turn_text(reference, turn))[0])

    def score_episode(self, episode: EpisodeView) -> ComponentResult:
        """The mean of the turn verdicts, else the final state's verdict, with the difference report."""
        reference, final_state = episode.reference, episode.final_state
        last = reference.n_turns - 1
        extra_verdicts: list[float] = []
        extra_records = episode.extra_records
        for i, rec in enumerate(extra_records):  # extra turns from a custom user source
            # the ground truth expects no change after its last turn: a changed state scores 0 there
            state = rec.state if rec.state is not None else (final_state if i == len(extra_records) - 1 else None)
            if state is not None and state_diff(state, _expected(reference, last, state),
                                                bookkeeping=reference.excluded_fields,
                                                set_fields=reference.set_fields, limit=1):
                extra_verdicts.append(0.0)
        final_verdict, diff = _state_score(final_state, _expected(reference, last, final_state),
                                           _ground_truth_changes(reference, 0, last),
                                           reference.excluded_fields, reference.set_fields,
                                           expected_text=_turn_text(reference, last))
        if self.turn_state == "cumulative":
            verdicts = [ts.r_state for ts in episode.turns]
        else:  # the turn scores hold delta verdicts: the episode keeps the cumulative ones
            verdicts = [_R_STATE.score_turn(t, episode.records[t], reference).value for t in range(len(episode.turns))]
        value = _episode_state_score(verdicts, reference, len(episode.records), final_verdict, extra_verdicts)
        return ComponentResult(value, {"state_diff": diff})


class ROutput(RewardComponent):
    """``R_output``: the share of a turn's ``expected_outputs`` found in the assistant's replies at token
    boundaries (docs/reward.md, "R_output"; docs/cases.md C10); vacuous without expected outputs.
    Weight: ``output_weight`` (0 by default: reported, not counted)."""

    name = "r_output"
    weight_key = "output_weight"

    def score_turn(self, turn: int, record: TurnRecord, reference: TaskReference) -> ComponentResult:
        """Share of turn ``turn``'s expected outputs in ``record.text``."""
        outputs = reference.expected_outputs[turn]
        return ComponentResult(sum(contains_output(record.text, o) for o in outputs) / len(outputs) if outputs else None)

    def score_episode(self, episode: EpisodeView) -> ComponentResult:
        """Share of all the task's expected outputs found in the replies of their turns."""
        outputs = episode.reference.expected_outputs
        n_out = sum(len(o) for o in outputs)
        found = sum(contains_output(episode.records[t].text, o) for t in range(len(episode.turns)) for o in outputs[t])
        return ComponentResult(found / n_out if n_out else None)


class PLen(RewardComponent):
    """``P_len = surplus + invalid`` (docs/reward.md, "P_len"; docs/cases.md C12): well-formed calls
    beyond a turn's ground-truth calls, plus invalid ones; every call of a turn beyond the task is
    surplus or invalid.  A penalty: ``min(gamma·P_len, penalty_cap)``.  Details: ``surplus``,
    ``invalid``.  Weight: ``gamma``."""

    name = "p_len"
    weight_key = "gamma"
    penalty = True

    def score_turn(self, turn: int, record: TurnRecord, reference: TaskReference) -> ComponentResult:
        """Surplus and invalid calls of turn ``turn``."""
        bad = sum(1 for _, _, b in record.calls if b)
        surplus = max(0, len(record.calls) - bad - len(reference.turn_calls[turn]))
        invalid = bad + record.not_recorded
        return ComponentResult(surplus + invalid, {"surplus": surplus, "invalid": invalid})

    def score_episode(self, episode: EpisodeView) -> ComponentResult:
        """The turns' counts summed, every call of an extra turn counting."""
        surplus = sum(ts.surplus for ts in episode.turns)
        invalid = sum(ts.invalid for ts in episode.turns)
        for rec in episode.extra_records:
            bad = sum(1 for _, _, b in rec.calls if b)
            surplus += len(rec.calls) - bad
            invalid += bad + rec.not_recorded
        return ComponentResult(surplus + invalid, {"surplus": surplus, "invalid": invalid})


#: The built-in components, in the order they are reported: ``R_traj``, ``R_state``, ``R_output``,
#: ``P_len`` (docs/reward.md).  ``RewardConfig.components`` come after them.
COMPONENTS: tuple[RewardComponent, ...] = (RTraj(), RState(), ROutput(), PLen())
_R_TRAJ, _R_STATE, _R_OUTPUT, _P_LEN = COMPONENTS
_R_STATE_DELTA = RState("delta")


def _r_state(cfg: RewardConfig) -> RewardComponent:
    """The ``R_state`` component of ``cfg.turn_state``."""
    return _R_STATE_DELTA if cfg.turn_state == "delta" else _R_STATE

#: The keys of ``info["reward_components"]`` (and the headline keys of ``info["score"]``), written once:
#: the reward, each built-in component's name, the penalty, the vacuous components' names.
REWARD_COMPONENTS: tuple[str, ...] = ("reward", *(c.name for c in COMPONENTS), "penalty", "vacuous")

#: Names an extra component may not take: every key of a turn's or an episode's score dict.
_RESERVED_NAMES = (*REWARD_COMPONENTS, "turn", "matched", "n_ground_truth", "surplus", "invalid", "missed",
                   "state_diff", "turns", "config")


def _plan(cfg: RewardConfig) -> tuple[tuple[tuple[int, str, float], ...], tuple[tuple[int, float], ...]]:
    """The weighted score terms ``(index, name, w > 0)`` and penalties ``(index, w)`` of :data:`COMPONENTS`
    then ``cfg.components``; computed once per config and kept on it (the config is frozen)."""
    plan = cfg.__dict__.get("_plan")
    if plan is None:
        terms, penalties = [], []
        for i, c in enumerate((*COMPONENTS, *cfg.components)):
            w = c.weight(cfg)
            if c.penalty:
                penalties.append((i, w))
            elif w > 0:
                terms.append((i, c.name, w))
        plan = (tuple(terms), tuple(penalties))
        object.__setattr__(cfg, "_plan", plan)
    return plan


def _checked(component: RewardComponent, method: Callable[..., ComponentResult], *args: Any) -> ComponentResult:
    """A component's result; its exception gets a note naming it; a non-finite value or a negative penalty is a ValueError."""
    try:
        result = method(*args)
    except Exception as exc:
        exc.add_note(f"in reward component {component.name!r} ({type(component).__name__})")
        raise
    v = result.value
    if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v) or (component.penalty and v < 0)):
        raise ValueError(f"reward component {component.name!r} returned {v!r}: a value must be a finite number"
                         f"{' >= 0 (it is a penalty)' if component.penalty else ''}, or None when vacuous")
    return result


def _compose(cfg: RewardConfig, values: Sequence[float | None]) -> tuple[float, float, list[str]]:
    """Task score ``Σ w·v / Σ w`` over the weighted terms with a value (else 0.0), penalty ``min(Σ w·v,
    penalty_cap)`` and the vacuous weighted terms' names, from the components' values (docs/reward.md)."""
    terms, penalties = _plan(cfg)
    vacuous = []
    total: float = 0
    weighted: float = 0
    for i, name, w in terms:  # left to right, as sum() adds
        v = values[i]
        if v is None:
            vacuous.append(name)
        else:
            total += w
            weighted += w * v
    task_score = weighted / total if total > 0 else 0.0
    cost: float = 0
    for i, w in penalties:
        v = values[i]
        if v is not None:
            cost += w * v
    return task_score, min(cfg.penalty_cap, cost), vacuous


def score_turn(turn_index: int, record: TurnRecord, reference: TaskReference, cfg: RewardConfig) -> TurnScore:
    """Score turn ``turn_index`` of an episode against its task's reference: every component of
    :data:`COMPONENTS` and ``cfg.components``, combined (docs/reward.md).

    Args:
        turn_index: 0-based turn of ``reference``.
        record: what the policy did in the turn (``record.state``: the state when the turn ended, or
            ``None`` when it was not read; then ``R_state`` is not scored).
        reference: the task's :class:`~gym_envfactory.replay.TaskReference`.
        cfg: reward weights.

    Returns:
        :class:`TurnScore`; ``R_state`` compares with the ground-truth state after the turn, and is
        vacuous when the ground truth left the state unchanged in that turn.
    """
    args = (turn_index, record, reference)
    traj, state, output, length = _R_TRAJ.score_turn(*args), _r_state(cfg).score_turn(*args), \
        _R_OUTPUT.score_turn(*args), _P_LEN.score_turn(*args)
    extra = [(c, _checked(c, c.score_turn, *args)) for c in cfg.components] if cfg.components else []
    values = [traj.value, state.value, output.value, length.value]
    values += [r.value for _, r in extra]
    task_score, penalty, vacuous = _compose(cfg, values)
    t, n = traj.details, length.details
    return TurnScore(turn_index, traj.value, state.value, output.value, t["matched"], t["n_ground_truth"],
                     n["surplus"], n["invalid"], penalty, _clip(task_score - penalty), vacuous, t["missed"],
                     {c.name: r.value for c, r in extra} if extra else {})


def turn_has_criteria(reference: TaskReference, turn: int, cfg: RewardConfig) -> bool:
    """Whether ``turn`` of ``reference`` can score above 0 under ``cfg``: it has ground-truth calls, a
    ground-truth state change, or expected outputs that ``cfg`` weighs (``output_weight > 0``).  A turn
    without any (a lone clarification turn) scores 0 for every policy: ``reward_mode="turn"`` leaves it
    out of the denominator, and ``envfactory export rl`` leaves such windows out."""
    if reference.turn_calls[turn] or (cfg.output_weight > 0 and reference.expected_outputs[turn]):
        return True
    return _ground_truth_changes(reference, turn, turn)


def _episode_state_score(turn_verdicts: Sequence[float | None], reference: TaskReference, reached: int,
                         final_verdict: float | None, extra: Sequence[float] = ()) -> float | None:
    """Episode ``R_state``: the mean of the per-turn state verdicts (docs/reward.md, "R_state").

    A turn counts when it has a verdict (its ground truth changes the state, or the agent changed a
    state the ground truth leaves alone); a turn not reached counts 0 when its ground truth changes the
    state.  So doing a later turn's writes early scores the turns in between 0.  With no per-turn
    verdict at all (turn states not recorded, e.g. scoring from an action log), the final state decides.
    """
    verdicts = [v for v in turn_verdicts if v is not None]
    verdicts += [0.0 for t in range(reached, len(reference.turn_calls)) if _ground_truth_changes(reference, t, t)]
    verdicts += list(extra)
    if not verdicts:
        return final_verdict
    return sum(verdicts) / len(verdicts)


def score_episode(records: Sequence[TurnRecord], reference: TaskReference, final_state: Any,
                  cfg: RewardConfig, *, turn_scores: Sequence[TurnScore] = ()) -> EpisodeScore:
    """Score an episode: ``R = α·R_traj + (1−α)·R_state − γ·P_len`` (paper §3.5) and every component,
    each :class:`RewardComponent`'s :meth:`~RewardComponent.score_episode` composed.

    Args:
        records: one :class:`TurnRecord` per user turn reached; may be shorter than the task (a
            truncated episode: turns not reached leave their ground-truth calls unmatched) or longer
            (a custom user source: calls in extra turns are surplus).
        reference: the task's :class:`~gym_envfactory.replay.TaskReference`.
        final_state: the episode's canonical final state (:meth:`Session.state` form).
        cfg: reward weights.
        turn_scores: :func:`score_turn` results already computed for the first turns of ``records``
            under ``cfg`` (the env keeps them as turns end); reused instead of scoring those turns again.

    A pure function of its inputs: scoring never touches a session (docs/cases.md C05).
    """
    reached = min(len(records), len(reference.turn_calls))
    if cfg.turn_state == "delta":  # each turn starts where the one before it ended
        records = [dataclasses.replace(r, start=records[t - 1].state) if t and r.start is None else r
                   for t, r in enumerate(records)]
    turns = [turn_scores[t] if t < len(turn_scores) else score_turn(t, records[t], reference, cfg)
             for t in range(reached)]
    episode = EpisodeView(records, reference, final_state, turns)
    traj, state = _R_TRAJ.score_episode(episode), _r_state(cfg).score_episode(episode)
    output, length = _R_OUTPUT.score_episode(episode), _P_LEN.score_episode(episode)
    extra = [(c, _checked(c, c.score_episode, episode)) for c in cfg.components] if cfg.components else []
    values = [traj.value, state.value, output.value, length.value]
    values += [r.value for _, r in extra]
    task_score, penalty, vacuous = _compose(cfg, values)
    t, n = traj.details, length.details
    return EpisodeScore(
        reward=_clip(task_score - penalty),
        r_traj=traj.value,
        r_state=state.value,
        r_output=output.value,
        p_len=n["surplus"] + n["invalid"],
        penalty=penalty,
        matched=t["matched"],
        n_ground_truth=t["n_ground_truth"],
        surplus=n["surplus"],
        invalid=n["invalid"],
        vacuous=vacuous,
        missed=t["missed"],
        state_diff=state.details["state_diff"],
        turns=turns,
        config=cfg,
        extra={c.name: r.value for c, r in extra} if extra else {},
    )


def reward_from_components(components: Mapping[str, Any], cfg: RewardConfig) -> float:
    """The reward ``cfg`` gives to components already scored, without scoring again (an
    :class:`AlphaSchedule` step applied to a played episode: docs/training.md, "α schedule").

    Args:
        components: an episode's ``EpisodeScore.to_dict()`` or ``reward_components()`` (``info["score"]``,
            ``TokenEpisode.components``), or a turn's ``TurnScore.to_dict()`` (its ``P_len`` is
            ``surplus + invalid``); extra components' values under their names.
        cfg: the weights to apply.  Only weights may differ from the config that scored the components
            (``alpha``, ``gamma``, ``penalty_cap``, ``output_weight``, ``weights``); its ``components``
            must be the same, and ``turn_state`` changes values, not weights.

    Returns:
        ``clip(Σ w·R / Σ w − min(γ·P_len, penalty_cap), 0, 1)`` as :func:`score_episode` composes it: under
        the config that scored them, exactly the reward they came with.

    Raises:
        KeyError: a component of ``cfg.components`` missing from ``components``.
    """
    p_len = components.get("p_len")
    if p_len is None:
        p_len = components["surplus"] + components["invalid"]
    values = [components.get("r_traj"), components.get("r_state"), components.get("r_output"), p_len,
              *(components[c.name] for c in cfg.components)]
    task_score, penalty, _ = _compose(cfg, values)
    return _clip(task_score - penalty)
