"""``--tasks FILE`` on ``validate``, ``rollout`` and ``export rl|sft``, and ``envfactory tasks add`` (docs/synthesis.md,
"Using a tasks file"): a file written by QueryGen's writer or by hand goes all the way, and every refusal names
file, line and field and changes nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from gym_envfactory.cli import app
from gym_envfactory.cli.tasks import oracle_refusal
from gym_envfactory.environment.tasks import Task, TaskSet
from gym_envfactory.generators.tasks.querygen import ChainOutcome, write_tasks
from gym_envfactory.training.export.rl import template_messages
from tests.conftest import CATALOG_SERVER_TOKEN as TOKEN
from tests.environment.test_package import PKG
from tests.environment.test_package import TOOLS as PACKAGE_TOOLS
from tests.environment.test_taskfiles import catalog_tasks, write_jsonl

STATE = PKG
# the counter package of tests/environment/test_package.py, with a read-only tool beside its writes
TOOLS = PACKAGE_TOOLS + '''
@tool(read_only=True)
def peek(state: State, *, at_least: int = 0) -> int:
    """The counter; an error when it is below `at_least`."""
    if state.n < at_least:
        raise ToolError(f"n is {state.n}", code="too_low")
    return state.n
'''
SCENARIOS = [{"scenario_id": "s1", "steps": [
    {"call": "peek", "result": 1},
    {"call": "peek", "arguments": {"at_least": 5}, "expect": "tool_error", "error_code": "too_low"},
    {"call": "bump", "arguments": {"by": 2}, "state": {"n": 3}},
    {"call": "bump", "arguments": {"by": 0}, "expect": "tool_error", "error_code": "invalid_amount"},
    {"call": "drop", "result": 0},
    {"call": "drop", "expect": "tool_error"}]}]
OWN = [{"task_id": "own-1", "turns": [{"user": "bump it", "ground_truth": [{"name": "bump", "arguments": {"by": 1}}]}]}]


def bump_task(tid: str, by: int = 2) -> dict[str, Any]:
    return {"task_id": tid, "turns": [{"user": f"add {by}", "ground_truth": [{"name": "bump", "arguments": {"by": by}}]},
                                      {"user": "what is it now?", "ground_truth": [{"name": "peek"}],
                                       "expected_outputs": [str(1 + by)]}]}


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A small package on ``$ENVFACTORY_CATALOG`` under a name of its own (modules load once per name)."""
    name = f"Counter{uuid.uuid4().hex[:8]}"
    d = tmp_path / "catalog" / name
    (d / "initial_states").mkdir(parents=True)
    (d / "environment.toml").write_text(f'name = "{name}"\nversion = "0.1.0"\ndomain = "utilities"\n'
                                        f'description = "A counter."\n')
    (d / "__init__.py").write_text("")
    (d / "state.py").write_text(STATE)
    (d / "tools.py").write_text(TOOLS)
    (d / "initial_states" / "small.json").write_text('{"n": 1}')
    write_jsonl(d / "tasks.jsonl", OWN)
    write_jsonl(d / "scenarios.jsonl", SCENARIOS)
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(d.parent))
    return name, d


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------------- a file through every command
@pytest.fixture
def generated(tmp_path: Path) -> Path:
    """A tasks file written by QueryGen's writer (``write_tasks``: dedupe, replay, write) from kept outcomes."""
    outcomes = [ChainOutcome(chain_id=f"c-{i}", status="kept", solved=1, k=1,
                             task={**t, "env": t.get("env", "HotelBooking"),
                                   "provenance": {"kind": "querygen", "chain_id": f"c-{i}"}})
                for i, t in enumerate(catalog_tasks("HotelBooking", "hotel-002", "hotel-003", "hotel-x01"))]
    out = tmp_path / "gen" / "tasks.jsonl"
    assert write_tasks(outcomes, out)["tasks"] == 3
    return out


def test_rollout_plays_a_generated_tasks_file_and_the_oracle_earns_one(generated: Path, tmp_path: Path) -> None:
    out = tmp_path / "traj.jsonl"
    res = invoke("rollout", "--tasks", generated, "--policy", "oracle", "--out", out)
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["mine-hotel-002", "mine-hotel-003", "mine-hotel-x01"]
    assert all(r["reward"] == 1.0 and r["env"] == "HotelBooking" for r in records)


