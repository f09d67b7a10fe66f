"""The Gymnasium contract (docs/architecture.md, "The Gymnasium contract") on the programmatic Library environment."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env
from pydantic import BaseModel

from gym_envfactory import ToolError, define_environment, tool
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.groups import make_group
from gym_envfactory.envs.parsing import ToolCall

BORROW = '<tool_call>{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}</tool_call>'


def test_check_env_passes_without_warnings(library):
    env = gym.make("envfactory/Library-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


class Tally(BaseModel):
    count: int = 0
    log: list[str] = []


@tool(read_only=True)
def read_tally(state: Tally) -> int:
    """Current count."""
    return state.count


@tool
def increment(state: Tally, *, by: int = 1, note: str = "") -> int:
    """Increase the count."""
    if by < 1:
        raise ToolError("by must be >= 1", code="invalid_amount")
    state.count += by
    state.log.append(note)
    return state.count


@tool(destructive=True)
def clear_tally(state: Tally) -> int:
    """Clear the count."""
    if state.count == 0:
        raise ToolError("already zero", code="invalid_state")
    state.count = 0
    return 0


def test_environment_defined_in_code_runs_under_gym_make():
    define_environment("Tally", Tally, [read_tally, increment, clear_tally], tasks=[
        {"task_id": "inc", "turns": [{"user": "add three", "ground_truth": [{"name": "increment", "arguments": {"by": 3}}]}]}])
    env = gym.make("envfactory/Tally-v0")
    obs, info = env.reset(seed=0)
    assert obs[-1] == {"role": "user", "content": "add three"} and {t["function"]["name"] for t in info["tools"]} == {"read_tally", "increment", "clear_tally"}
    obs, r, term, trunc, info = env.step({"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "increment", "arguments": '{"by": "3"}'}}]})
    assert obs == [{"role": "tool", "tool_call_id": "1", "name": "increment", "content": "3"}] and not term
    obs, r, term, trunc, info = env.step("Done, the count is 3.")
    assert term and not trunc and r == 1.0 and info["reward_components"]["r_state"] == 1.0
    check_env(env.unwrapped)


def test_full_episode_multi_turn_and_info(library):
    env = gym.make("envfactory/Library-v0", task_id="borrow-return")
    obs, info = env.reset(seed=3)
    assert [m["role"] for m in obs] == ["system", "user"] and info["n_turns"] == 2
    obs, r, term, trunc, info = env.step([ToolCall("borrow_book", {"book_id": "B2", "member": "bob", "days": 7})])
    assert info["tool_results"][0]["ok"] and r == 0.0
    obs, r, term, trunc, info = env.step("Done.")
    assert info["turn_ended"] and info["turn_score"]["reward"] == 1.0 and obs[-1]["content"].startswith("Actually")
    obs, r, term, trunc, info = env.step('<tool_call>{"name": "return_book", "arguments": {"loan_id": "L-0001"}}</tool_call>'
                                          + BORROW)
    assert len(obs) == 2 and all(m["role"] == "tool" for m in obs)
    obs, r, term, trunc, info = env.step("All set.")
    assert term and r == 1.0 and info["score"]["matched"] == 3 and info["state_diff"] == []
    with pytest.raises(ResetNeeded):
        env.step("more")


def test_parse_errors_are_observations_and_counted(library):
    env = EnvFactoryEnv("Library", task_id="borrow-dune")
    env.reset()
    obs, r, term, trunc, info = env.step('<tool_call>{"name": "borrow_book", "arguments": {oops</tool_call>' + BORROW)
    assert not term and [e["type"] for e in info["errors"]] == ["parse_error"]
    assert "not valid JSON" in obs[0]["content"] and obs[1]["content"].startswith("{")
    assert env.messages[-3]["tool_calls"][0]["function"]["name"] == "borrow_book"
    obs, r, term, trunc, info = env.step("Loan L-0001 is yours.")
    assert term and info["score"]["invalid"] == 1 and r == pytest.approx(1.0 - 0.05)


def test_truncation_on_step_limits(library):
    env = EnvFactoryEnv("Library", task_id="borrow-dune", max_steps=3)
    env.reset()
    for _ in range(3):
        obs, r, term, trunc, info = env.step('<tool_call>{"name": "get_book", "arguments": {"book_id": "B2"}}</tool_call>')
    assert trunc and not term and info["truncated_reason"] == "max_steps"
    assert info["score"]["surplus"] == 2 and info["score"]["r_traj"] == 0.0 and r < 0.5
    env = EnvFactoryEnv("Library", task_id="borrow-dune", max_steps_per_turn=2)
    env.reset()
    env.step(BORROW)
    assert env.step(BORROW)[3]


def test_task_selection_seeded_split_and_options(library):
    env = EnvFactoryEnv("Library")
    a = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
    b = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert a == b and len(set(a)) > 1
    env = EnvFactoryEnv("Library", split="test")
    assert {env.reset(seed=s)[1]["task_id"] for s in range(5)} == {"borrow-return"}
    assert env.reset(options={"task_id": "lookup"})[1]["task_id"] == "lookup"
    with pytest.raises(KeyError):
        EnvFactoryEnv("Library", task_id="missing")


def test_pluggable_user_source(library):
    seen = []

    def user(conversation, task, turn):
        seen.append((len(conversation), turn))
        return None if turn >= 1 else "Please lend Dune to ada (simulated)."

    env = EnvFactoryEnv("Library", task_id="borrow-return", user=user)
    obs, _ = env.reset()
    assert obs[-1]["content"].endswith("(simulated).")
    obs, r, term, trunc, info = env.step("ok")
    assert term and seen == [(0, 0), (3, 1)]
    assert info["score"]["r_traj"] == 0.0  # the scripted ground truth was not done


def test_turn_reward_mode_sums_to_mean_turn_reward(library):
    env = EnvFactoryEnv("Library", task_id="borrow-return", reward_mode="turn")
    env.reset()
    total = 0.0
    for a in [[ToolCall("borrow_book", {"book_id": "B2", "member": "bob", "days": 7})], "ok", "ok"]:
        total += env.step(a)[1]
    assert total == pytest.approx(1.0 / 2 + 0.0 / 2)  # turn 1 perfect; turn 2 did nothing: R_traj 0, R_state 0


def test_make_vec_and_group(library):
    vec = gym.make_vec("envfactory/Library-v0", num_envs=3, vectorization_mode="sync", task_id="borrow-dune")
    obs, info = vec.reset(seed=0)
    assert len(obs) == 3 and all(o[-1]["content"] == "Borrow Dune for ada." for o in obs)
    obs, rew, term, trunc, info = vec.step([BORROW, BORROW, "no"])
    assert list(term) == [False, False, True]
    vec.close()

    group = make_group("envfactory/Library-v0", 4, options={"task_id": "borrow-dune"})
    assert len(group) == 4 and group.observation[-1]["content"] == "Borrow Dune for ada."
    group.step([BORROW, BORROW, BORROW + BORROW, "nothing to do"])
    res = group.step(["Loan L-0001.", "done", "done", None])
    assert group.done and res[3] is None
    # member 2 booked twice: one surplus call and a wrong final state
    assert group.rewards[:3] == [1.0, 1.0, pytest.approx(0.5 * 1.0 + 0.5 * 0.0 - 0.05)] and group.rewards[3] < 0.5
    states = [e.session.state()["books"]["B1"]["copies"] for e in group.envs]
    assert states == [1, 1, 0, 2]  # each fork wrote only to itself


def test_fork_midway_is_independent(library):
    env = EnvFactoryEnv("Library", task_id="borrow-return")
    env.reset()
    env.step([ToolCall("borrow_book", {"book_id": "B2", "member": "bob", "days": 7})])
    f = env.fork()
    f.step([ToolCall("return_book", {"loan_id": "L-0001"})])
    assert env.session.state()["loans"]["L-0001"]["status"] == "open"
    assert len(f.messages) == len(env.messages) + 2


def test_render_ansi(library):
    env = EnvFactoryEnv("Library", task_id="borrow-dune", render_mode="ansi")
    env.reset()
    env.step(BORROW)
    text = env.render()
    assert "[user] Borrow Dune" in text and "borrow_book(" in text and "[tool]" in text
    assert env.render() == ""


def test_final_state_is_read_once_per_episode_end(library):
    """The last turn's state read is reused for the episode score (one round trip on remote backends)."""
    from unittest import mock

    from gym_envfactory.session import Session

    env = EnvFactoryEnv("Library", task_id="borrow-dune")
    env.reset()
    with mock.patch.object(Session, "frozen_state", autospec=True, side_effect=Session.frozen_state) as reads, \
            mock.patch.object(Session, "state", autospec=True, side_effect=Session.state) as dumps:
        env.step(BORROW)
        *_, term, _, info = env.step("Loan L-0001.")
    # in process the state is read as a frozen state (no serialisation), once
    assert term and info["score"]["reward"] == 1.0 and reads.call_count == 1 and dumps.call_count == 0


