"""Tool sets per task and per turn (issue 12 part 6): a task's ``excluded_tools`` and a turn's
``added_tools`` in the task format, the gym, the reward and the exporters (docs/architecture.md,
"Tool sets per turn")."""

from __future__ import annotations

import json

import pytest

from gym_envfactory import EnvFactoryEnv, define_environment
from gym_envfactory.errors import DatasetError
from gym_envfactory.rollout.policies import OraclePolicy, prompt_messages
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.training.export.episodes import oracle_trajectories
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.export.sft import to_alpaca, to_sharegpt
from tests.conftest import (
    LIBRARY_STATE,
    LibraryDB,
    add_members,
    borrow_book,
    extend_loan,
    get_book,
    return_book,
    set_fee,
)

TOOLS = [get_book, borrow_book, return_book, set_fee, add_members, extend_loan]

#: The example tasks of docs/authoring.md, "Tasks" ("Tool sets").
TOOL_SET_TASKS = [
    {"task_id": "return-added-at-2", "excluded_tools": ["set_fee"], "turns": [
        {"user": "Borrow Dune for ada.",
         "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}]},
        {"user": "How many copies of Dune are left?",
         "ground_truth": [{"name": "get_book", "arguments": {"book_id": "B1"}}], "expected_outputs": ["1"]},
        {"user": "She finished it already; return it.", "added_tools": ["return_book"],
         "ground_truth": [{"name": "return_book", "arguments": {"loan_id": "L-0001"}}]}]},
    {"task_id": "fee-missing", "excluded_tools": ["set_fee"], "turns": [
        {"user": "What is the late fee of Emma?", "ground_truth": [{"name": "get_book", "arguments": {"book_id": "B2"}}],
         "expected_outputs": ["0.25"]}]},
]


def names(tools):
    return [t["function"]["name"] for t in tools]


@pytest.fixture(scope="module")
def spec():
    return define_environment("ToolSetLibrary", LibraryDB, TOOLS, initial_state=LIBRARY_STATE, tasks=TOOL_SET_TASKS)


@pytest.fixture()
def env(spec):
    e = EnvFactoryEnv(spec)
    yield e
    e.close()


def test_a_tool_added_at_turn_2_works_end_to_end(env):
    obs, info = env.reset(options={"task_id": "return-added-at-2"})
    assert names(info["tools"]) == ["get_book", "borrow_book", "add_members", "extend_loan"]
    # turn 0: the tool of turn 2 is an unknown tool to the model; nothing changes
    before = env.session.state_bytes()
    _, _, _, _, step = env.step({"name": "return_book", "arguments": {"loan_id": "L-0001"}})
    assert step["errors"] == [{"type": "unknown_tool", "name": "return_book", "message": step["errors"][0]["message"]}]
    assert "return_book" not in step["errors"][0]["message"].split("available tools:")[1]
    assert step["tool_results"][0]["error_type"] == "unknown_tool"
    assert env.session.state_bytes() == before
    assert "tools" not in step
    # play the rest like the oracle: info["tools"] changes when turn 2 opens, with a system note
    env.step({"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}})
    obs, _, _, _, step = env.step("Done.")
    assert "tools" not in step and [m["role"] for m in obs] == ["user"]
    env.step({"name": "get_book", "arguments": {"book_id": "B1"}})
    obs, _, _, _, step = env.step("Done. 1.")
    assert names(step["tools"]) == ["get_book", "borrow_book", "return_book", "add_members", "extend_loan"]
    assert [m["role"] for m in obs] == ["system", "user"]
    assert '"name": "return_book"' in obs[0]["content"] and "set_fee" not in obs[0]["content"]
    assert names(env.tools) == names(step["tools"]) and names(env.opening_tools) == names(info["tools"])
    _, reward, terminated, _, step = env.step({"name": "return_book", "arguments": {"loan_id": "L-0001"}})
    assert step["errors"] == []
    _, reward, terminated, _, step = env.step("Done.")
    assert terminated
    # the early call to return_book is an invalid call in P_len: not a perfect episode
    assert step["score"]["invalid"] == 1 and reward < 1.0


def test_the_oracle_scores_one_and_reward_counts_unavailable_calls_as_invalid(env):
    result = run_episode(env, OraclePolicy(), task_id="return-added-at-2")
    assert result.reward == 1.0
    roles = [m["role"] for m in result.messages]
    assert roles.count("system") == 2 and roles[roles.index("system", 1) + 1] == "user"
    env.reset(options={"task_id": "fee-missing"})
    _, _, _, _, step = env.step({"name": "set_fee", "arguments": {"book_id": "B2", "fee": 1.0}})
    assert step["errors"][0]["type"] == "unknown_tool"
    env.step({"name": "get_book", "arguments": {"book_id": "B2"}})
    _, reward, terminated, _, step = env.step("The fee is 0.25.")
    assert terminated and step["score"]["invalid"] == 1 and step["score"]["r_traj"] == 1.0
    assert 0.0 < reward < 1.0


def test_excluded_tools_are_never_offered(env):
    for task_id in ("return-added-at-2", "fee-missing"):
        obs, info = env.reset(options={"task_id": task_id})
        assert "set_fee" not in names(info["tools"]) and "set_fee" not in json.dumps(obs)
    run_episode(env, OraclePolicy(), task_id="return-added-at-2")
    assert "set_fee" not in json.dumps(env.messages) and "set_fee" not in names(env.tools)


def test_an_unavailable_tool_is_refused_before_the_backend(env):
    env.reset(options={"task_id": "return-added-at-2"})
    sent = []
    session = env.session

    class Spy:  # what a backend's session would be sent
        def __getattr__(self, attr):
            return getattr(session, attr)

        def call(self, name, *args, **kwargs):
            sent.append(name)
            return session.call(name, *args, **kwargs)

    env.session = Spy()
    env.step([{"name": "set_fee", "arguments": {"book_id": "B1", "fee": 2}},
              {"name": "return_book", "arguments": {"loan_id": "L-0001"}},
              {"name": "get_book", "arguments": {"book_id": "B1"}}])
    assert sent == ["get_book"]
    log = session.action_log
    assert [r.name for r in log] == ["set_fee", "return_book", "get_book"]
    assert [r.result.is_invalid_call for r in log] == [True, True, False]
    assert [r.result.error_type for r in log] == ["unknown_tool", "unknown_tool", None]


def test_a_window_starting_after_the_change_shows_the_note_and_the_new_set(env):
    obs, info = env.reset(options={"task_id": "return-added-at-2", "start_turn": 2})
    assert "return_book" in names(info["tools"])
    assert [m["role"] for m in obs][-2:] == ["system", "user"]
    assert "return_book" not in names(env.opening_tools)
    fork = env.fork()
    _, _, _, _, step = fork.step({"name": "return_book", "arguments": {"loan_id": "L-0001"}})
    assert step["errors"] == []
    fork.close()


def test_prompt_format_shows_the_change(env):
    run_episode(env, OraclePolicy(), task_id="return-added-at-2")
    msgs = prompt_messages(env.messages, env.opening_tools)
    assert '"name": "return_book"' not in msgs[0]["content"] and '"name": "borrow_book"' in msgs[0]["content"]
    notes = [m for m in msgs[1:] if m["role"] == "system"]
    assert len(notes) == 1 and '"name": "return_book"' in notes[0]["content"]


def test_exporters_carry_the_tool_sets(spec):
    rows = {(r["extra_info"]["task_id"], r["extra_info"]["turn"]): r for r in rl_rows(["ToolSetLibrary"])}
    first, last = rows[("return-added-at-2", 0)], rows[("return-added-at-2", 2)]
    assert "return_book" not in names(json.loads(first["extra_info"]["tools"]))
    assert "return_book" in names(json.loads(last["extra_info"]["tools"]))
    assert json.loads(first["extra_info"]["tool_changes"]) == []
    assert [m["role"] for m in last["prompt"]][-2:] == ["system", "user"]
    whole = rl_rows(["ToolSetLibrary"], per="task")
    changes = json.loads(next(r for r in whole if r["extra_info"]["task_id"] == "return-added-at-2")["extra_info"]["tool_changes"])
    assert [(c["turn"], names(c["added"])) for c in changes] == [(2, ["return_book"])]
    assert all("set_fee" not in json.dumps(r) for r in whole)

    trajectories = list(oracle_trajectories("ToolSetLibrary"))
    record = next(r for r in to_sharegpt(trajectories) if r["task_id"] == "return-added-at-2")
    assert [t["name"] for t in json.loads(record["tools"])] == ["get_book", "borrow_book", "add_members", "extend_loan"]
    assert record["system"].startswith("You are an assistant")
    humans = [t["value"] for t in record["conversations"] if t["from"] == "human"]
    assert humans[2].startswith("New tools are available") and humans[2].endswith("She finished it already; return it.")
    assert '"name": "return_book"' in humans[2] and '"name": "return_book"' not in humans[1]
    alpaca = [r for r in to_alpaca(trajectories) if r["task_id"] == "return-added-at-2"]
    assert '"name": "return_book"' not in alpaca[0]["system"]
    assert any("New tools are available" in r["instruction"] for r in alpaca)


def bad(task, **extra):
    return define_environment("BadToolSets", LibraryDB, TOOLS, initial_state=LIBRARY_STATE,
                              tasks=[{"task_id": "t", **task}], register=False, **extra)


TURN = {"user": "Look up Dune.", "ground_truth": [{"name": "get_book", "arguments": {"book_id": "B1"}}]}


@pytest.mark.parametrize(("task", "field", "words"), [
    ({"excluded_tools": ["set_fee"], "turns": [TURN, {"user": "x", "added_tools": ["set_fee"]}]},
     "turns.1.added_tools", "both excluded"),
    ({"turns": [TURN, {"user": "x", "added_tools": ["set_fee"]}, {"user": "y", "added_tools": ["set_fee"]}]},
     "turns.2.added_tools", "added twice"),
    ({"excluded_tools": ["get_book"], "turns": [TURN]}, "turns.0.ground_truth.0", "excludes"),
    ({"turns": [TURN, {"user": "x", "added_tools": ["get_book"]}]}, "turns.0.ground_truth.0", "before turn 1"),
    ({"excluded_tools": ["set_fee", "set_fee"], "turns": [TURN]}, "excluded_tools", "twice"),
])
def test_bad_tool_sets_are_dataset_errors_at_load(task, field, words):
    with pytest.raises(DatasetError) as exc:
        len(bad(task).tasks)
    assert exc.value.field == field and exc.value.line == 1 and exc.value.task_id == "t" and words in str(exc.value)


@pytest.mark.parametrize(("task", "field"), [
    ({"excluded_tools": ["no_such_tool"], "turns": [TURN]}, "excluded_tools"),
    ({"turns": [TURN, {"user": "x", "added_tools": ["set_fees"]}]}, "turns.1.added_tools"),
])
def test_unknown_tool_names_are_dataset_errors_naming_file_line_and_field(tmp_path, task, field):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"task_id": "ok", "turns": [TURN]}) + "\n" + json.dumps({"task_id": "t", **task}) + "\n")
    spec = define_environment("BadToolNames", LibraryDB, TOOLS, initial_state=LIBRARY_STATE, tasks=path, register=False)
    e = EnvFactoryEnv(spec)
    try:
        with pytest.raises(DatasetError) as exc:
            e.reset(options={"task_id": "t"})
    finally:
        e.close()
    err = exc.value
    assert (str(err.file), err.line, err.field, err.task_id) == (str(path), 2, field, "t")
    assert str(path) in str(err) and "unknown tool" in str(err)


