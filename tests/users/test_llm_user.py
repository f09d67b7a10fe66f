"""The LLM user simulator over real HTTP (scripted server), inside gym episodes, and the
``envfactory gen tasks`` command (bad input: one line, no traceback; a scripted run with the real sampler)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from gym_envfactory.environment.tasks import Task
from gym_envfactory.generators.cli import gen_app
from gym_envfactory.llm import LLMConfig
from gym_envfactory.testing import ScriptedChatServer
from gym_envfactory.users.llm import LLMUser, known_values, run_sync
from tests.generators.tasks.querygen_script import ADA_CALLS, Script, make_chain

TASK = Task.model_validate({
    "task_id": "t", "env": "HotelBooking",
    "turns": [{"user": "Find my profile, I'm ada.lovelace@example.com"},
              {"user": "Book the twin room for me", "clarification": True},
              {"user": "Use card PM-0001"}],
    "provenance": {"user_profile": {"name": "Ada", "persona": "brisk"}}})


def user_reply(message: str, done: bool = False) -> dict:
    return {"content": json.dumps({"message": message, "done": done})}


def config(server: ScriptedChatServer, tmp_path: Path | None = None, **kw) -> LLMConfig:
    return LLMConfig(model="scripted", base_url=server.base_url, max_retries=0,
                     cache_dir=tmp_path / "cache" if tmp_path else None, **kw)


def test_user_answers_clarification_with_the_known_value_and_ends_when_done(tmp_path: Path) -> None:
    assert known_values(TASK) == [{"turn": 1, "answer": "Use card PM-0001"}]
    with ScriptedChatServer([user_reply("hi, ada.lovelace@example.com here"), user_reply("PM-0001 please"),
                             user_reply("thanks, bye", done=True)]) as server:
        user = LLMUser(config=config(server, tmp_path, seed=7))
        assert user([], TASK, 0) == "hi, ada.lovelace@example.com here"
        conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Which card?"}]
        assert user(conv, TASK, 2) == "PM-0001 please"
        assert user(conv, TASK, 1) is None  # the model said done
        body = server.requests[1]
        system = body["messages"][0]["content"]
        assert system.startswith("QueryGen stage: user") and "Use card PM-0001" in system and "brisk" in system
        assert "Which card?" in body["messages"][1]["content"]
        assert body["seed"] == 7  # seeded through the request
    assert user.stats == {"requests": 3, "fallbacks": 0, "done": 1, "capped": 0}
    # cached: the same calls again make no request
    with ScriptedChatServer([]) as server2:
        again = LLMUser(config=config(server2, tmp_path, seed=7))
        assert again([], TASK, 0) == "hi, ada.lovelace@example.com here"
        assert server2.requests == []


def test_never_stopping_user_is_capped_and_bad_json_falls_back() -> None:
    with ScriptedChatServer(lambda body: user_reply("more, more, more")) as server:
        user = LLMUser(config=config(server), max_turns=2)
        outs = [user([], TASK, i) for i in range(5)]
        assert outs == ["more, more, more", "more, more, more", None, None, None]
        assert user.stats["capped"] == 3 and len(server.requests) == 2
    with ScriptedChatServer(lambda body: {"content": "no json here"}) as server:
        user = LLMUser(config=config(server))
        assert user([], TASK, 0) == TASK.turns[0].user  # scripted fallback after the repair round
        assert user.stats["fallbacks"] == 1 and len(server.requests) == 2
    with pytest.raises(ValueError):
        LLMUser()
    with pytest.raises(ValueError):
        LLMUser(config=LLMConfig(model="m"), max_turns=0)


def test_user_is_usable_inside_a_running_event_loop() -> None:
    with ScriptedChatServer(lambda body: user_reply("from a loop")) as server:
        user = LLMUser(config=config(server))

        async def main() -> str | None:
            return user([], TASK, 0)  # sync call while this thread runs a loop

        assert asyncio.run(main()) == "from a loop"

    async def seven() -> int:
        return 7

    assert run_sync(seven()) == 7


def test_gym_make_with_llm_user_drives_an_episode() -> None:
    replies = iter(["Which cities can I book hotels in?"])
    with ScriptedChatServer(lambda body: user_reply(next(replies, "that's all"), done=False)) as server:
        env = gym.make("envfactory/HotelBooking-v0", user=LLMUser(config=config(server)), task_id="hotel-001")
        try:
            obs, info = env.reset(seed=0)
            assert obs[-1] == {"role": "user", "content": "Which cities can I book hotels in?"}
            _, _, terminated, _, _ = env.step({"role": "assistant", "content": "",
                                               "tool_calls": [{"id": "c1", "type": "function", "function": {
                                                   "name": "list_hotel_destinations", "arguments": "{}"}}]})
            _, reward, terminated, _, _ = env.step("Kyoto, Lisbon, Montreal and Vienna.")
            assert terminated and reward == pytest.approx(1.0)
        finally:
            env.close()


# ------------------------------------------------------------------------------------------------ CLI
runner = CliRunner()


@pytest.mark.parametrize("args, needle", [
    (["HotelBooking", "--model", "m", "--preset", "sft"], "unknown preset"),
    (["NoSuchEnv", "--model", "m"], "NoSuchEnv"),
    (["HotelBooking"], "--model"),
    (["HotelBooking", "--model", "m", "--structured-output", "grammar"], "--structured-output must be"),
])
def test_cli_bad_input_is_one_line_without_traceback(args: list[str], needle: str, monkeypatch) -> None:
    monkeypatch.delenv("ENVFACTORY_MODEL", raising=False)
    res = runner.invoke(gen_app, ["tasks", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_cli_generates_tasks_from_chains_with_the_real_sampler(tmp_path: Path) -> None:
    sampler = pytest.importorskip("gym_envfactory.generators.tasks.sampler")
    chain = sampler.Chain.model_validate(make_chain("cli-ada", ADA_CALLS))
    check = sampler.check_chain(chain)
    assert check.ok, check.reason
    chains = tmp_path / "chains.jsonl"
    sampler.write_chains([chain], chains)
    script = Script({"cli-ada": check.calls}, conversational=False)
    out = tmp_path / "tasks.jsonl"
    with ScriptedChatServer(script) as server:
        res = runner.invoke(gen_app, ["tasks", "HotelBooking", "--preset", "sft-non-conv", "--model", "scripted",
                                      "--base-url", server.base_url, "--out", str(out), "--k", "2",
                                      "--chains", str(chains), "--checkpoint-dir", str(tmp_path / "qg")])
    assert res.exit_code == 0, res.output
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    task = json.loads(lines[0])
    assert task["provenance"]["chain_id"] == "cli-ada" and task["provenance"]["preset"] == "sft-non-conv"
    stats = json.loads((tmp_path / "tasks.stats.json").read_text())
    assert stats["tasks"] == 1 and stats["preset"]["name"] == "sft-non-conv" and stats["k"] == 2
    assert "QueryGen" in res.output
