"""Rollout views as links: one row per episode, filters, sorting, statistics and comparisons, all read
from a page's query parameters (so a view is a URL to share; docs/ui.md, "Rollouts").

Query parameters of ``/rollouts`` (every one optional): ``env``, ``task`` (substring of the task id),
``split``, ``policy``, ``code`` (an error code: an ``errors`` entry's type such as ``tool_error`` or a
tool result's typed code such as ``already_cancelled``), ``truncated`` (``yes``/``no``), ``min`` and
``max`` (reward range, inclusive), ``q`` (search in the task id, environment, policy and the messages'
text, case-insensitive), ``sort`` (a column of :data:`SORT_KEYS`) and ``order`` (``asc``/``desc``).
``/compare`` takes ``a`` and ``b``, each ``FILE`` or ``FILE:POLICY`` (file numbers from 0, as listed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlencode

from gym_envfactory.ui.rollouts import Episode, split_turns

__all__ = ["finite_number", "EpisodeRow", "RolloutQuery", "SORT_KEYS", "COMPONENT_KEYS", "summarise", "sort_rows", "component_means",
           "Side", "parse_side", "compare_rows", "output_weighted"]

#: Columns ``sort=`` accepts: row attribute names.
SORT_KEYS = ("line", "task_id", "env", "policy", "split", "reward", "steps", "n_errors", "truncated")
#: Reward components averaged per file (docs/reward.md), in display order.
COMPONENT_KEYS = ("reward", "r_traj", "r_state", "r_output", "penalty")


def output_weighted(record: Mapping[str, Any]) -> bool:
    """Whether the episode's reward weighs ``r_output`` (``components.config.output_weight`` is not 0;
    a record without a config counts as weighted, so nothing is hidden by mistake)."""
    comps = record.get("components")
    config = comps.get("config") if isinstance(comps, dict) else None
    w = config.get("output_weight") if isinstance(config, dict) else None
    return not (isinstance(w, (int, float)) and not isinstance(w, bool) and w == 0)


@dataclass
class EpisodeRow:
    """One episode of a rollout file as the tables show it (``fi``/``ei``: file and episode numbers).

    ``reward`` is ``None`` for a malformed record or one without a reward; ``codes`` are its error codes
    (sorted); ``components`` the episode's reward components that are numbers (a vacuous one is absent).
    """

    fi: int
    ei: int
    line: int
    task_id: str
    env: str
    policy: str
    split: str
    reward: float | None
    steps: int | None
    n_errors: int
    truncated: bool
    codes: list[str] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    malformed: str | None = None
    text: str = ""
    weighs_output: bool = True


def finite_number(v: Any) -> float | None:
    """``v`` as a finite float; ``None`` for a bool, a non-number, an infinity or NaN (JSON read from logs)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def summarise(fi: int, episodes: Sequence[Episode], split_of: Callable[[str, str], str]) -> list[EpisodeRow]:
    """The rows of one file's episodes; ``split_of(env, task_id)`` names a task's split (``""`` unknown)."""
    rows = []
    for ei, e in enumerate(episodes):
        r = e.record
        env, tid = str(r.get("env", "")), str(r.get("task_id", "?"))
        raw = r.get("components")
        comps: dict[str, Any] = raw if isinstance(raw, dict) else {}
        codes = {str(x).split(":", 1)[0].strip() for x in r.get("errors") or []}
        texts = [tid, env, str(r.get("policy", ""))]
        if e.problem is None:
            _, turns = split_turns(r)
            codes.update(c.error for t in turns for c in t.calls if c.error)
            texts += [str(m.get("content") or "") for m in r["messages"] if isinstance(m, dict)]
            texts += [c.arguments for t in turns for c in t.calls]
        steps = r.get("steps")
        rows.append(EpisodeRow(
            fi=fi, ei=ei, line=e.line, task_id=tid, env=env, policy=str(r.get("policy", "")),
            split=split_of(env, tid), reward=None if e.problem else finite_number(r.get("reward")),
            steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            n_errors=len(r.get("errors") or []), truncated=r.get("truncated") is True, codes=sorted(codes),
            components={k: f for k in COMPONENT_KEYS if (f := finite_number(comps.get(k))) is not None},
            malformed=e.problem, text="\n".join(texts).lower(), weighs_output=output_weighted(r)))
    return rows


def _float_param(params: Mapping[str, str], key: str, problems: list[str]) -> float | None:
    raw = params.get(key, "").strip()
    if not raw:
        return None
    v = finite_number(_try_float(raw))
    if v is None:
        problems.append(f"{key}={raw!r} is not a number; ignored")
    return v


