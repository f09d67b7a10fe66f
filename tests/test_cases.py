"""One test (at least) per case of docs/cases.md, named after the case id.

Where a case is a whole kind of fault, the test runs over every catalog environment, not one example.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gym_envfactory import DatasetError, Session, get_environment
from gym_envfactory.environment.states import task_environments, task_initial_state
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import ParseError, ToolCall, parse_action
from gym_envfactory.replay import TaskReference, task_reference
from gym_envfactory.reward import (
    RewardConfig,
    TurnRecord,
    contains_output,
    match_calls,
    score_episode,
)
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from tests.shipped import SHIPPED

CATALOG = SHIPPED


def write_tasks(spec, k=2):
    """The first ``k`` tasks with at least one write call in their ground truth, single environment."""
    out = []
    for t in spec.tasks:
        if len(t.envs) == 1 and any(not spec.tools[c.name].read_only for turn in t.turns for c in turn.ground_truth):
            out.append(t)
        if len(out) == k:
            break
    return out


def test_C01_duplicate_covers_two():
    gt = [("weather", {"city": "Oslo"}, []), ("weather", {"city": "Lima"}, [])]
    dup = [("weather", {"city": "Lima"}, False), ("weather", {"city": "Lima"}, False)]
    good = [("weather", {"city": "Lima"}, False), ("weather", {"city": "Oslo"}, False)]
    cfg = RewardConfig()
    s_dup = score_episode([TurnRecord(calls=dup, state={})], TaskReference.from_parts([gt], [{}], [[]]), {}, cfg)
    s_good = score_episode([TurnRecord(calls=good, state={})], TaskReference.from_parts([gt], [{}], [[]]), {}, cfg)
    assert s_dup.r_traj == 0.5 and s_good.r_traj == 1.0
    assert match_calls([(n, a) for n, a, _ in dup], gt).count(None) == 1


@pytest.mark.parametrize("env_name", CATALOG)
def test_C02_reset_after_wrong_attempt(env_name):
    env = EnvFactoryEnv(env_name)
    for task in write_tasks(env.environment, 3):
        noisy = run_episode(env, NoisyPolicy(p=1.0, seed=1), task_id=task.task_id)
        assert noisy.reward < 1.0
        for _ in range(2):
            assert run_episode(env, OraclePolicy(), task_id=task.task_id).reward == 1.0


def test_C02_reset_same_process_library(library):
    env = EnvFactoryEnv("Library", task_id="borrow-dune")
    env.reset()
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "bob"})] * 2)
    env.step("done")
    r = run_episode(env, OraclePolicy(), task_id="borrow-dune")
    assert r.reward == 1.0 and "L-0001" in env.messages[3]["content"]


@pytest.mark.parametrize("env_name", CATALOG)
def test_C03_interleaved_sessions(env_name):
    spec = get_environment(env_name)
    a_task, b_task = write_tasks(spec, 2)
    calls = {t.task_id: [c for turn in t.turns for c in turn.ground_truth] for t in (a_task, b_task)}
    sa = Session.from_states(task_environments(spec, a_task), task_initial_state(spec, a_task))
    sb = Session.from_states(task_environments(spec, b_task), task_initial_state(spec, b_task))
    qa, qb = list(calls[a_task.task_id]), list(calls[b_task.task_id])
    while qa or qb:  # A, B, A, B, ...
        if qa:
            c = qa.pop(0)
            assert sa.call(c.name, c.arguments).ok
        if qb:
            c = qb.pop(0)
            assert sb.call(c.name, c.arguments).ok
    assert sa.state() == task_reference(spec, a_task).final_state
    assert sb.state() == task_reference(spec, b_task).final_state


def test_C03_book_cancel_book_library(library):
    a, b = Session(library), Session(library)
    a.call("borrow_book", {"book_id": "B1", "member": "ada"})
    b.call("borrow_book", {"book_id": "B1", "member": "bob"})
    b.call("return_book", {"loan_id": "L-0001"})
    a.call("borrow_book", {"book_id": "B2", "member": "ada"})
    solo = Session(library)
    solo.call("borrow_book", {"book_id": "B1", "member": "ada"})
    solo.call("borrow_book", {"book_id": "B2", "member": "ada"})
    assert a.state_bytes() == solo.state_bytes()
    assert b.state()["books"]["B1"]["copies"] == 2 and b.state()["loans"]["L-0001"]["status"] == "returned"


REPLAY_SCRIPT = """
import hashlib, json, sys
import gym_envfactory
from gym_envfactory import Session, get_environment
from gym_envfactory.environment.states import task_environments, task_initial_state
out = {}
for env_name in sys.argv[1:]:
    spec = get_environment(env_name)
    for t in spec.tasks:
        if len(t.envs) > 1:
            continue
        s = Session.from_states(task_environments(spec, t), task_initial_state(spec, t))
        for turn in t.turns:
            for c in turn.ground_truth:
                s.call(c.name, c.arguments)
        out[t.task_id] = hashlib.sha256(s.state_bytes()).hexdigest()
