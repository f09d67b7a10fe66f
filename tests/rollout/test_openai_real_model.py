"""The ``openai`` policy against a REAL OpenAI-compatible server (issue 14, item 0): llama-cpp-python's
server with SmolLM2-135M-Instruct (``tests/llama_server.py``).

- ``test_rollout_against_a_real_local_server`` (slow; skipped unless ``ENVFACTORY_LLAMA_PYTHON`` is set):
  ``envfactory rollout --policy openai`` in both tool formats; real, messy model output flows through the
  env without a crash and every episode is written.
- ``test_replay_of_a_recorded_real_exchange`` (always runs): the fixture holds a real SmolLM2 exchange
  recorded through :class:`~gym_envfactory.testing.RecordingProxy`; replaying it reproduces the same
  trajectories, so a change in what the policy sends is caught without the model.  Re-record after a
  deliberate change of the request format: ``ENVFACTORY_LLAMA_PYTHON=... python tests/rollout/test_openai_real_model.py --record``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.rollout.policies import OpenAIPolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.testing import RecordingProxy, ScriptedChatServer

try:
    from tests.llama_server import LLAMA_PYTHON, SKIP_REASON, llama_cpp_server
except ImportError:  # run as a script (--record)
    from llama_server import LLAMA_PYTHON, SKIP_REASON, llama_cpp_server  # type: ignore[no-redef]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2_hotel_exchange.jsonl"
EXPECTED = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2_hotel_exchange.expected.json"
TASKS = ["hotel-001", "hotel-003"]
SYSTEM = "You are a hotel booking assistant. Use the tools to help the user."  # fixed: stable request hashes


def _episodes(base_url: str) -> list[dict]:
    out = []
    for task_id in TASKS:
        policy = OpenAIPolicy(model="smollm2", base_url=base_url, max_retries=0, tool_format="prompt",
                              max_tokens=96, timeout=300)
        env = EnvFactoryEnv("HotelBooking", system_prompt=SYSTEM, max_steps=4)
        r = run_episode(env, policy, task_id=task_id, keep_policy_errors=True)
        env.close()
        out.append({"task_id": task_id, "reward": r.reward, "steps": r.steps, "error": r.error,
                    "texts": [m.get("content") for m in r.messages if m["role"] == "assistant"]})
    return out


def test_replay_of_a_recorded_real_exchange():
    if not FIXTURE.exists():
        pytest.fail(f"missing fixture {FIXTURE}: record it (see the module docstring)")
    expected = json.loads(EXPECTED.read_text())
    with ScriptedChatServer.from_file(FIXTURE) as server:
        got = _episodes(server.base_url)
    assert not server.errors, f"{server.errors} (the requests changed: re-record, see the module docstring)"
    assert got == expected


@pytest.mark.slow
@pytest.mark.parametrize("tool_format", ["native", "prompt"])
def test_rollout_against_a_real_local_server(tmp_path, tool_format):
    if not LLAMA_PYTHON:
        pytest.skip(SKIP_REASON)
    from gym_envfactory.cli import app

    out = tmp_path / "t.jsonl"
    with llama_cpp_server(LLAMA_PYTHON, tmp_path / "server.log") as base:
        r = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "openai", "--model", "smollm2",
                                     "--base-url", base, "--tool-format", tool_format, "--episodes", "2",
                                     "--max-tokens", "96", "--timeout", "300", "--out", str(out)],
                               env={"OPENAI_API_KEY": "EMPTY"})
    assert "Traceback" not in r.output, r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all(0.0 <= x["reward"] <= 1.0 for x in lines)


def _record() -> None:
    if not LLAMA_PYTHON:
        raise SystemExit(SKIP_REASON)
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.unlink(missing_ok=True)
    log = FIXTURE.with_suffix(".server.log")
    with llama_cpp_server(LLAMA_PYTHON, log) as base, RecordingProxy(base, FIXTURE) as proxy:
        got = _episodes(proxy.base_url)
    log.unlink(missing_ok=True)
    EXPECTED.write_text(json.dumps(got, indent=1) + "\n")
    print(f"recorded {proxy.recorded} exchanges to {FIXTURE}: {json.dumps(got)[:400]}")


if __name__ == "__main__" and "--record" in sys.argv:
    _record()
