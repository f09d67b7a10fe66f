"""Checks shared by EnvGen and the importer: one implementation of each.

* **Run twice and compare** (:func:`run_differences`): every validation scenario is run twice from
  the same initial state in fresh sessions (and, on request, once more interleaved step by step with a
  second session doing the same); the results and final states must be byte-identical
  (docs/authoring.md: environments are deterministic; docs/architecture.md, "Sessions": sessions are
  isolated).  EnvGen reports a difference as a ``nondeterministic_replay`` finding; the importer
  refuses an import whose sessions differ (state shared at module level).
* **Coverage gaps** (:func:`split_coverage_gaps`): which failures of a
  :class:`~gym_envfactory.validation.ValidationReport` are per-tool coverage gaps (advice) rather than
  failures.

These checks run wherever the environment's code was loaded: inside the sandbox
(:mod:`gym_envfactory.generators.sandbox`, where the child processes and containers live).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec

__all__ = ["RunDifference", "run_differences", "scenario_initial_state", "split_coverage_gaps"]

# ------------------------------------------------------------------------------------ run twice, compare


@dataclass(frozen=True)
class RunDifference:
    """Two runs of one scenario's calls from the same initial state that did not agree.

    Attributes:
        scenario_id: the scenario.
        interleaved: ``None`` when two runs in fresh sessions differ; ``"first"`` or ``"second"`` when
            that session, run interleaved step by step with another one, differs from a session run on
            its own.
        results: the call results differ (``ok``, content, error message, error code).
        states: the final states differ.
    """

    scenario_id: str
    interleaved: str | None
    results: bool
    states: bool

    def describe(self) -> str:
        """One line for a report (results are named first when both differ)."""
        what = "results" if self.results else "states"
        if self.interleaved is None:
            return (f"scenario {self.scenario_id}: two runs in fresh sessions from the same state gave "
                    f"different {what}")
        return (f"scenario {self.scenario_id}: run interleaved with another session, the {self.interleaved} "
                f"session gave different {what} than a session on its own")


def scenario_initial_state(spec: EnvironmentSpec, scenario: Any) -> bytes | None:
    """The validated initial state bytes of a validation scenario (task-file reference forms), or
    ``None`` when it does not resolve (scenario validation reports that, not the comparison)."""
    from gym_envfactory.environment.states import resolve_state

    try:
        return resolve_state(spec, scenario.initial_state, task_form=True, where={"task_id": scenario.scenario_id})
    except Exception:  # noqa: BLE001 - a bad scenario is reported by the scenario run
        return None


def _fingerprint(results: Sequence[Any], state: bytes) -> tuple[bytes, bytes]:
    calls = [[r.ok, r.content, r.error, r.error_code] for r in results]
    return json.dumps(calls, sort_keys=True, ensure_ascii=False, default=str).encode(), state


def _run_alone(spec: EnvironmentSpec, initial: bytes, steps: Sequence[Any]) -> tuple[bytes, bytes]:
    from gym_envfactory.session import Session

    s = Session.from_states(spec, {spec.name: initial})
    try:
        return _fingerprint([s.call(st.call, st.arguments) for st in steps], s.state_bytes())
    finally:
        s.close()


def _run_interleaved(spec: EnvironmentSpec, initial: bytes, steps: Sequence[Any]) -> list[tuple[bytes, bytes]]:
    from gym_envfactory.session import Session

    x, y = Session.from_states(spec, {spec.name: initial}), Session.from_states(spec, {spec.name: initial})
    try:
        rx, ry = [], []
        for st in steps:
            rx.append(x.call(st.call, st.arguments))
            ry.append(y.call(st.call, st.arguments))
        return [_fingerprint(rx, x.state_bytes()), _fingerprint(ry, y.state_bytes())]
    finally:
        x.close()
        y.close()


def run_differences(spec: EnvironmentSpec, *, interleave: bool = False, limit: int = 50) -> Iterator[RunDifference]:
    """Run each of the first ``limit`` validation scenarios' calls twice in fresh sessions from the
    same initial state, and with ``interleave`` once more in two sessions stepping in turn; yield a
    :class:`RunDifference` for each scenario whose runs disagree (at most one per scenario, lazily,
    so ``next(run_differences(...), None)`` stops at the first).

    Scenarios whose initial state does not resolve are skipped.  Tool faults are results (sessions
    never raise for them); only a fault of the runtime itself propagates.
    """
    for sc in spec.scenarios[:limit]:
        initial = scenario_initial_state(spec, sc)
        if initial is None:
            continue
        a, b = _run_alone(spec, initial, sc.steps), _run_alone(spec, initial, sc.steps)
        if a != b:
            yield RunDifference(sc.scenario_id, None, results=a[0] != b[0], states=a[1] != b[1])
            continue
        if not interleave:
            continue
        for label, f in zip(("first", "second"), _run_interleaved(spec, initial, sc.steps), strict=True):
            if f != a:
                yield RunDifference(sc.scenario_id, label, results=f[0] != a[0], states=f[1] != a[1])
                break


# ------------------------------------------------------------------------------------ reports


def split_coverage_gaps(report: Any) -> tuple[list[str], list[str]]:
    """``(failures, gaps)`` of a :class:`~gym_envfactory.validation.ValidationReport`: ``gaps`` are the
    per-tool coverage gaps (``"tool X: no scenario covers ..."``, advice: add scenarios), ``failures``
    everything else :meth:`~gym_envfactory.validation.ValidationReport.failures` lists (failing
    scenarios, unusable scenario files, task replays, the determinism lint)."""
    gaps = [f for f in report.coverage_failures if f.startswith("tool ")]
    return [f for f in report.failures() if f not in gaps], gaps
