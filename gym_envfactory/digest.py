"""State digests: scoring a remote session's turn end without moving its state (docs/reward.md,
"Scoring on the server").

:func:`state_digest` is SHA-256 of the canonical JSON bytes (those of ``Session.state_bytes()``) of a
canonical state with the paths the reward leaves out removed.  The server answers it for a session (the
fast protocol's ``digest``); the env computes it once per reference turn state (:func:`reference_digest`,
memoised on the :class:`~gym_envfactory.replay.TaskReference`).  Equal digests mean states the reward
calls equal, so the env scores the reference's own state in its place with no state on the wire; any
other answer falls back to reading the whole state.

Soundness (equal digest ⇒ ``state_diff`` finds nothing) rests on :func:`prune` being *at most* the
reward's exclusions, never more:

- a dict key whose path matches an excluded pattern (the reward's own regexes, ``state_compare.compile_patterns``) is
  removed: the reward ignores it whether present or absent;
- a list element whose path matches is replaced by a constant, so the list's length still counts (the
  reward reports a length mismatch even when every element is excluded);
- nothing inside a list declared a set is touched (the reward compares such a list's whole elements as a
  multiset, exclusions not applied inside);
- a subtree no excluded pattern can reach by its dotted segments is kept as it is (a key holding a ``.``
  may leave a subtree unpruned that the reward would prune: a different digest, so the full path, never
  a wrong verdict).

Everything else is finer than the reward: ``5`` and ``5.0``, a reordered set, differ in bytes and only
cost the fallback.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from gym_envfactory.environment.cow import CowDict
from gym_envfactory.environment.manifest import canonical_json
from gym_envfactory.protocol import STATE_DIGEST_ALGORITHM
from gym_envfactory.replay import TaskReference
from gym_envfactory.session import Session
from gym_envfactory.state_compare import compile_patterns, root_serialises_by_field

__all__ = ["STATE_DIGEST_ALGORITHM", "state_digest", "session_digest", "prune", "reference_digest"]

#: Bytes of canonical root-field parts :func:`session_digest` keeps (keyed by the field's JSON text).
PART_CACHE_BYTES = 32 * 1024 * 1024

#: What an excluded list element becomes (its position kept): any constant works, both sides get it.
_EXCLUDED = "\x00excluded"


def prune(state: Any, excluded: Sequence[str] = (), set_fields: Sequence[str] = ()) -> Any:
    """``state`` (canonical form) without the parts the reward leaves out (see the module doc).  Shares
    the subtrees it does not change with ``state``; never mutates it."""
    if not excluded:
        return state
    skip = compile_patterns(tuple(excluded))
    sets = compile_patterns(tuple(set_fields))
    segs = [tuple(p.split(".")) for p in excluded]

    def reach(live: list[tuple[str, ...]], depth: int, key: str) -> list[tuple[str, ...]]:
        return [s for s in live if len(s) > depth + 1 and (s[depth] == "*" or s[depth] == key)]

    def walk(v: Any, path: str, depth: int, live: list[tuple[str, ...]]) -> Any:
        if isinstance(v, dict):
            out: dict[Any, Any] = {}
            for k, x in v.items():
                p = f"{path}.{k}" if path else str(k)
                if any(r.match(p) for r in skip):
                    continue
                below = reach(live, depth, str(k))
                out[k] = walk(x, p, depth + 1, below) if below else x
            return out
        if isinstance(v, list):
            if any(r.match(path) for r in sets):
                return v  # a multiset of whole elements: the reward excludes nothing inside
            items: list[Any] = []
            for i, x in enumerate(v):
                p = f"{path}.{i}"
                if any(r.match(p) for r in skip):
                    items.append(_EXCLUDED)
                    continue
                below = reach(live, depth, str(i))
                items.append(walk(x, p, depth + 1, below) if below else x)
            return items
        return v

    return walk(state, "", 0, segs)


def state_digest(state: Any, excluded: Sequence[str] = (), set_fields: Sequence[str] = ()) -> str:
    """Hex SHA-256 of the canonical JSON bytes of ``prune(state, excluded, set_fields)``
    (algorithm :data:`STATE_DIGEST_ALGORITHM`)."""
    return hashlib.sha256(canonical_json(prune(state, excluded, set_fields))).hexdigest()


def reference_digest(reference: TaskReference, turn: int) -> str:
    """:func:`state_digest` of the reference's state after ``turn`` (``-1``: the state before turn 0),
    with the reference's exclusions; memoised on the reference."""
    key = ("digest", turn)
    hit = reference.memo.get(key)
    if hit is None:
        state = reference.turn_states[turn] if turn >= 0 else reference.state_before(0)
        hit = reference.memo[key] = state_digest(state, reference.excluded_fields, reference.set_fields)
    return hit