# ---------------------------------------------------------------------------- training-facing behaviour


def test_record_episode_statistics_works_with_its_default_key():
    from gymnasium.wrappers import RecordEpisodeStatistics

    from gym_envfactory.rollout.policies import OraclePolicy

    env = RecordEpisodeStatistics(gym.make("envfactory/HotelBooking-v0"))
    env.reset(seed=0)
    policy = OraclePolicy()
    policy.begin(env.unwrapped)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(policy.act(env.unwrapped))
        done = term or trunc
    assert info["episode"]["r"] == 1.0 and info["episode"]["l"] >= 1  # Gymnasium's statistics
    assert info["score"]["reward"] == 1.0  # ours, every component


def test_time_limit_truncation_still_reports_a_score():
    env = gym.make("envfactory/HotelBooking-v0", max_episode_steps=2)
    env.reset(seed=0)
    env.step('<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>')
    _, r, term, trunc, info = env.step('<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>')
    # the env found the outer TimeLimit at reset and truncated itself at the same step: reward and score
    assert trunc and not term and info["truncated_reason"] == "max_steps"
    assert r == info["score"]["reward"] and "score" in info  # eager at the end, not computed on demand
    assert info["score"]["matched"] == 0 and info["score"]["surplus"] >= 1 and 0.0 <= info["score"]["reward"] <= 1.0
    assert info["reward_components"]["reward"] == info["score"]["reward"]
    import copy
    import pickle

    assert type(pickle.loads(pickle.dumps(info))) is dict and type(copy.copy(info)) is dict


