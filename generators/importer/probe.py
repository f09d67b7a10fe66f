"""Probing: scenarios recorded by calling every tool of an imported environment once.

They pin the imported code's current behaviour (characterisation tests); re-running them at
validation also checks that the import is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec

__all__ = ["probe_scenarios"]


def _json_type(schema: Mapping[str, Any]) -> str | None:
    if "type" in schema:
        t = schema["type"]
        return t if isinstance(t, str) else next((x for x in t if x != "null"), None)
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key, []):
            t = _json_type(sub)
            if t and t != "null":
                return t
    if "enum" in schema:
        return "enum"
    return None


def _state_values(state: Any) -> tuple[dict[str, list[Any]], list[str]]:
    """Scalar values by field name, and every key of every collection (dict of objects)."""
    values: dict[str, list[Any]] = {}
    keys: list[str] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            if obj and all(isinstance(v, dict) for v in obj.values()):
                keys.extend(str(k) for k in obj)
            for k, v in obj.items():
                if isinstance(v, (str, int, float, bool)) and v is not None:
                    lst = values.setdefault(str(k), [])
                    if v not in lst:
                        lst.append(v)
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(state)
    return values, keys


def _candidates(pname: str, schema: Mapping[str, Any], values: dict[str, list[Any]], keys: list[str]) -> list[Any]:
    t = _json_type(schema)
    enum = schema.get("enum") or next((s.get("enum") for s in schema.get("anyOf", []) if s.get("enum")), None)
    if enum:
        return list(enum)[:3]
    fits = {"string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool)}.get(t or "", lambda v: False)
    out = [v for v in values.get(pname, []) if fits(v)]
    if not out and t == "string" and pname.lower().endswith("id"):
        out = list(keys)
    if not out:
        fallback: dict[str, list[Any]] = {"string": ["a"], "integer": [1], "number": [1.0], "boolean": [True],
                                          "array": [[]], "object": [{}]}
        out = fallback.get(t or "", [])
    return out[:3]


def probe_scenarios(spec: EnvironmentSpec, taken: set[str],
                    observed: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Scenarios recorded by calling every tool once from the default initial state.

    They pin the imported code's current behaviour (characterisation tests): a success path per tool
    where simple arguments drawn from the state reach one, and an error path (an unknown id, else an
    unknown parameter).  Re-running them at validation also checks that the import is deterministic.

    ``observed`` (filled when given): per tool, ``{"ok": calls that succeeded, "noop": calls of a write
    tool that reported success without changing the state (the validation mode's contract check),
    "arguments": the first such arguments}``; the importer treats a guessed write whose name reads and
    that changed nothing as read-only, and reports the other no-op writes in its summary."""
    from gym_envfactory.session import Session

    state = json.loads(spec.initial_state_json())
    values, keys = _state_values(state)
    out: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {} if observed is None else observed

    unchanged = [False]  # did the last successful call leave the public state as it was?

    def run(tool_name: str, args: dict[str, Any]) -> Any:
        s = Session(spec, check_writes=True)
        try:
            before = s.state_bytes()
            res = s.call(tool_name, args)
            # a write that changes only private attributes (a login) succeeds with the saved state unchanged:
            # its success scenario must expect that, or validation refuses the import's own probe
            unchanged[0] = bool(res.ok) and s.state_bytes() == before
            noop = (not res.ok and res.error_code == "contract_violation" and "no-op" in str(res.error))
            if res.ok or noop:
                entry = seen.setdefault(tool_name, {"ok": 0, "noop": 0, "arguments": args})
                entry["ok" if res.ok else "noop"] += 1
            return res
        finally:
            s.close()

    for t in spec.tools.values():
        props = t.input_schema.get("properties", {})
        required = list(t.input_schema.get("required", []))
        options = {p: _candidates(p, props[p], values, keys) for p in required}
        ok_step = err_step = None
        attempts = max([len(v) for v in options.values()] + [1])
        for i in range(attempts):
            if any(not v for v in options.values()):
                break
            args = {p: v[min(i, len(v) - 1)] for p, v in options.items()}
            res = run(t.name, args)
            if res.ok and ok_step is None:
                ok_step = {"call": t.name, "arguments": args, "expect": "ok", "result": res.content,
                           "state_unchanged": t.read_only or unchanged[0]}
            elif res.error_type == "tool_error" and err_step is None:
                err_step = {"call": t.name, "arguments": args, "expect": "tool_error", "error_code": res.error_code}
            if ok_step is not None:
                break
        if ok_step is None and seen.get(t.name, {}).get("noop") and all(options.get(p) for p in required):
            # a write that changed nothing (the value it sets is already there): try fresh values
            fresh = {"string": "probe", "integer": 7, "number": 7.5}
            args = {p: (fresh.get(_json_type(props[p]) or "", options[p][0])
                        if not p.lower().endswith("id") else options[p][0]) for p in required}
            res = run(t.name, args)
            if res.ok:
                ok_step = {"call": t.name, "arguments": args, "expect": "ok", "result": res.content,
                           "state_unchanged": t.read_only or unchanged[0]}
        if err_step is None:
            id_params = [p for p in required if p.lower().endswith("id") and _json_type(props[p]) == "string"]
            if id_params and all(options.get(p) for p in required):
                args = {p: options[p][0] for p in required}
                args.update({p: "__no_such_id__" for p in id_params})
                res = run(t.name, args)
                if res.error_type == "tool_error":
                    err_step = {"call": t.name, "arguments": args, "expect": "tool_error",
                                "error_code": res.error_code}
        if err_step is None:
            err_step = {"call": t.name, "arguments": {"__unexpected_parameter__": 1}, "expect": "invalid_arguments"}
        for kind, step, level in (("ok", ok_step, "simple"), ("error", err_step, "error")):
            if step is None:
                continue
            sid = f"probe-{t.name}-{kind}"
            if sid in taken:
                continue
            out.append({"scenario_id": sid, "level": level,
                        "description": "recorded by the importer's probe: pins the imported code's behaviour",
                        "initial_state": spec.manifest.default_initial_state, "steps": [step]})
    return out

