"""Topology-aware sampling of tool chains, and the executed solvability check (arXiv 2605.18703 §3.3).

Contract: docs/synthesis.md, "Chains"; the choices this module makes are written down in
docs/synthesis.md, "Sampler: implementation notes".

:func:`sample_chains` walks the tool graph (:mod:`.graph`, a ``networkx.DiGraph`` of ``tool``, ``input``
and ``output`` nodes with ``depends`` edges producer → consumer) and returns :class:`Chain` objects whose
every *required* input is user-providable or produced by an earlier step (optional inputs are left to
the user simulator).  Priors are resolved recursively along reverse ``depends`` edges, then the chain
grows forward along ``depends`` edges; the *dependency depth* of a step (0 without step inputs, else
one more than the deepest step it reads from) never exceeds ``depth_limit``.  Everything is drawn
from one ``random.Random(seed)`` over sorted node lists, so a seed gives the same chains (and
:func:`write_chains` the same bytes).

:func:`check_chain` runs a chain in a :class:`~gym_envfactory.session.Session` before any LLM is asked
for anything: ``user`` inputs are filled from the initial state (same-named fields, collection keys,
the tool's input schema, dates relative to the state's clock ``now``), ``step`` inputs from earlier
results, and a failing call is retried with a few other fillings.  A chain that runs end to end comes
back with its ground-truth calls, results and final state.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.manifest import parse_json_text
from gym_envfactory.environment.states import resolve_initial_states
from gym_envfactory.errors import DatasetError, EnvFactoryError
from gym_envfactory.generators.errors import ChainError
from gym_envfactory.session import Session

__all__ = [
    "UserInput", "OptionalInput", "StepInput", "InputSource", "ChainStep", "Chain", "ChainCheck",
    "sample_chains", "check_chain", "write_chains", "read_chains", "chain_errors", "is_id_like",
    "user_providable", "output_values", "FILL_ATTEMPTS",
]

#: How many fillings :func:`check_chain` tries per step before the chain fails.
FILL_ATTEMPTS = 8
#: Candidate values kept per input (:func:`check_chain`).
CANDIDATES = 6
#: Days after the state's clock tried for a start date, in order (:func:`check_chain`).
DATE_OFFSETS = (14, 7, 21, 28, 3)
#: The clock used when a state has no ``now`` field.
FALLBACK_NOW = datetime(2026, 1, 1, 9, 0)


# ------------------------------------------------------------------------------------------- models
class UserInput(BaseModel):
    """An input the user states (``{"source": "user"}``); the checker picks a value from the state."""

    model_config = ConfigDict(extra="forbid")
    source: Literal["user"] = "user"


class OptionalInput(BaseModel):
    """An optional input the chain leaves out (``{"source": "optional"}``)."""

    model_config = ConfigDict(extra="forbid")
    source: Literal["optional"] = "optional"


class StepInput(BaseModel):
    """An input taken from an earlier step's result: ``step`` (0-based index of that step) and
    ``output`` (dotted path into its result, ``[]`` for list items, ``""`` for a scalar result)."""

    model_config = ConfigDict(extra="forbid")
    source: Literal["step"] = "step"
    step: int = Field(ge=0)
    output: str


#: Where one input's value comes from (discriminated on ``source``).
InputSource = Annotated[UserInput | OptionalInput | StepInput, Field(discriminator="source")]


class ChainStep(BaseModel):
    """One tool of a chain: ``tool`` (the graph node id ``Env.name``), ``env``, ``name`` and
    ``inputs`` (parameter name → :data:`InputSource`, every parameter of the tool)."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    env: str
    name: str
    inputs: dict[str, InputSource] = Field(default_factory=dict)


class Chain(BaseModel):
    """A sampled tool chain (one line of ``chains.jsonl``; docs/synthesis.md, "Chains").

    ``chain_id`` (``c-<index>-<8 hex of the steps' hash>``), ``seed`` (of :func:`sample_chains`),
    ``envs`` (the environments, in order of first use) and ``steps``.
    """

    model_config = ConfigDict(extra="forbid")
    chain_id: str
    seed: int
    envs: list[str] = Field(min_length=1)
    steps: list[ChainStep] = Field(min_length=1)

    @property
    def tools(self) -> list[str]:
        """The tool node ids in step order."""
        return [s.tool for s in self.steps]


