"""Training data in EnvFactory's own row shapes (``envfactory export rl|sft --format envfactory``; arXiv
2605.18703 §3.5, the layout of its published data; docs/training.md, "EnvFactory's row format").

RL: one row per task turn that has ground-truth calls (the paper writes none for a turn without)::

    {"prompt": "<JSON text of the messages>", "data_source": "EnvFactory", "agent_name": "tool_agent",
     "ability": "tool_use",
     "reward_model": {"ground_truth": "<JSON [{name, arguments, masked_arguments}]>", "style": "rule"},
     "extra_info": {"mcp_factory_kwargs": {"mcp_servers": "<JSON [server, ...]>",
                                           "initial_config": "<JSON {server: state before the turn}>",
                                           "final_config": "<JSON {server: state after it}>"}}}

The prompt holds no system message: the earlier turns flattened to text as the paper does (the user
query; per ground-truth call an assistant message ``<tool_call>\\n{"name", "arguments"}\\n</tool_call>\\n``
and a user message ``<tool_response>\\n<result JSON>\\n</tool_response>\\n``; the turn's closing reply),
then the turn's query.  SFT: LlamaFactory alpaca records, one per assistant step of the turns with calls
(``instruction`` the query or the ``<tool_response>`` blocks, ``input`` empty, ``output`` the
``<tool_call>`` block or the closing reply, ``system`` the episode's system prompt with the tools in
``<tools></tools>``, ``history`` the earlier ``[instruction, output]`` pairs as written).

Names: a server is its environment's name, or the server the task was imported from (its provenance,
:mod:`gym_envfactory.environment.paperformat`); a tool is written ``<server><separator><tool>`` when a
separator is given or the task was imported from prefixed names, else bare.  Documented normalisation
against rows the paper wrote: states are the environments' canonical form (defaults filled in, the
state model's field order), tool results are the replayed environment's own (JSON), an earlier turn's
closing reply is the ground-truth reply (``Done.`` and its expected outputs), and nested JSON is written
by ``json.dumps`` with its defaults, as the paper's code does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.environment.taskfiles import tasks_for
from gym_envfactory.environment.tasks import Task, TaskSet
from gym_envfactory.envs.env import ground_truth_reply
from gym_envfactory.replay import TaskReference, task_reference

__all__ = ["envfactory_rl_rows", "envfactory_sft_records", "write_rows"]

DATA_SOURCE, AGENT_NAME, ABILITY = "EnvFactory", "tool_agent", "tool_use"


class _Names:
    """Server and tool names of one task's rows (module docstring, "Names")."""

    def __init__(self, task: Task, separator: str | None) -> None:
        prov = task.provenance if task.provenance.get("format") in ("envfactory", "envfactory-sft") else {}
        raw = prov.get("servers")
        servers: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        self.servers = {env: str(servers.get(env, env)) for env in task.envs}
        self.separator = separator if separator is not None else prov.get("tool_separator")
        self.meta = {k: prov.get(k) for k in ("data_source", "agent_name", "ability")}

    def tool(self, name: str, env_of: Mapping[str, str]) -> str:
        if not self.separator:
            return name
        return f"{self.servers[env_of.get(name, next(iter(self.servers)))]}{self.separator}{name}"

    def by_server(self, state: Any, envs: Sequence[str]) -> dict[str, Any]:
        """``{server: state}`` of a reference state (one env: its dict; several: ``{env: dict}``)."""
        return {self.servers[envs[0]]: state} if len(envs) == 1 else {self.servers[e]: state[e] for e in envs}


def _tool_owner(task: Task) -> dict[str, str]:
    """``{tool: environment}`` over the task's environments."""
    from gym_envfactory.environment.catalog import get_environment

    return {tool: name for name in task.envs for tool in get_environment(name).tools}


