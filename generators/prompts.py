"""Stage prompts and output schemas of EnvGen (EnvFactory, arXiv 2605.18703, §3.2).

Every system prompt starts with the line ``EnvGen stage: <stage>`` (``code``, ``test``, ``revise``):
logs, caches and scripted test servers can tell the stages apart from the request alone.  The stage
answers are JSON objects checked against the schemas below by the LLM layer (one repair round there);
whether an environment *passes* is never asked of the model: the Validator executes it
(:mod:`gym_envfactory.generators.envgen`).

The authoring rules repeat ``docs/authoring.md`` (the package format the runtime loads) in the short
form a model needs; keep the two in step.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "STAGE_MARK",
    "CODE_SCHEMA",
    "TEST_SCHEMA",
    "REVISE_SCHEMA",
    "code_messages",
    "scenario_messages",
    "revise_messages",
]

STAGE_MARK = "EnvGen stage: "

_STR_LIST = {"type": "array", "items": {"type": "string"}}

#: Answer of the Code Agent (and the code part of the Reviser's answer).
CODE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["state_py", "tools_py", "initial_state", "manifest"],
    "properties": {
        "state_py": {"type": "string", "description": "source of state.py"},
        "tools_py": {"type": "string", "description": "source of tools.py"},
        "initial_state": {"type": "object", "description": "the small initial state, valid for the root model"},
        "manifest": {
            "type": "object",
            "required": ["domain", "description"],
            "properties": {
                "name": {"type": "string"},
                "domain": {"type": "string"},
                "description": {"type": "string"},
                "state_model": {"type": "string", "description": "state:RootClass"},
                "bookkeeping_fields": _STR_LIST,
                "free_text_fields": _STR_LIST,
                "set_fields": _STR_LIST,
            },
        },
        "notes": {"type": "string"},
    },
}

_SCENARIOS = {"type": "array", "items": {"type": "object", "required": ["scenario_id", "steps"]}}
_TASKS = {"type": "array", "items": {"type": "object", "required": ["task_id", "turns"]}}

#: Answer of the Test Agent.
TEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["scenarios"],
    "properties": {"scenarios": _SCENARIOS, "tasks": _TASKS},
}

#: Answer of the Reviser: the Code Agent's answer, optionally with corrected scenarios and tasks.
REVISE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": list(CODE_SCHEMA["required"]),
    "properties": {**CODE_SCHEMA["properties"], "scenarios": _SCENARIOS, "tasks": _TASKS},
}

AUTHORING_RULES = """\
An environment is a Pydantic database plus plain Python tools. You write two modules of one package:

state.py
- `from pydantic import BaseModel, Field`; one ROOT model (the database) plus record models.
- Collections are `dict[str, Record]` keyed by id, e.g. `orders: dict[str, Order] = Field(default_factory=dict)`.
- Everything a tool needs is in the state: the clock (`now: datetime`, a fixed value; never read the
  wall clock) and id counters (`next_order_seq: int = 1` -> "O-0001").
- Forbidden (a determinism lint rejects them): module-level mutable objects (lower-case module names
  bound to dict/list/set; UPPER_CASE constants are fine), `global`, `datetime.now()`, `date.today()`,
  `time.time()`, `uuid4()`, builtin `hash()`, the global `random` module (use
  `random.Random(state.seed + state.counter)` if needed).
- Money is a float rounded with round(x, 2).

tools.py
- `from typing import Annotated, Literal`, `from pydantic import Field`,
  `from gym_envfactory import ToolError, tool`, `from .state import RootModel, Record`.
- One function per tool of the metadata, with EXACTLY the metadata's tool name, parameter names,
  required parameters (no default) and optional parameters (with a default), and JSON types
  (string->str, integer->int, number->float, boolean->bool, array->list[...], object->a model or dict,
  enum->Literal[...], date strings->date).  No extra tools, no extra parameters.
- Signature: `def name(state: Root, *, param: Annotated[T, Field(description="...")], opt: T = default) -> R:`
  the state first and positional, every tool parameter keyword-only (after `*`) and typed.
