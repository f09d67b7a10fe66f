"""``envfactory export rl|sft``: rows rebuild their episodes (the oracle scores 1.0 on each), parquet
round-trips, SFT records follow LlamaFactory's formats, trajectories are filtered by reward."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import EnvFactoryEnv, define_environment
from gym_envfactory.errors import DatasetError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.training.export.cli import export_app
from gym_envfactory.training.export.episodes import Trajectory, oracle_trajectories, read_trajectories
from gym_envfactory.training.export.rl import rl_rows, template_messages, write_parquet
from gym_envfactory.training.export.sft import dataset_info_entry, to_alpaca, to_sharegpt

ENV = "HotelBooking"


@pytest.fixture(scope="module")
def turn_rows():
    return rl_rows([ENV], per="turn")


def _play(row):
    env = EnvFactoryEnv(ENV)
    obs, info = env.reset(options=row["extra_info"]["reset_options"])
    policy = OraclePolicy()
    policy.begin(env)
    done, reward, last = False, 0.0, {}
    while not done:
        obs2, r, term, trunc, last = env.step(policy.act(env))
        reward += r
        done = term or trunc
    env.close()
    return obs, reward, last


def test_every_turn_row_rebuilds_its_episode_and_the_oracle_scores_one(turn_rows):
    env = EnvFactoryEnv(ENV)
    n_turns = sum(len(t.turns) for t in env.tasks)
    scored = sum(1 for t in env.tasks for turn in t.turns if turn.ground_truth or turn.expected_outputs)
    assert scored <= len(turn_rows) < n_turns  # one row per task turn that has something to score
    for row in turn_rows:
        obs, reward, last = _play(row)
        assert obs == row["prompt"], row["extra_info"]["task_id"]
        assert reward == 1.0, (row["extra_info"], last.get("score"))
        assert row["reward_model"]["style"] == "rule"
        gt = json.loads(row["reward_model"]["ground_truth"])
        assert [t["turn"] for t in gt["turns"]] == [row["extra_info"]["turn"]]


def test_later_turn_rows_carry_the_earlier_turns_played_from_ground_truth(turn_rows):
    later = [r for r in turn_rows if r["extra_info"]["turn"] > 0]
    assert later, "the catalog has multi-turn tasks"
    row = later[0]
    roles = [m["role"] for m in row["prompt"]]
    assert roles[0] == "system" and roles[-1] == "user"
    assert roles.count("user") == row["extra_info"]["turn"] + 1
    assert json.loads(row["extra_info"]["tools"])[0]["type"] == "function"


def test_per_task_rows_rebuild_whole_episodes():
    rows = rl_rows([ENV], per="task", split="test")
    assert rows and all(r["extra_info"]["split"] == "test" for r in rows)
    for row in rows[:5]:
        obs, reward, _ = _play(row)
        assert obs == row["prompt"] and reward == 1.0


def test_parquet_round_trip(turn_rows, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_parquet(turn_rows, tmp_path / "rl.parquet")
    back = pq.read_table(path).to_pylist()
    assert len(back) == len(turn_rows)
    for a, b in zip(back, turn_rows, strict=True):
        assert a["prompt"] == template_messages(b["prompt"])  # role and content only (test_chat_templates.py)
        assert json.loads(a["extra_info"]["messages"]) == b["prompt"]
        assert a["extra_info"]["reset_options"] == b["extra_info"]["reset_options"]
        assert a["reward_model"] == b["reward_model"]


def _alternates(conv):
    for i, turn in enumerate(conv):
        want = ("human", "observation") if i % 2 == 0 else ("gpt", "function_call")
        assert turn["from"] in want, (i, turn)
    assert conv[-1]["from"] in ("gpt", "function_call")


def test_sharegpt_records_follow_llamafactory_alternation():
    trajectories = list(oracle_trajectories(ENV, split="train"))
    records = to_sharegpt(trajectories)
    assert len(records) == len(trajectories)
    for rec in records:
        _alternates(rec["conversations"])
        assert rec["system"] and json.loads(rec["tools"])[0]["name"]
        for turn in rec["conversations"]:
            if turn["from"] == "function_call":
                call = json.loads(turn["value"])
                assert {"name", "arguments"} <= set(call if isinstance(call, dict) else call[0])


def test_alpaca_records_put_tool_calls_in_hermes_form():
    trajectories = list(oracle_trajectories(ENV, split="test"))
    records = to_alpaca(trajectories)
    calls = [r for r in records if r["output"].startswith("<tool_call>")]
    assert calls and all(r["instruction"] for r in records)
    first = calls[0]
    body = json.loads(first["output"][len("<tool_call>"):-len("</tool_call>")])
    assert body["name"] and isinstance(body["arguments"], dict)
    assert dataset_info_entry("d", "d.json", "alpaca")["d"]["formatting"] == "alpaca"


def test_trajectories_are_filtered_by_reward(tmp_path):
    env = EnvFactoryEnv(ENV)
    tid = env.tasks.ids()[0]
    good = run_episode(env, OraclePolicy(), task_id=tid).to_json()
    bad = {**good, "reward": 0.25}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    kept = list(read_trajectories(path, min_reward=0.5))
    assert [t.reward for t in kept] == [1.0]
    assert isinstance(kept[0], Trajectory) and kept[0].tools


def test_episodes_cut_short_by_a_failed_request_are_never_exported(tmp_path):
    env = EnvFactoryEnv(ENV)
    good = run_episode(env, OraclePolicy(), task_id=env.tasks.ids()[0]).to_json()
    failed = {**good, "reward": 0.0, "components": {}, "error": "HTTP 500 from the endpoint"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(failed) + "\n" + json.dumps(good) + "\n")
    assert [t.reward for t in read_trajectories(path, min_reward=0.0)] == [1.0]


def test_a_malformed_trajectory_line_names_file_and_line(tmp_path):
    from gym_envfactory.errors import DatasetError

    path = tmp_path / "t.jsonl"
    path.write_text('{"reward": 1}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl:1"):
        list(read_trajectories(path))


def test_cli_writes_parquet_sft_and_dataset_info(tmp_path):
    runner = CliRunner()
    res = runner.invoke(export_app, ["rl", f"envfactory/{ENV}-v0", "--out", str(tmp_path / "rl.parquet"), "--per", "task"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rl.parquet").stat().st_size > 0
    res = runner.invoke(export_app, ["sft", ENV, "--out", str(tmp_path / "sft.json"), "--split", "train"])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "sft.json").read_text())
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert data and info["envfactory"]["file_name"] == "sft.json"
    res = runner.invoke(export_app, ["sft", "NoSuchEnv", "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 1 and "unknown environment" in res.output


def _write(tmp_path, obj, raw: str | None = None):
    p = tmp_path / "traj.jsonl"
    p.write_text((raw if raw is not None else json.dumps(obj)) + "\n", encoding="utf-8")
    return p


def test_read_trajectories_keeps_nan_reward_despite_min_reward(tmp_path):
    """DEFECT: ``reward < min_reward`` is False for NaN, so a trajectory with ``"reward": NaN`` (or
    ``"nan"``) passes ``--min-reward 1.0`` and lands in the SFT file, which then holds ``"reward": NaN``
    (not valid JSON for strict readers).  Should: rejected (DatasetError) or filtered out."""
    from gym_envfactory.training.export.episodes import read_trajectories

    msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "Done."}]
    p = _write(tmp_path, None, raw='{"env": "HotelBooking", "task_id": "hotel-001", "reward": NaN, "messages": ' + json.dumps(msgs) + "}")
    try:
        kept = list(read_trajectories(p, min_reward=1.0))
    except DatasetError:
        return
    assert not kept or not math.isnan(kept[0].reward), "a NaN-reward trajectory passed min_reward=1.0"


def test_read_trajectories_accepts_messages_that_are_not_a_list_of_messages(tmp_path):
    """DEFECT (low): ``list(obj["messages"])`` turns ``"messages": "hello"`` into five one-letter
    'messages'; ``envfactory export sft`` then dies with ``AttributeError: 'str' object has no attribute
    'get'`` and a traceback instead of the DatasetError naming file and line that the docstring promises."""
    from gym_envfactory.training.export.episodes import read_trajectories

    p = _write(tmp_path, {"env": "HotelBooking", "task_id": "hotel-001", "reward": 1.0, "messages": "hello"})
    with pytest.raises(DatasetError):
        list(read_trajectories(p))


def test_rl_rows_export_a_window_whose_reward_is_constant_under_the_default_config():
    """DEFECT: ``_has_criteria`` counts expected outputs as something to score, but the default reward
    has ``output_weight=0``: a turn with no ground-truth call and no state change but an expected output
    (a recall question) is exported, and every policy gets the same 0.0 on it (zero GRPO advantage,
    exactly what the filter is meant to drop).  Should: the row is left out, or its reward varies."""
    from gym_envfactory.training.export.rl import rl_rows
    from tests.conftest import LIBRARY_STATE, LibraryDB, borrow_book, get_book

    define_environment(
        "LibraryRecallAdv", LibraryDB, [get_book, borrow_book], initial_state=LIBRARY_STATE,
        tasks=[{"task_id": "recall", "turns": [
            {"user": "Borrow Dune for ada.", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}],
             "expected_outputs": ["L-0001"]},
            {"user": "What was the loan id again?", "expected_outputs": ["L-0001"]}]}])
    rows = [r for r in rl_rows(["LibraryRecallAdv"]) if r["extra_info"]["turn"] == 1]
    for row in rows:
        rewards = set()
        for reply in ("Your loan id is L-0001.", "I do not remember."):
            env = EnvFactoryEnv("LibraryRecallAdv")
            env.reset(options=row["extra_info"]["reset_options"])
            _, r, *_ = env.step(reply)
            rewards.add(r)
        assert len(rewards) > 1, f"exported window scores {rewards} for a right and a wrong answer"



def test_alpaca_records_mark_tool_results_as_observations_not_user_words():
    """Issue 28 part 6: a tool result in an alpaca instruction is a <tool_response> block, never bare JSON."""
    trajectories = list(oracle_trajectories(ENV, split="test"))
    records = to_alpaca(trajectories)
    after_call = [r for r in records if r["history"] and r["history"][-1][1].startswith("<tool_call>")]
    assert after_call
    for r in after_call:
        assert r["instruction"].startswith("<tool_response>\n") and r["instruction"].endswith("\n</tool_response>")
    results = [m["content"] for m in trajectories[0].messages if m["role"] == "tool"]
    first = next(r for r in records if r["task_id"] == trajectories[0].task_id and r["instruction"].startswith("<tool_response>"))
    assert first["instruction"] == f"<tool_response>\n{results[0]}\n</tool_response>"
    sharegpt = to_sharegpt(trajectories[:1])[0]["conversations"]
    assert all(set(turn) == {"from", "value"} for turn in sharegpt)
