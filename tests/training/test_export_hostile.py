"""``envfactory export sft --from-trajectories`` with hostile records (issue 25, finding 7): each bad
record is one line on stderr naming the file, line and field, the rest is exported, and every record
written is one LlamaFactory trains on (its sharegpt converter's alternation rule, string values, calls
with a name and object arguments, tool schemas its formatters read; README "Train", training/export/sft.py)."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.errors import DatasetError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.training.export.cli import export_app
from gym_envfactory.training.export.episodes import Trajectory
from gym_envfactory.training.export.sft import to_sharegpt

ENV = "HotelBooking"


@pytest.fixture(scope="module")
def good() -> dict:
    env = EnvFactoryEnv(ENV)
    rec = run_episode(env, OraclePolicy(), task_id="hotel-003").to_json()  # multi-turn, with tool calls
    env.close()
    assert rec["reward"] == 1.0 and any(m.get("tool_calls") for m in rec["messages"])
    return rec


def _first(rec: dict, role: str, calls: bool = False) -> int:
    return next(i for i, m in enumerate(rec["messages"]) if m["role"] == role and (not calls or m.get("tool_calls")))


def _set(path: str, value):
    """A change to a good record: ``path`` like ``messages.@user.content`` (``@role``: that role's first
    message, ``@call``: the first assistant message with tool calls)."""
    def change(rec: dict) -> dict:
        keys = path.split(".")
        obj = rec
        for k in keys[:-1]:
            if k == "@call":
                obj = obj[_first(rec, "assistant", calls=True)]
            elif k.startswith("@"):
                obj = obj[_first(rec, k[1:])]
            else:
                obj = obj[int(k)] if isinstance(obj, list) else obj[k]
        last = keys[-1]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
        return rec
    return change


def _msgs(*messages: dict):
    def change(rec: dict) -> dict:
        rec["messages"] = list(messages)
        return rec
    return change


def _insert_after(role: str, message: dict, calls: bool = False):
    def change(rec: dict) -> dict:
        i = _first(rec, role, calls)
        rec["messages"].insert(i + 1, message)
        return rec
    return change


U, A = {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Done."}
SYS = {"role": "system", "content": "You help."}

#: (id, change to the good record or a raw line, what the report names)
HOSTILE = [
    # shapes that gave tracebacks
    ("user-content-list", _set("messages.@user.content", [{"type": "text", "text": "hi"}]), "content"),
    ("user-content-int", _set("messages.@user.content", 7), "content"),
    ("function-not-object", _set("messages.@call.tool_calls.0.function", "search_hotels"), "tool_calls[0].function"),
    ("reward-400-digits", "RAW:" + '{"env": "HotelBooking", "task_id": "x", "reward": 1' + "0" * 400 + ', "messages": []}', "reward"),
    ("not-utf8", "BYTES", "not UTF-8"),
    ("nested-deep", "RAW:" + "[" * 100_000 + "]" * 100_000, "not JSON"),
    # records that stopped the whole export
    ("not-an-object", "RAW:[1, 2]", "JSON object"),
    ("not-json", "RAW:{\"env\": \"HotelBooking\",", "not JSON"),
    ("unknown-env", _set("env", "NoSuchEnv"), "field 'env'"),
    ("missing-messages", lambda r: {k: v for k, v in r.items() if k != "messages"}, "field 'messages'"),
    ("messages-string", _set("messages", "hello"), "field 'messages'"),
    ("message-not-object", _set("messages.1", "hi"), "messages[1]"),
    ("role-missing", _set("messages.@user.role", None), "role"),
    ("role-unknown", _set("messages.@user.role", "developer"), "role"),
    ("tool-calls-string", _set("messages.@call.tool_calls", "search"), "tool_calls"),
    ("tool-calls-on-user", _set("messages.@user.tool_calls", []), "tool_calls"),
    ("call-name-missing", _set("messages.@call.tool_calls.0.function.name", None), "function.name"),
    ("arguments-list", _set("messages.@call.tool_calls.0.function.arguments", [1, 2]), "function.arguments"),
    ("tools-not-list", _set("tools", {"name": "x"}), "field 'tools'"),
    ("tool-function-string", _set("tools.0", {"type": "function", "function": "search"}), "tools[0].function"),
    ("tool-without-parameters", _set("tools.0", {"name": "search", "description": "d"}), "tools[0].parameters"),
    # records written before that LlamaFactory cannot train on
    ("arguments-not-json", _set("messages.@call.tool_calls.0.function.arguments", "{oops"), "function.arguments"),
    ("arguments-json-string", _set("messages.@call.tool_calls.0.function.arguments", '"text"'), "function.arguments"),
    ("assistant-content-object", _set("messages.@assistant.content", {"text": "x"}), "content"),
    ("tool-content-object", _set("messages.@tool.content", {"ok": True}), "content"),
    ("empty-conversation", _msgs(), "nothing to train on"),
    ("only-system-and-user", _msgs(SYS, U), "nothing to train on"),
    ("assistant-first", _msgs(SYS, A, U, A), "no user message or tool result before it"),
    ("two-users", _msgs(U, U, A), "two user messages"),
    ("two-assistant-replies", _msgs(U, A, A), "two assistant moves"),
    ("tool-result-without-call", _msgs(U, {"role": "tool", "tool_call_id": "c1", "content": "{}"}, A), "no tool call before it"),
    ("empty-assistant", _msgs(U, {"role": "assistant", "content": None}), "neither content nor tool calls"),
]


def _line(good: dict, change) -> bytes:
    if change == "BYTES":
        return json.dumps({**good, "task_id": "caf\u00e9"}, ensure_ascii=False).encode().replace("\u00e9".encode(), b"\xe9")
    if isinstance(change, str):
        return change.removeprefix("RAW:").encode()
    return json.dumps(change(copy.deepcopy(good)), ensure_ascii=False).encode()


def llamafactory_problem(rec: dict) -> str | None:
    """Why LlamaFactory's sharegpt loader and formatters could not train on ``rec``, else ``None``."""
    conv = rec["conversations"]
    if not conv or len(conv) % 2:
        return "empty or odd conversation"
    for i, turn in enumerate(conv):
        if turn["from"] not in (("human", "observation"), ("gpt", "function_call"))[i % 2]:
            return f"turn {i} is {turn['from']}"
        if not isinstance(turn["value"], str):
            return f"turn {i} value is {type(turn['value']).__name__}"
        if turn["from"] == "function_call":
            calls = json.loads(turn["value"])
            for c in calls if isinstance(calls, list) else [calls]:
                if not isinstance(c.get("name"), str) or not isinstance(c.get("arguments"), dict):
                    return f"turn {i} call {c!r}"
    if not isinstance(rec["system"], str):
        return "system"
    for t in json.loads(rec["tools"]):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) \
                or not isinstance(t.get("parameters", {}).get("properties"), dict):
            return f"tool {t!r}"
    return None


