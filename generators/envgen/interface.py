"""The Validator's ``interface`` dimension: generated tool schemas against the metadata.

Missing and extra tools, parameter names, required fields, JSON types, enums and array item types are
compared by :func:`check_interface` (``$ref``, ``anyOf``/``oneOf``/``allOf`` and ``enum`` resolved);
output fields are advice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec

from .report import Finding

__all__ = ["check_interface"]


def _ref_target(ref: str, defs: Mapping[str, Any]) -> Any:
    return defs.get(ref.rsplit("/", 1)[-1], {})


def _json_types(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> set[str]:
    """JSON types a schema admits (``$ref``, ``anyOf``/``oneOf``/``allOf``, ``enum`` resolved)."""
    if not isinstance(schema, dict) or depth > 10:
        return set()
    if "$ref" in schema:
        return _json_types(_ref_target(schema["$ref"], defs), defs, depth + 1)
    out: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        out.add(t)
    elif isinstance(t, list):
        out.update(x for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            out |= _json_types(sub, defs, depth + 1)
    values = schema.get("enum", [schema["const"]] if "const" in schema else [])
    if not out and values:
        for v in values:
            out.add("null" if v is None else "boolean" if isinstance(v, bool) else "integer" if isinstance(v, int)
                    else "number" if isinstance(v, float) else "string" if isinstance(v, str) else
                    "array" if isinstance(v, list) else "object")
    if not out and "properties" in schema:
        out.add("object")
    if not out and "items" in schema:
        out.add("array")
    return out


def _enum(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> set[Any] | None:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "$ref" in schema:
        return _enum(_ref_target(schema["$ref"], defs), defs, depth + 1)
    if "enum" in schema:
        return {json.dumps(v, sort_keys=True) for v in schema["enum"] if v is not None}
    if "const" in schema:
        return {json.dumps(schema["const"], sort_keys=True)}
    subs = [s for k in ("anyOf", "oneOf") for s in schema.get(k) or []]
    found = [e for e in (_enum(s, defs, depth + 1) for s in subs) if e is not None]
    return set().union(*found) if found else None


def _items(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "$ref" in schema:
        return _items(_ref_target(schema["$ref"], defs), defs, depth + 1)
    if isinstance(schema.get("items"), dict):
        return schema["items"]
    for k in ("anyOf", "oneOf"):
        for s in schema.get(k) or []:
            it = _items(s, defs, depth + 1)
            if it is not None:
                return it
    return None


def _accepts(generated: set[str], wanted: str) -> bool:
    return wanted in generated or (wanted == "integer" and "number" in generated)


def _compare_types(tool: str, param: str, meta: Any, mdefs: Mapping[str, Any], gen: Any,
                   gdefs: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    mt, gt = _json_types(meta, mdefs) - {"null"}, _json_types(gen, gdefs) - {"null"}
    if mt and gt:
        missing = sorted(t for t in mt if not _accepts(gt, t))
        if missing:
            out.append(Finding.of("interface", "type_mismatch",
                                  f"tool {tool}: parameter {param!r} is {'/'.join(sorted(mt))} in the metadata but "
                                  f"{'/'.join(sorted(gt))} in the code", tool=tool))
            return out
    me, ge = _enum(meta, mdefs), _enum(gen, gdefs)
    if me is not None and ge is not None and me != ge:
        out.append(Finding.of("interface", "enum_mismatch",
                              f"tool {tool}: parameter {param!r} allows {sorted(me)} in the metadata but {sorted(ge)} "
                              "in the code", tool=tool))
    if "array" in mt and "array" in gt:
        mi, gi = _items(meta, mdefs), _items(gen, gdefs)
        if mi is not None and gi is not None:
            mit, git = _json_types(mi, mdefs) - {"null"}, _json_types(gi, gdefs) - {"null"}
            if mit and git and any(not _accepts(git, t) for t in mit):
                out.append(Finding.of("interface", "item_type_mismatch",
                                      f"tool {tool}: items of {param!r} are {'/'.join(sorted(mit))} in the metadata but "
                                      f"{'/'.join(sorted(git))} in the code", tool=tool))
    return out


def _defs(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}


def check_interface(spec: EnvironmentSpec, metadata: Mapping[str, Any]) -> list[Finding]:
    """Compare the generated tools' JSON schemas with the metadata (names, parameters, required
    fields, JSON types, enums, array item types; output fields as advice).

    ``metadata`` is the EnvFactory metadata dict (``{"class_name", "description", "tools": [...]}``).
    """
    out: list[Finding] = []
    meta_tools = {t["name"]: t for t in metadata.get("tools", [])}
    for name in meta_tools:
        if name not in spec.tools:
            out.append(Finding.of("interface", "missing_tool", f"the metadata's tool {name!r} is not implemented", tool=name))
    for name in spec.tools:
        if name not in meta_tools:
            out.append(Finding.of("interface", "extra_tool", f"tool {name!r} is not in the metadata; remove it or "
                                  "rename it to a metadata tool", tool=name))
    for name, mt in meta_tools.items():
        ts = spec.tools.get(name)
        if ts is None:
            continue
        mschema = mt.get("input_schema") or {}
        gschema = ts.input_schema
        mdefs, gdefs = _defs(mschema), _defs(gschema)
        mprops, gprops = mschema.get("properties") or {}, gschema.get("properties") or {}
        mreq, greq = set(mschema.get("required") or []), set(gschema.get("required") or [])
        for p in mprops:
            if p not in gprops:
                out.append(Finding.of("interface", "missing_param", f"tool {name}: parameter {p!r} of the metadata is "
                                      f"missing (code has {sorted(gprops) or 'none'})", tool=name))
        for p in gprops:
            if p not in mprops:
                check = "extra_required_param" if p in greq else "extra_optional_param"
                out.append(Finding.of("interface", check, f"tool {name}: parameter {p!r} is not in the metadata "
                                      f"(metadata has {sorted(mprops) or 'none'})", tool=name))
        for p in mprops:
            if p not in gprops:
                continue
            if p in mreq and p not in greq:
                out.append(Finding.of("interface", "required_but_optional",
                                      f"tool {name}: parameter {p!r} is required in the metadata but has a default in the code", tool=name))
            elif p not in mreq and p in greq:
                out.append(Finding.of("interface", "optional_but_required",
                                      f"tool {name}: parameter {p!r} is optional in the metadata but required in the code", tool=name))
            out += _compare_types(name, p, mprops[p], mdefs, gprops[p], gdefs)
        mout, gout = mt.get("output_schema") or {}, ts.output_schema or {}
        mfields = set(mout.get("properties") or {})
        gfields = set(gout.get("properties") or {})
        if not gfields and "$ref" in gout:
            gfields = set(_ref_target(gout["$ref"], _defs(gout)).get("properties") or {})
        if mfields and gfields and mfields - gfields:
            out.append(Finding.of("interface", "output_fields", f"tool {name}: result lacks the metadata's output fields "
                                  f"{sorted(mfields - gfields)}", tool=name))
    return out

