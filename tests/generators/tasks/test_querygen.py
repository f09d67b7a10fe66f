"""QueryGen end to end over real HTTP against the scripted OpenAI-compatible server: every stage has a
scripted answer (querygen_script.py), and each bad answer is filtered and counted, never a crash.  Also:
a do-nothing agent never solves a task that leaves the state unchanged; the first solving attempt is
stored (filtered) as a verified trajectory that `envfactory export sft` reads; `envfactory gen tasks`
output for each catalog environment passes validation and scores 1.0 with the oracle."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.generators.cli import gen_app
from gym_envfactory.generators.tasks.qgsolve import task_environment
from gym_envfactory.generators.tasks.querygen import (
    QueryGen,
    QueryGenOptions,
    get_preset,
    write_tasks,
)
from gym_envfactory.llm import LLMConfig
from gym_envfactory.replay import task_reference
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.testing import ScriptedChatServer
from gym_envfactory.training.export.cli import export_app
from gym_envfactory.training.export.episodes import read_trajectories
from gym_envfactory.validation import validate_environment

from .querygen_script import ADA_CALLS, GRACE_CALLS, FakeChecker, Script, make_chain

CALLS = {"ada": ADA_CALLS, "grace": GRACE_CALLS, "ada-copy": ADA_CALLS}
# ground truths that end where they started: a do-nothing agent reaches their final state
FREEZE_UNFREEZE = [{"env": "PersonalFinance", "name": "freeze_card", "arguments": {"card_id": "CARD-5001"}},
                   {"env": "PersonalFinance", "name": "unfreeze_card", "arguments": {"card_id": "CARD-5001"}}]
READ_ONLY = [{"env": "PersonalFinance", "name": "list_accounts", "arguments": {"customer_id": "CU-001"}},
             {"env": "PersonalFinance", "name": "get_account_balance", "arguments": {"account_id": "ACC-1001"}}]
MARK = re.compile(r"<<c=(\S+) s=([\d,]+)>>")
BAD_CALL = {"name": "get_hotel_booking", "arguments": {"booking_id": "BK-9999"}}


def chain_of(chain_id: str, calls: list[dict]) -> dict:
    """A chain over ``calls``' own environment (every input user-provided; the checker runs ``calls``)."""
    env = calls[0]["env"]
    return {"chain_id": chain_id, "seed": 0, "envs": [env],
            "steps": [{"tool": f"{env}.{c['name']}", "env": env, "name": c["name"],
                       "inputs": {a: {"source": "user"} for a in c["arguments"]}} for c in calls]}


