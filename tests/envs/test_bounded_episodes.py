"""Bounded episodes (issue 10, part 6): parsing is linear in the size of a message, and the calls a
message makes that are not executed (malformed, or beyond ``max_calls_per_step``) are recorded one by
one only up to ``max_invalid_calls_per_step`` / ``max_invalid_calls_per_episode``, the rest in one
summary record per message, each still counting in ``P_len`` (docs/reward.md).  So a message of
10,000 junk ``<tool_call>`` blocks leaves a small action log and snapshot, and the episode resumes.

Work is counted, never timed (docs/architecture.md, "Guard rails"): the characters handed to the JSON
decoder (every ``json.loads`` in the process goes through ``JSONDecoder.decode``) plus the characters
the parser scans (``str.find``), compares (``startswith``) or copies (slices) on the message itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import MAX_RAW_CHARS, ParseError, ToolCall, parse_action

TASK = "hotel-004"
JUNK = '<tool_call>{"name": "cancel_hotel_booking", "arguments": {"booking_id": </tool_call>'
VALID = '<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>'

#: Messages of ``k`` blocks (or of a size proportional to ``k``) of every shape that was quadratic or
#: could be: malformed and valid blocks, unclosed tags, nested braces, huge JSON strings, tags inside
#: strings, many <think> blocks, a plain JSON list of bad calls, strings that swallow the next block.
MESSAGES: dict[str, Callable[[int], str]] = {
    "malformed": lambda k: JUNK * k,
    "valid": lambda k: VALID * k,
    "unclosed": lambda k: '<tool_call>{"name": "f", "arguments": {"x": 1}}' * k,
    "nested_braces": lambda k: ("<tool_call>" + "{" * 20 + "</tool_call>") * k,
    "deep_nesting": lambda k: "<tool_call>" + "[" * (50 * k) + "</tool_call>",
    "huge_string": lambda k: '<tool_call>{"name": "f", "arguments": {"x": "' + "a" * (50 * k) + '"}}</tool_call>',
    "tags_in_strings": lambda k: '<tool_call>{"name":"f","arguments":{"x":"</tool_call>"' * k,
    "think_blocks": lambda k: "<think>hm</think>x" * k,
    "json_list": lambda k: json.dumps([{"name": "", "arguments": {}}] * k),
    "open_quotes": lambda k: '<tool_call>["</tool_call>' * k,
    "reply_then_calls": lambda k: "Sure. " * k + VALID * (k // 10),
}


class CountedText(str):
    """A message that adds the characters the parser scans, compares or copies on it to ``counter``."""

    counter: list[int]

    def find(self, sub: str, start: int | None = 0, end: int | None = None, /) -> int:  # type: ignore[override]
        start = start or 0
        stop = len(self) if end is None else min(end, len(self))
        r = str.find(self, sub, start, stop)
        self.counter[0] += (r + len(sub) - start) if r >= 0 else max(0, stop - start)
        return r

    def startswith(self, prefix: Any, *args: Any) -> bool:
        self.counter[0] += len(prefix) if isinstance(prefix, str) else sum(map(len, prefix))
        return str.startswith(self, prefix, *args)

    def __getitem__(self, key: Any) -> str:
        out = str.__getitem__(self, key)
        self.counter[0] += len(out)
        return out


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], CountedText]:
    """``counted(text)``: ``text`` as a :class:`CountedText` sharing one counter (``counted.n()``) with
    the JSON decoder, which counts the length of every document it decodes."""
    counter = [0]
    decode = json.JSONDecoder.decode

    def counting_decode(self: json.JSONDecoder, s: str, *args: Any, **kwargs: Any) -> Any:
        counter[0] += len(s)
        return decode(self, s, *args, **kwargs)

    monkeypatch.setattr(json.JSONDecoder, "decode", counting_decode)

    def counted(text: str) -> CountedText:
        out = CountedText(text)
        out.counter = counter
        return out

    def n() -> int:
        value, counter[0] = counter[0], 0
        return value

    counted.n = n  # type: ignore[attr-defined]
    return counted


@pytest.mark.parametrize("shape", sorted(MESSAGES))
def test_parsing_work_doubles_when_the_message_doubles(shape, work):
    counts, sizes = [], []
    for k in (400, 800, 1600):
        text = work(MESSAGES[shape](k))
        work.n()
        parse_action(text)
        counts.append(work.n())
        sizes.append(len(text))
    for i in range(1, len(counts)):
        (w1, w2), (n1, n2) = counts[i - 1:i + 1], sizes[i - 1:i + 1]
        assert w2 / w1 <= 1.05 * n2 / n1, (shape, counts, sizes)  # doubling the message doubles the work
        assert w2 <= 8 * n2, (shape, counts, sizes)  # a few passes over the message, whatever its shape


@pytest.mark.parametrize("shape", ["malformed", "valid", "json_list", "tags_in_strings", "open_quotes"])
def test_a_step_costs_work_linear_in_the_message(shape, work):
    env = EnvFactoryEnv("HotelBooking", task_id=TASK)
    counts = []
    for k in (1000, 2000):
        env.reset()
        text = work(MESSAGES[shape](k))
        work.n()
        env.step(text)
        counts.append(work.n())
    assert counts[1] <= 2.1 * counts[0], counts
    env.close()


def _step_junk(env: Any, n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    obs, _, _, _, info = env.step(JUNK * n)
    return obs, info


def test_ten_thousand_junk_calls_leave_a_bounded_log_and_snapshot_and_the_episode_resumes():
    env = EnvFactoryEnv("HotelBooking", task_id=TASK)
    env.reset()
    obs, info = _step_junk(env, 10_000)
    log = env.session.action_log
    assert len(log) == 16 + 1 and len(obs) == 17 and len(info["errors"]) == 17
    assert all(r.result.error_type == "parse_error" for r in log)
    summary = log[-1]
    assert summary.raw_arguments == {"not_recorded": 10_000 - 16}
    assert "9984 more invalid calls" in summary.result.error and "each still counts" in summary.result.error
    assert env.messages[-18]["tool_calls"][-1]["function"]["arguments"] == '{"not_recorded": 9984}'
    # every junk call counts in P_len; the penalty is capped
    score = env.score()
    assert score.invalid == 10_000 and score.p_len == 10_000 and score.penalty == env.reward_config.penalty_cap
    snapshot = env.session.snapshot()
    assert len(snapshot) < 64 * 1024  # far under the server's 4 MiB frame cap
    # the episode resumes from the snapshot, on a fresh session, and finishes
    env.resume(snapshot)
    assert [r.to_dict() for r in env.session.action_log] == [r.to_dict() for r in log]
    *_, term, trunc, info = env.step('<tool_call>{"name": "cancel_hotel_booking", "arguments": '
                                     '{"booking_id": "BK-0002", "reason": "x"}}</tool_call>')
    *_, term, trunc, info = env.step("Done. 314.10 comes back to your card.")
    assert term and info["score"]["invalid"] == 10_000 and info["score"]["matched"] == 1
    env.close()


def test_invalid_calls_are_bounded_per_step_and_per_episode_and_configurable_on_gym_make():
    env = gym.make("envfactory/HotelBooking-v0", task_id=TASK, max_invalid_calls_per_step=4,
                   max_invalid_calls_per_episode=10, max_steps_per_turn=10, disable_env_checker=True)
    env.reset()
    session = env.unwrapped.session
    sizes, summaries = [], []
    for _ in range(4):
        obs, info = _step_junk(env, 7)
        sizes.append(len(session.action_log))
        summaries.append(session.action_log[-1].raw_arguments)
        assert len(obs) == len(info["tool_results"])  # one tool message per recorded call and summary
    # 4 recorded + a summary of 3; 4 + 3; the episode's last 2 + 5; then only a summary of 7
    assert sizes == [5, 10, 13, 14]
    assert summaries == [{"not_recorded": 3}, {"not_recorded": 3}, {"not_recorded": 5}, {"not_recorded": 7}]
    assert env.unwrapped.score().invalid == 28
    # a fork carries the episode's budget: it is spent there too
    fork = env.unwrapped.fork()
    _, info = _step_junk(fork, 2)
    assert len(fork.session.action_log) == 15 and fork.session.action_log[-1].raw_arguments == {"not_recorded": 2}
    # reset gives the next episode its whole budget
    env.reset()
    _step_junk(env, 2)
    assert len(env.unwrapped.session.action_log) == 2
    env.close()


def test_valid_calls_run_and_only_calls_not_executed_spend_the_budget():
    env = EnvFactoryEnv("HotelBooking", task_id=TASK)
    env.reset()
    _, _, _, _, info = env.step(VALID * 3 + JUNK * 30)
    log = env.session.action_log
    assert [r.result.ok for r in log[:3]] == [True] * 3
    # 13 parse errors among the first 16 items, then 3 beyond max_calls_per_step: 16 recorded, 14 summarised
    assert len(log) == 3 + 16 + 1 and log[-1].raw_arguments == {"not_recorded": 14}
    assert "more than 16 parallel calls" in log[-2].result.error
    assert env.score().invalid == 30
    env.close()


def test_a_call_beyond_the_limit_keeps_at_most_max_raw_chars_of_its_arguments():
    env = EnvFactoryEnv("HotelBooking", task_id=TASK, max_calls_per_step=1)
    env.reset()
    big = json.dumps({"name": "list_hotel_destinations", "arguments": {"country": "x" * 50_000}})
    small = json.dumps({"name": "list_hotel_destinations", "arguments": {"country": "Austria"}})
    env.step(f"<tool_call>{small}</tool_call><tool_call>{big}</tool_call><tool_call>{small}</tool_call>")
    log = env.session.action_log
    assert log[1].result.error_code == "parse_error" and len(json.dumps(log[1].raw_arguments)) <= MAX_RAW_CHARS + 10
    assert log[2].raw_arguments == {"country": "Austria"}  # small arguments are kept as they were
    env.close()


@pytest.mark.parametrize("kwargs", [{"max_invalid_calls_per_step": -1}, {"max_invalid_calls_per_episode": -1}])
def test_bounds_are_validated(kwargs):
    with pytest.raises(ValueError, match="max_invalid_calls"):
        EnvFactoryEnv("HotelBooking", **kwargs)


def test_zero_records_every_invalid_call_in_the_summary():
    env = EnvFactoryEnv("HotelBooking", task_id=TASK, max_invalid_calls_per_step=0)
    env.reset()
    obs, info = _step_junk(env, 3)
    assert len(obs) == 1 and env.session.action_log[0].raw_arguments == {"not_recorded": 3}
    assert env.score().invalid == 3
    env.close()


def test_subprocess_backend_gets_a_bounded_log_and_resumes():
    env = gym.make("envfactory/HotelBooking-v0", task_id=TASK, backend="subprocess", disable_env_checker=True)
    try:
        env.reset()
        _step_junk(env, 10_000)
        session = env.unwrapped.session
        assert len(session.action_log) == 17
        snapshot = session.snapshot()
        assert len(snapshot) < 64 * 1024
        env.unwrapped.resume(snapshot)
        assert len(env.unwrapped.session.action_log) == 17
        *_, info = env.step("Done.")
        assert info["score"]["invalid"] == 10_000
    finally:
        env.close()


# --------------------------------------------------------------------------- parse behaviour kept


def test_a_json_string_may_hold_many_closing_tags():
    args = {"note": "</tool_call>" * 20}
    p = parse_action(f"<tool_call>{json.dumps({'name': 'f', 'arguments': args})}</tool_call>"
                     f'<tool_call>{{"name": "g", "arguments": {{}}}}</tool_call>')
    assert p.errors == [] and [(c.name, c.arguments) for c in p.calls] == [("f", args), ("g", {})]


def test_parse_errors_keep_a_bounded_raw():
    p = parse_action("<tool_call>" + json.dumps({"arguments": {"x": "y" * 10_000}}) + "</tool_call>")
    assert isinstance(p.items[0], ParseError) and len(p.items[0].raw) == MAX_RAW_CHARS
    # elements of a JSON list keep their own text, not the whole list's
    p = parse_action(json.dumps([{"name": "", "arguments": {}}] * 3 + [{"name": "f", "arguments": {}}]))
    assert [type(i) for i in p.items] == [ParseError] * 3 + [ToolCall]
    assert p.items[0].raw == '{"name": "", "arguments": {}}'
    # a long name is cut in the error
    p = parse_action(json.dumps({"name": "n" * 5000, "arguments": "{bad"}))
    assert len(p.items[0].name) == 200 and len(p.items[0].message) < 400


def test_unclosed_and_broken_blocks_parse_as_before():
    p = parse_action('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"')
    assert [type(i) for i in p.items] == [ToolCall, ParseError] and p.errors[0].name == "b"
    p = parse_action('<tool_call>{"name": "a", "arguments": {"x": "</tool_call>"<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    # as before: a block that is not JSON ends at its first closing tag, and the next block stands alone
    assert [type(i) for i in p.items] == [ParseError, ToolCall] and p.errors[0].name == "a" and p.calls[0].name == "b"
    p = parse_action('<think>a</think>x<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>y<think>b</think>')
    assert p.reasoning == "a\nb" and p.content == "xy" and p.calls[0].name == "a"