- Decorate reads with `@tool(read_only=True)`, cancel/delete with `@tool(destructive=True)`, other
  writes with `@tool` (add `idempotent=True` where calling twice equals once).
- The docstring says what the tool does, what it returns and its errors (the model reads it).
- Return a Pydantic model, a list of them, or plain JSON data; never None or {} as "success".
- A write tool that succeeds MUST change the state (the validator runs every tool and rejects a write
  that reports success without changing the state).  Read tools must never change the state.
- Domain failures raise `ToolError("message the model can act on", code="not_found")` BEFORE any
  mutation (codes: not_found, sold_out, invalid_dates, already_cancelled, insufficient_funds,
  invalid_state, limit_exceeded, invalid_value ...).
- Deterministic: two identical call sequences from the same state give byte-identical states.
- Imports: only gym_envfactory, pydantic and pure standard-library modules (typing, datetime, decimal,
  enum, math, re, collections, dataclasses, functools, itertools, json, copy ...); relative imports
  inside the package. No I/O, processes or network (no os, pathlib, subprocess, open(), eval, exec).
  From the runtime import only `from gym_envfactory import ToolError, tool` (no submodules).
- A static gate rejects, anywhere in the code: the names open, eval, exec, compile, __import__,
  globals, locals, vars, getattr, setattr, delattr, input, breakpoint; star imports; dunder names and
  attributes other than __name__, __doc__, __init__ (defining methods such as __eq__ is fine);
  private (_x) attributes of imported modules; attributes named os, sys, subprocess, builtins, shutil,
  socket; operator.attrgetter/methodcaller; .format/.format_map anywhere except called directly on a
  string literal whose fields read no attribute or index (prefer f-strings).
"""

SCENARIO_RULES = """\
Validation scenarios (each is one JSON object):
{"scenario_id": "cancel-twice", "level": "error", "description": "...", "initial_state": "small",
 "steps": [
   {"call": "cancel_order", "arguments": {"order_id": "O-0001"}, "expect": "ok",
    "result": {"status": "cancelled"}, "state": {"orders.O-0001.status": "cancelled"}},
   {"call": "cancel_order", "arguments": {"order_id": "O-0001"}, "expect": "tool_error", "error_code": "already_cancelled"},
   {"call": "get_order", "arguments": {"order_id": "O-9999"}, "expect": "tool_error", "error_code": "not_found"}]}
- `level`: simple | medium | complex | boundary | error; write scenarios of every level.
- Per step: `expect` is ok | tool_error | invalid_arguments | unknown_tool; `result` is a subset match of
  the tool's JSON result; `state` maps dotted paths (collection.id.field) to expected values after the
  step; `state_absent` lists paths that must not exist; `exact: true` makes result/state exact.
  An error step must leave the state unchanged (checked automatically).
- Every tool needs at least one step reaching its success path and one reaching an error path
  (a ToolError, or invalid arguments such as a wrong type).
- Every successful write step should check the state it changed with `state`.
- Compute expected values from the initial state and the code; ids created come from the counters.
Tasks (optional, each one JSON object): {"task_id": "t1", "turns": [{"user": "natural request",
 "ground_truth": [{"name": "tool", "arguments": {...}}], "expected_outputs": ["text the reply must contain"]}]}