class AgentScript(Script):
    """``Script`` with two more agents: ``lazy`` answers every turn without a call; ``sloppy`` opens
    turn 0 with a failing call and repeats its read-only call before going on.  ``no_patches``: the
    state stage keeps the default state (environments other than HotelBooking)."""

    def __init__(self, *args: Any, no_patches: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.no_patches = no_patches

    def answer_state(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"content": json.dumps({"patches": {}})} if self.no_patches else super().answer_state(body)

    def answer_solve(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.agent == "lazy":
            return {"content": "All done, nothing else needed."}
        msgs = body["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        m = MARK.search(msgs[last_user]["content"])
        if self.agent != "sloppy" or m is None or not m.group(2).startswith("0"):
            return super().answer_solve(body)
        calls = self.calls_by_chain[m.group(1)]
        steps = [int(x) for x in m.group(2).split(",")]
        plan = [BAD_CALL, calls[0], calls[0], *(calls[i] for i in steps[1:])]
        done = sum(1 for x in msgs[last_user:] if x["role"] == "assistant" and x.get("tool_calls"))
        if done >= len(plan):
            return {"content": "All done."}
        return {"tool_calls": [{"function": {"name": plan[done]["name"], "arguments": plan[done]["arguments"]}}]}


def run_qg(server: ScriptedChatServer, chains: list[dict], tmp_path: Path, *, preset: str = "sft-conv", k: int = 2,
           checker: FakeChecker | None = None, cache: bool = True, checkpoints: bool = True, **opts):
    config = LLMConfig(model="scripted", base_url=server.base_url, max_retries=0,
                       cache_dir=tmp_path / "cache" if cache else None)
    options = QueryGenOptions(preset=preset, k=k, seed=0, date="2026-12-01",
                              checkpoint_dir=tmp_path / "ckpt" if checkpoints else None, **opts)
    qg = QueryGen(config, options, checker=checker or FakeChecker(CALLS))
    outcomes = asyncio.run(qg.generate(chains))
    return qg, outcomes


def test_end_to_end_sft_conv_tasks_replay_and_score_one(tmp_path: Path) -> None:
    script = Script(CALLS)
    chains = [make_chain("ada", ADA_CALLS), make_chain("grace", GRACE_CALLS), make_chain("ada-copy", ADA_CALLS)]
    with ScriptedChatServer(script) as server:
        qg, outcomes = run_qg(server, chains, tmp_path)
        n_requests = len(server.requests)
    assert [o.status for o in outcomes] == ["kept", "kept", "kept"], [(o.reason, o.detail) for o in outcomes]
    out = tmp_path / "tasks.jsonl"
    stats = write_tasks(outcomes, out, extra={"llm_usage": qg.usage_by_stage, "user_simulator": qg.user_stats})
    # ada-copy has ada's ground truth on the same generated state: deduplicated
    assert stats["tasks"] == 2 and stats["drop_reasons"] == {"duplicate": 1}
    assert Path(stats["stats_path"]).is_file()
    # the verified trajectories (the user simulator's messages replayed) beside the tasks
    records = [json.loads(line) for line in Path(stats["trajectories_path"]).read_text().splitlines()]
    assert stats["trajectories"] == 2 and [r["task_id"] for r in records] == \
        [json.loads(line)["task_id"] for line in out.read_text().splitlines()]
    assert all(r["reward"] == pytest.approx(1.0) and sum(m["role"] == "user" for m in r["messages"]) == 3
               for r in records)
    on_disk = json.loads(Path(stats["stats_path"]).read_text())
    assert on_disk["turns_per_task"]["mean"] == 3.0  # turn, clarification, answer turn
    assert on_disk["clarification_share"] == 1.0
    assert on_disk["notes"]["redundant_calls_removed"] == 1  # grace's repeated lookup
    assert on_disk["state"] == {"generated": 2, "default": 1} or on_disk["state"].get("generated") == 3
    assert on_disk["llm_usage"]["solve"]["requests"] > 0 and on_disk["user_simulator"]["requests"] > 0
    # the file is in the catalog format; its ground truth replays; the oracle scores 1.0
    spec = get_environment("HotelBooking")
    tasks = TaskSet.from_jsonl("HotelBooking", out)
    assert len(tasks) == 2
    env_spec = task_environment(spec, list(tasks))
    for t in tasks:
        assert t.provenance["kind"] == "querygen" and t.provenance["preset"] == "sft-conv"
        assert {"model", "chain_id", "seed", "date"} <= set(t.provenance)
        assert t.provenance["pass_at_k"] == {"k": 2, "solved": 2}
        assert isinstance(t.initial_state, dict)
        assert t.initial_state["name"] == "small" and t.initial_state["patches"]  # the generated state
        assert [u.clarification for u in t.turns] == [False, True, False]
        assert t.turns[0].expected_outputs in (["G-001"], ["G-002"])  # others not in the results: dropped
        assert "BK-0007" in t.turns[2].expected_outputs
        task_reference(env_spec, t)
        env = EnvFactoryEnv(env_spec, task_id=t.task_id)
        try:
            res = run_episode(env, OraclePolicy(), task_id=t.task_id)
        finally:
            env.close()
        assert res.reward == pytest.approx(1.0), res.components
    # the state stage's first answer failed validation: its error text went back to the model
    state_bodies = [b for b in server.requests if b["messages"][0]["content"].startswith("QueryGen stage: state")]
    retry = [b for b in state_bodies if len(b["messages"]) > 2]
    assert retry and "credit_limit" in retry[0]["messages"][-1]["content"]
    # resume: a re-run reads the checkpoints and makes no request
    with ScriptedChatServer(Script(CALLS)) as server2:
        _, again = run_qg(server2, chains, tmp_path)
        assert server2.requests == []
    assert all(o.resumed for o in again) and [o.task for o in again] == [o.task for o in outcomes]
    assert n_requests > 0


def test_llm_cache_alone_makes_a_rerun_free(tmp_path: Path) -> None:
    chains = [make_chain("ada", ADA_CALLS)]
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server:
        _, first = run_qg(server, chains, tmp_path, preset="sft-non-conv", checkpoints=False)
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server2:
        _, second = run_qg(server2, chains, tmp_path, preset="sft-non-conv", checkpoints=False)
        assert server2.requests == []  # every stage, attempt and user turn replayed from the cache
    assert first[0].status == second[0].status == "kept"
    assert first[0].task == second[0].task
    assert all(not t.get("clarification") for t in first[0].task["turns"])


@pytest.mark.parametrize("stage, bad, reason", [
    ("scenario", ["this is not json", "still not json"], "scenario_invalid_json"),
    ("turns", ["{not json", "nope"], "turns_invalid_json"),
    ("turns", [json.dumps({"turns": [{"steps": [0, 2], "user": "x"}, {"steps": [1], "user": "y"}]})], "turns_invalid"),
])
def test_bad_stage_output_drops_the_chain_with_a_reason(tmp_path: Path, stage: str, bad: list[str], reason: str) -> None:
    with ScriptedChatServer(Script(CALLS, overrides={stage: bad})) as server:
        qg, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path)
    assert outcomes[0].status == "dropped" and outcomes[0].reason == reason
    stats = write_tasks(outcomes, tmp_path / "tasks.jsonl")
    assert stats["tasks"] == 0 and stats["drop_reasons"] == {reason: 1}
    assert (tmp_path / "tasks.jsonl").read_text() == ""


def test_state_that_never_validates_falls_back_to_the_default_state(tmp_path: Path) -> None:
    bad = json.dumps({"patches": {"HotelBooking": [{"op": "replace", "path": "/max_nights", "value": "many"}]}})
    with ScriptedChatServer(Script(CALLS, overrides={"state": [bad]})) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, state_retries=2)
        n_state = sum(1 for b in server.requests if b["messages"][0]["content"].startswith("QueryGen stage: state"))
    assert n_state == 3  # first answer + 2 retries, each with the validation error
    o = outcomes[0]
    assert o.status == "kept" and "state_fallback:state_invalid" in o.notes
    assert o.task["initial_state"] == "small" and o.task["provenance"]["state"] == "default"
    stats = write_tasks(outcomes, tmp_path / "t.jsonl")
    assert stats["state"] == {"default": 1, "fallback:state_invalid": 1}


def test_invalid_json_state_and_refine_are_counted_not_fatal(tmp_path: Path) -> None:
    with ScriptedChatServer(Script(CALLS, overrides={"state": ["<<<", "???"], "refine": ["x", "y"]})) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path)
    o = outcomes[0]
    assert o.status == "kept", (o.reason, o.detail)
    assert "state_fallback:state_invalid_json" in o.notes and "refine_invalid_json" in o.notes
    assert not any(t.get("clarification") for t in o.task["turns"])


