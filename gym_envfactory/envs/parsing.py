"""Tool-call parsing: every form a policy's action can take → ordered calls and typed parse errors.

Accepted actions (docs/architecture.md, "The Gymnasium contract"):

- an OpenAI chat-completions assistant message ``{"role": "assistant", "content": ..., "tool_calls":
  [{"id", "type": "function", "function": {"name", "arguments": "<json>"}}]}`` (OpenAI API reference,
  "Chat Completions / tool calls"); the legacy ``function_call`` field too;
- a raw model string in the Hermes / Qwen format: ``<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>`` blocks, any number (parallel calls), with reasoning inside ``<think>...</think>``
  ignored (also a bare ``...</think>`` prefix, as Qwen3 templates emit);
- a plain JSON call ``{"name": ..., "arguments": {...}}`` (or a list of them), optionally in a
  Markdown code fence;
- typed calls: a :class:`ToolCall`, or a list of ToolCall / ``{"name", "arguments"}`` dicts.

``arguments`` may be an object, a JSON string holding an object, or a doubly encoded JSON string
(docs/cases.md C09).  Scalar strings inside the arguments are never converted here: that is the tool argument
policy's job (docs/cases.md C08, :mod:`gym_envfactory.environment.tools`).  Malformed input becomes a :class:`ParseError`
item in order, never an exception and never an empty call (docs/cases.md C13).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.environment.arguments import (
    JSON_ERRORS,
    decode_arguments,
    has_lone_surrogate,
    raw_text,
    safe_repr,
    scrub,
)

__all__ = ["ToolCall", "ParseError", "ParsedAction", "parse_action"]

_MAX_BLOCK_END_TRIES = 8


def _unfence(text: str) -> str | None:
    """The body of a Markdown code fence (```json ... ```), or None.  Linear time."""
    t = text.strip()
    if len(t) < 6 or not t.startswith("```") or not t.endswith("```"):
        return None
    body = t[3:-3]
    nl = body.find("\n")
    first = body[:nl] if nl >= 0 else ""
    if nl >= 0 and first.strip().lower() in ("json", ""):
        body = body[nl + 1:]
    elif body[:4].lower() == "json":
        body = body[4:]
    return body.strip()








@dataclass(slots=True)
class ToolCall:
    """A parsed tool call.  ``arguments`` is a dict; ``id`` is the model's call id if it gave one."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_openai(self, call_id: str) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry (OpenAI API "Chat Completions"): ``{"id", "type": "function",
        "function": {"name", "arguments": JSON text}}``; ``call_id`` when the model gave no id."""
        return {
            "id": self.id or call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass(slots=True)
class ParseError:
    """A call the policy attempted but that could not be parsed.  ``name`` is set when recoverable."""

    message: str
    raw: str
    name: str | None = None
    id: str | None = None


@dataclass
class ParsedAction:
    """Result of :func:`parse_action`.

    Attributes:
        content: the reply text with reasoning and tool-call blocks removed (stripped).
        reasoning: text inside ``<think>`` blocks (never executed or matched), or ``None``.
        items: calls and parse errors in the order they appeared.
    """

    content: str = ""
    reasoning: str | None = None
    items: list[ToolCall | ParseError] = field(default_factory=list)

    @property
    def calls(self) -> list[ToolCall]:
        """The calls that parsed, in order."""
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[ParseError]:
        """The call attempts that did not parse, in order."""
        return [i for i in self.items if isinstance(i, ParseError)]

    @property
    def attempted_calls(self) -> bool:
        """True when the action contains calls or call attempts (the user turn continues)."""
        return bool(self.items)








def _call_from_obj(obj: Any, raw: str, call_id: str | None = None) -> ToolCall | ParseError:
    if not isinstance(obj, Mapping):
        return ParseError(f"a tool call must be a JSON object, got {type(obj).__name__}", raw, id=call_id)
    if "function" in obj and isinstance(obj["function"], Mapping):  # OpenAI tool_calls entry
        call_id = _id(obj.get("id")) or call_id
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError("tool call has no 'name' (a non-empty string)", raw, id=call_id)
    if has_lone_surrogate(name):
        return ParseError("tool name contains invalid Unicode", scrub(raw), id=call_id)
    args_raw = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    try:
        args = decode_arguments(args_raw)
    except ValueError as exc:
        return ParseError(f"tool call {name}: {exc}", raw, name=name, id=call_id)
    return ToolCall(name=name.strip(), arguments=args, id=call_id or _id(obj.get("id")))


def _id(value: Any) -> str | None:
    """A model-given call id as a string (ints are converted; anything else is dropped)."""
    if isinstance(value, str) and value:
        return value[:200]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _items_from_json_text(text: str) -> list[ToolCall | ParseError]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        name_m = re.search(r'"name"\s*:\s*"([^"]{1,200})"', text[:10_000])
        return [ParseError(f"tool call is not valid JSON: {exc.msg} at position {exc.pos}", scrub(text[:2000]),
                           name=scrub(name_m.group(1)) if name_m else None)]
    except JSON_ERRORS as exc:
        return [ParseError(f"tool call is not usable JSON: {type(exc).__name__}", scrub(text[:2000]))]
    objs = obj if isinstance(obj, list) else [obj]
    return [_call_from_obj(o, text) for o in objs]


def _looks_like_json_call(text: str) -> bool:
    return bool(re.match(r'^\s*[\[{]', text)) and '"name"' in text


def _block_end(text: str, start: int) -> int:
    """Index of the ``</tool_call>`` closing the block that starts at ``start``: the first one after
    which the block is valid JSON (a JSON string may itself contain ``</tool_call>``), else the first."""
    first = end = text.find("</tool_call>", start)
    for _ in range(_MAX_BLOCK_END_TRIES):
        if end < 0:
            break
        try:
            json.loads(text[start:end])
            return end
        except JSON_ERRORS:
            end = text.find("</tool_call>", end + 1)
    return first


def _scan(text: str) -> tuple[list[str], list[str], str]:
    """Split raw output into reasoning parts, ``<tool_call>`` block bodies and the remaining reply.

    A sequential scan, so a tag-like string inside a tool call's JSON is never mistaken for a tag.
    """
    reasoning: list[str] = []
    blocks: list[str] = []
    rest: list[str] = []
    first_open = min((i for i in (text.find("<think>"), text.find("<tool_call>")) if i >= 0), default=len(text))
    close = text.find("</think>")
    pos = 0
    if 0 <= close < first_open:  # bare closing tag (Qwen3 templates open <think> in the prompt)
        reasoning.append(text[:close])
        pos = close + len("</think>")
    while pos < len(text):
        t = text.find("<think>", pos)
        c = text.find("<tool_call>", pos)
        nxt = min((i for i in (t, c) if i >= 0), default=-1)
        if nxt < 0:
            rest.append(text[pos:])
            break
        rest.append(text[pos:nxt])
        if nxt == t:
            end = text.find("</think>", t)
            reasoning.append(text[t + 7:] if end < 0 else text[t + 7:end])
            pos = len(text) if end < 0 else end + len("</think>")
        else:
            end = _block_end(text, c + 11)
            blocks.append(text[c + 11:] if end < 0 else text[c + 11:end])
            pos = len(text) if end < 0 else end + len("</tool_call>")
    return reasoning, blocks, "".join(rest)


def _parse_string(text: str) -> ParsedAction:
    reasoning_parts, blocks, body = _scan(text)
    out = ParsedAction(reasoning="\n".join(p.strip() for p in reasoning_parts) or None)
    if blocks:
        for inner in blocks:
            inner = inner.strip()
            fence = _unfence(inner)
            out.items.extend(_items_from_json_text(fence if fence is not None else inner))
        out.content = body.strip()
        return out
    stripped = body.strip()
    fence = _unfence(stripped)
    candidate = fence if fence is not None else stripped
    if _looks_like_json_call(candidate):
        try:
            obj = json.loads(candidate)
        except JSON_ERRORS:
            obj = None
        if isinstance(obj, Mapping) and ("tool_calls" in obj or "role" in obj):
            return parse_action(dict(obj))
        if obj is not None:
            objs = obj if isinstance(obj, list) else [obj]
            if all(isinstance(o, Mapping) and "name" in o and ("arguments" in o or "parameters" in o) for o in objs):
                out.items.extend(_call_from_obj(o, candidate) for o in objs)
                return out
        elif candidate.startswith("{") and re.search(r'"(arguments|parameters)"', candidate):
            out.items.extend(_items_from_json_text(candidate))
            return out
    out.content = stripped
    return out


def parse_action(action: Any) -> ParsedAction:
    """Parse a policy's action (module docstring) into ordered calls and parse errors.  Never raises."""
    if isinstance(action, str):
        return _parse_string(action)
    if isinstance(action, ToolCall):
        return ParsedAction(items=[_typed(action)])
    if isinstance(action, Mapping):
        if "tool_calls" in action or "function_call" in action or action.get("role") == "assistant":
            content = action.get("content")
            bad_content = None
            if isinstance(content, list):  # content parts
                content = "".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
            elif content is not None and not isinstance(content, str):
                bad_content = ParseError(f"message content must be a string or a list of text parts, got "
                                         f"{type(content).__name__}", safe_repr(content))
                content = ""
            content = scrub(content or "")
            raw_calls = action.get("tool_calls") or []
            if not raw_calls and action.get("function_call"):
                raw_calls = [{"function": action["function_call"]}]
            if not isinstance(raw_calls, list):
                out = _parse_string(content) if content else ParsedAction()
                out.items.append(ParseError(f"tool_calls must be a list, got {type(raw_calls).__name__}",
                                            safe_repr(raw_calls)))
                return out
            if not raw_calls:
                parsed = _parse_string(content)
                if isinstance(action.get("reasoning_content"), str) and not parsed.reasoning:
                    parsed.reasoning = action["reasoning_content"]
                if bad_content is not None:
                    parsed.items.append(bad_content)
                return parsed
            text = _parse_string(content) if content else ParsedAction()
            reasoning = text.reasoning or (action.get("reasoning_content") if isinstance(action.get("reasoning_content"), str) else None)
            out = ParsedAction(content=text.content, reasoning=reasoning)
            for rc in raw_calls:
                out.items.append(_call_from_obj(rc, raw_text(rc), _id(rc.get("id")) if isinstance(rc, Mapping) else None))
            if bad_content is not None:
                out.items.append(bad_content)
            return out
        if "name" in action:
            return ParsedAction(items=[_call_from_obj(action, raw_text(action))])
        return ParsedAction(items=[ParseError("a dict action must be an assistant message or a tool call",
                                              raw_text(action))])
    if isinstance(action, (list, tuple)):
        out = ParsedAction()
        for a in action:
            out.items.append(_typed(a) if isinstance(a, ToolCall) else _call_from_obj(a, raw_text(a)))
        return out
    return ParsedAction(items=[ParseError(f"unsupported action type {type(action).__name__}", safe_repr(action))])


def _typed(call: ToolCall) -> ToolCall | ParseError:
    if not isinstance(call.name, str) or not call.name.strip():
        return ParseError("tool call has no 'name' (a non-empty string)", safe_repr(call))
    try:
        args = decode_arguments(call.arguments)
    except ValueError as exc:
        return ParseError(f"tool call {scrub(call.name)}: {exc}", safe_repr(call), name=scrub(call.name), id=_id(call.id))
    return ToolCall(call.name.strip(), args, _id(call.id))