def _try_float(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


@dataclass
class RolloutQuery:
    """The filters and order of a ``/rollouts`` view (module docstring); ``problems`` lists parameters
    that were ignored (a reward bound that is not a number, an unknown sort column)."""

    env: str = ""
    task: str = ""
    split: str = ""
    policy: str = ""
    code: str = ""
    truncated: str = ""
    min: float | None = None
    max: float | None = None
    q: str = ""
    sort: str = "line"
    order: str = "asc"
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> RolloutQuery:
        """The query of a request's parameters (unknown parameters are ignored)."""
        problems: list[str] = []
        qy = cls(**{k: params.get(k, "").strip() for k in ("env", "task", "split", "policy", "code", "q")},
                 min=_float_param(params, "min", problems), max=_float_param(params, "max", problems),
                 problems=problems)
        t = params.get("truncated", "").strip().lower()
        if t in ("yes", "no"):
            qy.truncated = t
        elif t:
            problems.append(f"truncated={t!r}: use yes or no; ignored")
        s = params.get("sort", "").strip()
        if s in SORT_KEYS:
            qy.sort = s
        elif s:
            problems.append(f"sort={s!r}: sortable columns are {', '.join(SORT_KEYS)}; ignored")
        qy.order = "desc" if params.get("order", "").strip().lower() == "desc" else "asc"
        return qy

    @property
    def active(self) -> bool:
        """Whether any filter is set (sorting aside)."""
        return any((self.env, self.task, self.split, self.policy, self.code, self.truncated, self.q,
                    self.min is not None, self.max is not None))

    def matches(self, row: EpisodeRow) -> bool:
        """Whether ``row`` passes every filter (a reward range leaves out episodes without a reward)."""
        if self.env and row.env != self.env or self.split and row.split != self.split:
            return False
        if self.policy and row.policy != self.policy or self.task and self.task.lower() not in row.task_id.lower():
            return False
        if self.code and self.code not in row.codes:
            return False
        if self.truncated and row.truncated != (self.truncated == "yes"):
            return False
        if self.min is not None or self.max is not None:
            if row.reward is None:
                return False
            if self.min is not None and row.reward < self.min or self.max is not None and row.reward > self.max:
                return False
        return not (self.q and self.q.lower() not in row.text)

    def params(self, **override: Any) -> dict[str, str]:
        """The non-empty parameters of this view, with ``override`` applied (``None`` drops one)."""
        out: dict[str, str] = {}
        for f in fields(self):
            if f.name == "problems":
                continue
            v = override.get(f.name, getattr(self, f.name)) if f.name in override else getattr(self, f.name)
            if v is None or v == "" or (f.name, v) in (("sort", "line"), ("order", "asc")):
                continue
            out[f.name] = f"{v:g}" if isinstance(v, float) else str(v)
        return out

    def link(self, path: str = "/rollouts", **override: Any) -> str:
        """``path`` with this view's query string (``override`` as in :meth:`params`)."""
        p = self.params(**override)
        return path + ("?" + urlencode(p) if p else "")


def sort_rows(rows: Iterable[EpisodeRow], key: str, order: str = "asc") -> list[EpisodeRow]:
    """``rows`` by ``key`` (:data:`SORT_KEYS`); rows without a value (no reward) go last either way;
    ties keep file order."""
    rows = sorted(rows, key=lambda r: (r.fi, r.ei))
    have = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    return sorted(have, key=lambda r: getattr(r, key), reverse=order == "desc") + missing


def component_means(rows: Iterable[EpisodeRow]) -> dict[str, tuple[float, int]]:
    """Per component of :data:`COMPONENT_KEYS`: ``(mean, episodes counted)`` over the rows where it is a
    number (a vacuous component is not counted); ``r_output`` only when some row weighs it."""
    rows = [r for r in rows if r.malformed is None]
    out = {}
    for k in COMPONENT_KEYS:
        if k == "r_output" and not any(r.weighs_output for r in rows):
            continue
        vals = [r.components[k] for r in rows if k in r.components]
        if vals:
            out[k] = (sum(vals) / len(vals), len(vals))
    return out


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a file number and, optionally, one policy of it."""

    fi: int
    policy: str = ""

    def label(self, names: Sequence[str]) -> str:
        """``file`` or ``file (policy)``."""
        return names[self.fi] + (f" (policy {self.policy})" if self.policy else "")

    def spec(self) -> str:
        """The ``a=``/``b=`` value naming this side."""
        return f"{self.fi}:{self.policy}" if self.policy else str(self.fi)


def parse_side(raw: str, n_files: int) -> Side:
    """``FILE`` or ``FILE:POLICY`` as a :class:`Side`.

    Raises:
        ValueError: not that form, or no such file number (the message says what to pass).
    """
    head, _, policy = raw.partition(":")
    if not head.strip().isdigit() or not 0 <= int(head) < n_files:
        raise ValueError(f"{raw!r} is not a rollout file: pass a file number from 0 to {n_files - 1}, "
                         "optionally with :POLICY (e.g. a=0&b=1 or a=0:noisy&b=0:oracle)")
    return Side(int(head), policy.strip())


def compare_rows(a: Sequence[EpisodeRow], b: Sequence[EpisodeRow]) -> list[dict[str, Any]]:
    """Per ``(env, task_id)`` in either side: episodes and mean reward on each side and the difference
    ``b − a`` (``None`` when a side has no reward there), sorted by environment and task."""
    rewards: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    counts: dict[tuple[str, str], list[int]] = {}
    for side, rows in enumerate((a, b)):
        for r in rows:
            key = (r.env, r.task_id)
            counts.setdefault(key, [0, 0])[side] += 1
            if r.reward is not None:
                rewards.setdefault(key, ([], []))[side].append(r.reward)
    out = []
    for (env, tid), (na, nb) in sorted(counts.items()):
        ra, rb = rewards.get((env, tid), ([], []))
        ma = sum(ra) / len(ra) if ra else None
        mb = sum(rb) / len(rb) if rb else None
        out.append({"env": env, "task_id": tid, "n_a": na, "n_b": nb, "mean_a": ma, "mean_b": mb,
                    "diff": None if ma is None or mb is None else mb - ma})
    return out