def test_unsolvable_chain_is_dropped_before_any_request(tmp_path: Path) -> None:
    checker = FakeChecker(CALLS, broken={"ada"})
    with ScriptedChatServer(Script(CALLS)) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, checker=checker)
        assert server.requests == []
    assert outcomes[0].reason == "unsolvable_chain" and "H-999" in outcomes[0].detail


def test_generated_state_the_chain_does_not_run_on_falls_back(tmp_path: Path) -> None:
    # a valid state in which Ada's card is blocked: the chain fails on it, the default state is used
    blocked = json.dumps({"patches": {"HotelBooking": [
        {"op": "replace", "path": "/guests/G-001/payment_methods/PM-0001/status", "value": "blocked"}]}})
    with ScriptedChatServer(Script(CALLS, overrides={"state": [blocked]})) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path)
    o = outcomes[0]
    assert o.status == "kept" and "state_fallback:state_chain_failed" in o.notes
    assert o.task["initial_state"] == "small"


def test_all_k_attempts_failing_drops_the_task(tmp_path: Path) -> None:
    with ScriptedChatServer(Script(CALLS, agent="wrong")) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, k=3)
        n_solve = sum(1 for b in server.requests if not b["messages"][0]["content"].startswith("QueryGen stage:"))
    o = outcomes[0]
    assert o.status == "dropped" and o.reason == "unsolved" and o.solved == 0 and o.k == 3
    assert n_solve >= 3 * 4  # three full attempts
    stats = write_tasks(outcomes, tmp_path / "t.jsonl")
    assert stats["drop_reasons"] == {"unsolved": 1}


