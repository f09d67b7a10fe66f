"""Issue 28, part 1: OpenEnv's own clients (openenv-core) play whole episodes on `envfactory serve`'s
/openenv/<Env> endpoint and get the reward `envfactory rollout` gives for the same actions.  Runs in
`.venv-openenv` (`make test-openenv`); not collected where openenv is not installed."""

from __future__ import annotations

import json
import urllib.request

import pytest
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from gym_envfactory import ToolCall
from tests.server.test_app import start_server
from tests.training.episodes_helper import reference

CASES = [("hotel-003", "oracle"), ("hotel-003", "wrong"), ("hotel-002", "noisy"), ("hotel-001", "oracle")]


@pytest.fixture(scope="module")
def server():
    proc, url = start_server("HotelBooking", token=None)  # openenv-core 0.3.0 clients send no headers
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _action(a):
    if isinstance(a, ToolCall):
        return {"type": "call_tool", "tool_name": a.name, "arguments": a.arguments}
    return {"type": "message", "content": a}


@pytest.mark.parametrize(("task_id", "policy"), CASES)
def test_generic_client_episode_reward_equals_rollout(server, task_id, policy):
    ref, actions = reference("HotelBooking", task_id, policy)
    with GenericEnvClient(base_url=server + "/openenv/HotelBooking").sync() as env:
        result = env.reset(task_id=task_id)
        assert result.done is False and result.observation["task_id"] == task_id
        assert result.observation["messages"][-1]["role"] == "user"
        total, turn_components = 0.0, []
        for a in actions:
            result = env.step(_action(a))
            total += result.reward
            if "turn_reward_components" in result.observation:
                turn_components.append(result.observation["turn_reward_components"])
        assert result.done is True
    assert total == pytest.approx(ref.reward)
    comps = result.observation["reward_components"]
    for k in ("reward", "r_traj", "r_state", "r_output", "p_len"):
        assert comps[k] == ref.components[k], k
    assert len(turn_components) == len(ref.components["turns"])
    for mine, theirs in zip(turn_components, ref.components["turns"], strict=True):
        assert mine["r_traj"] == theirs["r_traj"] and mine["reward"] == theirs["reward"]
        assert mine["p_len"] == theirs["surplus"] + theirs["invalid"]
    if policy == "oracle":
        assert total == pytest.approx(1.0)
    if policy == "wrong":
        assert total < 1.0 and comps["p_len"] >= 1


def test_mcp_tool_client_sees_openenv_mcp_types(server):
    with MCPToolClient(base_url=server + "/openenv/HotelBooking").sync() as env:
        env.reset(task_id="hotel-001")
        tools = env.list_tools()
        assert "list_hotel_destinations" in {t.name for t in tools}
        assert all(t.input_schema.get("type") == "object" for t in tools)
        step = env.step(CallToolAction(tool_name="list_hotel_destinations", arguments={}))
        obs = step.observation
        assert isinstance(obs, CallToolObservation) and obs.error is None and step.done is False
        assert "Vienna" in {c["name"] for c in obs.result["data"]}
        bad = env.step(CallToolAction(tool_name="no_such_tool", arguments={})).observation
        assert bad.error is not None and bad.error.error_type.value == "tool_not_found"
        assert env.step(ListToolsAction()).observation.tools


def test_each_connection_is_its_own_episode(server):
    url = server + "/openenv/HotelBooking"
    with GenericEnvClient(base_url=url).sync() as a, GenericEnvClient(base_url=url).sync() as b:
        a.reset(task_id="hotel-001")
        b.reset(task_id="hotel-002")
        a.step({"type": "call_tool", "tool_name": "list_hotel_destinations", "arguments": {}})
        sa, sb = a.state(), b.state()
        assert (sa["task_id"], sa["step_count"]) == ("hotel-001", 1)
        assert (sb["task_id"], sb["step_count"]) == ("hotel-002", 0)
        assert sa["episode_id"] != sb["episode_id"]
        with pytest.raises(RuntimeError, match="unknown action type"):
            b.step({"type": "jump"})
        assert b.step({"type": "message", "content": "Which dates?"}).observation["turn_ended"] is True


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, json.loads(r.read())


def test_http_routes(server):
    base = server + "/openenv/HotelBooking"
    assert _get(base + "/health") == (200, {"status": "healthy"})
    status, schema = _get(base + "/schema")
    assert status == 200 and {"action", "observation", "state"} <= set(schema)
    req = urllib.request.Request(base + "/reset", data=json.dumps({"task_id": "hotel-001"}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read())
    assert body["done"] is False and body["observation"]["task_id"] == "hotel-001"
    req = urllib.request.Request(base + "/step", data=b'{"action": {}}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 409 and b"/ws" in e.value.read()