class ChainCheck(BaseModel):
    """The outcome of :func:`check_chain` (docs/synthesis.md, "Chains").

    ``ok``; ``reason`` (why the chain cannot run: the step, tool and error; ``None`` when ok);
    ``calls`` (the executed ground truth, ``[{"env", "name", "arguments"}]``, the successful calls so far
    when not ok); ``results`` (each call's JSON result); ``initial_states`` (``{env: state dict}``) and
    ``final_state`` (:meth:`Session.state` after the last call: one environment's dict, or
    ``{env: dict}`` for several; ``None`` when not ok).
    """

    ok: bool
    reason: str | None = None
    calls: list[dict[str, Any]] = Field(default_factory=list)
    results: list[Any] = Field(default_factory=list)
    initial_states: dict[str, Any] = Field(default_factory=dict)
    final_state: Any = None


def chain_errors(chain: Chain) -> list[tuple[str, str]]:
    """What is wrong with a chain that parsed: ``[(dotted field, message)]`` (empty when sound).

    Checks: ``tool`` is ``env.name``, ``env`` is one of ``envs``, ``envs`` has no repeats, and a
    ``step`` input points to an earlier step.
    """
    out: list[tuple[str, str]] = []
    if len(set(chain.envs)) != len(chain.envs):
        out.append(("envs", f"environments repeat: {chain.envs}"))
    for i, s in enumerate(chain.steps):
        if s.tool != f"{s.env}.{s.name}":
            out.append((f"steps.{i}.tool", f"{s.tool!r} is not {s.env!r}.{s.name!r}"))
        if s.env not in chain.envs:
            out.append((f"steps.{i}.env", f"{s.env!r} is not one of the chain's envs {chain.envs}"))
        for p, src in s.inputs.items():
            if isinstance(src, StepInput) and src.step >= i:
                out.append((f"steps.{i}.inputs.{p}.step", f"refers to step {src.step}, not an earlier one"))
    return out


