"""Type and entity compatibility of a candidate tool-graph link (issue 27 part 3; ``docs/synthesis.md``,
"Tool graph: link check").

The embedding score (arXiv 2605.18703 §3.3) says two parameters *read* alike; it cannot say that a hotel
``booking_id`` is no fitness-class ``booking_id``.  Before a candidate ``match`` edge output → input counts,
:func:`check_link` asks two questions and answers with a reason when the answer is no:

1. **Types.** JSON-schema types must be compatible: equal, or an integer into a number; a scalar into an
   array input of that scalar (the value is wrapped in a list), an array into an array of compatible items;
   never an array into a single value.  ``any`` (no type) fits everything.  Formats that differ (``date``
   into ``date-time``) are incompatible.
2. **Entities**, for id-like parameters (``id``, ``*_id``, ``*_ids``, ``*Id``, ``*Ids``): both sides must
   identify the same kind of record of the same database.  The entity of a parameter or output leaf in
   environment E is found, in order:

   a. from E's initial state (:class:`EnvEntities`, built by :func:`env_entities` from the state model and
      the default initial state): a record field of that name whose values are keys of one or more
      collections (``organizer_id`` → ``people``; CloudDrive's ``item_id`` → ``files`` or ``folders``);
   b. from the name: the words before ``id`` (``to_address_id`` → ``to address``), then with leading words
      dropped one at a time (``address``), matched against E's collection names (plural or singular) and
      their record models' names (``bookings`` / ``ClassBooking``);
   c. otherwise the name's words themselves (``organizer``), compared by name.

   Ids named ``deleted_*``/``removed_*``/``purged_*`` name records that are gone: never a source.  When
   only one side has an id-like name (``requested_by`` takes a person id) the types alone decide.  An id
   links across environments only when the two collections are declared the same entity
   (``shared_entities``: each environment has its own database, so two ``customer_id`` of two environments
   are different customers unless someone says otherwise; the shipped catalog declares none).

The verdict is a :class:`LinkVerdict`; :func:`~.graph.build_graph` keeps the rejected candidates, with
their reasons, in the graph attribute ``rejected`` (``envfactory graph show --rejected`` lists them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory.errors import EnvFactoryError

__all__ = ["EnvEntities", "LinkVerdict", "env_entities", "is_id_like", "entity_of", "check_types", "check_link"]

_GONE = ("deleted", "removed", "purged")


def is_id_like(name: str) -> bool:
    """Whether a parameter or output leaf names an identifier: ``id``, ``ids``, ``*_id``, ``*_ids``,
    ``*Id``, ``*Ids`` (the sampler's rule, ``docs/synthesis.md``, "Sampler")."""
    return name.lower() in ("id", "ids") or name.endswith(("_id", "_ids", "Id", "Ids"))


def _words(name: str) -> list[str]:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[_\W]+", name.lower()) if w]


def _singular(word: str) -> str:
    if word == "people":
        return "person"
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@dataclass(frozen=True)
class EnvEntities:
    """What an environment's database says about its ids.

    Attributes:
        env: environment name.
        collections: collection name → record model name (``{"bookings": "ClassBooking"}``): the root state
            model's fields that are maps of records keyed by id.
        fields: id-like record field name → the collections its values are keys of, in the default initial
            state (``{"organizer_id": ("people",)}``).
    """

    env: str
    collections: dict[str, str] = field(default_factory=dict)
    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in the graph attribute ``entities``)."""
        return {"collections": dict(self.collections), "fields": {k: list(v) for k, v in self.fields.items()}}

    @classmethod
    def from_dict(cls, env: str, data: Mapping[str, Any]) -> EnvEntities:
        """Inverse of :meth:`as_dict`."""
        return cls(env, dict(data.get("collections", {})),
                   {k: tuple(v) for k, v in (data.get("fields") or {}).items()})


def env_entities(spec: Any, state: Mapping[str, Any] | None = None) -> EnvEntities:
    """:class:`EnvEntities` of an ``EnvironmentSpec``: collections from its state model's JSON schema
    (object-valued fields with ``additionalProperties``), id fields from ``state`` (default: the spec's
    default initial state).  An environment whose state cannot be read gets collections only."""
    collections: dict[str, str] = {}
    try:
        schema = spec.state_model.model_json_schema()
    except (AttributeError, TypeError, ValueError):
        schema = {}
    for name, sub in (schema.get("properties") or {}).items():
        add = sub.get("additionalProperties") if isinstance(sub, dict) else None
        if isinstance(add, dict) and sub.get("type") == "object":
            ref = str(add.get("$ref", "")).rsplit("/", 1)[-1]
            collections[name] = ref or add.get("title", "") or ""
    if state is None:
        try:
            state = json.loads(spec.initial_state_json())
        except (AttributeError, ValueError, OSError, EnvFactoryError):  # no readable state: names only
            state = None
    fields: dict[str, tuple[str, ...]] = {}
    if isinstance(state, Mapping):
        keys = {c: set(state.get(c) or {}) for c in collections if isinstance(state.get(c), Mapping)}
        seen: dict[str, set[str]] = {}

        def walk(node: Any) -> None:
            if isinstance(node, Mapping):
                for k, v in node.items():
                    if isinstance(k, str) and is_id_like(k):
                        vals = v if isinstance(v, list) else [v]
                        seen.setdefault(k, set()).update(x for x in vals if isinstance(x, str))
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        for c in keys:
            walk(state.get(c))
        for name, vals in seen.items():
            if not vals:
                continue
            hit = tuple(sorted(c for c, ks in keys.items() if vals & ks))
            if hit and vals <= set().union(*(keys[c] for c in hit)):
                fields[name] = hit
    return EnvEntities(spec.name, collections, fields)


@dataclass(frozen=True)
class Entity:
    """What an id identifies: ``collections`` of ``env`` (empty when unresolved), or a ``name``; ``gone``
    for ids of removed records; ``how`` says which rule found it."""

    env: str
    collections: tuple[str, ...]
    name: str
    how: str
    gone: bool = False

    def label(self) -> str:
        """``"HotelBooking.bookings"``, ``"FitnessClub.bookings|..."`` or ``"TeamCalendar:'organizer'"``."""
        if self.collections:
            return f"{self.env}." + "|".join(self.collections)
        return f"{self.env}:{self.name!r}"


def _match_collection(words: list[str], ents: EnvEntities) -> str | None:
    text = " ".join(words)
    for coll in sorted(ents.collections):
        cw = _words(coll)
        if cw and text in (" ".join(cw), " ".join([*cw[:-1], _singular(cw[-1])])):
            return coll
    for coll, title in sorted(ents.collections.items()):
        tw = _words(title)
        if tw and " ".join(tw) == text:
            return coll
    return None


def entity_of(leaf: str, path: str, env: str, ents: EnvEntities | None) -> Entity:
    """The entity an id-like ``leaf`` (an input parameter, or the last segment of output ``path``) of
    environment ``env`` identifies (module docstring, rule 2)."""
    words = _words(leaf)
    if words and words[-1] in ("id", "ids"):
        words = words[:-1]
    if not words:  # a bare "id": the record it sits in (`hotels[].id` -> hotel)
        segs = [s for s in path.replace("[]", "").split(".") if s][:-1]
        words = [_singular(w) for w in _words(segs[-1])] if segs else []
    gone = bool(words) and words[0] in _GONE
    if gone:
        words = words[1:]
    if ents is not None and leaf in ents.fields and not gone:
        return Entity(env, ents.fields[leaf], leaf, "state field")
    if ents is not None:
        for start in range(len(words)):
            coll = _match_collection(words[start:], ents)
            if coll is not None:
                return Entity(env, (coll,), " ".join(words), "name", gone)
    return Entity(env, (), " ".join(words[-1:]) if words else leaf, "unresolved name", gone)


def _types(t: str) -> set[str]:
    return {x for x in str(t or "any").split("|") if x and x != "null"} or {"any"}


def _scalar_fits(out: set[str], into: set[str]) -> bool:
    if "any" in out or "any" in into:
        return True
    return bool(out & into) or ("integer" in out and "number" in into)


def check_types(out: Mapping[str, Any], into: Mapping[str, Any]) -> str | None:
    """Why an output node's value cannot be the input node's value, or ``None`` (rule 1).  Nodes carry
    ``type``, ``format`` and, for arrays, ``items_type``."""
    ot, it = _types(out.get("type", "any")), _types(into.get("type", "any"))
    if "array" in it and "array" not in ot:
        item = _types(into.get("items_type") or "any")
        if not _scalar_fits(ot, item):
            return f"type: {'|'.join(sorted(ot))} into a list of {'|'.join(sorted(item))}"
    elif "array" in ot and "array" not in it and "any" not in it:
        return f"type: a list into a single {'|'.join(sorted(it))}"
    elif "array" in ot and "array" in it:
        oi, ii = _types(out.get("items_type") or "any"), _types(into.get("items_type") or "any")
        if not _scalar_fits(oi, ii):
            return f"type: a list of {'|'.join(sorted(oi))} into a list of {'|'.join(sorted(ii))}"
    elif not _scalar_fits(ot, it):
        return f"type: {'|'.join(sorted(ot))} into {'|'.join(sorted(it))}"
    of, inf = out.get("format"), into.get("format")
    if of and inf and of != inf:
        return f"format: {of} into {inf}"
    return None


@dataclass(frozen=True)
class LinkVerdict:
    """The check's answer: ``ok``; ``reason`` when not; ``entity`` (the consumer's entity label) for ids."""

    ok: bool
    reason: str | None = None
    entity: str | None = None


def _shared(a: Entity, b: Entity, shared: Iterable[tuple[str, str]]) -> bool:
    pa = {f"{a.env}.{c}" for c in a.collections}
    pb = {f"{b.env}.{c}" for c in b.collections}
    return any((x in pa and y in pb) or (y in pa and x in pb) for x, y in shared)


def check_link(out: Mapping[str, Any], into: Mapping[str, Any], *, out_env: str, in_env: str,
               entities: Mapping[str, EnvEntities] | None = None,
               shared_entities: Iterable[tuple[str, str]] = ()) -> LinkVerdict:
    """Whether output node ``out`` (attributes ``path``, ``type``, ``format``, ``items_type``) of a tool in
    ``out_env`` may feed input node ``into`` (``param``, ...) of a tool in ``in_env`` (module docstring).

    ``entities``: :class:`EnvEntities` per environment (missing: names only).  ``shared_entities``: pairs
    of ``"Env.collection"`` that hold the same records.
    """
    why = check_types(out, into)
    if why is not None:
        return LinkVerdict(False, why)
    path = str(out.get("path", ""))
    leaf = path.rsplit(".", 1)[-1].replace("[]", "")
    param = str(into.get("param", ""))
    if not is_id_like(param) and not is_id_like(leaf):
        return LinkVerdict(True)
    if is_id_like(param) != is_id_like(leaf):
        return LinkVerdict(True)  # an id under another name (`requested_by`): the types decide
    ents = entities or {}
    eo = entity_of(leaf, path, out_env, ents.get(out_env))
    ei = entity_of(param, "", in_env, ents.get(in_env))
    if eo.gone:
        return LinkVerdict(False, f"entity: {leaf} names removed records", ei.label())
    if out_env != in_env and not _shared(eo, ei, shared_entities):
        return LinkVerdict(False, f"entity: {eo.label()} and {ei.label()} are records of two environments' "
                                  "databases (not declared shared)", ei.label())
    if eo.collections and ei.collections:
        if set(eo.collections) & set(ei.collections) or out_env != in_env:
            return LinkVerdict(True, None, ei.label())
    elif not eo.collections and not ei.collections and eo.name == ei.name:
        return LinkVerdict(True, None, ei.label())
    return LinkVerdict(False, f"entity: {leaf} identifies {eo.label()} ({eo.how}), {param} identifies "
                              f"{ei.label()} ({ei.how})", ei.label())