_parts: OrderedDict[bytes, tuple[str, bytes]] = OrderedDict()
_parts_bytes = 0
_parts_lock = threading.Lock()


def session_digest(session: Session, excluded: Sequence[str] = (), set_fields: Sequence[str] = ()) -> str:
    """:func:`state_digest` of ``session.state()``, the same value, computed without parsing and
    re-encoding the whole state when it can: for one environment whose live state model serialises field
    by field (``state_compare.root_serialises_by_field``, no extra fields), the canonical pruned bytes of each root field are
    taken from a bounded cache keyed by that field's own JSON text (a large collection no call changed
    costs one serialisation and one hash).  Canonical JSON of a dict is its fields' canonical parts in
    sorted key order, so the joined parts are the bytes :func:`state_digest` hashes."""
    excluded, set_fields = tuple(excluded), tuple(set_fields)
    if len(session.envs) == 1:
        live = session._states.get(next(iter(session.envs)))
        model = live.model if live is not None else None
        if model is not None and root_serialises_by_field(type(model)) and not model.__pydantic_extra__:
            return _model_digest(model, excluded, set_fields)
    return state_digest(session.state(), excluded, set_fields)


#: Parts of root collections a view holds exactly as its base does (``CowDict.pristine``), keyed by the
#: identity of the base's dict (kept alive here, so the identity cannot be reused) and the exclusions:
#: a collection no call touched costs no serialisation at all.
_pristine: OrderedDict[tuple[int, str, bytes], tuple[Any, tuple[str, bytes]]] = OrderedDict()
PRISTINE_ENTRIES = 16  # each keeps a base collection alive: few, so memory stays bounded


#: Canonical pruned bytes of the records of root collections that a view shares with its base (not
#: owned by it: base records are never mutated), keyed by the record's identity (held by a weak
#: reference, so a hit is the very record and the cache keeps none alive), its field, its key and the
#: exclusions: ``None`` for a record the exclusions remove.
_records: OrderedDict[tuple[int, str, str, bytes], tuple[Any, bytes | None]] = OrderedDict()
_records_bytes = 0
RECORD_CACHE_BYTES = 16 * 1024 * 1024
RECORD_OVERHEAD = 400  # bytes an entry costs besides its bytes (key tuple, weak reference, dict slot)
#: JSON name (alias) of a root field, per model class.
_json_names: dict[tuple[type, str], str] = {}


