"""SFT data in LlamaFactory's formats (https://llamafactory.readthedocs.io, "Data Preparation").

``sharegpt`` record (one per trajectory)::

    {"conversations": [{"from": "human", "value": ...},
                       {"from": "function_call", "value": "{\\"name\\": ..., \\"arguments\\": {...}}"},
                       {"from": "observation", "value": "<tool result JSON>"},
                       {"from": "gpt", "value": "Done."}, ...],
     "system": "<system prompt>", "tools": "<JSON list of {name, description, parameters}>"}

Parallel calls of one assistant message become one ``function_call`` whose value is a JSON list of
calls, followed by one ``observation`` holding a JSON list of their results, so human/observation and
gpt/function_call keep alternating as LlamaFactory requires.  A record's ``tools`` are those of the
task's turn 0; a turn that adds tools (a task's ``added_tools``) brings a system note listing them
(``gym_envfactory.envs.env.tools_note``), which the record puts at the head of that turn's ``human``
value (LlamaFactory has no system role inside a conversation), separated by a blank line.  ``alpaca`` records (one per assistant
action) carry the preceding exchange in ``history``; tool calls are written in the Hermes
``<tool_call>{...}</tool_call>`` form the environment parses back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from gym_envfactory.training.export.episodes import Trajectory

__all__ = ["to_sharegpt", "to_alpaca", "dataset_info_entry", "hermes_call"]


def _call(tc: dict[str, Any]) -> dict[str, Any]:
    fn = tc.get("function", tc)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            pass  # a malformed call stays as the text the policy sent
    return {"name": fn.get("name"), "arguments": args}


def _tools(tools: Sequence[dict[str, Any]]) -> str:
    return json.dumps([t.get("function", t) for t in tools], ensure_ascii=False)


def hermes_call(call: dict[str, Any]) -> str:
    """One call as a Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block."""
    return "<tool_call>" + json.dumps(call, ensure_ascii=False) + "</tool_call>"


def _turns(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    """(system prompt, sharegpt turns) from OpenAI-format messages."""
    system = ""
    out: list[dict[str, str]] = []
    pending_results: list[str] = []
    notes: list[str] = []  # system messages after the first (tools notes): they open the next human turn

    def flush() -> None:
        if pending_results:
            value = pending_results[0] if len(pending_results) == 1 else json.dumps(pending_results, ensure_ascii=False)
            out.append({"from": "observation", "value": value})
            pending_results.clear()

    for m in messages:
        role = m.get("role")
        content = m.get("content") or ""
        if role == "system":
            if system or out:
                notes.append(content)
            else:
                system = content
        elif role == "user":
            flush()
            out.append({"from": "human", "value": "\n\n".join([*notes, content])})
            notes.clear()
        elif role == "assistant":
            flush()
            calls = [_call(tc) for tc in m.get("tool_calls") or []]
            if calls:
                value = calls[0] if len(calls) == 1 else calls
                out.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
            else:
                out.append({"from": "gpt", "value": content})
        elif role == "tool":
            pending_results.append(content)
    flush()
    while out and out[-1]["from"] in ("human", "observation"):  # a record ends with the model's move
        out.pop()
    return system, out


def to_sharegpt(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """One sharegpt record per trajectory (module docstring)."""
    records = []
    for t in trajectories:
        system, conv = _turns(t.messages)
        records.append({"conversations": conv, "system": system, "tools": _tools(t.tools),
                        "env": t.env, "task_id": t.task_id, "reward": t.reward})
    return records


def to_alpaca(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """One alpaca record per assistant action: ``instruction`` (the last user message or tool
    results), ``output`` (reply text or Hermes tool-call blocks), ``system`` (with the tool list) and
    ``history`` (earlier ``[instruction, output]`` pairs)."""
    records = []
    for t in trajectories:
        system, conv = _turns(t.messages)
        system = f"{system}\n\nTools (call them as <tool_call>{{\"name\": ..., \"arguments\": ...}}</tool_call>):\n{_tools(t.tools)}"
        history: list[list[str]] = []
        prompt = ""
        for turn in conv:
            if turn["from"] in ("human", "observation"):
                prompt = turn["value"] if not prompt else f"{prompt}\n{turn['value']}"
                continue
            if turn["from"] == "function_call":
                value = json.loads(turn["value"])
                output = "".join(hermes_call(c) for c in (value if isinstance(value, list) else [value]))
            else:
                output = turn["value"]
            records.append({"instruction": prompt, "input": "", "output": output, "system": system,
                            "history": [list(h) for h in history], "env": t.env, "task_id": t.task_id})
            history.append([prompt, output])
            prompt = ""
    return records


def dataset_info_entry(name: str, file_name: str, fmt: str) -> dict[str, Any]:
    """The ``dataset_info.json`` entry LlamaFactory needs to load the file (``fmt``: sharegpt|alpaca)."""
    if fmt == "sharegpt":
        return {name: {"file_name": file_name, "formatting": "sharegpt",
                       "columns": {"messages": "conversations", "system": "system", "tools": "tools"}}}
    return {name: {"file_name": file_name, "formatting": "alpaca",
                   "columns": {"prompt": "instruction", "query": "input", "response": "output",
                               "system": "system", "history": "history"}}}