# ------------------------------------------------------------------------------------------- files
def write_chains(chains: Sequence[Chain], path: str | Path) -> Path:
    """Write ``chains`` as JSON Lines (one :class:`Chain` per line, UTF-8, ``\\n`` line ends); the same
    chains always give the same bytes.  Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for c in chains:
            fh.write(c.model_dump_json() + "\n")
    return path


def read_chains(path: str | Path) -> list[Chain]:
    """Read a chains file written by :func:`write_chains` (blank lines are skipped).

    Raises:
        ChainError: a file that is not UTF-8, a line that is not JSON, does not fit :class:`Chain`, fails
            :func:`chain_errors` or repeats a ``chain_id``; the message names the file, the line and the field.
        OSError: the file cannot be read.
    """
    path = Path(path)
    chains: list[Chain] = []
    seen: dict[str, int] = {}
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChainError(f"not UTF-8 text (byte {exc.start}): {exc.reason}", file=path) from None
    for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit in a string
        if not line.strip():
            continue
        try:
            obj = parse_json_text(line, file=path, line=lineno, error=DatasetError)
        except DatasetError as exc:
            raise ChainError(exc.message, file=path, line=lineno) from None
        try:
            chain = Chain.model_validate(obj)
        except ValidationError as exc:
            d = format_validation_error(exc)[0]
            raise ChainError(d["message"], file=path, line=lineno, field=d["field"]) from None
        problems = chain_errors(chain)
        if problems:
            raise ChainError(problems[0][1], file=path, line=lineno, field=problems[0][0])
        if chain.chain_id in seen:
            raise ChainError(f"duplicate chain_id {chain.chain_id!r} (first on line {seen[chain.chain_id]})",
                             file=path, line=lineno, field="chain_id")
        seen[chain.chain_id] = lineno
        chains.append(chain)
    return chains


# ------------------------------------------------------------------------------------------- graph
def is_id_like(param: str) -> bool:
    """Whether a parameter name names an identifier: ``id``, ``*_id``, ``*_ids``, ``*Id``, ``*Ids``."""
    return param.lower() in ("id", "ids") or param.endswith(("_id", "_ids", "Id", "Ids"))


class _GraphIndex:
    """The parts of a tool graph the sampler reads, sorted once."""

    def __init__(self, G: nx.DiGraph) -> None:
        self.G = G
        self.tools = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "tool")
        self.inputs: dict[str, list[tuple[str, dict[str, Any]]]] = {t: [] for t in self.tools}
        for n, d in sorted(G.nodes(data=True)):
            if d.get("kind") == "input" and d.get("tool") in self.inputs:
                self.inputs[d["tool"]].append((str(d.get("param", n)), d))
        for t in self.tools:
            self.inputs[t].sort(key=lambda x: x[0])
        # producers[consumer][param] = [(producer tool, output path, score)], best first
        self.producers: dict[str, dict[str, list[tuple[str, str, float]]]] = {t: {} for t in self.tools}
        self.consumers: dict[str, list[str]] = {t: [] for t in self.tools}
        for u, v, d in sorted(G.edges(data=True), key=lambda e: (e[0], e[1])):
            if d.get("kind") != "depends" or u not in self.producers or v not in self.producers:
                continue
            self.consumers[u].append(v)
            for via in d.get("via") or []:
                entry = (u, str(via.get("output", "")), float(via.get("score", 0.0)))
                self.producers[v].setdefault(str(via.get("input")), []).append(entry)
        for by_param in self.producers.values():
            for lst in by_param.values():
                lst.sort(key=lambda e: (-e[2], e[0], e[1]))

    def env(self, tool: str) -> str:
        return str(self.G.nodes[tool].get("env") or tool.split(".", 1)[0])

    def name(self, tool: str) -> str:
        return str(self.G.nodes[tool].get("name") or tool.split(".", 1)[1])

    def user_providable(self, tool: str, param: str, data: Mapping[str, Any]) -> bool:
        flag = data.get("user_providable")
        if flag is not None:
            return bool(flag)
        return not (is_id_like(param) and bool(self.producers[tool].get(param)))


def user_providable(G: nx.DiGraph, input_node: str) -> bool:
    """Whether the user can state the value of ``input_node`` (an ``input`` node of ``G``).

    The node's ``user_providable`` when it is a bool (a refined graph).  When it is ``None`` the
    heuristic: user-providable unless the parameter is id-like (:func:`is_id_like`) and some tool of
    ``G`` produces it (a ``depends`` edge into its tool whose ``via`` names the parameter); an id
    nobody produces is user-providable (the checker picks it from the state).

    Raises:
        KeyError: ``input_node`` is not a node of ``G``.
    """
    data = G.nodes[input_node]
    return _GraphIndex(G).user_providable(str(data.get("tool")), str(data.get("param")), data)


# ------------------------------------------------------------------------------------------- sampling
class _Draft:
    """A chain being built: steps as ``(tool, inputs, depth)`` and the environments used."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, dict[str, dict[str, Any]], int]] = []
        self.envs: list[str] = []

    def copy(self) -> _Draft:
        d = _Draft()
        d.steps, d.envs = list(self.steps), list(self.envs)
        return d

    def restore(self, other: _Draft) -> None:
        self.steps, self.envs = other.steps, other.envs

    def has(self, tool: str) -> bool:
        return any(s[0] == tool for s in self.steps)

    def index_of(self, tool: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s[0] == tool)


