"""Validation scenarios (``scenarios.jsonl``): the tests EnvGen's Test Agent writes and authors write by
hand; :mod:`gym_envfactory.validation` runs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.manifest import parse_json_text
from gym_envfactory.errors import SpecError


class ScenarioStep(BaseModel):
    """One step of a scenario: ``call`` the tool with ``arguments`` (a dict, or a raw string to test
    decoding) and check the outcome ``expect``, optionally the ``error_code``, the ``result`` (subset
    match; ``exact``: equal), ``state`` values at dotted paths after the step, ``state_absent`` paths,
    and ``state_unchanged`` (default: unchanged after an error).  See :mod:`gym_envfactory.validation`
    for the file format."""

    model_config = ConfigDict(extra="forbid")
    call: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    expect: Literal["ok", "tool_error", "invalid_arguments", "unknown_tool"] = "ok"
    error_code: str | None = None
    result: Any = None
    state: dict[str, Any] = Field(default_factory=dict)
    state_absent: list[str] = Field(default_factory=list)
    exact: bool = False
    state_unchanged: bool | None = None


class Scenario(BaseModel):
    """One validation scenario (a line of ``scenarios.jsonl``): ``scenario_id``, difficulty ``level``,
    ``initial_state`` (the same forms as a task's; ``None``: the default state) and at least one step,
    run in order in one fresh session (EnvFactory paper §3.2, "Validator")."""

    model_config = ConfigDict(extra="forbid")
    scenario_id: str
    level: Literal["simple", "medium", "complex", "boundary", "error"] = "simple"
    description: str = ""
    initial_state: str | dict[str, Any] | None = None
    steps: list[ScenarioStep] = Field(min_length=1)


def load_scenarios(src: str | Path | Iterable[Mapping[str, Any]]) -> list[Scenario]:
    """Parse scenarios from a JSON Lines file or objects.  Raises :class:`SpecError` (file, line, field)."""
    out: list[Scenario] = []
    if isinstance(src, (str, Path)):
        path = Path(src)
        items = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                items.append((lineno, parse_json_text(line, file=path, line=lineno)))
    else:
        path = None
        items = list(enumerate(src, 1))
    seen: set[str] = set()
    for lineno, obj in items:
        try:
            sc = Scenario.model_validate(obj)
        except ValidationError as exc:
            d = format_validation_error(exc)[0]
            raise SpecError(d["message"], file=path, line=lineno, field=d["field"]) from None
        if sc.scenario_id in seen:
            raise SpecError(f"duplicate scenario_id {sc.scenario_id!r}", file=path, line=lineno, field="scenario_id")
        seen.add(sc.scenario_id)
        out.append(sc)
    return out
