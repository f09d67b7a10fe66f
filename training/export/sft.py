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
``<tool_call>{...}</tool_call>`` form the environment parses back, tool results in its observation form,
one ``<tool_response>\\n...\\n</tool_response>`` block per result (alpaca has no observation role: unmarked,
a result would read as the user's instruction).

Only what LlamaFactory trains on is written: a conversation that opens with a user message, alternates
human|observation with gpt|function_call and ends with the model's move, string values, calls with a
name and object arguments.  A trajectory that cannot be written so (two user messages in a row, a tool
result with no call, an empty assistant message, nothing to learn...) is a :class:`DatasetError` naming
its file and line (or task) and field; ``envfactory export sft`` lists each on stderr and exports the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from gym_envfactory.errors import DatasetError
from gym_envfactory.training.export.episodes import Trajectory, messages_problem

__all__ = ["to_sharegpt", "to_alpaca", "dataset_info_entry", "hermes_call", "tool_responses"]


class _Unusable(ValueError):
    """A trajectory LlamaFactory could not train on: ``field`` (a path into the record) and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _call(tc: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"name", "arguments": {...}}`` of the OpenAI ``tool_calls`` entry ``where`` (or a flat call; its
    shape checked first: :func:`~gym_envfactory.training.export.episodes.messages_problem`), arguments parsed.

    Raises:
        _Unusable: the arguments are not a JSON object (a malformed call is no training data, and
            LlamaFactory would write a string's quotes into the call it trains on).
    """
    fn = tc.get("function", tc)
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            pass  # the text the policy wrote: not an object, refused below
    if args is None:
        args = {}
    if not isinstance(args, dict):
        at = f"{where}.function.arguments" if "function" in tc else f"{where}.arguments"
        raise _Unusable(at, "the arguments are not a JSON object (a malformed call is no training data)")
    return {"name": fn.get("name"), "arguments": args}


def _tools(tools: Sequence[dict[str, Any]]) -> str:
    return json.dumps([t.get("function", t) for t in tools], ensure_ascii=False)


def hermes_call(call: dict[str, Any]) -> str:
    """One call as a Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block."""
    return "<tool_call>" + json.dumps(call, ensure_ascii=False) + "</tool_call>"


def tool_responses(results: Sequence[str]) -> str:
    """Tool results in the observation form of Hermes/Qwen prompts, one ``<tool_response>\\n...\\n</tool_response>``
    block each (newline-separated): how an alpaca record marks tool output, which has no role of its own
    there, so a model never takes it for the user's words (the form EnvFactory's SFT rows use)."""
    return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)


def _turns(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, sharegpt turns) from OpenAI-format messages.

    Raises:
        _Unusable: the turns would not be a conversation LlamaFactory trains on (its sharegpt converter
            skips one whose roles do not alternate human|observation, gpt|function_call, or that is empty):
            a model move before any user message, two user messages or two assistant moves in a row, a
            tool result with no call before it, an assistant message with neither text nor calls, no
            assistant move at all.
    """
    system = ""
    out: list[dict[str, Any]] = []
    pending_results: list[str] = []
    notes: list[str] = []  # system messages after the first (tools notes): they open the next human turn

    def flush() -> None:
        if pending_results:
            value = pending_results[0] if len(pending_results) == 1 else json.dumps(pending_results, ensure_ascii=False)
            out.append({"from": "observation", "value": value, "results": list(pending_results)})
            pending_results.clear()

    for i, m in enumerate(messages):
        role = m.get("role")
        content = m.get("content") or ""
        if role == "system":
            if system or out:
                notes.append(content)
            else:
                system = content
        elif role == "user":
            flush()
            if out and out[-1]["from"] == "human":
                raise _Unusable(f"messages[{i}]", "two user messages with no assistant move between them")
            out.append({"from": "human", "value": "\n\n".join([*notes, content])})
            notes.clear()
        elif role == "assistant":
            flush()
            if not out or out[-1]["from"] not in ("human", "observation"):
                raise _Unusable(f"messages[{i}]", "an assistant move with no user message or tool result before it"
                                if not out else "two assistant moves with no user message or tool result between them")
            calls = [_call(tc, f"messages[{i}].tool_calls[{j}]") for j, tc in enumerate(m.get("tool_calls") or [])]
            if calls:
                value = calls[0] if len(calls) == 1 else calls
                out.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
            elif content:
                out.append({"from": "gpt", "value": content})
            else:
                raise _Unusable(f"messages[{i}]", "an assistant message with neither content nor tool calls")
        elif role == "tool":
            if not (out and out[-1]["from"] == "function_call"):
                raise _Unusable(f"messages[{i}]", "a tool result with no tool call before it")
            pending_results.append(content)
    flush()
    while out and out[-1]["from"] in ("human", "observation"):  # a record ends with the model's move
        out.pop()
    if not out:
        raise _Unusable("messages", "no assistant move after a user message: nothing to train on")
    return system, out


def _convert(trajectories: Iterable[Trajectory], on_bad: Callable[[DatasetError], None] | None,
             ) -> Iterator[tuple[Trajectory, str, list[dict[str, Any]]]]:
    """``(trajectory, system, turns)`` of each usable trajectory; an unusable one is a
    :class:`DatasetError` naming its file and line (or task) and field: raised, or handed to ``on_bad``."""
    for t in trajectories:
        try:
            problem = messages_problem(t.messages)  # read_trajectories checked these; a caller's own may be odd
            if problem is not None:
                raise _Unusable(*problem)
            system, conv = _turns(t.messages)
        except _Unusable as exc:
            err = DatasetError(f"not usable as SFT data: {exc}", file=t.file, line=t.line, field=exc.field,
                               task_id=t.task_id)
            if on_bad is None:
                raise err from None
            on_bad(err)
            continue
        yield t, system, conv


def to_sharegpt(trajectories: Iterable[Trajectory], *,
                on_bad: Callable[[DatasetError], None] | None = None) -> list[dict[str, Any]]:
    """One sharegpt record per trajectory (module docstring).

    Raises:
        DatasetError: without ``on_bad``, a trajectory LlamaFactory could not train on (:func:`_turns`);
            with it, such a trajectory is handed to ``on_bad`` and left out.
    """
    return [{"conversations": [{"from": turn["from"], "value": turn["value"]} for turn in conv], "system": system, "tools": _tools(t.tools), "env": t.env, "task_id": t.task_id,
             "reward": t.reward} for t, system, conv in _convert(trajectories, on_bad)]


def to_alpaca(trajectories: Iterable[Trajectory], *,
              on_bad: Callable[[DatasetError], None] | None = None) -> list[dict[str, Any]]:
    """One alpaca record per assistant action: ``instruction`` (the last user message, or the tool
    results as ``<tool_response>`` blocks: :func:`tool_responses`), ``output`` (reply text or Hermes tool-call blocks), ``system`` (with the tool list) and
    ``history`` (earlier ``[instruction, output]`` pairs).  Unusable trajectories: as :func:`to_sharegpt`."""
    records = []
    for t, system, conv in _convert(trajectories, on_bad):
        system = f"{system}\n\nTools (call them as <tool_call>{{\"name\": ..., \"arguments\": ...}}</tool_call>):\n{_tools(t.tools)}"
        history: list[list[str]] = []
        prompt = ""
        for turn in conv:
            if turn["from"] in ("human", "observation"):
                value = turn["value"] if turn["from"] == "human" else tool_responses(turn["results"])
                prompt = value if not prompt else f"{prompt}\n{value}"
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
