"""Tool specifications derived from typed Python functions, and the one argument-validation policy.

Argument policy (docs/argument-policy.md; docs/cases.md C08, C09; applied identically by every tool of every environment, and by the
trajectory reward when it compares arguments):

1. Arguments are a JSON object.  Unknown parameter names are rejected (``extra="forbid"``).
2. A parameter whose schema is structured (array or object, e.g. ``list[Guest]``) may also be given as
   a string holding that JSON (``"guests": "[{\\"name\\": \\"Ada\\"}]"``); the string is decoded once.
   Scalar strings are never decoded here.
3. Values are then validated by Pydantic in *lax* mode
   (https://docs.pydantic.dev/latest/concepts/conversion_table/): for an ``int`` parameter ``3``,
   ``3.0`` and ``"3"`` are accepted and become ``3``, while ``3.5`` and ``"three"`` are rejected; for a
   ``float`` parameter ``5``, ``5.0`` and ``"5"`` become ``5.0``; ISO strings become ``date``/``datetime``;
   enum/``Literal`` values must match exactly; NaN and infinities are rejected.
4. A rejected argument produces a typed ``invalid_arguments`` result naming each field, which the model
   sees as the tool message and the length penalty counts (docs/reward.md).
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from gym_envfactory.authoring import TOOL_ATTR, ToolAnnotations, ToolMeta
from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.errors import ArgumentError, SpecError

__all__ = ["ToolSpec", "ArgumentError", "tool_spec_from_function", "format_validation_error"]






def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _is_structured(prop_schema: dict[str, Any], defs: dict[str, Any]) -> bool:
    """True when a parameter's JSON schema is an array or object (possibly via $ref/anyOf)."""
    if "$ref" in prop_schema:
        ref = prop_schema["$ref"].rsplit("/", 1)[-1]
        return _is_structured(defs.get(ref, {}), defs)
    t = prop_schema.get("type")
    if t in ("array", "object"):
        return True
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in prop_schema.get(key, []):
            if sub.get("type") != "null" and _is_structured(sub, defs):
                return True
    return False


@dataclass
class ToolSpec:
    """One tool: its function, validated input model, output adapter, schemas and annotations.

    Attributes:
        name: tool name as the model sees it (unique within an environment).
        description: the function docstring (becomes the MCP/OpenAI description).
        fn: ``fn(state, **kwargs)``.
        input_model: Pydantic model of the keyword arguments (``extra="forbid"``, lax mode).
        output_adapter: validates and serialises the return value.
        annotations: MCP annotations (read-only / destructive / idempotent).
        env: name of the environment that owns the tool (set by the spec).
        strict_arguments: validate in Pydantic's strict mode on the arguments as JSON (the manifest's
            ``strict_arguments``, set by the spec; docs/argument-policy.md, "Strict mode").
        shared_reads: a read-only tool of an environment whose manifest sets ``shared_reads``: it runs
            on the session's state with copy-on-write suspended, reading the records shared with other
            sessions in place (set by the spec; docs/performance.md, "Shared reads").
    """

    name: str
    description: str
    fn: Callable[..., Any]
    input_model: type[BaseModel]
    output_adapter: TypeAdapter[Any]
    annotations: ToolAnnotations
    env: str = ""
    structured_params: frozenset[str] = frozenset()
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    strict_arguments: bool = False
    shared_reads: bool = False

    @property
    def read_only(self) -> bool:
        """The MCP ``readOnlyHint``: the tool never changes the state (``@tool(read_only=True)``)."""
        return self.annotations.read_only

    def validate_arguments(self, arguments: Any) -> BaseModel:
        """Apply the argument policy (module docstring).  Raises :class:`ArgumentError`."""
        if not isinstance(arguments, dict):
            raise ArgumentError(
                f"arguments of {self.name} must be a JSON object, got {type(arguments).__name__}",
                [{"field": "<arguments>", "message": "expected an object"}],
            )
        if self.structured_params:
            arguments = dict(arguments)
            for p in self.structured_params:
                v = arguments.get(p)
                if isinstance(v, str):
                    try:
                        arguments[p] = json.loads(v)
                    except (ValueError, RecursionError):
                        pass  # leave it; validation reports the type error
        try:
            if self.strict_arguments:  # JSON input: dates and enums still come as strings, numbers never do
                return self.input_model.model_validate_json(self._json_text(arguments), strict=True)
            return self.input_model.model_validate(arguments)
        except ValidationError as exc:
            details = format_validation_error(exc)
            msg = "; ".join(f"{d['field']}: {d['message']}" for d in details)
            raise ArgumentError(f"invalid arguments for {self.name}: {msg}", details) from None

    def _json_text(self, arguments: dict[str, Any]) -> str:
        """``arguments`` as JSON text for strict validation.  Raises :class:`ArgumentError` for values
        that are not JSON data (a decoded call's never are)."""
        try:
            return json.dumps(arguments)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ArgumentError(f"invalid arguments for {self.name}: {exc}",
                                [{"field": "<arguments>", "message": str(exc)}]) from None

    def normalize_arguments(self, arguments: Any) -> dict[str, Any]:
        """Validated arguments in canonical JSON form (used to compare calls, docs/reward.md)."""
        return self.validate_arguments(arguments).model_dump(mode="json")

    def openai_schema(self) -> dict[str, Any]:
        """OpenAI chat-completions ``tools`` entry: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                # a copy (callers may edit it: strict mode ...): parsing the schema's cached JSON text runs
                # in C, ~10x deepcopy
                "parameters": json.loads(self._schema_text()),
            },
        }

    def _schema_text(self) -> str:
        text = self.__dict__.get("_input_schema_text")
        if text is None or text[0] is not self.input_schema:  # cached per schema object
            text = self.__dict__["_input_schema_text"] = (self.input_schema, json.dumps(self.input_schema))
        return text[1]

    def mcp_schema(self) -> dict[str, Any]:
        """MCP ``tools/list`` entry (MCP spec 2025-06-18, ``Tool``)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": copy.deepcopy(self.input_schema),
            "annotations": self.annotations.to_mcp(),
        }
        if self.output_schema is not None:
            out["outputSchema"] = copy.deepcopy(self.output_schema)
        return out


