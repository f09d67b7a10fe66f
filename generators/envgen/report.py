"""The Validator's report: findings, their dimensions and severities (the single source of severities).

A :class:`Finding` is one failed check; its severity is :data:`SEVERITY` of the check, never read from
the wording.  ``high`` and ``medium`` findings block (:data:`BLOCKING`), ``low`` ones are advice.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["BLOCKING", "LEVELS", "MEMORY_LIMIT_MESSAGE", "SEVERITY", "Dimension", "Finding", "ScenarioOutcome", "Severity", "ValidationOutcome",
           "hash_seed_finding"]

Dimension = Literal["interface", "execution", "results", "state"]

#: The message of a ``resource_limit`` finding for a package that hit the validation memory limit.
MEMORY_LIMIT_MESSAGE = ("the package exceeded the validation memory limit (MemoryError): an environment must "
                        "not hold large data in memory")
Severity = Literal["high", "medium", "low"]

#: The severity of every check the Validator runs (the single source of severities).
SEVERITY: dict[str, Severity] = {
    # interface
    "missing_tool": "high",
    "extra_tool": "high",
    "missing_param": "high",
    "extra_required_param": "high",
    "extra_optional_param": "medium",
    "required_but_optional": "medium",   # metadata requires it, the code gives it a default
    "optional_but_required": "high",     # metadata makes it optional, the code rejects calls without it
    "type_mismatch": "high",
    "enum_mismatch": "medium",
    "item_type_mismatch": "medium",
    "output_fields": "low",
    # execution
    "import": "high",
    "forbidden_import": "high",
    "initial_state": "high",
    "determinism_lint": "high",
    "nondeterministic_replay": "high",
    "hash_seed_dependence": "high",  # replays under two PYTHONHASHSEEDs differ
    "tool_crash": "high",
    "timeout": "high",
    "resource_limit": "high",
    "package_changed": "high",
    "validator_crash": "high",
    # state
    "silent_write": "high",
    "read_only_write": "high",
    "partial_write": "high",
    "missing_change": "medium",
    "unexpected_change": "medium",
    "state_mismatch": "medium",
    # results
    "bad_scenarios": "high",
    "outcome_mismatch": "medium",
    "error_code": "medium",
    "result_mismatch": "medium",
    "scenario": "medium",
    "coverage": "medium",
    "task_replay": "medium",
    "levels": "low",
}
BLOCKING: frozenset[str] = frozenset({"high", "medium"})
LEVELS = ("simple", "medium", "complex", "boundary", "error")

class Finding(BaseModel):
    """One failed check.  ``severity`` is :data:`SEVERITY` of ``check``."""

    dimension: Dimension
    check: str
    severity: Severity
    message: str
    tool: str | None = None
    scenario: str | None = None

    @classmethod
    def of(cls, dimension: Dimension, check: str, message: str, **kw: Any) -> Finding:
        """A finding of ``check`` with its severity from :data:`SEVERITY` (``KeyError`` for an unknown
        check); ``message`` is cut at 2,000 characters; ``kw`` sets ``tool`` and ``scenario``."""
        return cls(dimension=dimension, check=check, severity=SEVERITY[check], message=message[:2000], **kw)

    @property
    def blocking(self) -> bool:
        """Whether the finding blocks publication (its severity is in :data:`BLOCKING`)."""
        return self.severity in BLOCKING


def hash_seed_finding(message: str) -> Finding:
    """A ``hash_seed_dependence`` finding from one line of
    :func:`gym_envfactory.validation.fingerprint_differences` (``"task t1: turn 0 call 1 (tool): ..."``,
    ``"scenario s1: step 2 (tool): ..."``), naming the tool and scenario when the line does."""
    m = re.match(r"^(task|scenario) (\S+): (?:turn \d+ call \d+|step \d+) \(([^)]*)\)", message)
    kw: dict[str, Any] = {}
    if m:
        kw["tool"] = m.group(3)
        if m.group(1) == "scenario":
            kw["scenario"] = m.group(2)
    return Finding.of("execution", "hash_seed_dependence", message, **kw)


class ScenarioOutcome(BaseModel):
    """One validation scenario's result: its level and the failures of its steps."""

    scenario_id: str
    level: str
    passed: bool
    failures: list[str] = Field(default_factory=list)


class ValidationOutcome(BaseModel):
    """The Validator's structured report on one attempt."""

    env: str
    attempt: int = 0
    passed: bool = False
    findings: list[Finding] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    scenarios: list[ScenarioOutcome] = Field(default_factory=list)
    coverage: dict[str, list[str]] = Field(default_factory=dict)
    n_tasks: int = 0

    def finish(self) -> ValidationOutcome:
        """Set ``passed`` (no blocking finding) and return the report."""
        self.passed = not any(f.blocking for f in self.findings)
        return self

    def blocking(self) -> list[Finding]:
        """The blocking findings, in order (what the Reviser is shown)."""
        return [f for f in self.findings if f.blocking]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{dimension: {severity: n}}`` over all findings."""
        out: dict[str, dict[str, int]] = {d: {} for d in ("interface", "execution", "results", "state")}
        for f in self.findings:
            out[f.dimension][f.severity] = out[f.dimension].get(f.severity, 0) + 1
        return out

    @property
    def scenarios_passed(self) -> int:
        """How many scenarios passed."""
        return sum(s.passed for s in self.scenarios)

