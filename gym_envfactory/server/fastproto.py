"""The fast session protocol (docs/architecture.md, "Backends"): JSON-RPC 2.0 over one WebSocket, many sessions per connection.

Every request names its ``session_id``; a frame may carry one request or a JSON-RPC batch (an array),
so a GRPO group's k calls travel in one frame and come back in one frame (JSON-RPC 2.0 spec §6).
Methods (params → result):

- ``create`` {env: str | [str], task_id?, initial_state?, snapshot?} → {session_id, envs, tools}
- ``call`` {session_id, name, arguments, call_id?, tag?} → ToolResult dict (typed errors inside)
- ``record_invalid`` {session_id, name, raw, message, call_id?, tag?} → ToolResult dict
- ``state`` / ``snapshot`` / ``action_log`` / ``info`` {session_id} → state dict / snapshot str / list / dict
- ``restore`` {session_id, snapshot}, ``reset`` {session_id}, ``close`` {session_id} → null/bool
- ``fork`` {session_id, k} → [session_id, ...]
- ``stats`` {}, ``catalog`` {}, ``ping`` {} → dicts

Errors use JSON-RPC codes: -32700 parse error, -32600 invalid request, -32601 unknown method,
-32602 invalid params, and application codes below.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from gym_envfactory.errors import BadRequestError, CapacityError, UnknownSessionError
from gym_envfactory.server.manager import SessionManager

#: Most requests one frame (a JSON-RPC batch) may carry, and most bytes one response frame may hold.
MAX_BATCH = 4096
MAX_RESPONSE_BYTES = 64 * 1024 * 1024

__all__ = ["dispatch_frame", "METHODS", "ERR_UNKNOWN_SESSION", "ERR_CAPACITY", "ERR_BAD_REQUEST", "ERR_UNAUTHORIZED"]

log = logging.getLogger(__name__)

ERR_PARSE, ERR_INVALID_REQUEST, ERR_METHOD, ERR_PARAMS, ERR_INTERNAL = -32700, -32600, -32601, -32602, -32603
ERR_UNKNOWN_SESSION, ERR_CAPACITY, ERR_BAD_REQUEST, ERR_UNAUTHORIZED = -32001, -32002, -32003, -32004


def _create(m: SessionManager, p: dict[str, Any]) -> Any:
    ms = m.create(p["env"], task_id=p.get("task_id"), initial_state=p.get("initial_state"), snapshot=p.get("snapshot"))
    return {"session_id": ms.session_id, "envs": ms.envs,
            "versions": {n: m.specs[n].version for n in ms.envs},
            "tools": [t.name for t in ms.session.tools.values()]}


METHODS: dict[str, Callable[[SessionManager, dict[str, Any]], Any]] = {
    "create": _create,
    "call": lambda m, p: m.call(p["session_id"], p["name"], p.get("arguments"), call_id=p.get("call_id"), tag=p.get("tag")),
    "record_invalid": lambda m, p: m.record_invalid(p["session_id"], p["name"], p.get("raw"), p["message"],
                                                    call_id=p.get("call_id"), tag=p.get("tag")),
    "state": lambda m, p: m.state(p["session_id"]),
    "snapshot": lambda m, p: m.snapshot(p["session_id"]),
    "restore": lambda m, p: m.restore(p["session_id"], p["snapshot"]),
    "reset": lambda m, p: m.reset(p["session_id"]),
    "fork": lambda m, p: [ms.session_id for ms in m.fork(p["session_id"], p.get("k", 1))],
    "close": lambda m, p: m.close(p["session_id"]),
    "info": lambda m, p: m.info(p["session_id"]),
    "action_log": lambda m, p: m.action_log(p["session_id"]),
    "score": lambda m, p: m.score(p["session_id"], reward=p.get("reward"), texts=p.get("texts")),
    "stats": lambda m, p: m.stats(),
    "catalog": lambda m, p: m.catalog(),
    "ping": lambda m, p: {"ok": True},
}


def _error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def _one(m: SessionManager, req: Any, observe: Callable[[str, bool], None] | None) -> dict[str, Any] | None:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
        id_ = req.get("id") if isinstance(req, dict) else None
        return _error(id_ if _valid_id(id_) else None, ERR_INVALID_REQUEST,
                      "a request is an object with jsonrpc='2.0', method and optional params/id")
    notification = "id" not in req  # JSON-RPC 2.0 §4.1: never answered, not even with an error
    id_ = req.get("id")
    if not notification and not _valid_id(id_):
        return _error(None, ERR_INVALID_REQUEST, "id must be a string, an integer or null")
    out = _call(m, req, id_, observe)
    return None if notification else out


def _valid_id(id_: Any) -> bool:
    return id_ is None or isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool))


def _call(m: SessionManager, req: dict[str, Any], id_: Any, observe: Callable[[str, bool], None] | None) -> dict[str, Any]:
    method = req["method"]
    fn = METHODS.get(method)
    if fn is None:
        return _error(id_, ERR_METHOD, f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    params = req.get("params") or {}
    if not isinstance(params, dict):
        return _error(id_, ERR_PARAMS, "params must be an object")
    ok = False
    try:
        result = fn(m, params)
        ok = True
    except KeyError as exc:
        if isinstance(exc, UnknownSessionError):
            return _error(id_, ERR_UNKNOWN_SESSION, str(exc))
        return _error(id_, ERR_PARAMS, f"missing parameter {exc.args[0]!r} for {method}")
    except CapacityError as exc:
        return _error(id_, ERR_CAPACITY, str(exc))
    except (BadRequestError, TypeError, ValueError) as exc:
        return _error(id_, ERR_BAD_REQUEST, str(exc))
    except Exception as exc:  # noqa: BLE001 - a server bug must not kill the connection
        log.exception("method %s failed", method)
        return _error(id_, ERR_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        if observe is not None:
            observe(method, ok)
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def _encode(obj: Any) -> str:
    # ASCII escapes: a lone surrogate a client sent (in an id, a tag) can never break the response
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str)


def dispatch_frame(manager: SessionManager, frame: str | bytes,
                   observe: Callable[[str, bool], None] | None = None) -> str | None:
    """Handle one WebSocket text frame (a request or a batch); returns the response frame or ``None``.
    Never raises: malformed, too deeply nested or oversized input gets a JSON-RPC error."""
    try:
        msg = json.loads(frame)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting too deep
        return _encode(_error(None, ERR_PARSE, f"frame is not usable JSON: {type(exc).__name__}: {str(exc)[:200]}"))
    try:
        if isinstance(msg, list):
            if not msg:
                return _encode(_error(None, ERR_INVALID_REQUEST, "empty batch"))
            if len(msg) > MAX_BATCH:
                return _encode(_error(None, ERR_INVALID_REQUEST, f"batch of {len(msg)} requests; at most {MAX_BATCH} per frame"))
            out = [r for r in (_one(manager, q, observe) for q in msg) if r is not None]
            text = _encode(out) if out else None
        else:
            r = _one(manager, msg, observe)
            text = None if r is None else _encode(r)
    except (RecursionError, ValueError) as exc:  # a result that cannot be encoded (nesting, NaN)
        return _encode(_error(None, ERR_INTERNAL, f"response could not be encoded: {type(exc).__name__}"))
    if text is not None and len(text) > MAX_RESPONSE_BYTES:
        return _encode(_error(None, ERR_INVALID_REQUEST,
                              f"response of {len(text)} bytes is over {MAX_RESPONSE_BYTES}; ask for less per frame"))
    return text
