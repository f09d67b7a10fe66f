"""EnvGen inputs, converted into EnvFactory tool metadata without an LLM.

The metadata shape (arXiv 2605.18703, §3.2: the "tool metadata" an environment is synthesised from)::

    {"class_name": "PetClinic", "description": "...",
     "tools": [{"name": "find_pets", "description": "...",
                "input_schema": {"type": "object", "properties": {...}, "required": [...]},
                "output_schema": {...}}]}

Sources:

- a metadata JSON file: :func:`load_metadata` (validated by :class:`EnvMetadata`);
- an OpenAPI 3.0/3.1 document: :func:`openapi_to_metadata` (operations become tools, ``$ref`` resolved);
- a live MCP server (stdio command line or streamable-HTTP URL): :func:`mcp_to_metadata` (``tools/list``);
- "authentic resources" to attach as context: :func:`load_resources` (a folder of notes/API docs);
- web search: the :class:`SearchProvider` protocol, off by default (:class:`NoSearch`).
"""

from __future__ import annotations

import copy
import json
import keyword
import logging
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gym_envfactory.generators.errors import MCPImportError, MetadataError, OpenAPIError

__all__ = [
    "ToolMetadata",
    "EnvMetadata",
    "MetadataError",
    "OpenAPIError",
    "MCPImportError",
    "load_metadata",
    "load_metadata_all",
    "openapi_to_metadata",
    "mcp_to_metadata",
    "unwrap_result_schema",
    "load_resources",
    "SearchResult",
    "SearchProvider",
    "NoSearch",
    "to_snake_case",
    "to_class_name",
]

log = logging.getLogger(__name__)

_CLASS_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")  # = environment names (gym_envfactory.spec)
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # tools become Python functions








# ------------------------------------------------------------------------------------------------ names
def to_snake_case(text: str) -> str:
    """``findPetsByStatus`` → ``find_pets_by_status``, ``GET /owners/{ownerId}`` → ``get_owners_owner_id``;
    the result is a Python identifier (a leading digit or keyword gets a ``_`` suffix/prefix)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    s = re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").lower()
    s = re.sub(r"_+", "_", s) or "tool"
    if s[0].isdigit():
        s = "_" + s
    if keyword.iskeyword(s):
        s += "_"
    return s


def to_class_name(text: str) -> str:
    """``"Swagger Petstore - OpenAPI 3.0"`` → ``SwaggerPetstoreOpenAPI30``: an environment name
    (``^[A-Z][A-Za-z0-9]*$``); words keep their inner capitals."""
    words = re.findall(r"[A-Za-z0-9]+", text)
    name = "".join(w[:1].upper() + w[1:] for w in words)
    if not name or not name[0].isalpha():
        name = "Env" + name
    return name


# ------------------------------------------------------------------------------------------------ models
def _check_schema(schema: dict[str, Any], what: str) -> None:
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"{what} is not a valid JSON Schema at {where}: {exc.message}") from None


class ToolMetadata(BaseModel):
    """One tool: ``name`` (a Python identifier), ``description``, ``input_schema`` (a JSON Schema of an
    object: the arguments) and ``output_schema`` (a JSON Schema of the result; ``{}`` = any JSON)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME_RE.match(v) or keyword.iskeyword(v):
            raise ValueError(f"tool name {v!r} is not a Python identifier (tools become functions; "
                             f"e.g. {to_snake_case(v)!r})")
        return v

    @field_validator("input_schema")
    @classmethod
    def _input(cls, v: dict[str, Any]) -> dict[str, Any]:
        _check_schema(v, "input_schema")
        if v.get("type", "object") != "object":
            raise ValueError(f"input_schema must describe an object (the arguments), got type {v.get('type')!r}")
        props = v.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError("input_schema.properties must be an object")
        missing = [r for r in v.get("required", []) if r not in props]
        if missing:
            raise ValueError(f"input_schema.required names properties it does not define: {missing}")
        return v

    @field_validator("output_schema")
    @classmethod
    def _output(cls, v: dict[str, Any]) -> dict[str, Any]:
        _check_schema(v, "output_schema")
        return v