def _collection_part(model: Any, name: str, value: CowDict, excluded: tuple[str, ...], set_fields: tuple[str, ...],
                     salt: bytes) -> tuple[str, bytes] | None:
    """The canonical pruned part (``'"field":{...}'``) of a root collection of a copy-on-write view,
    serialising only the records the view owns (copied, written) or that were never seen: the others
    are its base's records, whose bytes are cached by identity.  The records are serialised by the root
    model's own serializer with a nested ``include`` (what ``state_compare`` does to compare frozen
    states), so every byte is the one :func:`state_digest` hashes.  ``None``: not a plain collection of
    string keys (the caller serialises the whole field)."""
    global _records_bytes
    owned = value._owned or ()
    got: dict[str, bytes | None] = {}
    need: list[str] = []
    with _parts_lock:
        for k, rec in dict.items(value):
            if type(k) is not str:
                return None
            if k in owned:
                need.append(k)
                continue
            hit = _records.get((id(rec), name, k, salt))
            if hit is not None and hit[0]() is rec:
                got[k] = hit[1]
            else:
                need.append(k)
    cls = type(model)
    json_name = _json_names.get((cls, name))
    if need or json_name is None:
        if not need and not got:
            return None  # an empty collection: the whole field costs nothing
        probe = need or [next(iter(got))]
        one = json.loads(cls.__pydantic_serializer__.to_json(model, include={name: set(probe)}))
        if len(one) != 1:
            return None
        json_name = _json_names[(cls, name)] = next(iter(one))
        kept = prune(one, excluded, set_fields)
        if json_name not in kept or not isinstance(kept[json_name], dict):
            return None  # the whole field is excluded, or not an object: the caller's path
        inner = kept[json_name]
        fresh = []
        for k in need:
            b = canonical_json(inner[k]) if k in inner else None
            got[k] = b
            if k not in owned:
                fresh.append((k, b))
        with _parts_lock:
            for k, b in fresh:
                rec = dict.__getitem__(value, k)
                try:
                    ref = weakref.ref(rec)  # held weakly: the cache keeps no record alive
                except TypeError:  # not weakly referable (a str, an int, a slotted object): not cached
                    continue
                _records[(id(rec), name, k, salt)] = (ref, b)
                _records_bytes += len(b or b"") + RECORD_OVERHEAD
            while _records_bytes > RECORD_CACHE_BYTES and _records:
                _records_bytes -= len(_records.popitem(last=False)[1][1] or b"") + RECORD_OVERHEAD
    body = b",".join(json.dumps(k, ensure_ascii=False).encode() + b":" + b
                     for k, b in sorted(got.items()) if b is not None)
    return json_name, json.dumps(json_name, ensure_ascii=False).encode() + b":{" + body + b"}"


def _model_digest(model: Any, excluded: tuple[str, ...], set_fields: tuple[str, ...]) -> str:
    global _parts_bytes
    salt = repr((excluded, set_fields)).encode()
    parts: list[tuple[str, bytes]] = []
    for name in type(model).model_fields:
        value = model.__dict__.get(name)
        origin = value.pristine() if type(value) is CowDict else None
        if origin is not None:
            ident = (id(origin), name, salt)
            with _parts_lock:
                kept = _pristine.get(ident)
                if kept is not None and kept[0] is origin:
                    _pristine.move_to_end(ident)
                    if kept[1][1]:
                        parts.append(kept[1])
                    continue
        if type(value) is CowDict:
            part = _collection_part(model, name, value, excluded, set_fields, salt)
            if part is not None:
                if origin is not None:
                    with _parts_lock:
                        _pristine[(id(origin), name, salt)] = (origin, part)
                        while len(_pristine) > PRISTINE_ENTRIES:
                            _pristine.popitem(last=False)
                parts.append(part)
                continue
        raw = model.model_dump_json(include={name}).encode()
        key = hashlib.sha256(raw + b"\0" + salt).digest()
        with _parts_lock:
            hit = _parts.get(key)
            if hit is not None:
                _parts.move_to_end(key)
        if hit is None:
            one = json.loads(raw)  # {key: value}, or {} for a field the model does not serialise
            kept = prune(one, excluded, set_fields)
            hit = (next(iter(one), ""), canonical_json(kept)[1:-1])  # '"key":value' without the braces
            with _parts_lock:
                _parts[key] = hit
                _parts_bytes += len(hit[1])
                while _parts_bytes > PART_CACHE_BYTES and _parts:
                    _parts_bytes -= len(_parts.popitem(last=False)[1][1])
        if origin is not None:
            with _parts_lock:
                _pristine[(id(origin), name, salt)] = (origin, hit)
                while len(_pristine) > PRISTINE_ENTRIES:
                    _pristine.popitem(last=False)
        if hit[1]:
            parts.append(hit)
    parts.sort(key=lambda kv: kv[0])
    return hashlib.sha256(b"{" + b",".join(p for _, p in parts) + b"}").hexdigest()