def test_agent_answering_garbage_is_unsolved_not_a_crash(tmp_path: Path) -> None:
    with ScriptedChatServer(Script(CALLS, overrides={"solve": ["<tool_call>{broken"]})) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, k=2)
    assert outcomes[0].reason == "unsolved"


def test_user_simulator_that_never_stops_is_capped(tmp_path: Path) -> None:
    # the simulator never says done; with a cap of 2 turns the 3-turn task's episodes end early
    with ScriptedChatServer(Script(CALLS, user_done=False)) as server:
        qg, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, user_max_turns=2)
    o = outcomes[0]
    assert o.status == "dropped" and o.reason == "user_ended_early"
    assert qg.user_stats["capped"] >= 2


def test_rl_preset_drops_tasks_every_attempt_solves(tmp_path: Path) -> None:
    assert get_preset("rl-non-conv").drop_all_solved and not get_preset("rl-non-conv").conversational
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, preset="rl-non-conv")
    assert outcomes[0].reason == "too_easy"
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("sft")


def test_endpoint_down_is_a_counted_drop_and_not_checkpointed(tmp_path: Path) -> None:
    with ScriptedChatServer([{"status": 400, "message": "bad model"}] * 5) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path)
    assert outcomes[0].reason == "llm_request_failed"
    assert not list((tmp_path / "ckpt").glob("*.json"))


def test_replay_failure_drops_a_task_before_writing(tmp_path: Path) -> None:
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server:
        _, outcomes = run_qg(server, [make_chain("ada", ADA_CALLS)], tmp_path, preset="sft-non-conv")
    task = outcomes[0].task
    task["turns"][-1]["ground_truth"][-1]["arguments"]["payment_method_id"] = "PM-0003"  # not Ada's card
    stats = write_tasks(outcomes, tmp_path / "t.jsonl")
    assert stats["tasks"] == 0 and stats["drop_reasons"] == {"replay_failed": 1}


def test_checkpoints_of_another_preset_or_chain_are_not_resumed(tmp_path: Path) -> None:
    # review: the default checkpoint dir is shared; a run with another preset must not return old tasks
    chains = [make_chain("ada", ADA_CALLS)]
    with ScriptedChatServer(Script(CALLS)) as server:
        _, first = run_qg(server, chains, tmp_path, preset="sft-conv")
    assert first[0].status == "kept", (first[0].reason, first[0].detail)
    assert any(t.get("clarification") for t in first[0].task["turns"])
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server2:
        _, second = run_qg(server2, chains, tmp_path, preset="sft-non-conv")
        assert server2.requests  # not resumed from the sft-conv checkpoint
    assert not second[0].resumed and second[0].task["provenance"]["preset"] == "sft-non-conv"
    assert not any(t.get("clarification") for t in second[0].task["turns"])
    # same chain id, other steps: not resumed either
    other = make_chain("ada", ADA_CALLS[:2])
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server3:
        _, third = run_qg(server3, [other], tmp_path, preset="sft-non-conv")
    assert not third[0].resumed
    # the same run again: resumed, no request
    with ScriptedChatServer(Script(CALLS, conversational=False)) as server4:
        _, again = run_qg(server4, [other], tmp_path, preset="sft-non-conv")
        assert server4.requests == []
    assert again[0].resumed and again[0].task == third[0].task