class EnvMetadata(BaseModel):
    """An environment's tool metadata (EnvFactory §3.2): ``class_name`` (an environment name,
    ``^[A-Z][A-Za-z0-9]*$``), ``description`` and ``tools`` (unique names, at least one)."""

    model_config = ConfigDict(extra="forbid")

    class_name: str
    description: str = ""
    tools: list[ToolMetadata] = Field(min_length=1)

    @field_validator("class_name")
    @classmethod
    def _class_name(cls, v: str) -> str:
        if not _CLASS_NAME_RE.match(v):
            raise ValueError(f"class_name {v!r} must match ^[A-Z][A-Za-z0-9]*$ (e.g. {to_class_name(v)!r})")
        return v

    @model_validator(mode="after")
    def _unique(self) -> EnvMetadata:
        seen: set[str] = set()
        for t in self.tools:
            if t.name in seen:
                raise ValueError(f"duplicate tool name {t.name!r}")
            seen.add(t.name)
        return self

    def tool(self, name: str) -> ToolMetadata:
        """The tool called ``name``. Raises KeyError."""
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (what :func:`load_metadata` reads)."""
        return self.model_dump(mode="json")


def _field_path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validate(data: Any, file: str | None, prefix: str = "") -> EnvMetadata:
    try:
        return EnvMetadata.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        field = prefix + _field_path(loc)
        # name the tool too: "tools[2] (cancel_booking).input_schema"
        if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int) and isinstance(data, dict):
            tools = data.get("tools")
            if isinstance(tools, list) and loc[1] < len(tools) and isinstance(tools[loc[1]], dict) \
                    and isinstance(tools[loc[1]].get("name"), str):
                rest = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc[2:])
                field = f"{prefix}tools[{loc[1]}] ({tools[loc[1]]['name']}){rest}"
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more errors)" if exc.error_count() > 1 else ""
        raise MetadataError(msg + more, file=file, field=field) from None


def load_metadata(path: str | Path) -> EnvMetadata:
    """Read one environment's metadata from a JSON file (one object in the shape above).

    Raises:
        MetadataError: unreadable file, not JSON, or a field that does not fit; the message names the file
            and the field (e.g. ``meta.json: tools[1] (book_room).input_schema: ...``).
    """
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, list):
        raise MetadataError("holds a list of environments; use load_metadata_all", file=str(p))
    return _validate(data, str(p))


def load_metadata_all(path: str | Path) -> list[EnvMetadata]:
    """Read several environments: a JSON list of objects, a JSON Lines file, or a single object.

    Raises:
        MetadataError: as :func:`load_metadata`; the field is prefixed with the item's index or line.
    """
    p = Path(path)
    if p.suffix == ".jsonl":
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise MetadataError(f"cannot read: {exc.strerror or exc}", file=str(p)) from None
        out = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MetadataError(f"not valid JSON: {exc.msg}", file=f"{p}:{i}") from None
            out.append(_validate(item, f"{p}:{i}"))
        return out
    data = _read_json(p)
    if isinstance(data, list):
        return [_validate(item, str(p), prefix=f"[{i}].") for i, item in enumerate(data)]
    return [_validate(data, str(p))]


def _read_json(p: Path) -> Any:
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetadataError(f"cannot read: {exc.strerror or exc}", file=str(p)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                            file=str(p)) from None


# ------------------------------------------------------------------------------------------------ OpenAPI
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
_IGNORED_HEADERS = {"accept", "content-type", "authorization"}  # OpenAPI: such header parameters are ignored
_DROP_KEYWORDS = ("discriminator", "xml", "externalDocs")  # OpenAPI-only, not JSON Schema


def _load_document(doc: dict[str, Any] | str | Path) -> tuple[dict[str, Any], str]:
    if isinstance(doc, dict):
        return doc, "<document>"
    p = Path(doc)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise OpenAPIError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml  # PyYAML: only for YAML documents

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise OpenAPIError(f"{p}: not valid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OpenAPIError(f"{p}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise OpenAPIError(f"{p}: an OpenAPI document is an object")
    return data, str(p)


#: The most schema nodes (objects) one tool's input and output schemas may expand to.  A document whose
#: references fan out (``A`` has ten properties of type ``B``, ``B`` ten of type ``C`` ...) would
#: otherwise expand exponentially ("billion laughs"); beyond the cap a reference becomes a stub.
MAX_SCHEMA_NODES = 20_000


class _Resolver:
    """Resolves local ``$ref``s (``#/...`` JSON pointers), nested and recursive ones, into plain schemas.

    A reference already being expanded on the current path (a cycle) or nested deeper than ``max_depth``
    is cut: replaced by a bare schema of the target's type whose description says where and why.
    Resolved references are memoised per tool (the same reference on the same path is expanded once),
    and a tool's schemas are capped at ``max_nodes`` expanded nodes: past the cap a reference becomes a
    ``{"type": ..., "description": "... truncated ..."}`` stub and a warning is logged."""

    def __init__(self, root: dict[str, Any], source: str, max_depth: int, max_nodes: int = MAX_SCHEMA_NODES) -> None:
        self.root = root
        self.source = source
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.cuts: list[str] = []
        self.start_tool("")

    def start_tool(self, name: str) -> None:
        """Reset the per-tool node budget and memo."""
        self.tool = name
        self.nodes = 0
        self.truncated: list[str] = []
        self._memo: dict[tuple[str, tuple[str, ...], bool], tuple[Any, int]] = {}

    def _truncate(self, ref: str, target: Any) -> dict[str, Any]:
        self.truncated.append(ref)
        self.nodes += 1
        t = target.get("type") if isinstance(target, dict) else None
        return {"type": t if isinstance(t, str) else "object",
                "description": f"Reference to {ref} not expanded: schema truncated (the tool's schemas reached "
                               f"{self.max_nodes} nodes)."}

    def lookup(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for raw in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise OpenAPIError(f"{self.source}: $ref {ref!r} points to nothing")
        return node

    def deref(self, node: Any, stack: tuple[str, ...] = ()) -> tuple[Any, tuple[str, ...]]:
        """Follow ``$ref`` chains of a non-schema object (parameter, request body, response)."""
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in stack:
                raise OpenAPIError(f"{self.source}: $ref cycle through {ref!r}")
            target = self.lookup(ref)
            if target is None:
                raise OpenAPIError(f"{self.source}: external $ref {ref!r} is not supported; bundle the document")
            stack = (*stack, ref)
            node = target
        return node, stack

    def schema(self, node: Any, stack: tuple[str, ...] = (), *, nullable_30: bool = True) -> Any:
        if isinstance(node, list):
            return [self.schema(x, stack, nullable_30=nullable_30) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            target = self.lookup(ref)
            if target is None:
                log.warning("%s: external $ref %s left unresolved", self.source, ref)
                self.cuts.append(ref)
                return {**siblings, "description": f"Unresolved external reference {ref}."}
            if ref in stack or len(stack) >= self.max_depth:
                self.cuts.append(ref)
                self.nodes += 1
                cut: dict[str, Any] = {}
                if isinstance(target, dict) and isinstance(target.get("type"), str):
                    cut["type"] = target["type"]
                text = (f"Recursive reference to {ref}: not expanded again (cycle cut at depth {len(stack)})."
                        if ref in stack else
                        f"Reference to {ref} not expanded: nesting depth limit {self.max_depth} reached.")
                base = target.get("description") if isinstance(target, dict) else None
                cut["description"] = f"{base} {text}" if base else text
                return cut
            key = (ref, stack, nullable_30)
            hit = self._memo.get(key)
            if hit is not None:
                resolved, size = hit
                if self.nodes + size > self.max_nodes:
                    return self._truncate(ref, target)
                self.nodes += size
            else:
                if self.nodes >= self.max_nodes:
                    return self._truncate(ref, target)
                before, cut_before = self.nodes, len(self.truncated)
                resolved = self.schema(target, (*stack, ref), nullable_30=nullable_30)
                if len(self.truncated) == cut_before:  # a truncated expansion is not reused
                    self._memo[key] = (resolved, self.nodes - before)
            if siblings:  # 3.1 allows keywords beside $ref: they refine the target
                resolved = {**resolved, **self.schema(siblings, stack, nullable_30=nullable_30)}
            return resolved
        if self.nodes >= self.max_nodes:
            self.truncated.append("(inline schema)")
            self.nodes += 1
            return {"type": node["type"] if isinstance(node.get("type"), str) else "object",
                    "description": f"Schema truncated (the tool's schemas reached {self.max_nodes} nodes)."}
        self.nodes += 1
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in _DROP_KEYWORDS:
                continue
            if k in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                out[k] = {pk: self.schema(pv, stack, nullable_30=nullable_30) for pk, pv in v.items()} \
                    if isinstance(v, dict) else v
            elif k == "example":
                out.setdefault("examples", [copy.deepcopy(v)])
            elif k == "nullable":
                continue
            elif isinstance(v, (dict, list)) and k not in ("enum", "const", "default", "examples", "required"):
                out[k] = self.schema(v, stack, nullable_30=nullable_30)
            else:
                out[k] = copy.deepcopy(v)
        if nullable_30 and node.get("nullable") is True:  # OpenAPI 3.0 → JSON Schema
            t = out.get("type")
            if isinstance(t, str):
                out["type"] = [t, "null"]
            elif isinstance(t, list) and "null" not in t:
                out["type"] = [*t, "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        return _merge_all_of(out)


def _merge_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    """Flatten ``allOf`` whose parts are all plain objects into one object schema (composition by
    inheritance, common in OpenAPI documents); anything else is left as it is."""
    parts = schema.get("allOf")
    if not isinstance(parts, list) or not parts:
        return schema
    mergeable = all(isinstance(p, dict) and set(p) <= {"type", "properties", "required", "description", "title"}
                    and p.get("type", "object") == "object" for p in parts)
    if not mergeable:
        return schema
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    merged["type"] = "object"
    props: dict[str, Any] = dict(merged.get("properties", {}))
    required: list[str] = list(merged.get("required", []))
    for p in parts:
        props.update(p.get("properties", {}))
        required += [r for r in p.get("required", []) if r not in required]
    merged["properties"] = props
    if required:
        merged["required"] = required
    return merged


def _strip_direction(schema: Any, drop: str) -> Any:
    """Remove ``readOnly`` properties from request schemas (``drop="readOnly"``) or ``writeOnly`` ones from
    response schemas, recursively."""
    if isinstance(schema, list):
        return [_strip_direction(x, drop) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "properties" and isinstance(v, dict):
            kept = {pk: _strip_direction(pv, drop) for pk, pv in v.items()
                    if not (isinstance(pv, dict) and pv.get(drop) is True)}
            out[k] = kept
        elif k in ("enum", "const", "default", "examples", "required"):
            out[k] = v
        else:
            out[k] = _strip_direction(v, drop)
    if "properties" in out and "required" in out:
        out["required"] = [r for r in out["required"] if r in out["properties"]]
        if not out["required"]:
            del out["required"]
    return out


def _is_object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and (schema.get("type") == "object" or
                                         ("type" not in schema and "properties" in schema))


def _json_media(content: Any) -> Any:
    """The schema of the JSON media type in a ``content`` map (``application/json``, ``*/*+json``), or of a
    form media type for request bodies; ``None`` when there is none."""
    if not isinstance(content, dict):
        return None
    ranked = sorted(content, key=lambda mt: (0 if mt.split(";")[0].strip() == "application/json"
                                             else 1 if mt.split(";")[0].strip().endswith("+json")
                                             else 2 if "json" in mt else 3 if "form" in mt else 4, mt))
    for mt in ranked:
        if "json" in mt or "form" in mt:
            media = content[mt] or {}
            return media.get("schema", {})
    return None


def openapi_to_metadata(doc: dict[str, Any] | str | Path, class_name: str | None = None, *,
                        max_ref_depth: int = 8, max_schema_nodes: int = MAX_SCHEMA_NODES) -> EnvMetadata:
    """Convert an OpenAPI 3.0/3.1 document (a dict, or a ``.json``/``.yaml`` path) into tool metadata.

    - Each operation becomes a tool: name = ``operationId`` in snake_case, else ``<method>_<path>``
      (``GET /owners/{ownerId}`` → ``get_owners_owner_id``); names are made unique with ``_2``, ``_3``.
    - description = summary and description (else ``"METHOD /path"``).
    - input_schema: path, query and header parameters (path-level ones merged with the operation's; cookie
      parameters and the ``Accept``/``Content-Type``/``Authorization`` headers are left out) and the JSON (or
      form) request body: an object body's properties are merged in (a name taken by a parameter gets a
      ``body_`` prefix), any other body sits under ``body``; ``readOnly`` body properties are dropped.
      Argument names that are not Python identifiers (``X-Request-Id``) are snake_cased (``x_request_id``)
      and the HTTP name is added to their description.
    - output_schema: the schema of the first 2xx response (in status order) with a JSON body, ``writeOnly``
      properties dropped; ``{}`` when there is none.
    - one tool's schemas expand to at most ``max_schema_nodes`` schema nodes (references are memoised;
      past the cap a reference is kept as a ``{"type": ..., "description": "... truncated ..."}`` stub
      and a warning is logged), so a small document whose references fan out cannot explode;
    - every local ``$ref`` is resolved, nested and recursive ones included; recursion is cut after
      ``max_ref_depth`` nested references or at the first repeat on a cycle, and the cut schema's
      description says so.  OpenAPI 3.0 ``nullable`` becomes a JSON Schema ``null`` type; ``example`` becomes
      ``examples``; ``allOf`` of plain objects is flattened.
    - class_name defaults to ``info.title`` in PascalCase; description to ``info.description`` (else title).

    Raises:
        OpenAPIError: not OpenAPI 3.x (Swagger 2.0 included), unreadable, a ``$ref`` to nothing, no operation.
        MetadataError: the result does not fit the metadata shape (e.g. an invalid ``class_name`` given).
    """
    data, source = _load_document(doc)
    version = str(data.get("openapi", ""))
    if not version.startswith("3."):
        found = f"swagger {data['swagger']}" if "swagger" in data else (version or "no 'openapi' field")
        raise OpenAPIError(f"{source}: only OpenAPI 3.x documents are supported (found {found})")
    nullable_30 = version.startswith("3.0")
    resolver = _Resolver(data, source, max_ref_depth, max_schema_nodes)
    info = data.get("info") or {}
    title = str(info.get("title") or "API")
    paths = data.get("paths") or {}
    if not isinstance(paths, dict):
        raise OpenAPIError(f"{source}: 'paths' must be an object")

    tools: list[dict[str, Any]] = []
    used: set[str] = set()
    for path, item in paths.items():
        item, _ = resolver.deref(item)
        if not isinstance(item, dict):
            continue
        shared_params = item.get("parameters") or []
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            where = f"{method.upper()} {path}"
            base = to_snake_case(op["operationId"]) if op.get("operationId") else to_snake_case(f"{method}_{path}")
            name, n = base, 2
            while name in used:
                name, n = f"{base}_{n}", n + 1
            used.add(name)
            resolver.start_tool(name)
            tools.append({
                "name": name,
                "description": _op_description(op, item, where),
                # memoised subtrees are shared: each tool gets its own copy (bounded by max_schema_nodes)
                "input_schema": copy.deepcopy(_input_schema(resolver, shared_params, op, where, nullable_30)),
                "output_schema": copy.deepcopy(_output_schema(resolver, op, nullable_30)),
            })
            if resolver.truncated:
                log.warning("%s: tool %s: $ref expansion stopped at %d schema nodes; %d reference(s) kept as "
                            "truncated stubs (%s)", source, name, resolver.max_nodes, len(resolver.truncated),
                            ", ".join(sorted(set(resolver.truncated))[:5]))
    if not tools:
        raise OpenAPIError(f"{source}: the document has no operations under 'paths'")
    if resolver.cuts:
        log.info("%s: %d $ref(s) cut or left unresolved: %s", source, len(resolver.cuts),
                 sorted(set(resolver.cuts)))
    description = str(info.get("description") or title).strip()
    return _validate({"class_name": class_name or to_class_name(title), "description": description,
                      "tools": tools}, source)


def _op_description(op: dict[str, Any], item: dict[str, Any], where: str) -> str:
    summary = str(op.get("summary") or item.get("summary") or "").strip()
    desc = str(op.get("description") or item.get("description") or "").strip()
    if summary and desc and not desc.startswith(summary):
        text = f"{summary.rstrip('.')}. {desc}"
    else:
        text = desc or summary or where
    if op.get("deprecated"):
        text += " (Deprecated.)"
    return text


def _input_schema(resolver: _Resolver, shared: list[Any], op: dict[str, Any], where: str,
                  nullable_30: bool) -> dict[str, Any]:
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*shared, *(op.get("parameters") or [])]:  # the operation's override the path item's
        p, stack = resolver.deref(raw)
        if not isinstance(p, dict) or "name" not in p or "in" not in p:
            raise OpenAPIError(f"{resolver.source}: {where}: a parameter needs 'name' and 'in'")
        params[(p["name"], p["in"])] = {**p, "_stack": stack}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for (pname, loc), p in params.items():
        if loc == "cookie" or (loc == "header" and pname.lower() in _IGNORED_HEADERS):
            continue
        raw_schema = p.get("schema")
        if raw_schema is None:
            raw_schema = _json_media(p.get("content")) or {}
        schema = resolver.schema(raw_schema, p["_stack"], nullable_30=nullable_30)
        schema = dict(schema) if isinstance(schema, dict) else {}
        if p.get("description") and "description" not in schema:
            schema["description"] = p["description"]
        elif p.get("description"):
            schema["description"] = f"{p['description']} {schema['description']}".strip()
        if p.get("example") is not None and "examples" not in schema:
            schema["examples"] = [p["example"]]
        key = pname if _TOOL_NAME_RE.match(pname) and not keyword.iskeyword(pname) else to_snake_case(pname)
        if key != pname:  # tools become Python functions: the HTTP name is kept in the description
            schema["description"] = f"{schema.get('description', '').rstrip()} (HTTP {loc} {pname})".lstrip()
        if key in properties:
            key = f"{loc}_{key}"
        properties[key] = schema
        if p.get("required") or loc == "path":
            required.append(key)
    body_raw = op.get("requestBody")
    if body_raw is not None:
        body, stack = resolver.deref(body_raw)
        raw_schema = _json_media((body or {}).get("content"))
        if raw_schema is not None:
            schema = _strip_direction(resolver.schema(raw_schema, stack, nullable_30=nullable_30), "readOnly")
            body_required = bool((body or {}).get("required"))
            if _is_object_schema(schema) and schema.get("properties"):
                inner_required = set(schema.get("required", []))
                for bname, bschema in schema["properties"].items():
                    key = bname if _TOOL_NAME_RE.match(bname) and not keyword.iskeyword(bname) \
                        else to_snake_case(bname)
                    if key in properties:
                        key = f"body_{key}"
                    properties[key] = bschema
                    if body_required and bname in inner_required:
                        required.append(key)
            else:
                if (body or {}).get("description") and isinstance(schema, dict) and "description" not in schema:
                    schema = {**schema, "description": body["description"]}
                properties["body"] = schema
                if body_required:
                    required.append("body")
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _output_schema(resolver: _Resolver, op: dict[str, Any], nullable_30: bool) -> dict[str, Any]:
    responses = op.get("responses") or {}

    def order(code: str) -> tuple[int, str]:
        c = str(code).upper()
        return (int(c) if c.isdigit() else int(c[0]) * 100 + 99, c)

    for code in sorted((c for c in responses if str(c).startswith("2")), key=order):
        resp, stack = resolver.deref(responses[code])
        if not isinstance(resp, dict):
            continue
        content = resp.get("content")
        if not isinstance(content, dict) or not any("json" in mt for mt in content):
            continue
        raw_schema = _json_media({mt: v for mt, v in content.items() if "json" in mt})
        schema = _strip_direction(resolver.schema(raw_schema or {}, stack, nullable_30=nullable_30), "writeOnly")
        if isinstance(schema, dict) and resp.get("description") and "description" not in schema:
            schema = {**schema, "description": resp["description"]}
        return schema if isinstance(schema, dict) else {}
    return {}


# ------------------------------------------------------------------------------------------------ MCP
async def mcp_to_metadata(target: str, class_name: str | None = None, *, timeout_s: float = 60.0,
                          headers: dict[str, str] | None = None, env: dict[str, str] | None = None,
                          description: str | None = None, unwrap_result: bool = True) -> EnvMetadata:
    """List a live MCP server's tools (``tools/list``, all pages) as metadata.

    Args:
        target: an ``http(s)://`` URL of a streamable-HTTP endpoint (e.g. ``http://127.0.0.1:8000/mcp/HotelBooking``)
            or a stdio command line (e.g. ``python -m gym_envfactory.cli serve HotelBooking --transport stdio``;
            split with ``shlex``; the child inherits this process's environment, updated with ``env``).
        class_name: defaults to the server's name (``serverInfo.name``) in PascalCase.
        timeout_s: for connecting and listing.
        headers: extra HTTP headers (e.g. ``Authorization``) for URL targets.
        description: defaults to the server's instructions, else its title/name.
        unwrap_result: undo the ``{"result": <schema>}`` wrapping that handshake-era MCP servers (FastMCP,
            ours) apply to non-object outputs: an output schema that is exactly an object with the single
            required property ``result`` (plus ``$defs``) becomes the inner schema.

    Tool names that are not Python identifiers are snake_cased (``get-weather`` → ``get_weather``); a tool
    without ``outputSchema`` gets ``{}``.

    Raises:
        MCPImportError: the server could not be started, reached or listed (the cause is chained).
        MetadataError: the listing does not fit the metadata shape.
    """
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    is_url = target.startswith(("http://", "https://"))
    hc = None
    if is_url:
        if headers:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            hc = httpx2.AsyncClient(headers=headers, timeout=timeout_s)
            server: Any = streamable_http_client(target, http_client=hc)
        else:
            server = target
    else:
        argv = shlex.split(target)
        if not argv:
            raise MCPImportError("empty MCP target: give a URL or a command line")
        server = StdioServerParameters(command=argv[0], args=argv[1:], env={**os.environ, **(env or {})})
    listed: list[Any] = []
    server_name = server_title = instructions = None
    try:
        with anyio.fail_after(timeout_s):
            async with Client(server) as client:
                info = client.server_info
                server_name = getattr(info, "name", None)
                server_title = getattr(info, "title", None)
                instructions = client.instructions
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
    except TimeoutError as exc:
        raise MCPImportError(f"{target}: no tool listing within {timeout_s:g}s") from exc
    except (OSError, RuntimeError, ValueError) as exc:
        raise MCPImportError(f"{target}: could not list tools: {type(exc).__name__}: {exc}") from exc
    except BaseExceptionGroup as exc:  # anyio task groups wrap transport failures
        raise MCPImportError(f"{target}: could not list tools: {exc!r}") from exc
    finally:
        if hc is not None:
            await hc.aclose()
    tools = []
    for t in listed:
        name = t.name if _TOOL_NAME_RE.match(t.name) and not keyword.iskeyword(t.name) else to_snake_case(t.name)
        tools.append({
            "name": name,
            "description": (t.description or t.title or "").strip(),
            "input_schema": dict(t.input_schema or {"type": "object", "properties": {}}),
            "output_schema": unwrap_result_schema(dict(t.output_schema or {})) if unwrap_result
            else dict(t.output_schema or {}),
        })
    if not tools:
        raise MCPImportError(f"{target}: the server lists no tools")
    name = class_name or to_class_name(server_name or server_title or "McpServer")
    desc = description or (instructions or server_title or server_name or name).strip()
    return _validate({"class_name": name, "description": desc, "tools": tools}, target)


def unwrap_result_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "object", "properties": {"result": X}, "required": ["result"], "$defs": D}`` → ``X`` with
    ``$defs: D`` at its root (so ``#/$defs/...`` refs still resolve); any other schema is returned as is."""
    extra = set(schema) - {"type", "properties", "required", "$defs", "x-fastmcp-wrap-result",
                           "additionalProperties"}
    props = schema.get("properties")
    if (extra or schema.get("type") != "object" or not isinstance(props, dict) or list(props) != ["result"]
            or schema.get("required") != ["result"] or not isinstance(props["result"], dict)
            or schema.get("additionalProperties", False) is not False):
        return schema
    inner = dict(props["result"])
    if "$defs" in schema:
        inner["$defs"] = {**schema["$defs"], **inner.get("$defs", {})}
    return inner


# ------------------------------------------------------------------------------------------------ resources
RESOURCE_SUFFIXES = (".md", ".markdown", ".txt", ".rst", ".json", ".yaml", ".yml")


def load_resources(folder: str | Path, *, max_chars: int = 60_000, max_file_chars: int = 20_000,
                   suffixes: Iterable[str] = RESOURCE_SUFFIXES) -> str:
    """Read a folder of notes / API docs into one bounded text block ("authentic resources", §3.2).

    Files with the given suffixes are read recursively in sorted relative-path order (hidden files and
    folders skipped), each as ``### <relative/path>`` followed by its text (UTF-8, undecodable bytes
    replaced), cut at ``max_file_chars``; the whole is cut at ``max_chars``, files that no longer fit are
    named in a closing line.  Same folder → same text.

    Raises:
        FileNotFoundError / NotADirectoryError: ``folder`` is missing or not a folder.
    """
    root = Path(folder)
    if not root.exists():
        raise FileNotFoundError(f"resources folder {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"resources path {root} is not a folder")
    allowed = {s.lower() for s in suffixes}
    files = sorted(
        (p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in allowed
         and not any(part.startswith(".") for part in p.relative_to(root).parts)),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    chunks: list[str] = []
    used = 0
    omitted: list[str] = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        text = p.read_bytes().decode("utf-8", errors="replace").strip()
        if len(text) > max_file_chars:
            text = text[:max_file_chars] + f"\n[... {len(text) - max_file_chars} more characters cut]"
        chunk = f"### {rel}\n{text}\n"
        room = max_chars - used
        if room <= len(f"### {rel}\n") + 200:  # no useful room left
            omitted.append(rel)
            continue
        if len(chunk) > room:
            keep = room - 60
            chunk = chunk[:keep] + f"\n[... {len(chunk) - keep} more characters cut]\n"
        chunks.append(chunk)
        used += len(chunk)
    if omitted:
        chunks.append(f"[{len(omitted)} more files left out for size: {', '.join(omitted)}]\n")
    return "\n".join(chunks)


@dataclass(frozen=True)
class SearchResult:
    """One web search hit."""

    title: str
    url: str
    snippet: str


@runtime_checkable
class SearchProvider(Protocol):
    """Pluggable web search for gathering authentic resources (off by default: :class:`NoSearch`).
    ``enabled`` says whether searching does anything; ``search`` returns at most ``max_results`` hits."""

    enabled: bool

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchResult]:
        """At most ``max_results`` hits for ``query`` (an empty list when nothing is found)."""
        ...


class NoSearch:
    """The default provider: no web search (generation stays offline and reproducible)."""

    enabled = False

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchResult]:
        """No hits, ever."""
        return []