def tool_spec_from_function(fn: Callable[..., Any], env: str = "") -> ToolSpec:
    """Build a :class:`ToolSpec` from ``fn(state, *, arg: T = default, ...) -> R``.

    Raises:
        SpecError: when the signature breaks the authoring contract (no state parameter, untyped or
            positional tool parameters).
    """
    meta: ToolMeta = getattr(fn, TOOL_ATTR, None) or ToolMeta(None, ToolAnnotations())
    name = meta.name or fn.__name__
    where = f"{getattr(fn, '__module__', '?')}.{fn.__qualname__}"
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise SpecError(f"tool {name} ({where}) must take the state as its first positional parameter")
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError etc. from unresolved annotations
        raise SpecError(f"tool {name} ({where}): cannot resolve type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    for p in params[1:]:
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise SpecError(
                f"tool {name} ({where}): parameter {p.name!r} must be keyword-only (put it after '*')"
            )
        if p.name not in hints:
            raise SpecError(f"tool {name} ({where}): parameter {p.name!r} has no type annotation")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], default)
    input_model = create_model(
        f"{name}_arguments",
        __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
        **fields,
    )
    raw_schema = input_model.model_json_schema()
    defs = raw_schema.get("$defs", {})
    structured = frozenset(
        p for p, s in raw_schema.get("properties", {}).items() if _is_structured(s, defs)
    )
    input_schema = _strip_titles(raw_schema)
    input_schema.setdefault("properties", {})
    input_schema["additionalProperties"] = False
    ret = hints.get("return", Any)
    output_adapter: TypeAdapter[Any] = TypeAdapter(ret)
    try:
        output_schema = _strip_titles(output_adapter.json_schema())
    except Exception:  # noqa: BLE001 - some return types (Any) have no useful schema
        output_schema = None
    return ToolSpec(
        name=name,
        description=inspect.getdoc(fn) or name,
        fn=fn,
        input_model=input_model,
        output_adapter=output_adapter,
        annotations=meta.annotations,
        env=env,
        structured_params=structured,
        input_schema=input_schema,
        output_schema=output_schema,
    )
