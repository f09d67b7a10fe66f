"""RL prompts as VeRL parquet rows (https://verl.readthedocs.io, "Prepare Data for Post-Training").

One row per task turn (the paper's unit, arXiv 2605.18703 §3.5) or per task (``per="task"``); a
window with nothing to score (a lone clarification turn: no call, no state change, no expected output)
is left out, since every policy would get the same reward on it::

    data_source   "envfactory/HotelBooking-v0"
    prompt        the opening messages of the episode: system prompt, and for turn t > 0 the earlier
                  turns played from the ground truth (user, assistant tool calls, tool results, reply),
                  then the user message of turn t.  Exactly ``env.reset(options=reset_options)``.
    ability       "tool_use"
    reward_model  {"style": "rule", "ground_truth": JSON of the window's ground-truth calls,
                   expected outputs and clarification flags}
    extra_info    {"index", "split", "env" (gym id), "envs" (environment names), "task_id", "turn",
                   "n_turns", "initial_state" (the task file's reference, JSON), "tools" (OpenAI tool
                   schemas offered in the row's first turn, JSON), "tool_changes" (JSON list of
                   {"turn", "added": [OpenAI tool schemas]} for each later turn of the window that adds
                   tools; "[]" for most tasks), "reset_options" {"task_id", "start_turn", "end_turn"}}

Tool sets per turn (a task's ``excluded_tools`` and ``added_tools``; docs/authoring.md, "Tool sets
per turn"): excluded tools are in no row; the prompt of a row starting after a turn that added tools
carries that turn's system note, as ``env.reset`` shows it; a trainer that sends native ``tools``
switches to ``tools`` + the ``added`` schemas at each ``tool_changes`` turn (``info["tools"]`` of the
step that opens it says the same).

Nested values whose shape varies between rows (tool schemas, ground truth) are JSON strings, so one
parquet schema holds every environment.  The reward is the environment's own: a trainer rebuilds the
episode with ``env.reset(options=row["extra_info"]["reset_options"])`` and steps it.

In the parquet file (:func:`write_parquet`) every ``prompt`` message is ``{"role", "content"}`` only, so
that any chat template renders it after ``datasets.load_dataset("parquet")``; the exact messages are
``extra_info.messages`` (JSON).  ``envfactory export rl --format envfactory`` writes the paper's own row
shape instead (:mod:`gym_envfactory.training.export.paper`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.environment.taskfiles import tasks_for
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import turn_has_criteria

__all__ = ["rl_rows", "write_parquet", "template_messages"]


def _ground_truth(reference: Any, start: int, end: int) -> str:
    turns = []
    for t in range(start, end):
        turns.append({
            "turn": t,
            "calls": [{"name": c.name, "arguments": c.arguments, "masked_arguments": list(c.masked)}
                      for c in reference.turn_calls[t]],
            "expected_outputs": reference.expected_outputs[t],
            "clarification": reference.clarification[t],
        })
    return json.dumps({"task_id": reference.task_id, "turns": turns}, ensure_ascii=False)


def rl_rows(env_names: Iterable[str], *, split: str | None = None, per: str = "turn",
            tasks: Mapping[str, TaskSet] | None = None) -> list[dict[str, Any]]:
    """VeRL rows (module docstring) for every task of ``env_names`` (optionally one split).

    Args:
        env_names: environment names.
        split: keep only tasks of this split.
        per: ``"turn"`` (one row per user turn) or ``"task"`` (one row per task).
        tasks: tasks by primary environment
            (:func:`~gym_envfactory.environment.taskfiles.read_tasks`, ``--tasks FILE``) played in place of
            each environment's own; a trainer rebuilding a row's episode passes the same tasks to
            ``gym.make(..., tasks=...)``.

    Raises:
        ValueError: ``per`` is neither.  DatasetError: a task's ground truth does not replay.
    """
    if per not in ("turn", "task"):
        raise ValueError(f"per must be 'turn' or 'task', got {per!r}")
    rows: list[dict[str, Any]] = []
    for name in env_names:
        env = EnvFactoryEnv(name, tasks=None if tasks is None else tasks_for(tasks, name))
        try:
            for task_id in env.tasks.ids(split):
                task = env.tasks.get(task_id)
                reference = task_reference(env.environment, task)
                n = len(task.turns)
                windows = [(t, t + 1) for t in range(n)] if per == "turn" else [(0, n)]
                for start, end in windows:
                    if not any(turn_has_criteria(reference, t, env.reward_config) for t in range(start, end)):
                        continue  # a window with nothing to score (e.g. a lone clarification turn): constant reward
                    options = {"task_id": task_id, "start_turn": start, "end_turn": end}
                    obs, info = env.reset(options=options)
                    rows.append({
                        "data_source": env.environment.gym_id,
                        "prompt": obs,
                        "ability": "tool_use",
                        "reward_model": {"style": "rule", "ground_truth": _ground_truth(reference, start, end)},
                        "extra_info": {
                            "index": len(rows),
                            "split": task.split,
                            "env": env.environment.gym_id,
                            "envs": info["envs"],
                            "task_id": task_id,
                            "turn": start,
                            "n_turns": n,
                            "initial_state": json.dumps(task.initial_state, ensure_ascii=False),
                            "tools": json.dumps(info["tools"], ensure_ascii=False),
                            "tool_changes": json.dumps([{"turn": t, "added": env.added_tools(t)}
                                                        for t in range(start + 1, end) if env.added_tools(t)],
                                                       ensure_ascii=False),
                            "reset_options": options,
                        },
                    })
        finally:
            env.close()
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as one parquet file (pyarrow) that any chat template renders (issue 28 part 6).

    Parquet gives every message of a column one schema, and a reader (``datasets.load_dataset("parquet")``,
    VeRL's ``RLHFDataset``) hands back every key of it, absent ones as null: a Llama-3.x-style template
    (``'tool_calls' in message``) then fails on every row.  So the ``prompt`` column holds each message
    as ``{"role", "content"}`` strings only (:func:`template_messages`: tool calls written as Hermes
    ``<tool_call>`` blocks in the assistant's content, tool results as ``tool`` messages with their text),
    still the list of messages VeRL's ``RLHFDataset`` passes to ``apply_chat_template``; the exact
    OpenAI-format messages, with only the keys each has, are ``extra_info.messages`` (a JSON string).

    Raises:
        ImportError: without pyarrow (the ``export`` extra).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([
        {**r, "prompt": template_messages(r["prompt"]),
         "extra_info": {**r["extra_info"], "messages": json.dumps(r["prompt"], ensure_ascii=False)}}
        for r in rows])
    pq.write_table(table, path)
    return path


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``messages`` (OpenAI format) as ``{"role", "content"}`` messages with string content and no
    other key, which every chat template renders: an assistant message's ``tool_calls`` become Hermes
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks after its text (the form the
    environment parses back from any model; ``arguments`` parsed when they are JSON text), a ``tool``
    message keeps its role and content.  Null fields count as absent."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        calls = m.get("tool_calls") or []
        blocks = []
        for c in calls:
            fn = c.get("function", c)
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    pass  # the text the policy wrote: kept as it is
            blocks.append("<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args},
                                                     ensure_ascii=False) + "</tool_call>")
        text = "\n".join(([content] if content else []) + blocks)
        out.append({"role": str(m.get("role")), "content": text})
    return out
