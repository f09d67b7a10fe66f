"""The fast session protocol (DESIGN §5): JSON-RPC 2.0 over one WebSocket, many sessions per connection.

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
from typing import Any, Callable

from .manager import BadRequestError, CapacityError, SessionManager, UnknownSessionError

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
    "stats": lambda m, p: m.stats(),
    "catalog": lambda m, p: m.catalog(),
    "ping": lambda m, p: {"ok": True},
}


def _error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def _one(m: SessionManager, req: Any, observe: Callable[[str, bool], None] | None) -> dict[str, Any] | None:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
        return _error(req.get("id") if isinstance(req, dict) else None, ERR_INVALID_REQUEST,
                      "a request is an object with jsonrpc='2.0', method and optional params/id")
    id_ = req.get("id")
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
    if id_ is None:  # a notification: no response
        return None
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def dispatch_frame(manager: SessionManager, frame: str | bytes,
                   observe: Callable[[str, bool], None] | None = None) -> str | None:
    """Handle one WebSocket text frame (a request or a batch); returns the response frame or ``None``."""
    try:
        msg = json.loads(frame)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return json.dumps(_error(None, ERR_PARSE, f"frame is not JSON: {exc}"))
    if isinstance(msg, list):
        if not msg:
            return json.dumps(_error(None, ERR_INVALID_REQUEST, "empty batch"))
        out = [r for r in (_one(manager, q, observe) for q in msg) if r is not None]
        return json.dumps(out, ensure_ascii=False) if out else None
    r = _one(manager, msg, observe)
    return None if r is None else json.dumps(r, ensure_ascii=False)
