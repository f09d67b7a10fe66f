"""Issue 28 part 3: the catalog as a verifiers environment, played by the real ``verifiers`` package (0.4,
``verifiers.v1``: its eval runner, the ``null`` chat harness, its interception server and MCP toolset) against
the scripted chat server; the rewards equal ``envfactory rollout``'s on the same model replies.

Runs where verifiers is installed (``make test-verifiers``: its own venv, verifiers pins mcp 2.0 and openai 2.x);
elsewhere this folder is not collected (tests/training/conftest.py).  The ``null`` harness is a uv script:
the first run installs its dependencies (openai, mcp, httpx) with uv from PyPI, later runs use uv's cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys

import pytest
from typer.testing import CliRunner

vf = pytest.importorskip("verifiers.v1")

from gym_envfactory.cli import app  # noqa: E402
from gym_envfactory.testing import ScriptedChatServer  # noqa: E402
from gym_envfactory.training import verifiers_env  # noqa: E402


def call(name, **args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


ORACLE_012 = [
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("list_guest_bookings", guest_id="G-003")]},
    {"content": None, "tool_calls": [call("modify_hotel_booking", booking_id="BK-0003", check_in="2026-12-27",
                                          check_out="2026-12-31", room_type="TAT", guests=2)]},
    {"content": "Done: you now check out on the 31st; the extra night is 396."},
]
# a wrong attempt: the wrong check-out date, a repeated lookup (surplus) and a tool that does not exist (invalid)
WRONG_012 = [
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("modify_hotel_booking", booking_id="BK-0003", check_in="2026-12-27",
                                          check_out="2027-01-01", room_type="TAT", guests=2)]},
    {"content": None, "tool_calls": [call("refund_everything", booking_id="BK-0003")]},
    {"content": "All set."},
]
ORACLE_004 = [
    {"content": None, "tool_calls": [call("cancel_hotel_booking", booking_id="BK-0002", reason="")]},
    {"content": "Cancelled; 314.10 goes back to your card."},
]


def rollout_reward(tmp_path, task_id, script):
    """``envfactory rollout --policy openai`` on the same replies: its trajectory record."""
    out = tmp_path / f"{task_id}-rollout.jsonl"
    with ScriptedChatServer(script) as server:
        res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "openai", "--model", "m", "--base-url",
                                       server.base_url, "--task-id", task_id, "--out", str(out)],
                                 env={"OPENAI_API_KEY": "x"})
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def vf_episodes(tmp_path, task_ids, scripts, **kwargs):
    """Play ``task_ids`` through verifiers' eval runner, one rollout each, one after the other; the episodes."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    replies = [r for s in scripts for r in s]
    os.environ["ENVFACTORY_TEST_KEY"] = "x"
    with ScriptedChatServer(replies) as server:
        cfg = EvalConfig.model_validate({
            "env": {"taskset": {"id": verifiers_env.TASKSET_ID, "env": "HotelBooking", "task_ids": task_ids,
                                **kwargs},
                    "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}},
            "model": "m", "client": {"base_url": server.base_url, "api_key_var": "ENVFACTORY_TEST_KEY"},
            "max_concurrent": 1, "push": False, "rich": None, "output_dir": str(tmp_path / "vf"), "clean": True})
        episodes = asyncio.run(run_eval(cfg))
        assert not server.errors, server.errors
    return episodes


def trace_of(episode):
    (trace,) = episode.traces
    return trace


pytestmark = pytest.mark.skipif(shutil.which("uv") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "uv")),
                                reason="verifiers' null harness needs uv")


def test_oracle_and_wrong_attempts_score_as_envfactory_rollout(tmp_path):
    cases = [("hotel-012", ORACLE_012), ("hotel-012", WRONG_012), ("hotel-004", ORACLE_004)]
    expected = [rollout_reward(tmp_path, tid, script) for tid, script in cases]
    assert [e["reward"] for e in expected][0] == 1.0 and expected[1]["reward"] < 0.5
    got = []
    for tid, script in cases:  # one run per case: the runner orders its rollouts itself
        (episode,) = vf_episodes(tmp_path / tid / str(len(got)), [tid], [script])
        got.append(episode)
    for exp, episode in zip(expected, got, strict=True):
        trace = trace_of(episode)
        assert episode.ok and not trace.errors, trace.errors
        assert trace.reward == pytest.approx(exp["reward"])
        comps = trace.info["nemo_gym"]["reward_components"]
        for key in ("r_traj", "r_state", "r_output", "p_len"):
            assert comps[key] == pytest.approx(exp["components"][key]), key
            if comps[key] is not None:
                assert trace.metrics[key] == pytest.approx(comps[key]), key


def test_load_environment_returns_a_verifiers_env_with_one_task_per_user_turn():
    env = verifiers_env.load_environment("HotelBooking", task_ids=["hotel-003", "hotel-004"])
    assert isinstance(env, vf.Env) and isinstance(env, verifiers_env.EnvFactoryEnv)
    tasks = list(env.taskset)
    assert [t.data.name for t in tasks] == ["hotel-003:t0", "hotel-003:t1", "hotel-003:t2", "hotel-004:t0"]
    row = tasks[1].data.row
    assert row["reset_options"] == {"task_id": "hotel-003", "start_turn": 1, "end_turn": 2}
    assert {t["name"] for t in row["responses_create_params"]["tools"]} >= {"cancel_hotel_booking", "search_hotels"}