print(json.dumps(out, sort_keys=True))
"""


def test_C04_deterministic_ids_two_processes():
    runs = [subprocess.run([sys.executable, "-c", REPLAY_SCRIPT, *CATALOG], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)]
    first = json.loads(runs[0])
    assert len(first) >= 75 and runs[0] == runs[1]


@pytest.mark.parametrize("env_name", CATALOG)
def test_C05_scoring_is_read_only(env_name):
    env = EnvFactoryEnv(env_name)
    task = write_tasks(env.environment, 1)[0]
    env.reset(options={"task_id": task.task_id})
    OraclePolicy().begin(env)
    first = task.turns[0].ground_truth[0]
    env.step([ToolCall(first.name, first.arguments)])
    before_state, before_log = env.session.state_bytes(), [r.to_dict() for r in env.session.action_log]
    for _ in range(3):
        env.score()
    assert env.session.state_bytes() == before_state
    assert [r.to_dict() for r in env.session.action_log] == before_log


def test_C06_gold_replay_error(library):
    spec = library
    ts = TaskSet.from_objects(spec.name, [{"task_id": "bad", "turns": [
        {"user": "lend Dune", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}]},
        {"user": "return it twice", "ground_truth": [{"name": "return_book", "arguments": {"loan_id": "L-0001"}},
                                                      {"name": "return_book", "arguments": {"loan_id": "L-0001"}}]}]}])
    with pytest.raises(DatasetError) as ei:
        task_reference(spec, "bad", ts)
    assert (ei.value.task_id, ei.value.turn, ei.value.call) == ("bad", 1, 1) and "already returned" in str(ei.value)
    _ = spec.tasks  # the good tasks still load
    env = EnvFactoryEnv(spec)
    env.tasks = ts
    with pytest.raises(DatasetError):
        env.reset(options={"task_id": "bad"})


def test_C07_bookkeeping_fields(library):
    env = EnvFactoryEnv("Library", task_id="borrow-dune")
    env.reset()
    env.session.state_model().request_count = 99  # bookkeeping only
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "ada"})])
    *_, info = env.step("Loan L-0001.")
    assert info["score"]["r_state"] == 1.0 and info["state_diff"] == []
    env.reset()
    env.session.state_model().books["B1"].title = "Dune Messiah"  # a domain field
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "ada"})])
    *_, info = env.step("Loan L-0001.")
    assert info["score"]["r_state"] == 0.0 and info["state_diff"][0].startswith("books.B1.title")


def test_read_only_task_doing_nothing_earns_nothing(library):
    """A read-only task: an unchanged state is vacuous (no free 0.5); a write makes R_state 0."""
    env = EnvFactoryEnv("Library", task_id="lookup")
    env.reset()
    *_, info = env.step("Done.")
    assert info["score"]["r_state"] is None and "r_state" in info["score"]["vacuous"] and info["score"]["reward"] == 0.0
    env.reset()
    env.step([ToolCall("get_book", {"book_id": "B1"})])
    assert env.step("There are 2 copies.")[1] == 1.0
    env.reset()
    env.step([ToolCall("get_book", {"book_id": "B1"}), ToolCall("borrow_book", {"book_id": "B1", "member": "ada"})])
    *_, info = env.step("There are 2 copies.")
    assert info["score"]["r_state"] == 0.0 and info["score"]["reward"] == pytest.approx(0.5 - 0.05)


def test_C08_numbers_as_strings(library):
    for nights in ("3", 3, 3.0):
        s = Session(library)
        assert s.call("borrow_book", {"book_id": "B1", "member": "ada", "days": nights}).arguments["days"] == 3
    s = Session(library)
    assert s.call("set_fee", {"book_id": "B1", "fee": 5}).arguments["fee"] == 5.0
    bad = s.call("borrow_book", {"book_id": "B1", "member": "ada", "days": "3.5"})
    assert bad.error_type == "invalid_arguments" and bad.is_invalid_call
    env = EnvFactoryEnv("Library", task_id="borrow-dune")
    env.reset()
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "ada", "days": "two weeks"})])
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "ada", "days": "14"})])
    *_, info = env.step("L-0001")
    assert info["score"]["invalid"] == 1 and info["score"]["r_traj"] == 1.0 and info["reward_components"]["penalty"] == 0.05


def test_C09_double_encoded_arguments():
    plain = {"guests": [{"name": "Ada"}], "n": "42"}
    forms = [plain, json.dumps(plain), json.dumps(json.dumps(plain))]
    parsed = [parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": f}}]}).calls[0] for f in forms]
    assert all(p.arguments == plain for p in parsed) and parsed[0].arguments["n"] == "42"
    as_string = parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"guests": '[{"name": "Ada"}]'}}}]})
    assert as_string.calls[0].arguments["guests"] == '[{"name": "Ada"}]'  # decoded later by the tool's schema policy
    broken = parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"guests": ['}}]})
    assert broken.calls == [] and isinstance(broken.items[0], ParseError)


def test_C09_list_as_json_string_same_call_in_session(library):
    a, b = Session(library), Session(library)
    assert a.call("add_members", {"members": [{"name": "cy", "age": 9}]}).arguments == \
        b.call("add_members", {"members": '[{"name": "cy", "age": 9}]'}).arguments


def test_C10_token_boundary():
    assert not contains_output("100 nights", "10")
    assert contains_output("Your total is 10.", "10")
    rec = [TurnRecord(calls=[], text="That is 100 nights", state={})]
    s = score_episode(rec, TaskReference.from_parts([[]], [{}], [["10"]]), {}, RewardConfig(output_weight=1.0))
    assert s.r_output == 0.0
    rec = [TurnRecord(calls=[], text="Your total is 10.", state={})]
    assert score_episode(rec, TaskReference.from_parts([[]], [{}], [["10"]]), {}, RewardConfig(output_weight=1.0)).r_output == 1.0


def test_C11_vacuous_criterion(library):
    env = EnvFactoryEnv("Library", task_id="borrow-return", reward={"output_weight": 1.0})
    env.reset()
    env.step([ToolCall("borrow_book", {"book_id": "B2", "member": "bob", "days": 7})])
    env.step("ok")
    env.step([ToolCall("return_book", {"loan_id": "L-0001"}), ToolCall("borrow_book", {"book_id": "B1", "member": "ada"})])
    *_, info = env.step("ok")
    comp = info["reward_components"]
    assert comp["r_output"] is None and "r_output" in comp["vacuous"] and comp["reward"] == 1.0
    # a task whose only criterion is vacuous scores 0, not 1
    rec = [TurnRecord(calls=[], text="hi", state=None)]
    s = score_episode(rec, TaskReference.from_parts([[]], [{}], [[]]), {"x": 1}, RewardConfig(alpha=1.0))
    assert s.vacuous == ["r_traj"] and s.reward == 0.0


def test_C12_ask_first_turn(library):
    env = EnvFactoryEnv("Library", task_id="ask-first")
    env.reset()
    env.step([ToolCall("borrow_book", {"book_id": "B1", "member": "ada"})])  # guessed write
    _, _, _, _, info = env.step("Done, I lent you Dune.")
    assert info["turn_score"]["surplus"] == 1 and info["turn_score"]["r_state"] == 0.0
    env.step([ToolCall("borrow_book", {"book_id": "B2", "member": "ada", "days": 10})])
    *_, info = env.step("Emma is yours.")
    ep = info["score"]
    assert ep["p_len"] > 0 and ep["r_state"] == 0.0
    # the right behaviour: ask, then act
    r = run_episode(env, OraclePolicy(), task_id="ask-first")
    assert r.reward == 1.0


def test_C13_raw_model_output(library):
    raw = ('<think>Let me look both up. {"name": "get_book"}</think>'
           '<tool_call>{"name": "get_book", "arguments": {"book_id": "B1"}}</tool_call>'
           '<tool_call>{"name": "get_book", "arguments": {"book_id": "B2"}}</tool_call>')
    p = parse_action(raw)
    assert [c.arguments["book_id"] for c in p.calls] == ["B1", "B2"] and "Let me" in p.reasoning
    broken = raw.replace('{"book_id": "B1"}', '{"book_id": ')
    env = EnvFactoryEnv("Library", task_id="lookup")
    env.reset()
    obs, *_, info = env.step(broken)
    assert [r["error_type"] for r in info["tool_results"]] == ["parse_error", None]
    assert json.loads(obs[1]["content"])["book_id"] == "B2"


@pytest.mark.parametrize("env_name", CATALOG)
def test_C14_silent_no_op_write(env_name):
    """Every write tool of every catalog env, called with an id that does not exist, raises a
    ToolError the model can read and leaves the state unchanged."""
    spec = get_environment(env_name)
    checked = 0
    for tool in spec.tools.values():
        if tool.read_only:
            continue
        props = tool.input_schema.get("properties", {})
        id_params = [p for p, s in props.items() if p.endswith("_id") and s.get("type") == "string"]
        if not id_params:
            continue
        s = Session(spec, check_writes=True)
        before = s.state_bytes()
        args = {p: "ZZ-9999" for p in id_params}
        for p in tool.input_schema.get("required", []):
            if p not in args:
                args[p] = _example(props[p], tool.input_schema.get("$defs", {}))
        r = s.call(tool.name, args)
        assert not r.ok and r.error_type in ("tool_error", "invalid_arguments"), (tool.name, r)
        assert r.error and s.state_bytes() == before, tool.name
        checked += 1
    assert checked >= 3


def _example(schema, defs):
    if "$ref" in schema:
        return _example(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return _example([s for s in schema["anyOf"] if s.get("type") != "null"][0], defs)
    t = schema.get("type")
    fmt = schema.get("format")
    if fmt == "date":
        return "2026-12-20"
    if fmt == "date-time":
        return "2026-12-20T10:00:00"
    return {"integer": 1, "number": 10.0, "boolean": False, "array": [], "object": {}}.get(t, "x")


def test_C14_library_noop_write_is_caught_by_validation():
    from gym_envfactory.environment.scenarios import load_scenarios
    from gym_envfactory.validation import run_scenarios
    from tests.conftest import make_library

    spec = make_library("LibraryC14", with_bug=True, register=False)
    reports, _ = run_scenarios(spec, load_scenarios([{"scenario_id": "noop", "steps": [{"call": "buggy_noop_write", "arguments": {"book_id": "B1"}}]}]))
    assert not reports[0].passed and "silent no-op" in reports[0].failures[0]
    s = Session(spec)
    r = s.call("return_book", {"loan_id": "L-9999"})
    assert r.error_type == "tool_error" and r.error_code == "not_found"