def test_raw_history_keeps_the_model_text_exactly_with_parsed_calls_beside_it():
    text = '<think>look first</think>\n<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>'
    raw_env = EnvFactoryEnv("HotelBooking", history="raw")
    raw_env.reset(seed=0)
    raw_env.step(text)
    assistant = raw_env.messages[2]
    assert assistant["content"] == text and "tool_calls" not in assistant
    assert assistant["parsed_tool_calls"][0]["function"]["name"] == "list_hotel_destinations"
    parsed_env = EnvFactoryEnv("HotelBooking")
    parsed_env.reset(seed=0)
    parsed_env.step(text)
    assert parsed_env.messages[2]["tool_calls"] and parsed_env.messages[2]["raw"] == text
    with pytest.raises(ValueError):
        EnvFactoryEnv("HotelBooking", history="rewritten")


def test_async_reset_and_step_do_not_block_the_event_loop():
    import asyncio

    async def main():
        envs = [EnvFactoryEnv("HotelBooking") for _ in range(8)]
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.gather(*(e.areset(seed=i) for i, e in enumerate(envs)))
        results = await asyncio.gather(*(e.astep("All set, thanks.") for e in envs))
        task.cancel()
        return ticks, results

    ticks, results = asyncio.run(main())
    assert ticks > 0 and len(results) == 8 and all(isinstance(r[1], float) for r in results)


