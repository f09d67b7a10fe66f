"""Issue 28 part 3: the catalog as a verifiers environment, played by the real ``verifiers`` package (0.4,
``verifiers.v1``: its eval runner, the ``null`` chat harness, its interception server and MCP toolset) against
the scripted chat server; the rewards equal ``envfactory rollout``'s on the same model replies.

Runs where verifiers is installed (``make test-verifiers``: its own venv, verifiers pins mcp 2.0 and openai 2.x);
elsewhere this folder is not collected (tests/training/conftest.py).  The ``null`` harness is a uv script:
the first run installs its dependencies (openai, mcp, httpx) with uv from PyPI, later runs use uv's cache.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys

import pytest

vf = pytest.importorskip("verifiers.v1")

from gym_envfactory.testing import ScriptedChatServer  # noqa: E402
from gym_envfactory.training import verifiers_env  # noqa: E402
from tests.training.hotel_scripts import CASES, rollout_record  # noqa: E402


def vf_episodes(tmp_path, task_ids, scripts, env="HotelBooking", num_rollouts=1, **kwargs):
    """Play ``task_ids`` through verifiers' eval runner, one rollout each, one after the other; the episodes."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    replies = [r for s in scripts for r in s]
    os.environ["ENVFACTORY_TEST_KEY"] = "x"
    with ScriptedChatServer(replies) as server:
        cfg = EvalConfig.model_validate({
            "env": {"taskset": {"id": verifiers_env.TASKSET_ID, "env": env, "task_ids": task_ids,
                                **kwargs},
                    "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}},
            "model": "m", "client": {"base_url": server.base_url, "api_key_var": "ENVFACTORY_TEST_KEY"},
            "num_rollouts": num_rollouts, "max_concurrent": 1, "push": False, "rich": None, "output_dir": str(tmp_path / "vf"), "clean": True})
        episodes = asyncio.run(run_eval(cfg))
        assert not server.errors, server.errors
    return episodes


def trace_of(episode):
    (trace,) = episode.traces
    return trace


# verifiers' null harness runs as a uv script: use the uv installed next to this Python (make test-verifiers
# installs it there), else one on PATH
_HERE = os.path.dirname(sys.executable)
if os.path.exists(os.path.join(_HERE, "uv")) and _HERE not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _HERE + os.pathsep + os.environ.get("PATH", "")
pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="verifiers' null harness needs uv")


def test_oracle_and_wrong_attempts_score_as_envfactory_rollout(tmp_path):
    cases = CASES
    expected = [rollout_record(tmp_path, tid, script) for tid, script in cases]
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


@pytest.mark.parametrize("kind", ["generated", "imported"])
def test_generated_and_imported_packages_through_verifiers(tmp_path, monkeypatch, kind):
    """An EnvGen-style and an imported package: two rollouts of one task in one run, the oracle then a surplus
    call; each rollout's own session (the second starts from 0 again).  ``trust=True``: the isolated backend
    (the default for such packages) needs the ``server`` extra, whose mcp 2.3 pin verifiers' mcp 2.0 excludes
    from this venv; run the resources server in another environment and pass ``resources_url`` to keep it."""
    from gym_envfactory import EnvFactoryEnv, ToolCall
    from gym_envfactory.environment.catalog import register_catalog
    from tests.backends.test_isolation import write_package
    from tests.training.hotel_scripts import call

    name = f"Vf{kind.title()}"
    write_package(tmp_path / "catalog", name, kind=kind)
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path / "catalog"))
    register_catalog()
    attempts = [[call("bump")], [call("bump"), call("bump")]]
    scripts = [[*({"content": None, "tool_calls": [c]} for c in calls), {"content": "It is 1 now."}] for calls in attempts]
    expected = []
    for calls in attempts:
        env = EnvFactoryEnv(name, trust=True)
        env.reset(options={"task_id": "probe-001", "start_turn": 0, "end_turn": 1})
        for _ in calls:
            env.step(ToolCall("bump", {}))
        env.step({"role": "assistant", "content": "It is 1 now."})
        expected.append(env.last_score)
        env.close()
    episodes = vf_episodes(tmp_path, ["probe-001"], scripts, env=name, num_rollouts=2, env_kwargs={"trust": True})
    assert len(episodes) == 2
    got = sorted((trace_of(e) for e in episodes), key=lambda t: t.info["nemo_gym"]["p_len"])
    for exp, trace in zip(expected, got, strict=True):
        assert trace.reward == pytest.approx(exp.reward)
        assert trace.info["nemo_gym"]["reward_components"]["r_state"] == exp.r_state
    assert got[0].reward == 1.0 and got[1].reward < 1.0
