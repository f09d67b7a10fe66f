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

Each format is a parser in a registry (:func:`register_action_parser`, as verl's ``ToolParser.register``),
offered the actions of the types it accepts and tried in this order, the first answer winning:
``tool_call`` (a :class:`ToolCall`), ``openai_message`` (an assistant message dict), ``call_object`` (a
call dict), ``call_list`` (a list or tuple), ``hermes`` (text with ``<tool_call>`` / ``<think>`` tags),
``json_call`` (text that is a plain JSON call); then any registered later, or ahead of the one named in
``before=``.  When no parser answers, a string is a plain reply and anything else a :class:`ParseError`.

``arguments`` may be an object, a JSON string holding an object, or a doubly encoded JSON string
(docs/cases.md C09).  Scalar strings inside the arguments are never converted here: that is the tool argument
policy's job (docs/cases.md C08, :mod:`gym_envfactory.environment.tools`).  Malformed input becomes a :class:`ParseError`
item in order, never an exception and never an empty call (docs/cases.md C13).

Parsing is linear in the size of the action, however many blocks it holds, malformed or not (docs/cases.md
C13; ``tests/envs/test_bounded_episodes.py`` counts the work): each search for a tag resumes where the last
one stopped, each block is decoded at most twice (its first ``</tool_call>``, then the one a lexical scan
of JSON strings points to), and a :class:`ParseError` keeps at most :data:`MAX_RAW_CHARS` characters of
what was sent, its own object's text for an element of a JSON list.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
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

__all__ = ["ToolCall", "ParseError", "ParsedAction", "parse_action", "MAX_RAW_CHARS", "ActionParser",
           "ActionParserEntry", "register_action_parser", "unregister_action_parser", "action_parsers"]

logger = logging.getLogger(__name__)

#: The most characters of a malformed call a :class:`ParseError` keeps in ``raw`` (and so in the action
#: log and the history); a tool name quoted in its message or kept in ``name`` is cut to 200.
MAX_RAW_CHARS = 2000
_MAX_NAME_CHARS = 200
_OPEN, _CLOSE, _THINK, _END_THINK = "<tool_call>", "</tool_call>", "<think>", "</think>"
#: Lexing JSON for block ends: a run of characters outside strings that cannot start a string, an
#: escape or a tag; a whole JSON string (escapes included).
_LEX_PLAIN = re.compile(r'[^"\\<]*')
_LEX_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_UNDECODED = object()  # a block body the scan could not decode as JSON


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








def _call_from_obj(obj: Any, raw: str | None, call_id: str | None = None) -> ToolCall | ParseError:
    """``obj`` as a call, or a :class:`ParseError` keeping ``raw`` (the text it came from; ``None``:
    ``obj``'s own JSON, computed only on error) cut to :data:`MAX_RAW_CHARS`."""
    source = obj
    if not isinstance(obj, Mapping):
        return ParseError(f"a tool call must be a JSON object, got {type(obj).__name__}", _raw(raw, source), id=call_id)
    if "function" in obj and isinstance(obj["function"], Mapping):  # OpenAI tool_calls entry
        call_id = _id(obj.get("id")) or call_id
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError("tool call has no 'name' (a non-empty string)", _raw(raw, source), id=call_id)
    if has_lone_surrogate(name):
        return ParseError("tool name contains invalid Unicode", _raw(raw, source), id=call_id)
    args_raw = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    try:
        args = decode_arguments(args_raw)
    except ValueError as exc:
        short = name[:_MAX_NAME_CHARS]
        return ParseError(f"tool call {short}: {exc}", _raw(raw, source), name=short, id=call_id)
    return ToolCall(name=name.strip(), arguments=args, id=call_id or _id(obj.get("id")))


def _raw(raw: str | None, obj: Any) -> str:
    """What a :class:`ParseError` keeps of the call: ``raw``, else ``obj`` rendered; at most
    :data:`MAX_RAW_CHARS` characters, scrubbed of lone surrogates."""
    if raw is None:
        return raw_text(obj)  # cut and scrubbed
    return scrub(raw[:MAX_RAW_CHARS]) if len(raw) > MAX_RAW_CHARS else scrub(raw)


def _id(value: Any) -> str | None:
    """A model-given call id as a string (ints are converted; anything else is dropped)."""
    if isinstance(value, str) and value:
        return value[:200]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _items_from_json_text(text: str, decoded: Any = _UNDECODED) -> list[ToolCall | ParseError]:
    """The calls in a JSON text (an object or a list of them); ``decoded``: its value when already
    decoded.  A list's elements keep their own text as ``raw``, never the whole list's."""
    obj = decoded
    if obj is _UNDECODED:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            name_m = re.search(r'"name"\s*:\s*"([^"]{1,200})"', text[:10_000])
            return [ParseError(f"tool call is not valid JSON: {exc.msg} at position {exc.pos}", _raw(text, None),
                               name=scrub(name_m.group(1)) if name_m else None)]
        except JSON_ERRORS as exc:
            return [ParseError(f"tool call is not usable JSON: {type(exc).__name__}", _raw(text, None))]
    if isinstance(obj, list):
        return [_call_from_obj(o, None) for o in obj]
    return [_call_from_obj(obj, text)]


def _looks_like_json_call(text: str) -> bool:
    return bool(re.match(r'^\s*[\[{]', text)) and '"name"' in text


def _block_end(text: str, start: int) -> tuple[int, Any]:
    """Where the block whose body starts at ``start`` ends, and its body decoded (``_UNDECODED`` when
    it is not JSON).  The end is the ``</tool_call>`` after which the body is valid JSON (a JSON string
    may itself contain ``</tool_call>``), else the first one; ``-1`` when there is none.

    Linear overall: the body up to the first ``</tool_call>`` is decoded once; only when that fails is the
    one other candidate looked for, by :func:`_close_outside_strings`, and decoded once more."""
    first = text.find(_CLOSE, start)
    if first < 0:
        return first, _UNDECODED
    try:
        return first, json.loads(text[start:first])
    except JSON_ERRORS:
        pass
    end = _close_outside_strings(text, start)
    if end > first:
        try:
            return end, json.loads(text[start:end])
        except JSON_ERRORS:
            pass
    return first, _UNDECODED


def _close_outside_strings(text: str, start: int) -> int:
    """The first ``</tool_call>`` after ``start`` that lies outside JSON strings, or -1 where none can end
    valid JSON (the text ends, or a string is unterminated, or a backslash or another ``<`` stands outside
    strings first).  The only ``</tool_call>`` after which a body can be valid JSON.

    Linear over a whole message: two scans alive at one position started at different block bodies, so
    one is inside a string where the other is outside (the later one starts right after a ``<tool_call>``
    the earlier one passed, which it can only pass inside a string); they stay opposite, and the first
    ``<`` or backslash stops the one outside.  So no position is scanned by more than two of them."""
    n = len(text)
    pos = start
    while True:
        plain = _LEX_PLAIN.match(text, pos)
        pos = plain.end() if plain is not None else pos  # it always matches (maybe the empty string)
        if pos >= n:
            return -1
        ch = text[pos]
        if ch == '"':
            m = _LEX_STRING.match(text, pos)
            if m is None:
                return -1
            pos = m.end()
        elif ch == "<" and text.startswith(_CLOSE, pos):
            return pos
        else:
            return -1


def _scan(text: str) -> tuple[list[str], list[tuple[str, Any]], str]:
    """Split raw output into reasoning parts, ``<tool_call>`` block bodies (each with its decoded JSON,
    or ``_UNDECODED``) and the remaining reply.

    A sequential scan, so a tag-like string inside a tool call's JSON is never mistaken for a tag.  Linear:
    the next ``<think>`` and ``<tool_call>`` are remembered, and searched again only once passed.
    """
    reasoning: list[str] = []
    blocks: list[tuple[str, Any]] = []
    rest: list[str] = []
    n = len(text)
    t = text.find(_THINK)
    c = text.find(_OPEN)
    first_open = min((i for i in (t, c) if i >= 0), default=n)
    close = text.find(_END_THINK, 0, first_open + len(_END_THINK) - 1)
    pos = 0
    if 0 <= close < first_open:  # bare closing tag (Qwen3 templates open <think> in the prompt)
        reasoning.append(text[:close])
        pos = close + len(_END_THINK)
    while pos < n:
        if 0 <= t < pos:
            t = text.find(_THINK, pos)
        if 0 <= c < pos:
            c = text.find(_OPEN, pos)
        nxt = min((i for i in (t, c) if i >= 0), default=-1)
        if nxt < 0:
            rest.append(text[pos:])
            break
        rest.append(text[pos:nxt])
        if nxt == t:
            end = text.find(_END_THINK, t)
            reasoning.append(text[t + len(_THINK):] if end < 0 else text[t + len(_THINK):end])
            pos = n if end < 0 else end + len(_END_THINK)
        else:
            body = c + len(_OPEN)
            end, decoded = _block_end(text, body)
            blocks.append((text[body:] if end < 0 else text[body:end], decoded))
            pos = n if end < 0 else end + len(_CLOSE)
    return reasoning, blocks, "".join(rest)


def _parse_string(text: str) -> ParsedAction:
    """A raw model string: reasoning and ``<tool_call>`` blocks scanned out; without blocks, the rest may
    still be a plain JSON call (:func:`_json_call`), else it is the reply."""
    reasoning_parts, blocks, body = _scan(text)
    out = ParsedAction(reasoning="\n".join(p.strip() for p in reasoning_parts) or None)
    if blocks:
        for inner, decoded in blocks:
            inner = inner.strip()
            if decoded is not _UNDECODED:  # the scan decoded it already
                out.items.extend(_items_from_json_text(inner, decoded))
                continue
            fence = _unfence(inner)
            out.items.extend(_items_from_json_text(fence if fence is not None else inner))
        out.content = body.strip()
        return out
    stripped = body.strip()
    called = _json_call(stripped, out)
    if called is not None:
        return called
    out.content = stripped
    return out


def _json_call(stripped: str, out: ParsedAction) -> ParsedAction | None:
    """``stripped`` (a reply without tags, optionally in a code fence) as a plain JSON call or list of
    calls added to ``out``, or as a JSON assistant message; ``None`` when it is not one."""
    fence = _unfence(stripped)
    candidate = fence if fence is not None else stripped
    if not _looks_like_json_call(candidate):
        return None
    try:
        obj = json.loads(candidate)
    except JSON_ERRORS:
        obj = None
    if isinstance(obj, Mapping) and ("tool_calls" in obj or "role" in obj):
        return parse_action(dict(obj))
    if obj is not None:
        objs = obj if isinstance(obj, list) else [obj]
        if all(isinstance(o, Mapping) and "name" in o and ("arguments" in o or "parameters" in o) for o in objs):
            out.items.extend(_call_from_obj(o, None if isinstance(obj, list) else candidate) for o in objs)
            return out
    elif candidate.startswith("{") and re.search(r'"(arguments|parameters)"', candidate):
        out.items.extend(_items_from_json_text(candidate))
        return out
    return None


# ---------------------------------------------------------------------------- the registry of formats

#: ``parser(action) -> ParsedAction | None``: the action parsed, or ``None`` when it is not in this
#: parser's format (the next parser is tried).  A parser should not raise; one that does yields a
#: :class:`ParseError` (parsing stays total, docs/cases.md C13).
ActionParser = Callable[[Any], "ParsedAction | None"]


@dataclass(frozen=True)
class ActionParserEntry:
    """A registered action format: its ``name``, the ``parser`` and the action types it ``accepts``
    (only actions of those types are offered to it)."""

    name: str
    parser: ActionParser
    accepts: tuple[type, ...]


_PARSERS: list[ActionParserEntry] = []
_BY_TYPE: dict[type, tuple[ActionParserEntry, ...]] = {}  # the parsers offered each action type, in order
_REGISTRY_LOCK = threading.Lock()


def register_action_parser(name: str, *, accepts: type | tuple[type, ...] = object, before: str | None = None,
                           replace: bool = False) -> Callable[[ActionParser], ActionParser]:
    """Decorator registering an action format (as verl's ``ToolParser.register``): ``parser(action) ->
    ParsedAction | None`` is offered every action that is an instance of ``accepts``, in registration
    order, ahead of the parser named ``before`` when given; the first that returns a
    :class:`ParsedAction` wins.  ``replace=True`` swaps a registered parser of that name in its place.

    Raises:
        ValueError: ``name`` already registered (without ``replace``), or ``before`` unknown.
        TypeError: ``accepts`` is not a type or a tuple of types, or the parser is not callable.
    """
    kinds = accepts if isinstance(accepts, tuple) else (accepts,)
    if not kinds or not all(isinstance(k, type) for k in kinds):
        raise TypeError(f"accepts must be a type or a tuple of types, got {accepts!r}")

    def decorator(parser: ActionParser) -> ActionParser:
        if not callable(parser):
            raise TypeError(f"action parser {name!r} must be callable, got {type(parser).__name__}")
        entry = ActionParserEntry(name, parser, kinds)
        with _REGISTRY_LOCK:
            names = [e.name for e in _PARSERS]
            if name in names:
                if not replace:
                    raise ValueError(f"action parser {name!r} is already registered; pass replace=True to replace it")
                _PARSERS[names.index(name)] = entry
            elif before is not None:
                if before not in names:
                    raise ValueError(f"unknown action parser {before!r}; registered: {', '.join(names)}")
                _PARSERS.insert(names.index(before), entry)
            else:
                _PARSERS.append(entry)
            _BY_TYPE.clear()
        return parser

    return decorator


def unregister_action_parser(name: str) -> None:
    """Remove the action parser called ``name`` (a no-op when there is none)."""
    with _REGISTRY_LOCK:
        _PARSERS[:] = [e for e in _PARSERS if e.name != name]
        _BY_TYPE.clear()


def action_parsers() -> tuple[str, ...]:
    """The registered action formats' names, in the order they are tried."""
    with _REGISTRY_LOCK:
        return tuple(e.name for e in _PARSERS)


def _parsers_for(kind: type) -> tuple[ActionParserEntry, ...]:
    hit = _BY_TYPE.get(kind)
    if hit is None:
        with _REGISTRY_LOCK:
            hit = _BY_TYPE[kind] = tuple(e for e in _PARSERS if issubclass(kind, e.accepts))
    return hit


def parse_action(action: Any) -> ParsedAction:
    """Parse a policy's action (module docstring) into ordered calls and parse errors: the registered
    parsers accepting its type, in order (:func:`action_parsers`), the first answer wins; when none
    answers, a string is a plain reply, anything else a :class:`ParseError`.  Never raises."""
    for entry in _parsers_for(type(action)):
        try:
            out = entry.parser(action)
        except Exception as exc:  # noqa: BLE001 - parsing is total (docs/cases.md C13): a parser's bug becomes a parse error the policy sees
            logger.warning("action parser %r raised %s", entry.name, type(exc).__name__, exc_info=True)
            return ParsedAction(items=[ParseError(f"action parser {entry.name!r} failed on this action: "
                                                  f"{type(exc).__name__}", safe_repr(action))])
        if isinstance(out, ParsedAction):
            return out
        if out is not None:
            return ParsedAction(items=[ParseError(f"action parser {entry.name!r} returned {type(out).__name__}, "
                                                  "not a ParsedAction", safe_repr(action))])
    if isinstance(action, str):
        return ParsedAction(content=action.strip())
    if isinstance(action, Mapping):
        return ParsedAction(items=[ParseError("a dict action must be an assistant message or a tool call",
                                              raw_text(action))])
    return ParsedAction(items=[ParseError(f"unsupported action type {type(action).__name__}", safe_repr(action))])


@register_action_parser("tool_call", accepts=ToolCall)
def parse_tool_call(action: ToolCall) -> ParsedAction:
    """A typed :class:`ToolCall`."""
    return ParsedAction(items=[_typed(action)])


@register_action_parser("openai_message", accepts=Mapping)
def parse_openai_message(action: Mapping[str, Any]) -> ParsedAction | None:
    """An OpenAI chat-completions assistant message (``tool_calls``, the legacy ``function_call``, or
    ``role: assistant`` with the calls in its text content); ``None`` for other dicts."""
    if not ("tool_calls" in action or "function_call" in action or action.get("role") == "assistant"):
        return None
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
        out.items.append(_call_from_obj(rc, None, _id(rc.get("id")) if isinstance(rc, Mapping) else None))
    if bad_content is not None:
        out.items.append(bad_content)
    return out


@register_action_parser("call_object", accepts=Mapping)
def parse_call_object(action: Mapping[str, Any]) -> ParsedAction | None:
    """One call as a dict: ``{"name", "arguments"}`` (or an OpenAI ``tool_calls`` entry with ``name``)."""
    return ParsedAction(items=[_call_from_obj(action, None)]) if "name" in action else None


@register_action_parser("call_list", accepts=(list, tuple))
def parse_call_list(action: list[Any] | tuple[Any, ...]) -> ParsedAction:
    """A list of :class:`ToolCall` s and call dicts (parallel calls), each parsed on its own."""
    out = ParsedAction()
    for a in action:
        out.items.append(_typed(a) if isinstance(a, ToolCall) else _call_from_obj(a, None))
    return out


@register_action_parser("hermes", accepts=str)
def parse_hermes(text: str) -> ParsedAction | None:
    """Hermes / Qwen text: ``<tool_call>`` blocks and ``<think>`` reasoning (a bare ``</think>`` prefix
    too); ``None`` for text without those tags."""
    if _OPEN not in text and _THINK not in text and _END_THINK not in text:
        return None
    return _parse_string(text)


@register_action_parser("json_call", accepts=str)
def parse_json_call(text: str) -> ParsedAction | None:
    """A plain JSON call or list of calls, optionally in a Markdown code fence, or a JSON assistant
    message; ``None`` for other text (a plain reply)."""
    return _json_call(text.strip(), ParsedAction())


def _typed(call: ToolCall) -> ToolCall | ParseError:
    if not isinstance(call.name, str) or not call.name.strip():
        return ParseError("tool call has no 'name' (a non-empty string)", safe_repr(call))
    try:
        args = decode_arguments(call.arguments)
    except ValueError as exc:
        return ParseError(f"tool call {scrub(call.name)}: {exc}", safe_repr(call), name=scrub(call.name), id=_id(call.id))
    return ToolCall(call.name.strip(), args, _id(call.id))


