"""Issue 28 part 2: NeMo Gym's own servers drive the catalog's resources server.  The real ``nemo-gym`` package
(0.4.0): its ``SimpleAgent`` (``responses_api_agents/simple_agent``, the agent NeMo RL rollouts go through),
its ``VLLMModel`` server (Responses API in front of an OpenAI-compatible chat endpoint: here the scripted chat
server) and its ``ServerClient`` with a global config naming the three servers; the agent's ``/run`` seeds a
session, plays the tool calls against our ``/<tool>`` endpoints and posts ``/verify``.  The rewards equal
``envfactory rollout``'s on the same model replies.

nemo-gym 0.4.0 declares Python >= 3.12 and pulls ray, mlflow and wandb; ``make test-nemo-gym`` installs it
into its own venv with ``--ignore-requires-python --no-deps`` and only the modules these servers import
(its code runs on 3.11).  Elsewhere this folder is not collected (tests/training/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time

import pytest

pytest.importorskip("nemo_gym.base_resources_server")

import requests  # noqa: E402
import uvicorn  # noqa: E402
from nemo_gym.base_resources_server import BaseVerifyResponse  # noqa: E402
from nemo_gym.config_types import BaseServerConfig  # noqa: E402
from nemo_gym.server_utils import ServerClient  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig  # noqa: E402
from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig  # noqa: E402

from gym_envfactory.testing import ScriptedChatServer  # noqa: E402
from gym_envfactory.training.nemo_gym import dataset_rows, resources_app  # noqa: E402
from tests.training.hotel_scripts import CASES, rollout_record  # noqa: E402

HOST = "127.0.0.1"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """NeMo Gym's config parser (Hydra) writes ``outputs/<date>/`` in the working directory: keep it in tmp_path."""
    monkeypatch.chdir(tmp_path)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nemo_stack(script, env="HotelBooking", monkeypatch=None):
    """Our resources server, NeMo Gym's model server (over a scripted chat server) and its simple agent, in one
    event loop (NeMo Gym's HTTP client is one global aiohttp session, bound to the loop that first used it:
    each stack starts without one)."""
    import nemo_gym.server_utils

    if monkeypatch is not None:
        monkeypatch.setattr(nemo_gym.server_utils, "_GLOBAL_AIOHTTP_CLIENT", None)
    with ScriptedChatServer(script) as chat:
        ports = {"envfactory": free_port(), "policy_model": free_port(), "agent": free_port()}
        config = OmegaConf.create({
            "envfactory": {"resources_servers": {"envfactory": {"host": HOST, "port": ports["envfactory"]}}},
            "policy_model": {"responses_api_models": {"vllm_model": {"host": HOST, "port": ports["policy_model"]}}},
            "agent": {"responses_api_agents": {"simple_agent": {"host": HOST, "port": ports["agent"]}}},
        })
        client = ServerClient(head_server_config=BaseServerConfig(host=HOST, port=free_port()), global_config_dict=config)
        model = VLLMModel(config=VLLMModelConfig(name="policy_model", host=HOST, port=ports["policy_model"],
                                                 entrypoint="app.py", base_url=chat.base_url, api_key="x", model="m",
                                                 return_token_id_information=False, uses_reasoning_parser=False),
                          server_client=client)
        agent = SimpleAgent(config=SimpleAgentConfig(
            name="agent", host=HOST, port=ports["agent"], entrypoint="app.py",
            resources_server={"type": "resources_servers", "name": "envfactory"},
            model_server={"type": "responses_api_models", "name": "policy_model"}), server_client=client)
        apps = {"envfactory": resources_app(env), "policy_model": model.setup_webserver(),
                "agent": agent.setup_webserver()}
        servers = [uvicorn.Server(uvicorn.Config(apps[n], host=HOST, port=ports[n], log_level="warning")) for n in apps]

        async def main():
            await asyncio.gather(*(s.serve() for s in servers))

        thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not all(s.started for s in servers):
            assert thread.is_alive() and time.monotonic() < deadline, "the NeMo Gym servers did not start"
            time.sleep(0.05)
        try:
            yield f"http://{HOST}:{ports['agent']}", chat
        finally:
            for s in servers:
                s.should_exit = True
            thread.join(timeout=10)


