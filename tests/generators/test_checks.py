"""The checks and the package writer shared by EnvGen and the importer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from gym_envfactory import tool
from gym_envfactory.environment.catalog import define_environment
from gym_envfactory.environment.manifest import Manifest, Provenance
from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.checks import (
    RunDifference,
    run_differences,
    scenario_initial_state,
    split_coverage_gaps,
)
from gym_envfactory.generators.packages import (
    add_catalog_dir,
    camel_name,
    jsonl_text,
    purge_modules,
    write_environment_package,
)
from gym_envfactory.generators.sandbox import child_environment, run_in_child


class Tally(BaseModel):
    n: int = 0


def tally_env(name: str, shared: dict | None = None):
    """``add`` is deterministic; ``tick`` counts in ``shared`` (module-level state) when given."""

    @tool
    def add(state: Tally, *, by: int) -> int:
        """Add to the tally."""
        state.n += by
        return state.n

    @tool(read_only=True)
    def start(state: Tally) -> str:
        """Reset the shared clock."""
        if shared is not None:
            shared["c"] = 0
        return "started"

    @tool(read_only=True)
    def tick(state: Tally) -> int:
        """Advance the shared clock."""
        if shared is None:
            return state.n
        shared["c"] += 1
        return shared["c"]

    steps = [{"call": "start"}, {"call": "add", "arguments": {"by": 2}}, {"call": "tick"}, {"call": "tick"}]
    scenarios = [{"scenario_id": "s1", "steps": steps},
                 {"scenario_id": "bad-state", "initial_state": "no-such-state", "steps": steps}]
    return define_environment(name, Tally, [add, start, tick], scenarios=scenarios, register=False)


def test_deterministic_environment_has_no_differences():
    spec = tally_env("ChecksSteady")
    assert list(run_differences(spec, interleave=True)) == []
    assert scenario_initial_state(spec, spec.scenarios[1]) is None  # skipped, not an error


def test_module_level_counter_is_an_interleaving_difference():
    shared = {"c": 0}
    spec = tally_env("ChecksShared", shared)
    # each fresh run resets the counter first, so running alone twice agrees ...
    assert list(run_differences(spec)) == []
    # ... but two sessions stepping in turn share it
    [d] = run_differences(spec, interleave=True)
    assert d == RunDifference("s1", "first", results=True, states=False)
    assert d.describe() == ("scenario s1: run interleaved with another session, the first session gave "
                            "different results than a session on its own")


def test_state_leaking_between_runs_is_a_replay_difference():
    shared = {"c": 0}
    spec = tally_env("ChecksLeaky", shared)
    spec.scenarios[0].steps.pop(0)  # no reset: the second run continues the first one's count
    diffs = list(run_differences(spec, interleave=True))
    assert diffs == [RunDifference("s1", None, results=True, states=False)]
    assert "two runs in fresh sessions from the same state gave different results" in diffs[0].describe()
    assert next(run_differences(spec, limit=0), None) is None


def test_split_coverage_gaps():
    report = SimpleNamespace(coverage_failures=["tool add: no scenario covers its error path", "scenarios: bad file"],
                             failures=lambda: ["scenario s1: step 0 (add): expected ok, got tool_error",
                                               "tool add: no scenario covers its error path", "scenarios: bad file",
                                               "lint: tools.py:3: random"])
    failures, gaps = split_coverage_gaps(report)
    assert gaps == ["tool add: no scenario covers its error path"]
    assert failures == ["scenario s1: step 0 (add): expected ok, got tool_error", "scenarios: bad file",
                        "lint: tools.py:3: random"]


def test_run_in_child_reports_how_the_child_ended(tmp_path, monkeypatch):
    monkeypatch.setenv("CHECKS_SECRET", "hunter2")
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": 1}')
    bad.write_text("{not json")
    ok = asyncio.run(run_in_child("json.tool", "main", [str(good), str(tmp_path / "out.json")], timeout_s=60))
    assert (ok.timed_out, ok.returncode) == (False, 0) and json.loads((tmp_path / "out.json").read_text()) == {"a": 1}
    failed = asyncio.run(run_in_child("json.tool", "main", [str(bad)], timeout_s=60))
    assert failed.returncode != 0 and "Expecting property name" in failed.stderr_tail
    env = child_environment(tmp_path)
    assert "CHECKS_SECRET" not in env and env["HOME"] == str(tmp_path)


def test_write_environment_package_round_trips(tmp_path):
    folder = tmp_path / "ChecksPkg"
    manifest = Manifest(name="ChecksPkg", version="0.1.0", domain="utilities", description="written",
                        provenance=Provenance(kind="generated", note="x"))
    files = {"__init__.py": "", "state.py": "from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    b: int = 0\n    a: int = 0\n",
             "tools.py": "from gym_envfactory import tool\n\nfrom .state import State\n\n\n@tool(read_only=True)\n"
                         "def get(state: State) -> int:\n    'The sum.'\n    return state.a + state.b\n",
             "data/raw.bin": b"\x00\r\n\xff"}
    out = write_environment_package(folder, manifest, files=files, initial_states={"small": {"b": 1, "a": 2}},
                                    scenarios=[], tasks=None, sort_state_keys=True)
    try:
        assert out == folder and (folder / "data" / "raw.bin").read_bytes() == b"\x00\r\n\xff"
        assert (folder / "initial_states" / "small.json").read_text() == '{\n "a": 2,\n "b": 1\n}\n'
        assert (folder / "scenarios.jsonl").read_text() == "" and not (folder / "tasks.jsonl").exists()
        spec = load_environment(folder)
        assert spec.manifest == manifest and json.loads(spec.initial_state_json()) == {"b": 1, "a": 2}
        with pytest.raises(FileExistsError):
            write_environment_package(folder, manifest, files={}, initial_states={})
        write_environment_package(folder, manifest, files={}, initial_states={}, tasks=[{"task_id": "t"}], replace=True)
        assert sorted(p.name for p in folder.iterdir()) == ["environment.toml", "initial_states", "tasks.jsonl"]
        assert (folder / "tasks.jsonl").read_text() == jsonl_text([{"task_id": "t"}]) == '{"task_id": "t"}\n'
    finally:
        purge_modules("ChecksPkg")
    assert not [m for m in sys.modules if m.startswith("gym_envfactory._envs.ChecksPkg")]


def test_names_and_catalog_dirs(tmp_path, monkeypatch):
    assert camel_name("plant_nursery_api", prefix="Env") == "PlantNurseryApi"
    assert camel_name(" 3d-printer ", prefix="Env") == "Env3dPrinter"
    assert camel_name("---", prefix="Imported") == "Imported"
    monkeypatch.setenv("ENVFACTORY_CATALOG", "/elsewhere")
    add_catalog_dir(tmp_path)
    add_catalog_dir(tmp_path)
    assert os.environ["ENVFACTORY_CATALOG"].split(os.pathsep) == [str(tmp_path.resolve()), "/elsewhere"]
