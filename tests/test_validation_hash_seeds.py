"""Determinism is checked under more than one hash seed (issue 25, item 4).

Validation children ran with ``PYTHONHASHSEED=0`` only, so a tool returning ``list(set(tags))`` passed
validation, and its oracle reward was 1.00 in process and 0.50 on the subprocess backend.  Now
validation replays every task and scenario in one child per seed of ``PROBE_HASH_SEEDS`` and compares
them, and the determinism lint flags iteration over a set where the AST sees it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from gym_envfactory import load_environment
from gym_envfactory.validation import (
    PROBE_HASH_SEEDS,
    fingerprint_differences,
    lint_source,
    validate_environment,
)

STATE = '''
from pydantic import BaseModel, Field


class State(BaseModel):
    tags: list[str] = Field(default_factory=list)
'''
TOOLS = '''
from gym_envfactory import ToolError, tool

from .state import State


@tool(read_only=True)
def list_tags(state: State, *, prefix: str = "") -> list[str]:
    """The distinct tags starting with `prefix`."""
    if prefix and not any(t.startswith(prefix) for t in state.tags):
        raise ToolError(f"no tag starts with {prefix!r}", code="not_found")
    return list(set(t for t in state.tags if t.startswith(prefix)))
'''
SORTED_TOOLS = TOOLS.replace("list(set(t for t in state.tags if t.startswith(prefix)))",
                             "sorted(set(t for t in state.tags if t.startswith(prefix)))")
TAGS = ["red", "green", "blue", "amber", "violet", "teal", "coral", "olive", "red"]


def write_package(root: Path, name: str, tools: str, tags: list[str] = TAGS) -> Path:
    d = root / name
    (d / "initial_states").mkdir(parents=True)
    (d / "environment.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\ndomain = "utilities"\n'
                                        'description = "Tags."\n')
    (d / "__init__.py").write_text("")
    (d / "state.py").write_text(STATE)
    (d / "tools.py").write_text(tools)
    (d / "initial_states" / "small.json").write_text(json.dumps({"tags": tags}))
    task = {"task_id": "all-tags", "turns": [{"user": "Which tags are there?",
                                              "ground_truth": [{"name": "list_tags", "arguments": {}}]}]}
    (d / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    scenarios = [{"scenario_id": "tags", "level": "simple", "steps": [{"call": "list_tags"}]},
                 {"scenario_id": "no-tag", "level": "error",
                  "steps": [{"call": "list_tags", "arguments": {"prefix": "zz"}, "expect": "tool_error"}]}]
    (d / "scenarios.jsonl").write_text("\n".join(json.dumps(s) for s in scenarios) + "\n")
    return d


def test_the_probe_seeds_order_these_tags_differently():
    """The fixture must be able to fail: under the two probe seeds, ``list(set(TAGS))`` differs (checked
    in two fresh interpreters, as the probe runs)."""
    import subprocess
    import sys

    orders = {subprocess.run([sys.executable, "-c", f"print(list(set({TAGS!r})))"], capture_output=True, text=True,
                             env={"PYTHONHASHSEED": str(seed)}, check=True).stdout for seed in PROBE_HASH_SEEDS}
    assert len(orders) == len(PROBE_HASH_SEEDS)


def test_validation_reports_a_tool_whose_result_depends_on_the_hash_seed(tmp_path):
    spec = load_environment(write_package(tmp_path, "TagBagSeeds", TOOLS))
    report = validate_environment(spec)
    assert not report.passed
    probe = "\n".join(report.determinism_failures)
    assert "task all-tags: turn 0 call 0 (list_tags): the result differs between PYTHONHASHSEED=0 and " \
           "PYTHONHASHSEED=1" in probe, report.failures()
    assert "scenario tags: step 0 (list_tags): the outcome differs" in probe
    assert "scenario no-tag" not in probe  # the error path does not depend on the seed
    assert any(f.startswith("determinism: task all-tags") for f in report.failures())
    # the lint sees it too, without running anything
    assert any("tools.py:12: list() of a set" in f and "PYTHONHASHSEED" in f for f in report.lint_failures), \
        report.lint_failures


def test_a_sorted_result_passes_both_checks(tmp_path):
    spec = load_environment(write_package(tmp_path, "TagBagSorted", SORTED_TOOLS))
    report = validate_environment(spec)
    assert report.passed, report.failures()
    assert report.determinism_failures == [] and report.lint_failures == []


def test_hash_seeds_none_skips_the_probe(tmp_path):
    spec = load_environment(write_package(tmp_path, "TagBagNoProbe", TOOLS))
    report = validate_environment(spec, hash_seeds=None, lint=False)
    assert report.determinism_failures == []


def test_fingerprint_differences_names_the_first_difference_of_each_unit():
    a = {"task t": [["turn 0 call 0 (f)", "1"], ["turn 0 state", "2"]], "scenario s": [["final state", "3"]]}
    b = {"task t": [["turn 0 call 0 (f)", "1"], ["turn 0 state", "9"]], "scenario s": [["final state", "3"]]}
    out = fingerprint_differences({0: a, 7: b})
    assert len(out) == 1 and out[0].startswith("task t: turn 0 state: the state differs between PYTHONHASHSEED=0 "
                                               "and PYTHONHASHSEED=7")
    assert fingerprint_differences({0: a, 1: a}) == []


SET_ITERATION = '''
def tool(state, tags: list[str], exclude: frozenset[str]):
    a = list(set(tags))
    for t in set(tags):
        pass
    seen = set(tags)
    b = [t for t in seen]
    c = ",".join(seen | {"x"})
    for e in exclude:
        pass
    d = seen.pop()
    ok = sorted(seen), sorted(t.upper() for t in seen), {t for t in seen}, len(seen), "x" in seen, max(seen)
    for n in {1, 2}:
        pass
    return a, b, c, d, ok
'''


def test_the_lint_flags_iteration_over_a_set_where_the_ast_sees_it():
    problems = lint_source(SET_ITERATION, "tools.py")
    lines = {int(p.split(":")[1]) for p in problems}
    assert lines == {3, 4, 7, 8, 9, 11}, problems
    assert all("PYTHONHASHSEED" in p and "sorted(" in p for p in problems)
    # an imported server's source is linted for what the importer refuses: set order is not among it
    assert lint_source(SET_ITERATION, "_source.py", module_state="mutation") == []


def test_envgen_runs_the_probe_from_outside_its_validation_child(tmp_path):
    """EnvGen's validation child may start no process, so ``validate_in_child`` replays the package in
    one sandboxed child per hash seed and turns a difference into a blocking finding."""
    from gym_envfactory.generators.envgen.sandbox import hash_seed_probe

    pkg = write_package(tmp_path, "TagBagEnvGen", TOOLS)
    findings = asyncio.run(hash_seed_probe(pkg, tmp_path / "report.json", mode="process", timeout_s=300))
    checks = {(f.check, f.tool, f.scenario) for f in findings}
    assert ("hash_seed_dependence", "list_tags", None) in checks  # the task
    assert ("hash_seed_dependence", "list_tags", "tags") in checks
    assert all(f.blocking for f in findings)
    fixed = tmp_path / "fixed"
    shutil.copytree(pkg, fixed / "TagBagEnvGen")
    (fixed / "TagBagEnvGen" / "tools.py").write_text(SORTED_TOOLS)
    assert asyncio.run(hash_seed_probe(fixed / "TagBagEnvGen", tmp_path / "report2.json", mode="process",
                                       timeout_s=300)) == []


@pytest.mark.parametrize("seed", [0, 3])
def test_child_environment_sets_the_hash_seed(tmp_path, seed):
    from gym_envfactory.isolation import child_environment

    assert child_environment(tmp_path, hash_seed=seed)["PYTHONHASHSEED"] == str(seed)
    assert child_environment(tmp_path)["PYTHONHASHSEED"] == "0"


HIDDEN_TOOLS = TOOLS.replace("@tool(read_only=True)", "def distinct(xs):\n    return set(xs)\n\n\n@tool(read_only=True)").replace(
    "return list(set(t for t in state.tags if t.startswith(prefix)))",
    "return list(distinct(t for t in state.tags if t.startswith(prefix)))")


def _orders(candidates: list[list[str]], seed: int) -> list[list[str]]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", f"import json; print(json.dumps([list(set(c)) for c in {candidates!r}]))"],
                         capture_output=True, text=True, env={"PYTHONHASHSEED": str(seed)}, check=True).stdout
    return json.loads(out)


def test_two_tags_that_seeds_0_and_1_order_alike_are_still_caught(tmp_path):
    """Under two seeds a set of two strings was ordered alike about half the time, and a helper returning the
    set hid it from the lint: such a tool passed validation and its result still differed in other processes.
    The lint now follows module functions that return sets, and the probe replays under four seeds."""
    candidates = [[f"t{i}", f"u{i}"] for i in range(60)]
    orders = {seed: _orders(candidates, seed) for seed in range(4)}
    pair = next(c for i, c in enumerate(candidates) if orders[0][i] == orders[1][i]
                and any(orders[s][i] != orders[0][i] for s in (2, 3)))
    assert "def distinct" in HIDDEN_TOOLS and "list(distinct(" in HIDDEN_TOOLS
    spec = load_environment(write_package(tmp_path, "TagPairSeeds", HIDDEN_TOOLS, tags=[*pair, pair[0]]))
    report = validate_environment(spec)
    assert not report.passed
    assert any("task all-tags: turn 0 call 0 (list_tags): the result differs" in f for f in report.determinism_failures), \
        report.failures()
    assert any("tools.py:" in f and "list() of a set" in f for f in report.lint_failures), report.lint_failures


def test_the_lint_follows_functions_of_the_module_that_return_sets():
    source = '''
def distinct(xs):
    return set(xs)


def distinct_again(xs):
    return distinct(xs)


def annotated(xs) -> frozenset[str]:
    return make(xs)


def maybe(xs):
    if xs:
        return set(xs)
    return list(xs)


def tool(tags):
    a = list(distinct(tags))
    b = [t for t in distinct_again(tags)]
    for t in annotated(tags):
        pass
    c = list(maybe(tags))
    d = sorted(distinct(tags))
    return a, b, c, d
'''
    lines = {int(p.split(":")[1]) for p in lint_source(source, "tools.py")}
    assert lines == {21, 22, 23}, lines