@pytest.mark.parametrize(("change", "names"), [pytest.param(c, n, id=i) for i, c, n in HOSTILE])
def test_a_hostile_record_is_one_line_naming_it_and_the_rest_is_exported(tmp_path, good, change, names):
    src = tmp_path / "t.jsonl"
    ok = json.dumps(good, ensure_ascii=False).encode()
    src.write_bytes(ok + b"\n" + _line(good, change) + b"\n" + ok + b"\n")
    out = tmp_path / "sft.json"
    res = CliRunner().invoke(export_app, ["sft", "--from-trajectories", str(src), "--min-reward", "0", "--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"skipped: {src}:2") and names in lines[0], res.stderr
    records = json.loads(out.read_text())
    assert len(records) == 2 and "skipped 1 bad records" in res.stdout
    assert [llamafactory_problem(r) for r in records] == [None, None]


def test_alpaca_export_skips_the_same_records(tmp_path, good):
    src = tmp_path / "t.jsonl"
    ok = json.dumps(good, ensure_ascii=False)
    bad = [_line(good, c).decode("utf-8", "replace") for _, c, _ in HOSTILE if c not in ("BYTES",)]
    src.write_text("\n".join([ok, *bad, ok]) + "\n", encoding="utf-8")
    out = tmp_path / "alpaca.json"
    res = CliRunner().invoke(export_app, ["sft", "--from-trajectories", str(src), "--min-reward", "0", "--format",
                                          "alpaca", "--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert len([x for x in res.stderr.splitlines() if x.startswith("skipped: ")]) == len(bad)
    records = json.loads(out.read_text())
    assert records and {r["task_id"] for r in records} == {good["task_id"]}
    for r in records:
        assert all(isinstance(r[k], str) for k in ("instruction", "output", "system"))
        assert all(isinstance(a, str) and isinstance(b, str) for a, b in r["history"])


def test_a_file_of_only_bad_records_writes_nothing_and_fails(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("[1]\n{}\n", encoding="utf-8")
    out = tmp_path / "sft.json"
    res = CliRunner().invoke(export_app, ["sft", "--from-trajectories", str(src), "--out", str(out)])
    assert res.exit_code == 1 and "no usable trajectory left" in res.output and not out.exists()


def test_the_library_call_raises_naming_the_trajectory_without_a_handler(good):
    t = Trajectory(ENV, "hotel-003", "train", 1.0, [U, U, A], good["tools"], file="t.jsonl", line=4)
    with pytest.raises(DatasetError, match=r"t\.jsonl:4 field 'messages\[1\]'.*two user messages"):
        to_sharegpt([t])
    seen: list[DatasetError] = []
    assert to_sharegpt([t, Trajectory(ENV, "hotel-003", "train", 1.0, [U, A], good["tools"])], on_bad=seen.append)
    assert len(seen) == 1