class _Sampler:
    def __init__(self, ix: _GraphIndex, rng: random.Random, *, max_tools: int, max_envs: int,
                 depth_limit: int, envs: frozenset[str] | None = None) -> None:
        self.ix, self.rng = ix, rng
        self.max_tools, self.max_envs, self.depth_limit = max_tools, max_envs, depth_limit
        self.envs = envs
        self.starts = ix.tools if envs is None else [t for t in ix.tools if ix.env(t) in envs]

    def env_fits(self, draft: _Draft, tool: str) -> bool:
        env = self.ix.env(tool)
        if self.envs is not None and env not in self.envs:
            return False
        return env in draft.envs or len(draft.envs) < self.max_envs

    def needs_producer(self, tool: str, param: str, data: Mapping[str, Any]) -> bool:
        return bool(data.get("required")) and not self.ix.user_providable(tool, param, data)

    def producer_in(self, draft: _Draft, tool: str, param: str) -> tuple[int, str] | None:
        """The best earlier step producing ``param`` of ``tool``: ``(step index, output path)``."""
        best: tuple[float, int, str] | None = None
        for producer, output, score in self.ix.producers[tool].get(param, []):
            if draft.has(producer):
                i = draft.index_of(producer)
                if best is None or (score, i) > (best[0], best[1]):
                    best = (score, i, output)
        return None if best is None else (best[1], best[2])

    def place(self, draft: _Draft, tool: str, level: int) -> bool:
        """Append ``tool`` after resolving its missing producers (recursively, ``level`` producer levels
        already used).  ``False`` leaves ``draft`` partly changed: the caller restores it."""
        if draft.has(tool) or len(draft.steps) >= self.max_tools or not self.env_fits(draft, tool):
            return False
        for param, data in self.ix.inputs[tool]:
            if not self.needs_producer(tool, param, data) or self.producer_in(draft, tool, param) is not None:
                continue
            if level >= self.depth_limit:
                return False
            candidates = sorted({p for p, _, _ in self.ix.producers[tool].get(param, [])
                                 if p != tool and not draft.has(p)})
            self.rng.shuffle(candidates)
            for producer in candidates:
                saved = draft.copy()
                if self.place(draft, producer, level + 1):
                    break
                draft.restore(saved)
            else:
                return False
        if draft.has(tool) or len(draft.steps) >= self.max_tools or not self.env_fits(draft, tool):
            return False  # (a producer's own producers may have placed ``tool`` through a cycle)
        inputs: dict[str, dict[str, Any]] = {}
        depth = 0
        for param, data in self.ix.inputs[tool]:
            found = self.producer_in(draft, tool, param)
            must = self.needs_producer(tool, param, data)
            if found is not None and (must or (data.get("required")
                                               and draft.steps[found[0]][2] < self.depth_limit)):
                inputs[param] = {"source": "step", "step": found[0], "output": found[1]}
                depth = max(depth, draft.steps[found[0]][2] + 1)
            elif data.get("required"):
                inputs[param] = {"source": "user"}
            else:
                inputs[param] = {"source": "optional"}
        if depth > self.depth_limit:
            return False
        draft.steps.append((tool, inputs, depth))
        env = self.ix.env(tool)
        if env not in draft.envs:
            draft.envs.append(env)
        return True

    def try_place(self, draft: _Draft, tool: str) -> bool:
        saved = draft.copy()
        if self.place(draft, tool, 0):
            return True
        draft.restore(saved)
        return False

    def draw(self, min_tools: int) -> _Draft | None:
        draft = _Draft()
        if not self.try_place(draft, self.rng.choice(self.starts)):
            return None
        target = self.rng.randint(min_tools, self.max_tools)
        while len(draft.steps) < target:
            used = [s[0] for s in draft.steps]
            candidates = sorted({c for t in used for c in self.ix.consumers[t]
                                 if not draft.has(c) and self.env_fits(draft, c)})
            self.rng.shuffle(candidates)
            if not any(self.try_place(draft, c) for c in candidates):
                break
        return draft if len(draft.steps) >= min_tools else None