def test_rl_preset_with_k_1_is_refused_not_silently_empty() -> None:
    # review: with k=1 every solved task is "too_easy", so rl-non-conv would write nothing
    with pytest.raises(ValueError, match="k >= 2"):
        QueryGenOptions(preset="rl-non-conv", k=1)
    with pytest.raises(ValueError, match="unknown preset"):
        QueryGenOptions(preset="nope")
    assert QueryGenOptions(preset="sft-non-conv", k=1).k == 1


# ------------------------------------------------------------------ do-nothing attempts, verified trajectories
@pytest.mark.parametrize("calls", [FREEZE_UNFREEZE, READ_ONLY], ids=["freeze-unfreeze", "read-only"])
def test_an_agent_that_calls_nothing_does_not_solve_a_task_that_leaves_the_state_unchanged(
        tmp_path: Path, calls: list[dict]) -> None:
    by_chain = {"pf": calls}
    with ScriptedChatServer(AgentScript(by_chain, conversational=False, agent="lazy", no_patches=True)) as server:
        _, outcomes = run_qg(server, [chain_of("pf", calls)], tmp_path, preset="sft-non-conv",
                             checker=FakeChecker(by_chain), checkpoints=False)
    o = outcomes[0]
    assert o.status == "dropped" and o.reason == "unsolved" and o.solved == 0, (o.status, o.reason, o.detail)
    assert "calls were not made" in o.detail
    # the same task, solved by making the calls: kept, with its verified trajectory
    with ScriptedChatServer(AgentScript(by_chain, conversational=False, no_patches=True)) as server:
        _, outcomes = run_qg(server, [chain_of("pf", calls)], tmp_path / "good", preset="sft-non-conv",
                             checker=FakeChecker(by_chain), checkpoints=False)
    o = outcomes[0]
    assert o.status == "kept" and o.solved == 2, (o.reason, o.detail)
    assert o.trajectory is not None and o.trajectory["reward"] == pytest.approx(1.0)