def _call_text(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>\n"


def _response_text(result: Any) -> str:
    return f"<tool_response>\n{json.dumps(result, ensure_ascii=False)}\n</tool_response>\n"


def _steps(task: Task, reference: TaskReference, t: int, names: _Names, owner: Mapping[str, str]) -> list[tuple[str, str]]:
    """The paper's ``(input step, output step)`` texts of turn ``t`` played from the ground truth."""
    turn = task.turns[t]
    inputs = [turn.user]
    outputs = []
    for call, ref in zip(turn.ground_truth, reference.turn_calls[t], strict=True):
        outputs.append(_call_text(names.tool(call.name, owner), call.arguments))
        inputs.append(_response_text(ref.result))
    outputs.append(ground_truth_reply(turn))
    return list(zip(inputs, outputs, strict=True))


def _tasks(env_names: Iterable[str], split: str | None, tasks: Mapping[str, TaskSet] | None,
           ) -> Iterable[tuple[EnvFactoryEnv, Task, TaskReference]]:
    for name in env_names:
        env = EnvFactoryEnv(name, tasks=None if tasks is None else tasks_for(tasks, name))
        try:
            for task_id in env.tasks.ids(split):
                task = env.tasks.get(task_id)
                yield env, task, task_reference(env.environment, task, env.tasks)
        finally:
            env.close()


def envfactory_rl_rows(env_names: Iterable[str], *, split: str | None = None,
                       tasks: Mapping[str, TaskSet] | None = None, separator: str | None = None,
                       ) -> list[dict[str, Any]]:
    """The paper's RL rows (module docstring) for every task of ``env_names`` (optionally one split;
    ``tasks``: ``--tasks FILE`` tasks in place of the environments' own; ``separator``: write tool names
    as ``<server><separator><tool>``).

    Raises:
        DatasetError: a task's ground truth does not replay.
    """
    rows = []
    for _env, task, reference in _tasks(env_names, split, tasks):
        names, owner = _Names(task, separator), _tool_owner(task)
        history: list[dict[str, str]] = []
        for t, turn in enumerate(task.turns):
            steps = _steps(task, reference, t, names, owner)
            if turn.ground_truth:
                before = reference.initial if t == 0 else reference.turn_states[t - 1]
                calls = [{"name": names.tool(c.name, owner), "arguments": c.arguments,
                          "masked_arguments": list(c.masked_arguments)} for c in turn.ground_truth]
                rows.append({
                    "prompt": json.dumps([*history, {"role": "user", "content": turn.user}]),
                    "data_source": names.meta["data_source"] or DATA_SOURCE,
                    "agent_name": names.meta["agent_name"] or AGENT_NAME,
                    "ability": names.meta["ability"] or ABILITY,
                    "reward_model": {"ground_truth": json.dumps(calls), "style": "rule"},
                    "extra_info": {"mcp_factory_kwargs": {
                        "mcp_servers": json.dumps([names.servers[e] for e in task.envs]),
                        "initial_config": json.dumps(names.by_server(before, task.envs)),
                        "final_config": json.dumps(names.by_server(reference.turn_states[t], task.envs)),
                    }},
                })
            for inp, out in steps:
                history += [{"role": "user", "content": inp}, {"role": "assistant", "content": out}]
    return rows


def envfactory_sft_records(env_names: Iterable[str], *, split: str | None = None,
                           tasks: Mapping[str, TaskSet] | None = None, separator: str | None = None,
                           ) -> list[dict[str, Any]]:
    """The paper's SFT rows (LlamaFactory alpaca; module docstring) from every task's ground truth.

    Raises:
        DatasetError: a task's ground truth does not replay.
    """
    records = []
    for env, task, reference in _tasks(env_names, split, tasks):
        names, owner = _Names(task, separator), _tool_owner(task)
        obs, info = env.reset(options={"task_id": task.task_id})
        tools = [{**t, "function": {**t["function"], "name": names.tool(t["function"]["name"], owner)}}
                 for t in info["tools"]]
        system = (f"{obs[0]['content']}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                  + "\n".join(json.dumps(t) for t in tools) + "\n</tools>\n\nFor each function call, return a json "
                  "object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                  '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
        history: list[list[str]] = []
        for t, turn in enumerate(task.turns):
            if not turn.ground_truth:
                continue  # the paper writes no record for a turn without tool calls, nor keeps it in history
            for inp, out in _steps(task, reference, t, names, owner):
                records.append({"instruction": inp.strip(), "input": "", "output": out, "system": system,
                                "history": [list(h) for h in history]})
                history.append([inp, out])
    return records


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` by ``path``'s suffix: ``.parquet`` (pyarrow), ``.jsonl`` (one per line), else a JSON
    list (``indent=2``, as the paper's own files).  Raises ``ImportError`` for parquet without pyarrow."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(list(rows), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