def test_a_remote_backend_plays_tasks_the_server_does_not_have(generated: Path, catalog_server: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFACTORY_TOKEN", TOKEN)
    out = tmp_path / "traj.jsonl"
    res = invoke("rollout", "--tasks", generated, "--policy", "oracle", "--backend", "url", "--url", catalog_server,
                 "--out", out)
    assert res.exit_code == 0, res.output  # sessions start from the file's initial states, never by task id
    assert [json.loads(line)["reward"] for line in out.read_text().splitlines()] == [1.0, 1.0, 1.0]


def test_rollout_says_which_environments_when_the_tasks_span_several_primaries(generated: Path, tmp_path: Path) -> None:
    store = write_jsonl(tmp_path / "store.jsonl", catalog_tasks("OnlineStore", "store-023"))
    res = invoke("rollout", "--tasks", generated, "--tasks", store, "--policy", "oracle")
    assert res.exit_code == 2 and "the tasks are of HotelBooking, OnlineStore; name one" in " ".join(res.output.split())
    res = invoke("rollout", "HotelBooking", "--tasks", generated, "--tasks", store, "--policy", "oracle", "--episodes", "1")
    assert res.exit_code == 0, res.output
    assert "left out 1 task(s) of other environments (OnlineStore: 1)" in " ".join(res.output.split())


def test_export_rl_rows_come_from_the_tasks_file_and_rebuild_with_gym_make(generated: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "rl.parquet"
    res = invoke("export", "rl", "--tasks", generated, "--out", out)
    assert res.exit_code == 0, res.output
    rows = pq.read_table(out).to_pylist()
    assert {r["extra_info"]["task_id"] for r in rows} == {"mine-hotel-002", "mine-hotel-003", "mine-hotel-x01"}
    row = next(r for r in rows if r["extra_info"]["task_id"] == "mine-hotel-003" and r["extra_info"]["turn"] == 1)
    env = gym.make(row["data_source"], tasks=generated)
    try:
        obs, _ = env.reset(options=row["extra_info"]["reset_options"])
        assert template_messages(obs) == row["prompt"]
    finally:
        env.close()


def test_export_sft_takes_the_tasks_file(generated: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.json"
    res = invoke("export", "sft", "--tasks", generated, "--out", out, "--format", "alpaca")
    assert res.exit_code == 0, res.output
    records = json.loads(out.read_text())
    assert {r["task_id"] for r in records} == {"mine-hotel-002", "mine-hotel-003", "mine-hotel-x01"}


def test_validate_replays_the_tasks_file_in_place_of_the_packages_own(counter: tuple[str, Path], tmp_path: Path) -> None:
    name, _ = counter
    good = write_jsonl(tmp_path / "good.jsonl", [{**bump_task("mine-1"), "env": name}, {**bump_task("mine-2", by=3), "env": name}])
    res = invoke("validate", "--tasks", good)  # no ENV: the environments the tasks name
    assert res.exit_code == 0, res.output
    assert f"{name}: scenarios 1/1 passed" in res.output and "tasks replayed 2/2" in res.output
    bad = write_jsonl(tmp_path / "bad.jsonl", [bump_task("mine-1"), {"task_id": "mine-3", "turns": [
        {"user": "drop twice", "ground_truth": [{"name": "drop"}, {"name": "drop"}]}]}])
    res = invoke("validate", name, "--tasks", bad)
    assert res.exit_code == 1 and "tasks replayed 1/2" in res.output
    assert f"{bad}:2" in res.output.replace("\n", "") and "turns.0.ground_truth.1" in res.output


def test_validate_refuses_a_malformed_tasks_file_in_one_line(counter: tuple[str, Path], tmp_path: Path) -> None:
    name, _ = counter
    bad = write_jsonl(tmp_path / "bad.jsonl", [bump_task("a"), '{"task_id": "b", "turns": [{"user": 3}]}'])
    res = invoke("validate", name, "--tasks", bad)
    assert res.exit_code == 1 and f"{bad}:2 field 'turns.0.user'" in res.output.replace("\n", "")


# ------------------------------------------------------------------------------------------- tasks add
def test_tasks_add_appends_checked_tasks_to_the_package(counter: tuple[str, Path], tmp_path: Path) -> None:
    name, d = counter
    new = write_jsonl(tmp_path / "new.jsonl", [bump_task("new-1"), {**bump_task("new-2", by=4), "split": "test"}])
    res = invoke("tasks", "add", name, new)
    assert res.exit_code == 0, res.output
    assert "added 2 task(s)" in res.output and "(3 in all)" in res.output
    written = TaskSet.from_jsonl(name, d / "tasks.jsonl")
    assert written.ids() == ["own-1", "new-1", "new-2"] and written.ids("test") == ["new-2"]
    assert "env" not in json.loads((d / "tasks.jsonl").read_text().splitlines()[1])  # the package's own: implied
    res = invoke("rollout", name, "--policy", "oracle", "--trust")
    assert res.exit_code == 0 and "3/3" in res.output
    assert "installed copy" not in res.output  # a package outside site-packages: no note


def test_tasks_add_into_an_installed_copy_says_a_reinstall_replaces_it(counter: tuple[str, Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """After a plain (non-editable) install the catalog's packages live in site-packages: tasks added there
    are lost at the next pip install, and the command says so (one line, with what to do)."""
    import sysconfig

    name, d = counter
    paths = dict(sysconfig.get_paths())
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**paths, "purelib": str(d.parent)})
    res = invoke("tasks", "add", name, write_jsonl(tmp_path / "new.jsonl", [bump_task("new-9")]))
    assert res.exit_code == 0, res.output
    assert "installed copy" in res.output and "pip install -e ." in res.output and "--tasks FILE" in res.output


@pytest.mark.parametrize("rows, line, field, needle", [
    ([bump_task("new-1"), bump_task("own-1")], 2, "task_id", "duplicate task_id"),
    ([bump_task("new-1"), {"task_id": "new-2", "turns": [{"user": "drop twice", "ground_truth": [
        {"name": "drop"}, {"name": "drop"}]}]}], 2, "turns.0.ground_truth.1", "already zero"),
    ([bump_task("new-1"), {"task_id": "new-2", "env": "HotelBooking", "turns": [{"user": "hi"}]}], 2, "env",
     "not '{name}'"),
])
def test_tasks_add_refuses_and_writes_nothing(counter: tuple[str, Path], tmp_path: Path, rows: list[Any], line: int,
                                              field: str, needle: str) -> None:
    name, d = counter
    before = (d / "tasks.jsonl").read_bytes()
    new = write_jsonl(tmp_path / "new.jsonl", rows)
    res = invoke("tasks", "add", name, new)
    text = res.output.replace("\n", "")
    assert res.exit_code == 1, res.output
    assert f"{new}:{line} field '{field}'" in text and needle.format(name=name) in text
    assert "nothing written" in text and (d / "tasks.jsonl").read_bytes() == before


@pytest.mark.parametrize("row, field, needle", [
    ('{"task_id": "x", "turns": [}', None, "invalid JSON"),
    ({"task_id": "x", "turns": [{"user": "hi", "ground_truth": [{"name": "teleport"}]}]},
     "turns.0.ground_truth.0.name", "unknown tool 'teleport'"),
    ({"task_id": "x", "env": ["{name}", "Nowhere"], "turns": [{"user": "hi"}]}, "env", "unknown environment 'Nowhere'"),
])
def test_tasks_add_refuses_a_file_that_does_not_load(counter: tuple[str, Path], tmp_path: Path, row: Any,
                                                     field: str | None, needle: str) -> None:
    name, d = counter
    before = (d / "tasks.jsonl").read_bytes()
    row = json.loads(json.dumps(row).replace("{name}", name)) if isinstance(row, dict) else row
    new = write_jsonl(tmp_path / "new.jsonl", [bump_task("new-1"), row])
    res = invoke("tasks", "add", name, new)
    text = res.output.replace("\n", "")
    assert res.exit_code == 1, res.output
    assert f"refused: {new}:2" + (f" field '{field}'" if field else "") in text and needle in text
    assert "nothing written" in text and (d / "tasks.jsonl").read_bytes() == before


def test_oracle_refusal_names_the_turn_short_of_one(tmp_path: Path) -> None:
    task = Task.model_validate({**bump_task("t"), "env": "X"})
    tasks = TaskSet("X", [task], source=tmp_path / "f.jsonl", lines={"t": 7})
    err = oracle_refusal(tasks, task, 0.5, {"turns": [{"turn": 0, "reward": 1.0}, {"turn": 1, "reward": 0.0}],
                                            "missed": ["peek"]})
    assert (err.line, err.field, err.task_id) == (7, "turns.1", "t")
    assert "scores 0.500, not 1.0" in str(err) and "missed calls ['peek']" in str(err)