def sample_chains(G: nx.DiGraph, n: int, *, seed: int, min_tools: int = 2, max_tools: int = 6, max_envs: int = 3,
                  depth_limit: int = 3, envs: Iterable[str] | None = None) -> list[Chain]:
    """Up to ``n`` distinct chains drawn from the tool graph ``G`` (docs/synthesis.md; paper §3.3).

    Each draw picks a start tool, resolves the producers of its required non-user-providable inputs
    (a seeded choice among the ``depends`` predecessors, recursively, at most ``depth_limit`` levels),
    then extends forward along ``depends`` edges (each new tool's producers resolved the same way) to a
    drawn length in ``[min_tools, max_tools]``.  A tool appears at most once per chain; a chain spans at
    most ``max_envs`` environments; no step's dependency depth exceeds ``depth_limit``.  Identical
    chains are kept once; fewer than ``n`` come back when the graph does not hold that many (the
    sampler stops after ``20 * n + 100`` draws).  User-providability: :func:`user_providable`.

    Args:
        G: a tool graph in the docs/synthesis.md format.
        n: how many chains to return at most.
        seed: seeds the one ``random.Random`` every choice is drawn from.
        envs: only tools of these environments (a subset of a bigger graph): every chain stays inside
            them, and up to ``n`` such chains come back (filtering after sampling would return fewer).
            User-providability is still judged on the whole graph.  ``None``: every environment.

    Raises:
        ValueError: ``n < 0``, ``min_tools < 1``, ``max_tools < min_tools``, ``max_envs < 1`` or
            ``depth_limit < 0``.
    """
    if n < 0 or min_tools < 1 or max_tools < min_tools or max_envs < 1 or depth_limit < 0:
        raise ValueError(f"bad sampling bounds: n={n}, min_tools={min_tools}, max_tools={max_tools}, "
                         f"max_envs={max_envs}, depth_limit={depth_limit}")
    ix = _GraphIndex(G)
    allowed = None if envs is None else frozenset(envs)
    sampler = _Sampler(ix, random.Random(seed), max_tools=max_tools, max_envs=max_envs, depth_limit=depth_limit,
                       envs=allowed)
    if not sampler.starts or n == 0:
        return []
    chains: list[Chain] = []
    seen: set[str] = set()
    for _ in range(20 * n + 100):
        if len(chains) >= n:
            break
        draft = sampler.draw(min_tools)
        if draft is None:
            continue
        steps = [{"tool": t, "env": ix.env(t), "name": ix.name(t), "inputs": inputs} for t, inputs, _ in draft.steps]
        key = json.dumps(steps, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        chains.append(Chain.model_validate({"chain_id": f"c-{len(chains):04d}-{digest}", "seed": seed,
                                            "envs": draft.envs, "steps": steps}))
    return chains


# ------------------------------------------------------------------------------------------- checking
def output_values(result: Any, path: str) -> list[Any]:
    """The values at ``path`` in a tool result, in order (``hotels[].hotel_id`` → every hotel's id;
    ``[].id`` when the result is a list; ``""`` → the result itself).  Missing keys give no value."""
    values = [result]
    if not path:
        return values
    for seg in path.split("."):
        many = seg.endswith("[]")
        key = seg[:-2] if many else seg
        if key:
            values = [v[key] for v in values if isinstance(v, dict) and key in v]
        if many:
            values = [x for v in values if isinstance(v, list) for x in v]
    return values


def _schema(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """A property's schema with ``$ref`` resolved and a nullable ``anyOf`` reduced to its non-null arm."""
    prop = dict(prop)
    for _ in range(8):
        if "$ref" in prop:
            prop = {**defs.get(str(prop.pop("$ref")).rsplit("/", 1)[-1], {}), **prop}
        elif "anyOf" in prop:
            arms = [a for a in prop.pop("anyOf") if a.get("type") != "null"]
            if arms:
                prop = {**arms[0], **prop}
        else:
            break
    return prop


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    if "enum" in schema:
        return value in schema["enum"]
    if t == "string":
        return isinstance(value, str) and ("pattern" not in schema or re.search(schema["pattern"], value) is not None)
    if t == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif t == "boolean":
        return isinstance(value, bool)
    elif t == "array":
        return isinstance(value, list)
    elif t == "object":
        return isinstance(value, dict)
    else:
        return value is not None
    if not ok:
        return False
    lo, hi = schema.get("minimum"), schema.get("maximum")
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _walk_named(obj: Any, names: set[str], out: list[Any], collections: set[str] | None = None) -> None:
    """Scalar values of keys in ``names`` anywhere in ``obj`` (document order), and the keys of
    mappings whose key is in ``collections``."""
    stack = [obj]
    while stack and len(out) < 200:
        cur = stack.pop(0)
        if isinstance(cur, dict):
            for k, v in cur.items():
                if k in names and isinstance(v, str | int | float | bool):
                    out.append(v)
                elif collections and k in collections and isinstance(v, dict):
                    out.extend(v.keys())
                if isinstance(v, dict | list):
                    stack.append(v)
        elif isinstance(cur, list):
            stack.extend(x for x in cur if isinstance(x, dict | list))


#: Parameter names of a free-text search input: filled with words of the state's names and titles first.
SEARCH_PARAMS = frozenset({"query", "q", "search", "search_term", "search_text", "term", "terms", "keyword",
                           "keywords", "pattern", "phrase", "contains", "name_contains", "match"})
#: Description words that mark a search input whatever its name ("Part of a name or email address").
_SEARCH_HINTS = ("part of", "search", "matches", "substring", "words that")


def is_search_input(param: str, schema: Mapping[str, Any]) -> bool:
    """Whether a string input is a free-text search (a query matched against the state's names and
    titles): its name is one of :data:`SEARCH_PARAMS`, or its description says so ("part of a name")."""
    if schema.get("type") != "string" or "enum" in schema or _date_kind(schema):
        return False
    desc = str(schema.get("description", "")).lower()
    return param.lower() in SEARCH_PARAMS or any(h in desc for h in _SEARCH_HINTS)


def _text_field(key: str) -> bool:
    k = key.lower()
    return k.endswith(("name", "title", "email", "subject", "label", "city")) or k in ("keywords", "tags", "topic")


def state_words(state: Any, limit: int = CANDIDATES) -> list[str]:
    """Search terms drawn from the records of ``state``: words (4+ letters) of the values of name-, title-,
    email-, subject-like fields, in document order, then those values whole; at most ``limit`` of each.
    What a search input is filled with instead of a placeholder (a literal ``'sample query'`` matches nothing)."""
    values: list[str] = []
    stack = [state]
    while stack and len(values) < 50:
        cur = stack.pop(0)
        if isinstance(cur, dict):
            for k, v in cur.items():
                if isinstance(v, str) and v.strip() and _text_field(str(k)):
                    values.append(v.strip())
                elif isinstance(v, list) and _text_field(str(k)):
                    values.extend(x.strip() for x in v if isinstance(x, str) and x.strip())
                if isinstance(v, dict | list):
                    stack.append(v)
        elif isinstance(cur, list):
            stack.extend(x for x in cur if isinstance(x, dict | list))
    words: list[str] = []
    for v in values:
        for w in re.findall(r"[A-Za-z]{4,}", v.split("@")[0]):
            if w not in words:
                words.append(w)
    whole = [v for j, v in enumerate(values) if v not in values[:j]]
    return words[:limit] + whole[:limit]


def _singular(param: str) -> str:
    return param[:-1] if param.endswith("s") and not param.endswith("ss") else param


def _plurals(param: str) -> set[str]:
    base = param[:-3] if param.endswith("_id") else param
    return {base + "s", base + "es", base[:-1] + "ies" if base.endswith("y") else base + "s"}


def _date_kind(schema: Mapping[str, Any]) -> str | None:
    fmt = schema.get("format")
    return str(fmt) if schema.get("type") == "string" and fmt in ("date", "date-time") else None


def _end_like(param: str) -> bool:
    return bool({"end", "out", "until", "to", "last", "finish", "till"} & set(param.lower().split("_")))


def _clock(state: Any) -> datetime:
    now = state.get("now") if isinstance(state, dict) else None
    if isinstance(now, str):
        try:
            return datetime.fromisoformat(now).replace(tzinfo=None)
        except ValueError:
            pass
    return FALLBACK_NOW


class _Filler:
    """Candidate arguments for one step (module docstring; docs/synthesis.md, "Sampler: implementation
    notes")."""

    def __init__(self, state: Any, calls: list[dict[str, Any]], results: list[Any]) -> None:
        self.state, self.calls, self.results = state, calls, results

    def earlier_arguments(self, param: str) -> list[Any]:
        return [c["arguments"][param] for c in reversed(self.calls) if param in c["arguments"]]

    def user_values(self, param: str, schema: Mapping[str, Any], defs: Mapping[str, Any], *,
                    guess: bool = True) -> list[Any]:
        """Candidates for a user input, best first; without ``guess`` only values found in earlier
        calls, results, the state, or the schema's enum (what an optional input may be filled with)."""
        if schema.get("type") == "array":
            item = _schema(schema.get("items", {}), defs)
            wrapped = [[v] for v in self.user_values(_singular(param), item, defs, guess=guess)]
            return [v for v in self.earlier_arguments(param) if isinstance(v, list)] + wrapped
        out: list[Any] = list(self.earlier_arguments(param))
        names = {param}
        for r in reversed(self.results):
            _walk_named(r, names, out)
        _walk_named(self.state, names | {f"{param}_id"}, out, _plurals(param))
        if schema.get("type") == "string":  # "Person id of whoever asks; must be the organizer"
            hinted = {f"{w}_id" for w in re.findall(r"[a-z]{3,}", str(schema.get("description", "")).lower())}
            for r in reversed(self.results):
                _walk_named(r, hinted, out)
            _walk_named(self.state, hinted, out)
        if guess:
            out.extend(re.findall(r"e\.g\.\s*\[?['\"]?([A-Za-z0-9][\w.-]*[A-Za-z0-9])",
                                  str(schema.get("description", ""))))
            if is_search_input(param, schema):  # a word of a real record, not 'sample query' (issue 27 part 3)
                out.extend(state_words(self.state))
            out.extend(self.schema_values(param, schema))
        else:
            out.extend(schema.get("enum", []))
        uniq: list[Any] = []
        for v in out:
            if _fits(v, schema) and v not in uniq:
                uniq.append(v)
        return uniq[:CANDIDATES]

    @staticmethod
    def schema_values(param: str, schema: Mapping[str, Any]) -> list[Any]:
        out: list[Any] = list(schema.get("enum", []))
        if "const" in schema:
            out.append(schema["const"])
        if schema.get("default") is not None:
            out.append(schema["default"])
        out.extend(schema.get("examples", []))
        t = schema.get("type")
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum")
        if t == "integer":
            base = int(lo) + (1 if "minimum" not in schema and lo is not None else 0) if lo is not None else 1
            base = max(base, 1) if lo is None or lo >= 0 else base
            out.extend(v for v in (base, base * 2, base * 4) if hi is None or v <= hi)
        elif t == "number":
            out.extend(v for v in (10.0, 1.0, 50.0) if (lo is None or v > lo) and (hi is None or v <= hi))
        elif t == "boolean":
            out.extend([False, True])
        elif t == "string" and "pattern" not in schema:
            out.append("user@example.com" if schema.get("format") == "email" or "email" in param
                       else f"sample {param.replace('_', ' ')}")
        elif t == "object":
            out.append({})
        return out

    def date_options(self, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Joint values for the date inputs ``[(param, 'date' | 'date-time')]``: earlier calls' values
        first, then start dates ``DATE_OFFSETS`` days after the clock (end-like names 3 days / 2 hours
        later)."""
        options: list[dict[str, Any]] = []
        reused = {p: self.earlier_arguments(p)[0] for p, _ in params if self.earlier_arguments(p)}
        now = _clock(self.state)
        for offset in DATE_OFFSETS:
            start = datetime.combine(now.date() + timedelta(days=offset), datetime.min.time()).replace(hour=10)
            opt: dict[str, Any] = {}
            for p, kind in params:
                if kind == "date":
                    d: date = start.date() + timedelta(days=3 if _end_like(p) else 0)
                    opt[p] = d.isoformat()
                else:
                    opt[p] = (start + timedelta(hours=2 if _end_like(p) else 0)).isoformat()
            if reused and not options:
                options.append({**opt, **reused})
            options.append(opt)
        return options


def _fillings(dims: list[list[dict[str, Any]]], limit: int) -> Iterator[dict[str, Any]]:
    """Up to ``limit`` argument dicts merging one option per dimension, in order of the sum of the
    option indices (every dimension is varied early), then lexicographically."""
    sizes = [len(d) for d in dims]
    emitted = 0
    for total in range(sum(s - 1 for s in sizes) + 1):
        stack: list[tuple[int, ...]] = [()]
        while stack:
            prefix = stack.pop()
            k = len(prefix)
            used = sum(prefix)
            if k == len(dims):
                if used == total:
                    merged: dict[str, Any] = {}
                    for dim, i in zip(dims, prefix, strict=True):
                        merged.update(dim[i])
                    yield merged
                    emitted += 1
                    if emitted >= limit:
                        return
                continue
            stack.extend(prefix + (i,) for i in reversed(range(min(sizes[k], total - used + 1))))


def _with_optionals(fillings: Iterator[dict[str, Any]], extras: list[dict[str, Any]],
                    limit: int) -> Iterator[dict[str, Any]]:
    """The fillings, then (when all of them failed) the first filling plus one optional input at a
    time (``extras``, at most ``limit`` of them): for tools that need one of several optional inputs."""
    first = None
    for f in fillings:
        first = f if first is None else first
        yield f
    for extra in extras[:limit]:
        yield {**(first or {}), **extra}


def _session(chain: Chain, initial_states: Mapping[str, Any] | None) -> tuple[Session, dict[str, bytes]]:
    specs = [get_environment(e) for e in chain.envs]
    if initial_states is None:
        ref: Any = None
    elif len(specs) == 1:
        ref = initial_states.get(specs[0].name)
    else:
        ref = {k: v for k, v in initial_states.items() if k in chain.envs}
    states = resolve_initial_states(specs, ref)
    return Session.from_states(specs, states, check_writes=True), states


def check_chain(chain: Chain, *, initial_states: Mapping[str, Any] | None = None,
                attempts: int = FILL_ATTEMPTS, variant: int = 0) -> ChainCheck:
    """Run ``chain`` in a fresh session (paper §3.3, the executed solvability check).

    The session spans the chain's environments, from ``initial_states`` (``{env: state name, dict or
    model}``; an environment left out, or ``None``, starts from its default initial state) and checks
    the write contract (``check_writes``).  Per step: ``step`` inputs take a value at the output path
    of the earlier result (the items in turn); ``user`` inputs a value from, in order, the same
    parameter in earlier calls, a same-named key in earlier results, a same-named field (or
    ``<name>_id`` field, or the keys of the ``<name>s`` collection) in the initial state, an ``e.g.``
    example in the parameter's description, the input schema (enum, default, examples, bounds); dates
    are computed from the state's ``now``; ``optional`` inputs are omitted.  A failing call is retried
    with the next filling, at most ``attempts`` in all.  ``variant`` ``v > 0`` starts every input's
    candidate list at its ``v``-th entry (modulo its length; the list rotated): another record, date or
    value where there are several, so one chain gives several different executed ground truths.

    Returns:
        A :class:`ChainCheck`: ``ok`` with the ground-truth calls, or not ok with the ``reason`` naming
        the step, the tool and the error code and message (a read-only tool that wrote, or a write
        tool that changed nothing, is a failure too).  Never raises for a bad chain or an unknown
        environment: those are reasons as well.
    """
    problems = chain_errors(chain)
    if problems:
        return ChainCheck(ok=False, reason=f"malformed chain: {problems[0][0]}: {problems[0][1]}")
    try:
        session, states = _session(chain, initial_states)
    except EnvFactoryError as exc:
        return ChainCheck(ok=False, reason=f"cannot start a session over {chain.envs}: {exc}")
    initial = {e: json.loads(b) for e, b in states.items()}
    calls: list[dict[str, Any]] = []
    results: list[Any] = []

    def fail(reason: str) -> ChainCheck:
        session.close()
        return ChainCheck(ok=False, reason=reason, calls=calls, results=results, initial_states=initial)

    for i, step in enumerate(chain.steps):
        where = f"step {i} ({step.tool})"
        tool = session.tools.get(step.name)
        if tool is None or tool.env != step.env:
            return fail(f"{where}: {step.env} has no tool {step.name!r}")
        props = tool.input_schema.get("properties", {})
        defs = tool.input_schema.get("$defs", {})
        filler = _Filler(initial[step.env], calls, results)
        dims: list[list[dict[str, Any]]] = []
        dates: list[tuple[str, str]] = []
        optional_options: list[dict[str, Any]] = []
        for param, src in sorted(step.inputs.items()):
            schema = _schema(props.get(param, {}), defs)
            if isinstance(src, OptionalInput):
                if not _date_kind(schema):
                    optional_options += [{param: v} for v in filler.user_values(param, schema, defs, guess=False)[:2]]
                continue
            if isinstance(src, StepInput):
                values = [v for v in output_values(results[src.step], src.output) if v is not None]
                if schema.get("type") == "array":
                    values = [v if isinstance(v, list) else [v] for v in values]
                uniq = [v for j, v in enumerate(values) if v not in values[:j]][:CANDIDATES]
                if not uniq:
                    return fail(f"{where}: input {param!r} from step {src.step} output {src.output!r}: "
                                "the result holds no value there")
                dims.append([{param: v} for v in uniq])
            elif _date_kind(schema):
                dates.append((param, str(_date_kind(schema))))
            else:
                values = filler.user_values(param, schema, defs)
                if not values:
                    return fail(f"{where}: no value found for user input {param!r}")
                dims.append([{param: v} for v in values])
        if dates:
            dims.append(filler.date_options(dates))
        if variant:
            dims = [d[variant % len(d):] + d[:variant % len(d)] for d in dims]
        last = None
        tried = 0
        for arguments in _with_optionals(_fillings(dims, max(1, attempts)), optional_options, attempts):
            tried += 1
            before = session.state_bytes()
            result = session.call(step.name, arguments)
            if not result.ok:
                last = f"{result.error_code}: {result.error}"
                continue
            changed = session.state_bytes() != before
            if tool.read_only and changed:
                return fail(f"{where}: read-only tool changed the state")
            if not tool.read_only and not changed:
                last = "write tool succeeded but changed nothing"
                continue
            calls.append({"env": step.env, "name": step.name, "arguments": arguments})
            results.append(result.content)
            break
        else:
            return fail(f"{where}: {last} (after {tried} filling(s))")
    final = session.state()
    session.close()
    return ChainCheck(ok=True, calls=calls, results=results, initial_states=initial, final_state=final)