def test_turn_window_starts_from_the_ground_truth_state_and_scores_only_its_turns():
    from gym_envfactory.replay import task_reference
    from gym_envfactory.rollout.policies import OraclePolicy

    env = EnvFactoryEnv("HotelBooking")
    task = next(t for t in env.tasks if len(t.turns) > 1 and t.turns[1].ground_truth)
    ref = task_reference(env.environment, task)
    obs, info = env.reset(options={"task_id": task.task_id, "start_turn": 1, "end_turn": 2})
    assert info["turn"] == 1 and env.session.state() == ref.turn_states[0]
    assert [m["role"] for m in obs].count("user") == 2
    policy = OraclePolicy()
    policy.begin(env)
    done = False
    while not done:
        _, r, term, trunc, step_info = env.step(policy.act(env))
        done = term or trunc
    assert term and r == 1.0 and step_info["score"]["n_ground_truth"] == len(task.turns[1].ground_truth)
    for bad in ({"start_turn": 2, "end_turn": 1}, {"start_turn": -1}, {"end_turn": 99}, {"start_turn": True},
                {"start_turn": "1"}):
        with pytest.raises(ValueError, match="start_turn"):
            env.reset(options={"task_id": task.task_id, **bad})


class Counter(BaseModel):
    value: int = 0


@tool
def add_to_counter(state: Counter, *, amount: int) -> int:
    """Add `amount` to the counter."""
    state.value += amount
    return state.value


def test_system_prompt_of_an_environment_without_description_or_clock():
    """Issue 14: a code-defined environment without a description read "Environment: Counter: Counter"."""
    define_environment("Counter", Counter, [add_to_counter], tasks=[
        {"task_id": "add-2", "turns": [{"user": "Add two.", "ground_truth": [{"name": "add_to_counter", "arguments": {"amount": 2}}]}]}])
    env = gym.make("envfactory/Counter-v0")
    obs, _ = env.reset()
    system = obs[0]["content"]
    assert system.startswith("You are an assistant that acts for the user through tools. Environment: Counter\nCall tools")
    assert "Counter: Counter" not in system and "Today is" not in system  # no clock in the state: no date line
    env.close()


class Diary(BaseModel):
    """A diary with a clock."""

    now: str = "2026-12-01T09:00:00"
    entries: list[str] = []


@tool
def write_entry(state: Diary, *, text: str) -> int:
    """Write an entry."""
    state.entries.append(text)
    return len(state.entries)


def test_system_prompt_date_comes_from_each_episode_initial_state():
    """The date is the episode's clock, read at each reset from the task's initial state (not the
    environment's default state), and a custom prompt gets it through ``{clock}``."""
    define_environment("Diary", Diary, [write_entry], initial_states={
        "small": Diary(), "leap": Diary(now="2028-02-29T17:45:00"), "day": Diary(now="2027-03-01")}, tasks=[
        {"task_id": f"t-{s}", "initial_state": s,
         "turns": [{"user": "Write hi.", "ground_truth": [{"name": "write_entry", "arguments": {"text": "hi"}}]}]}
        for s in ("small", "leap", "day")])
    env = gym.make("envfactory/Diary-v0")
    want = {"t-small": "Today is Tuesday 2026-12-01; the time is 09:00.\n",
            "t-leap": "Today is Tuesday 2028-02-29; the time is 17:45.\n", "t-day": "Today is Monday 2027-03-01.\n"}
    for tid, line in want.items():
        obs, _ = env.reset(options={"task_id": tid})
        assert obs[0]["content"].startswith(f"You are an assistant that acts for the user through tools. "
                                            f"Environment: Diary: A diary with a clock.\n{line}Call tools"), obs[0]["content"]
    env.close()
    custom = gym.make("envfactory/Diary-v0", system_prompt="{description} | {clock}")
    obs, _ = custom.reset(options={"task_id": "t-leap"})
    assert obs[0]["content"] == "Diary: A diary with a clock. | Today is Tuesday 2028-02-29; the time is 17:45.\n"
    custom.close()
