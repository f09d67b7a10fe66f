"""The argument policy's decoding half: what a tool call's ``arguments`` may be before validation.

Arguments arrive as an object, a JSON string holding an object, or a doubly encoded JSON string
(docs/cases.md C09); :func:`decode_arguments` turns each into a fresh dict of JSON data or raises
``ValueError`` with a message the model can read.  Scalar strings inside are never converted here: the
validating half (:mod:`gym_envfactory.environment.tools`, docs/argument-policy.md) decides (C08).
Also here: text sanitising shared by every surface that stores or echoes model input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

#: Errors json.loads raises on hostile input: malformed text, nesting too deep, huge integers.
JSON_ERRORS = (ValueError, RecursionError)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(obj: Any) -> bool:
    """True when a string anywhere in ``obj`` holds a lone UTF-16 surrogate (not encodable as UTF-8)."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return False
        except UnicodeEncodeError:
            return True
    if isinstance(obj, Mapping):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return any(has_lone_surrogate(v) for v in obj)
    return False


def scrub(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (safe to store, log and send)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", text)


def copy_json_data(value: Any, max_depth: int | None = None) -> Any:
    """A deep copy of ``value`` if it is JSON data (dicts with string keys, lists or tuples, str, int,
    float, bool, None; tuples become lists), checked in the same single walk: no string may hold a lone
    UTF-16 surrogate and, with ``max_depth``, nothing may nest deeper than ``max_depth`` levels.  This is
    the one walk :func:`decode_arguments` makes over a call's arguments.

    Raises:
        ValueError: a non-string key, a value that is not JSON data, a lone surrogate, or nesting past
            ``max_depth``.
        RecursionError: without ``max_depth``, nesting deeper than the interpreter's stack.
    """
    limit = max_depth if max_depth is not None else 1 << 30
    return _copy(value, 0, limit)


def _copy(value: Any, depth: int, limit: int) -> Any:
    if depth > limit:
        raise ValueError(f"arguments are nested deeper than {limit} levels")
    if type(value) is str:
        if not value.isascii():
            _check_text(value)
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        _check_text(value)
        return str(value)
    if type(value) is dict or isinstance(value, Mapping):  # exact dict first: no ABC check on the hot path
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"object keys must be strings, got {type(k).__name__}")
            if not k.isascii():
                _check_text(k)
            out[k] = _copy(v, depth + 1, limit)
        return out
    if isinstance(value, (list, tuple)):
        return [_copy(v, depth + 1, limit) for v in value]
    raise ValueError(f"{type(value).__name__} is not JSON data")


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("arguments contain invalid Unicode (a lone UTF-16 surrogate)") from None


class DecodedArguments(dict[str, Any]):
    """A dict of JSON data that :func:`decode_arguments` produced (a fresh copy owned by the call).

    The marker lets decoding happen once per call: the action parser decodes what the model sent, and
    :meth:`Session.call <gym_envfactory.session.Session.call>` accepts the result without walking it
    again.  Anything else handed to a session is decoded there.
    """

    __slots__ = ()


def decode_arguments(raw: Any) -> DecodedArguments:
    """Object, JSON string of an object, or doubly encoded JSON string → a fresh dict of JSON data.

    Raises:
        ValueError: malformed or too deeply nested JSON, not an object, non-JSON values, or strings
            holding lone surrogates.
    """
    if type(raw) is DecodedArguments:
        return raw
    if raw is None:
        return DecodedArguments()
    value: Any
    if type(raw) is dict or isinstance(raw, Mapping):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        if not text:
            return DecodedArguments()
        value = text
        for _ in range(2):  # at most double encoding
            if not isinstance(value, str):
                break
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}") from None
            except JSON_ERRORS as exc:
                raise ValueError(f"arguments are not usable JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(value, Mapping):
            raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    else:
        raise ValueError(f"arguments must be a JSON object, got {type(raw).__name__}")
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    # one walk: copy (the call owns its arguments), types, lone surrogates and depth together
    return DecodedArguments(copy_json_data(value, MAX_ARGUMENT_DEPTH))


def raw_text(obj: Any) -> str:
    """A printable, storable rendering of what the policy sent (for error observations and logs)."""
    try:
        text = json.dumps(obj, ensure_ascii=False, default=safe_repr)
    except Exception:  # noqa: BLE001 - TypeError, ValueError, RecursionError, or a hostile object's own error
        text = safe_repr(obj, 2000)
    return scrub(text[:2000])


def format_validation_error(exc: ValidationError) -> list[dict[str, str]]:
    """Per-field problems of a Pydantic argument validation error, as ``{"field": dotted path,
    "message": ...}`` dicts (``"<arguments>"`` for the whole object; unknown and missing parameters
    named plainly for the model), the ``details`` of an ``invalid_arguments`` :class:`ToolResult`."""
    out = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<arguments>"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown parameter"
        elif err.get("type") == "missing":
            msg = "required parameter missing"
        out.append({"field": loc, "message": msg})
    return out


def describe_validation_error(exc: ValidationError, root: str, *, limit: int = 3) -> tuple[str, list[dict[str, str]]]:
    """A Pydantic error as the model should read it: ``("<path>: <message>; ...", details)``.

    Each path is the dotted location of the failing field under ``root`` (``root`` alone for the whole
    value), e.g. ``"result.nights: Input should be a valid integer"``; at most ``limit`` problems are
    named in the text (``"(and 4 more)"`` after them), every one is in ``details`` (``{"field",
    "message"}`` dicts, as :func:`format_validation_error` gives).
    """
    details = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()))
        details.append({"field": f"{root}.{loc}" if loc else root, "message": str(err.get("msg", "invalid"))})
    text = "; ".join(f"{d['field']}: {d['message']}" for d in details[:limit])
    if len(details) > limit:
        text += f" (and {len(details) - limit} more)"
    return scrub(text), details


def safe_repr(obj: Any, limit: int = 500) -> str:
    """``repr(obj)`` cut to ``limit`` characters and scrubbed; an object whose ``repr`` raises (or nests
    too deeply) is shown by its type name instead.  Never raises."""
    try:
        text = repr(obj)
    except Exception as exc:  # noqa: BLE001 - a hostile __repr__ must not crash the caller
        try:
            kind = type(obj).__name__
        except Exception:  # noqa: BLE001
            kind = "object"
        text = f"<{kind} whose repr raised {type(exc).__name__}>"
    return scrub(text[:limit])


#: Deeper tool arguments are refused (no tool schema needs them; they only serve to exhaust the stack).
MAX_ARGUMENT_DEPTH = 64
