"""Environment packages and task files: loading errors name file, line and field (docs/authoring.md; docs/architecture.md, "Tasks")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gym_envfactory import (
    DatasetError,
    SpecError,
    UnknownEnvironmentError,
    get_environment,
    load_environment,
)
from gym_envfactory.errors import UnknownTaskError
from gym_envfactory.replay import task_reference

PKG = '''
from pydantic import BaseModel
class State(BaseModel):
    n: int = 0
'''
TOOLS = '''
from gym_envfactory import ToolError, tool
from .state import State

@tool
def bump(state: State, *, by: int = 1) -> int:
    """Add `by` to n."""
    if by <= 0:
        raise ToolError("by must be positive", code="invalid_amount")
    state.n += by
    return state.n

@tool(destructive=True)
def drop(state: State) -> int:
    """Set n to zero; fails when already zero."""
    if state.n == 0:
        raise ToolError("already zero", code="invalid_state")
    state.n = 0
    return 0
'''
MANIFEST = '''name = "Tiny"
version = "1.2.0"
domain = "utilities"
description = "A tiny counter."
'''


@pytest.fixture
def pkg(tmp_path) -> Path:
    d = tmp_path / "Tiny"
    (d / "initial_states").mkdir(parents=True)
    (d / "environment.toml").write_text(MANIFEST)
    (d / "__init__.py").write_text("")
    (d / "state.py").write_text(PKG)
    (d / "tools.py").write_text(TOOLS)
    (d / "initial_states" / "small.json").write_text('{"n": 1}')
    tasks = [
        {"task_id": "a", "turns": [{"user": "bump", "ground_truth": [{"name": "bump", "arguments": {}}]}]},
        {"task_id": "b", "turns": [{"user": "drop", "ground_truth": [{"name": "drop"}]},
                                   {"user": "drop again", "ground_truth": [{"name": "drop"}]}]},
    ]
    (d / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    scen = [{"scenario_id": "s1", "steps": [{"call": "bump", "arguments": {"by": 2}, "state": {"n": 3}},
                                            {"call": "bump", "arguments": {"by": 0}, "expect": "tool_error", "error_code": "invalid_amount"},
                                            {"call": "drop", "result": 0},
                                            {"call": "drop", "expect": "tool_error"}]}]
    (d / "scenarios.jsonl").write_text("\n".join(json.dumps(s) for s in scen) + "\n")
    return d


def _fresh(pkg, name):
    """Copy the package under a new environment name (modules are cached per name)."""
    new = pkg.parent / name
    shutil.copytree(pkg, new)
    (new / "environment.toml").write_text(MANIFEST.replace('"Tiny"', f'"{name}"'))
    return new


def test_load_and_gym_id(pkg):
    spec = load_environment(pkg)
    assert spec.gym_id == "envfactory/Tiny-v1" and list(spec.tools) == ["bump", "drop"]
    assert spec.tools["drop"].annotations.destructive and spec.tools["drop"].mcp_schema()["annotations"]["destructiveHint"]


def test_gold_replay_error_names_task_turn_call(pkg):
    spec = load_environment(_fresh(pkg, "TinyReplay"))
    assert task_reference(spec, "a").final_state == {"n": 2}
    with pytest.raises(DatasetError) as ei:
        task_reference(spec, "b")
    e = ei.value
    assert (e.task_id, e.turn, e.call, e.line) == ("b", 1, 0, 2)
    assert e.field == "turns.1.ground_truth.0" and "tasks.jsonl:2" in str(e) and "already zero" in str(e)


@pytest.mark.parametrize("line,field,needle", [
    ('{"task_id": "x", "turns": []}', "turns", "at least 1"),
    ('{"task_id": "x", "turns": [{"usr": "hi"}]}', "turns.0.user", "required"),
    ('{"task_id": "x", "turns": [{"user": "hi", "clarification": true, "ground_truth": [{"name": "bump"}]}]}', "turns.0.ground_truth", "clarification"),
    ('{"task_id": "x", "turns": [{"user": "hi"}], "env": "Other"}', "env", "belongs"),
    ('{"task_id": "x" "turns": 1}', None, "invalid JSON"),
])
def test_malformed_task_line_names_file_line_field(pkg, line, field, needle):
    d = _fresh(pkg, f"TinyBad{abs(hash(line)) % 10**6}")
    (d / "tasks.jsonl").write_text('{"task_id": "ok", "turns": [{"user": "hi"}]}\n\n' + line + "\n")
    with pytest.raises(DatasetError) as ei:
        _ = load_environment(d).tasks
    assert ei.value.line == 3 and ei.value.field == field and needle in str(ei.value)
    assert str(d / "tasks.jsonl") in str(ei.value)


def test_duplicate_task_id(pkg):
    d = _fresh(pkg, "TinyDup")
    (d / "tasks.jsonl").write_text('{"task_id": "a", "turns": [{"user": "x"}]}\n{"task_id": "a", "turns": [{"user": "y"}]}\n')
    with pytest.raises(DatasetError, match="duplicate task_id"):
        _ = load_environment(d).tasks


@pytest.mark.parametrize("manifest,field", [
    (MANIFEST.replace('"utilities"', '"gaming"'), "domain"),
    (MANIFEST.replace('"1.2.0"', '"one"'), "version"),
    (MANIFEST.replace('description = "A tiny counter."\n', ""), "description"),
    (MANIFEST + 'colour = "red"\n', "colour"),
])
def test_bad_manifest(pkg, manifest, field):
    (pkg / "environment.toml").write_text(manifest)
    with pytest.raises(SpecError) as ei:
        load_environment(pkg)
    assert ei.value.field == field and ei.value.file.endswith("environment.toml")


def test_bad_initial_state_names_field(pkg):
    d = _fresh(pkg, "TinyState")
    (d / "initial_states" / "small.json").write_text('{"n": "many"}')
    with pytest.raises(SpecError) as ei:
        load_environment(d).initial_state_json()
    assert ei.value.field == "n" and ei.value.file.endswith("small.json")


def test_tool_contract_violations(pkg):
    d = _fresh(pkg, "TinyTools")
    (d / "tools.py").write_text(TOOLS + '\n@tool\ndef bad(state: State, by: int) -> int:\n    """x"""\n    return 1\n')
    with pytest.raises(SpecError, match="keyword-only"):
        load_environment(d)


def test_validation_runner_and_unknown_names(pkg):
    from gym_envfactory.validation import validate_environment

    spec = load_environment(_fresh(pkg, "TinyValid"))
    report = validate_environment(spec, replay_tasks=False)
    assert report.passed, report.failures()
    with pytest.raises(UnknownEnvironmentError):
        get_environment("NoSuchEnv")
    with pytest.raises(UnknownTaskError):
        spec.tasks.get("zzz")


def test_initial_state_patches(pkg):
    from gym_envfactory.environment.tasks import TaskSet

    spec = load_environment(_fresh(pkg, "TinyPatch"))
    ts = TaskSet.from_objects(spec.name, [{"task_id": "p", "initial_state": {"name": "small", "patches": [{"op": "replace", "path": "/n", "value": 5}]},
                                      "turns": [{"user": "x", "ground_truth": [{"name": "bump"}]}]}])
    assert task_reference(spec, "p", ts).final_state == {"n": 6}
    ts = TaskSet.from_objects(spec.name, [{"task_id": "q", "initial_state": {"name": "small", "patches": [{"op": "replace", "path": "/zz/1", "value": 5}]},
                                      "turns": [{"user": "x"}]}])
    with pytest.raises(DatasetError, match="patch failed"):
        task_reference(spec, "q", ts)


def test_scenario_exact_and_absent_checks(library):
    from gym_envfactory.environment.scenarios import load_scenarios
    from gym_envfactory.validation import run_scenarios

    sc = load_scenarios([
        {"scenario_id": "exact-ok", "steps": [{"call": "add_members", "arguments": {"members": [{"name": "cy", "age": 9}]},
                                               "state": {"members.cy": {"name": "cy", "age": 9}}, "exact": True,
                                               "state_absent": ["members.dan"], "result": ["cy"]}]},
        {"scenario_id": "exact-fails", "steps": [{"call": "get_book", "arguments": {"book_id": "B2"},
                                                  "result": {"title": "Emma"}, "exact": True}]},
        {"scenario_id": "absent-fails", "steps": [{"call": "get_book", "arguments": {"book_id": "B2"}, "state_absent": ["books.B2"]}]},
        {"scenario_id": "subset-ok", "steps": [{"call": "get_book", "arguments": {"book_id": "B2"}, "result": {"title": "Emma"}}]},
    ])
    reports, coverage = run_scenarios(library, sc)
    assert [r.passed for r in reports] == [True, False, False, True]
    assert "absent" in reports[2].failures[0] and coverage["get_book"] == {"ok"}


def test_determinism_lint():
    from gym_envfactory.validation import lint_source

    bad = '''
import random, uuid, time
from datetime import datetime, date
import datetime as dt
from random import choice
CACHE_OK = {}
cache = {}
seen: list = list()
def tool(state):
    global cache
    a = datetime.now(); b = dt.datetime.now(); c = date.today(); d = time.time()
    e = uuid.uuid4(); f = hash("x"); g = random.random(); h = random.Random(state.seed).random()
    return state.x.hash()
'''
    problems = lint_source(bad, "tools.py")
    text = "\n".join(problems)
    for needle in ["from random import choice", "'cache'", "'seen'", "global cache", "datetime.now()", "dt.datetime.now()",
                   "date.today()", "time.time()", "uuid.uuid4()", "hash()", "random.random()"]:
        assert needle in text, needle
    assert "CACHE_OK" not in text and "random.Random()" not in text and "x.hash" not in text
    assert lint_source("def f(:\n", "x.py")[0].startswith("x.py:1: syntax error")


def test_validate_reports_lint_failures(pkg):
    from gym_envfactory.validation import validate_environment

    d = _fresh(pkg, "TinyLint")
    (d / "tools.py").write_text(TOOLS + "\nimport uuid\nregistry = {}\n")
    report = validate_environment(load_environment(d), replay_tasks=False)
    assert not report.passed and any("registry" in f for f in report.lint_failures)