def test_simple_agent_runs_score_as_envfactory_rollout(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nemo-gym"])  # NeMo Gym parses its global config from the command line
    rows = {r["reset_options"]["task_id"]: r for r in dataset_rows("HotelBooking")}
    expected = [rollout_record(tmp_path, tid, script) for tid, script in CASES]
    assert expected[0]["reward"] == 1.0 and expected[1]["reward"] < 0.5
    # one stack for every case (NeMo Gym's global HTTP client outlives an event loop): the rollouts one by one
    with nemo_stack([reply for _, script in CASES for reply in script], monkeypatch=monkeypatch) as (agent_url, chat):
        bodies = []
        for tid, _ in CASES:
            res = requests.post(f"{agent_url}/run", json=rows[tid], timeout=120)
            assert res.status_code == 200, (tid, res.text)
            bodies.append(res.json())
        assert not chat.errors and len(chat.requests) == sum(len(script) for _, script in CASES)
    for (tid, _), exp, body in zip(CASES, expected, bodies, strict=True):
        BaseVerifyResponse.model_validate(body)  # NeMo Gym's own response model
        assert body["reward"] == pytest.approx(exp["reward"]), tid
        for key in ("r_traj", "r_state", "r_output", "p_len"):
            assert body["reward_components"][key] == pytest.approx(exp["components"][key]), (tid, key)


@pytest.mark.parametrize("kind", ["generated", "imported"])
def test_generated_and_imported_packages_through_the_simple_agent(tmp_path, monkeypatch, kind):
    """An EnvGen-style and an imported package, their episodes on the isolated backend (the default for them):
    the oracle, then a surplus call, each in its own session; rewards as the Gymnasium env gives them."""
    from gym_envfactory import EnvFactoryEnv, ToolCall
    from gym_envfactory.environment.catalog import register_catalog
    from tests.backends.test_isolation import write_package
    from tests.training.hotel_scripts import call

    monkeypatch.setattr(sys, "argv", ["nemo-gym"])
    name = f"Nemo{kind.title()}"
    write_package(tmp_path / "catalog", name, kind=kind)
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path / "catalog"))
    register_catalog()
    row = dataset_rows(name)[0]
    attempts = [1, 2]  # bumps
    expected = []
    for n in attempts:
        env = EnvFactoryEnv(name)
        env.reset(options=row["reset_options"])
        for _ in range(n):
            env.step(ToolCall("bump", {}))
        env.step({"role": "assistant", "content": "It is 1 now."})
        expected.append(env.last_score.reward)
        env.close()
    script = [r for n in attempts for r in [*({"content": None, "tool_calls": [call("bump")]} for _ in range(n)),
                                            {"content": "It is 1 now."}]]
    with nemo_stack(script, env=name, monkeypatch=monkeypatch) as (agent_url, _):
        got = [requests.post(f"{agent_url}/run", json=row, timeout=120).json()["reward"] for _ in attempts]
    assert got == pytest.approx(expected) and got[0] == 1.0 and got[1] < 1.0


def test_parallel_and_double_encoded_calls_through_the_simple_agent(tmp_path, monkeypatch):
    """What the fix of the review's findings rests on, through NeMo Gym's own agent: two model responses of
    parallel calls (16 surplus and the right one) are two steps, as in ``envfactory rollout`` (reward 0.5, not a
    truncated 0.0), and arguments the model double-encoded (docs/cases.md C09), which the agent posts as a JSON
    string, run as the object they hold."""
    import json

    from tests.training.hotel_scripts import call

    monkeypatch.setattr(sys, "argv", ["nemo-gym"])
    rows = {r["reset_options"]["task_id"]: r for r in dataset_rows("HotelBooking")}
    search = {"city": "Vienna", "check_in": "2026-12-10", "check_out": "2026-12-13", "guests": 2, "min_stars": 4,
              "amenities": ["parking"]}
    surplus = [call("list_hotel_destinations")] * 16
    parallel = [{"content": None, "tool_calls": surplus[:8]},
                {"content": None, "tool_calls": [*surplus[8:], call("search_hotels", **search)]},
                {"content": "Schoenbrunn Garden Inn fits."}]
    double = [{"content": None, "tool_calls": [{"type": "function", "function": {
                  "name": "search_hotels", "arguments": json.dumps(json.dumps(search))}}]},
              {"content": "Schoenbrunn Garden Inn fits."}]
    cases = [("hotel-002", parallel), ("hotel-002", double)]
    expected = [rollout_record(tmp_path, tid, script) for tid, script in cases]
    assert expected[0]["reward"] == pytest.approx(0.5) and expected[1]["reward"] == 1.0
    with nemo_stack([r for _, script in cases for r in script], monkeypatch=monkeypatch) as (agent_url, chat):
        bodies = [requests.post(f"{agent_url}/run", json=rows[tid], timeout=120).json() for tid, _ in cases]
        assert not chat.errors
    for (tid, _), exp, body in zip(cases, expected, bodies, strict=True):
        assert body["reward"] == pytest.approx(exp["reward"]), tid
        for key in ("r_traj", "r_state", "r_output", "p_len"):
            assert body["reward_components"][key] == pytest.approx(exp["components"][key]), (tid, key)