"""


def _system(stage: str, body: str) -> str:
    return f"{STAGE_MARK}{stage}\n{body}"


def _metadata_block(metadata: Mapping[str, Any]) -> str:
    return json.dumps(metadata, indent=1, ensure_ascii=False)


def code_messages(name: str, metadata: Mapping[str, Any], *, resources: str | None = None,
                  domains: Iterable[str] = ()) -> list[dict[str, str]]:
    """Messages of the Code Agent: write ``state.py``, ``tools.py``, the small initial state and the
    manifest for environment ``name`` from its tool metadata (and optional authentic resources)."""
    system = _system("code", (
        "You are the Code Agent of EnvFactory. From authentic tool metadata you write an executable, "
        "stateful, deterministic simulation of the tool service as a Python environment package.\n\n"
        + AUTHORING_RULES
        + "\nAnswer with one JSON object: {\"state_py\": \"...\", \"tools_py\": \"...\", "
        "\"initial_state\": {...small but realistic data: a few records per collection, enough for every "
        "tool's success and error paths...}, \"manifest\": {\"name\": \"" + name + "\", \"domain\": \"one of "
        + ", ".join(domains) + "\", \"description\": \"one sentence\", \"state_model\": \"state:RootClass\", "
        "\"bookkeeping_fields\": [], \"free_text_fields\": []}}."))
    user = f"Environment: {name}\n\nTool metadata:\n{_metadata_block(metadata)}\n"
    if resources:
        user += f"\nAuthentic resources (documentation of the real service):\n{resources}\n"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def scenario_messages(name: str, metadata: Mapping[str, Any], code: Mapping[str, Any]) -> list[dict[str, str]]:
    """Messages of the Test Agent: validation scenarios (and optionally tasks) for the generated code."""
    system = _system("test", (
        "You are the Test Agent of EnvFactory. You write validation scenarios that check a generated "
        "environment against the tool metadata of the real service: results, errors and state changes.\n\n"
        + SCENARIO_RULES
        + "\nAnswer with one JSON object: {\"scenarios\": [...], \"tasks\": [...optional...]}."))
    user = (f"Environment: {name}\n\nTool metadata:\n{_metadata_block(metadata)}\n\n"
            f"state.py:\n```python\n{code.get('state_py', '')}\n```\n\n"
            f"tools.py:\n```python\n{code.get('tools_py', '')}\n```\n\n"
            f"Initial state \"small\":\n{json.dumps(code.get('initial_state'), ensure_ascii=False)}\n")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def revise_messages(name: str, metadata: Mapping[str, Any], code: Mapping[str, Any],
                    scenarios: list[Mapping[str, Any]], failures: list[Mapping[str, Any]],
                    attempt: int) -> list[dict[str, str]]:
    """Messages of the Reviser: fix the code so every failure of the executed validation report goes.

    ``failures`` are the report's blocking findings (dimension, severity, check, tool, message).
    """
    system = _system("revise", (
        "You are the Reviser of EnvFactory. A generated environment failed execution-based validation. "
        "Fix it. The code must follow the tool metadata exactly; the scenarios encode the intended "
        "behaviour. Change a scenario only when it contradicts the metadata or the initial state (never "
        "to hide a bug, and keep the success and error path of every tool covered).\n\n"
        + AUTHORING_RULES + "\n" + SCENARIO_RULES
        + "\nAnswer with one JSON object with the complete files: {\"state_py\": \"...\", \"tools_py\": \"...\", "
        "\"initial_state\": {...}, \"manifest\": {...}, \"scenarios\": [...only if you corrected them...], "
        "\"tasks\": [...optional...]}."))
    user = (f"Environment: {name}\nRevision: {attempt}\n\nTool metadata:\n{_metadata_block(metadata)}\n\n"
            f"Validation failures (from executing the code):\n"
            + "\n".join(f"- [{f.get('severity')}] {f.get('dimension')}/{f.get('check')}"
                        + (f" tool {f['tool']}" if f.get("tool") else "") + f": {f.get('message')}" for f in failures)
            + f"\n\nstate.py:\n```python\n{code.get('state_py', '')}\n```\n\n"
            f"tools.py:\n```python\n{code.get('tools_py', '')}\n```\n\n"
            f"Initial state \"small\":\n{json.dumps(code.get('initial_state'), ensure_ascii=False)}\n\n"
            f"Manifest:\n{json.dumps(code.get('manifest'), ensure_ascii=False)}\n\n"
            f"Scenarios:\n" + "\n".join(json.dumps(s, ensure_ascii=False) for s in scenarios) + "\n")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