def test_tasks_without_tool_sets_are_unchanged(library):
    e = EnvFactoryEnv(library)
    try:
        _, info = e.reset(options={"task_id": "borrow-return"})
        assert names(info["tools"]) == list(library.tools)
        _, _, _, _, step = e.step("ok")
        assert "tools" not in step
        _, _, _, _, step = e.step({"name": "no_such_tool", "arguments": {}})
        assert step["errors"][0]["type"] == "unknown_tool"
    finally:
        e.close()


REMOTE_MODULE = '''
from pydantic import BaseModel
from gym_envfactory import define_environment, tool

class Pantry(BaseModel):
    items: dict[str, int] = {"rice": 2}

@tool(read_only=True)
def count_item(state: Pantry, *, item: str) -> int:
    """How many of an item the pantry holds."""
    return state.items.get(item, 0)

@tool
def stock_item(state: Pantry, *, item: str, n: int) -> int:
    """Add n of an item; returns the new count."""
    state.items[item] = state.items.get(item, 0) + n
    return state.items[item]

define_environment("ToolSetPantry", Pantry, [count_item, stock_item], tasks=[
    {"task_id": "p1", "turns": [
        {"user": "How much rice is there?", "ground_truth": [{"name": "count_item", "arguments": {"item": "rice"}}],
         "expected_outputs": ["2"]},
        {"user": "Add three beans.", "added_tools": ["stock_item"],
         "ground_truth": [{"name": "stock_item", "arguments": {"item": "beans", "n": 3}}]}]}])
'''

REMOTE_DRIVER = '''
import json
import gymnasium as gym
import pantry_tool_sets
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode

if __name__ == "__main__":
    env = gym.make("envfactory/ToolSetPantry-v0", backend="subprocess").unwrapped
    env.reset(options={"task_id": "p1"})
    _, _, _, _, info = env.step({"name": "stock_item", "arguments": {"item": "beans", "n": 3}})
    log = [[r.name, r.result.error_type] for r in env.session.action_log]
    state = env.session.state()
    reward = run_episode(env, OraclePolicy(), task_id="p1").reward
    out = {"error": info["errors"][0]["type"], "log": log, "state": state, "reward": reward,
           "backend": type(env.backend).__name__}
    env.close()
    print(json.dumps(out))
'''


def test_an_unavailable_tool_on_a_remote_backend_is_an_unknown_tool_in_the_servers_log(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "pantry_tool_sets.py").write_text(REMOTE_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", REMOTE_DRIVER], cwd=tmp_path, capture_output=True, text=True,
                       timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "InProcess" not in out["backend"]
    assert out["error"] == "unknown_tool" and out["log"] == [["stock_item", "unknown_tool"]]
    assert out["state"] == {"items": {"rice": 2}} and out["reward"] == 1.0
