"""What the VeRL agent loop puts in a prompt, and the refusal when it does not fit (docs/training.md, "VeRL").

VeRL 0.9.1 measures prompts for ``data.filter_overlong_prompts`` *without* the tools (``RLHFDataset`` sees
only the messages), then the agent loop's ``ct_build_initial_tokens`` left-truncates anything over
``rollout.prompt_length`` with a log warning: the model would see a prompt that starts in the middle of
the tool list.  The loop therefore renders the tools in a chosen form (:func:`prompt_tools`) and refuses a
prompt that does not fit (:func:`check_prompt_fits`, :class:`PromptTooLongError`) instead of cutting it.

Tool forms (``tool_schemas`` of the loop's YAML entry):

- ``"compact"`` (the shipped default): :func:`~gym_envfactory.training.episodes.compact_tools` (name, the
  description's first sentence, parameter names, types and which are required) plus each parameter's
  ``enum`` values.  With a Qwen3-style template (every schema as one JSON line) the rows of the shipped
  catalog take 1,775-5,836 tokens instead of 4,721-11,644 with full schemas (SmolLM2's tokenizer;
  tests/training/verl/test_prompt_fit.py).
- ``"full"``: the environment's OpenAI schemas as they are (parameter descriptions, formats, examples).

Needs no VeRL (importable without the ``train-verl`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gym_envfactory.errors import EnvFactoryError
from gym_envfactory.training.episodes import compact_tools

__all__ = ["TOOL_SCHEMAS", "PromptTooLongError", "check_prompt_fits", "prompt_tools", "row_prompt_ids"]

#: The tool forms :func:`prompt_tools` knows.
TOOL_SCHEMAS = ("compact", "full")


class PromptTooLongError(EnvFactoryError, ValueError):
    """An episode's opening prompt, tools included, is longer than ``rollout.prompt_length`` (VeRL would
    left-truncate it).  Attributes: ``n_tokens``, ``limit``, ``row`` (``{"task_id", "index", "env",
    "turn"}`` of the dataset row, values ``None`` where unknown)."""

    def __init__(self, n_tokens: int, limit: int, row: Mapping[str, Any]) -> None:
        self.n_tokens, self.limit, self.row = n_tokens, limit, dict(row)
        where = ", ".join(f"{k}={v}" for k, v in self.row.items() if v is not None) or "unknown row"
        super().__init__(
            f"the prompt of row {where} is {n_tokens} tokens with its tools, over rollout.prompt_length="
            f"{limit} (data.max_prompt_length): VeRL would left-truncate it. Raise data.max_prompt_length, "
            f"render tools compactly (tool_schemas: compact in the agent loop YAML) or leave the row out")


def prompt_tools(tools: Sequence[Mapping[str, Any]], mode: str = "compact") -> list[dict[str, Any]]:
    """The tool schemas put in the prompt: ``tools`` (OpenAI function schemas) in form ``mode`` (module
    docstring).  Returns new dicts; raises ``ValueError`` for an unknown ``mode``."""
    if mode == "full":
        return [dict(t) for t in tools]
    if mode != "compact":
        raise ValueError(f"tool_schemas must be one of {TOOL_SCHEMAS}, got {mode!r}")
    out = compact_tools(tools)
    for small, tool in zip(out, tools, strict=True):
        props = (tool.get("function", tool).get("parameters") or {}).get("properties") or {}
        kept = small["function"]["parameters"]["properties"]
        for name, schema in props.items():
            if isinstance(schema, Mapping) and "enum" in schema:
                kept[name]["enum"] = list(schema["enum"])
    return out


def check_prompt_fits(n_tokens: int, limit: int, row: Mapping[str, Any]) -> None:
    """Raise :class:`PromptTooLongError` when ``n_tokens > limit``; ``row`` names the dataset row in the
    message (``task_id``, ``index``, ``env``, ``turn``)."""
    if n_tokens > limit:
        raise PromptTooLongError(n_tokens, limit, row)


def row_prompt_ids(tokenizer: Any, row: Mapping[str, Any], mode: str = "compact") -> list[int]:
    """Token ids of an ``envfactory export rl`` row's opening prompt as the agent loop builds it: the row's
    ``prompt`` messages and its ``extra_info.tools`` (JSON) in form ``mode``, through the tokenizer's chat
    template with the generation prompt (what VeRL's Continuous Token builder renders for a text model)."""
    tools = prompt_tools(json.loads(row["extra_info"]["tools"]), mode)
    messages = [dict(m) for m in row["prompt"]]
    ids = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    return list(ids)