def test_first_solving_attempt_is_stored_filtered_and_exports_as_sft(tmp_path: Path) -> None:
    chains = [make_chain("ada", ADA_CALLS)]
    with ScriptedChatServer(AgentScript(CALLS, conversational=False, agent="sloppy")) as server:
        _, outcomes = run_qg(server, chains, tmp_path, preset="sft-non-conv", k=2)
    o = outcomes[0]
    assert o.status == "kept" and o.trajectory is not None, (o.reason, o.detail, o.notes)
    out = tmp_path / "build" / "tasks.jsonl"
    stats = write_tasks(outcomes, out, extra={"model": "scripted"})
    path = tmp_path / "build" / "tasks.trajectories.jsonl"
    assert stats["trajectories_path"] == str(path) and stats["trajectories"] == 1
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    # the `envfactory rollout --out` record format (EpisodeResult.to_json), messages last
    assert list(record) == ["task_id", "env", "policy", "seed", "reward", "components", "steps", "terminated",
                            "truncated", "perturbations", "errors", "tools", "messages"]
    assert record["task_id"] == json.loads(out.read_text())["task_id"] and record["env"] == "HotelBooking"
    assert record["policy"] == "querygen:scripted" and record["terminated"] and not record["errors"]
    assert record["reward"] == pytest.approx(1.0) and record["components"]["p_len"] == 0
    calls = [tc["function"] for m in record["messages"] if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    # the failing call and the repeated read-only lookup are filtered out: exactly the ground truth
    assert [c["name"] for c in calls] == [c["name"] for c in ADA_CALLS]
    assert not any(m["role"] == "tool" and '"error"' in m["content"] for m in record["messages"])
    assert {m["role"] for m in record["messages"]} == {"system", "user", "assistant", "tool"}
    # `envfactory export sft --from-trajectories` reads it
    [traj] = list(read_trajectories(path))
    assert traj.task_id == record["task_id"] and traj.reward == 1.0 and traj.tools
    sft = tmp_path / "sft" / "sft.json"
    res = CliRunner().invoke(export_app, ["sft", "--from-trajectories", str(path), "--out", str(sft)])
    assert res.exit_code == 0, res.output
    [conv] = json.loads(sft.read_text())
    kinds = [t["from"] for t in conv["conversations"]]
    assert kinds.count("function_call") == len(ADA_CALLS) and kinds[0] == "human" and kinds[-1] == "gpt"


# ------------------------------------------------------------------ `envfactory gen tasks` over the catalog
FINANCE_EDGES = [
    ("list_accounts", "[].account_id", "get_account_balance", "account_id"),
    ("list_accounts", "[].account_id", "transfer_between_accounts", "from_account_id"),
    ("list_accounts", "[].account_id", "transfer_between_accounts", "to_account_id"),
    ("list_accounts", "[].account_id", "pay_payee", "from_account_id"),
    ("list_payees", "[].payee_id", "pay_payee", "payee_id"),
    ("add_payee", "payee_id", "pay_payee", "payee_id"),
    ("list_cards", "[].card_id", "freeze_card", "card_id"),
    ("list_cards", "[].card_id", "unfreeze_card", "card_id"),
    ("list_cards", "[].card_id", "report_card_lost", "card_id"),
    ("search_transactions", "transactions[].transaction_id", "recategorize_transaction", "transaction_id"),
    ("search_transactions", "transactions[].transaction_id", "dispute_transaction", "transaction_id"),
    ("dispute_transaction", "dispute_id", "get_dispute", "dispute_id"),
]


def test_cli_tasks_of_each_catalog_environment_validate_and_score_one(tmp_path: Path) -> None:
    """`gen tasks ENV --graph G --n 1` on a graph of all three environments: the CLI samples inside ENV,
    the output tasks pass validation (ground-truth replay) and the oracle scores 1.0 on each."""
    pytest.importorskip("networkx")
    from gym_envfactory.generators.tasks import sampler
    from gym_envfactory.generators.tasks.graph import save_graph

    from .test_sampler import CALENDAR_EDGES, add_env, hotel_graph

    G = add_env(add_env(hotel_graph(), "TeamCalendar", CALENDAR_EDGES), "PersonalFinance", FINANCE_EDGES)
    graph = save_graph(G, tmp_path / "graph.json")
    runner = CliRunner()
    for env in ("HotelBooking", "TeamCalendar", "PersonalFinance"):
        # the chain the CLI will sample for this seed, checked here to script the model's answers
        for seed in range(40):
            [chain] = sampler.sample_chains(G, 1, seed=seed, envs=[env])
            check = sampler.check_chain(chain)
            if check.ok and len(check.calls) <= 4:
                break
        else:
            pytest.fail(f"no runnable short chain for {env}")
        script = AgentScript({chain.chain_id: check.calls}, conversational=False, no_patches=env != "HotelBooking")
        out = tmp_path / env / "tasks.jsonl"
        with ScriptedChatServer(script) as server:
            res = runner.invoke(gen_app, ["tasks", env, "--graph", str(graph), "--n", "1", "--seed", str(seed),
                                          "--preset", "sft-non-conv", "--k", "1", "--model", "scripted",
                                          "--base-url", server.base_url, "--out", str(out),
                                          "--checkpoint-dir", str(tmp_path / env / "qg")])
        assert res.exit_code == 0, (env, res.output)
        spec = get_environment(env)
        tasks = TaskSet.from_jsonl(env, out)
        assert len(tasks) == 1 and tasks.ids()[0] == f"qg-{chain.chain_id}"
        env_spec = task_environment(spec, list(tasks))
        report = validate_environment(env_spec, require_coverage=False, lint=False)
        assert report.passed and report.n_tasks == 1, (env, report.failures())
        for t in tasks:
            e = EnvFactoryEnv(env_spec, task_id=t.task_id)
            try:
                assert run_episode(e, OraclePolicy(), task_id=t.task_id).reward == pytest.approx(1.0), env
            finally:
                e.close()
        [record] = [json.loads(x) for x in (tmp_path / env / "tasks.trajectories.jsonl").read_text().splitlines()]
        assert record["env"] == env and record["reward"] == pytest.approx(1.0)
        assert json.loads((tmp_path / env / "tasks.stats.json").read_text())["trajectories"] == 1
