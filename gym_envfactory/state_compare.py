"""Canonical state equivalence, the comparison behind ``R_state`` (docs/reward.md, "R_state" and "Cost").

:func:`state_diff` lists the differences between two canonical states (or two
:class:`~gym_envfactory.environment.cow.FrozenState` objects, compared by record identity): bookkeeping and
free-text paths excluded, numbers by value (:func:`values_equal`, :func:`canonical_number`), lists ordered unless
declared sets.  :mod:`gym_envfactory.reward` scores with it and re-exports its public names;
:mod:`gym_envfactory.digest` mirrors its path patterns (:func:`compile_patterns`) and its test of a root that
serialises field by field (:func:`root_serialises_by_field`).
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gym_envfactory.environment.cow import FrozenState

__all__ = [
    "StateDiff",
    "state_diff",
    "state_text",
    "values_equal",
    "canonical_number",
    "compile_patterns",
    "root_serialises_by_field",
    "state_changes",
    "changes_diff",
    "ABSENT",
]



@dataclass(frozen=True)
class StateDiff:
    """One difference: dotted ``path``, and the ``expected`` / ``actual`` values (truncated JSON)."""

    path: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, got {self.actual}"


def _compile(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    return list(_compile_cached(tuple(patterns)))


@functools.lru_cache(maxsize=256)
def _compile_cached(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    out = []
    for p in patterns:
        rx = "^" + r"\.".join("[^.]+" if seg == "*" else re.escape(seg) for seg in p.split(".")) + "$"
        out.append(re.compile(rx))
    return tuple(out)


def _short(v: Any) -> str:
    if v is _ABSENT:
        return "<absent>"
    s = json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
    return s if len(s) <= 120 else s[:117] + "..."


_ABSENT = object()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _canon_key(v: Any) -> str:
    return json.dumps(canonical_number(v), sort_keys=True, ensure_ascii=False)


def canonical_number(v: Any) -> Any:
    """``v`` with every number in canonical form, recursively through dicts and lists: an integral value
    below 2**53 in magnitude becomes an ``int`` (``5.0`` → ``5``), any other number a ``float``; booleans
    and other values are unchanged.  Equal numbers then serialise alike, which is how set-valued fields
    are compared as multisets (docs/reward.md: numbers compare by value)."""
    if _is_number(v):
        f = float(v)
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    if isinstance(v, dict):
        return {k: canonical_number(x) for k, x in v.items()}
    if isinstance(v, list):
        return [canonical_number(x) for x in v]
    return v


def values_equal(a: Any, b: Any) -> bool:
    """Structural equality with numbers by value (``5 == 5.0``; ``True`` is not ``1``)."""
    if _is_number(a) and _is_number(b):
        return a == b
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _identical(a: Any, e: Any) -> bool:
    """True only if ``a`` and ``e`` are surely equal under :func:`values_equal` — decided in C, not node
    by node: Python's ``==`` (numbers by value, but ``True == 1``) confirmed by equal JSON text (which
    tells ``true`` from ``1`` and refuses NaN).  ``False`` means "walk it" (``5`` vs ``5.0``, keys in
    another order, a bookkeeping-only difference), never "different".  Costs about one serialisation
    of the subtree, so the reward's state comparison pays Python-level work only where states differ."""
    if a != e:
        return False
    try:
        return _DUMPS(a) == _DUMPS(e)
    except (TypeError, ValueError):  # not JSON (NaN, foreign objects): the walk decides
        return False


_DUMPS = json.JSONEncoder(allow_nan=False, ensure_ascii=False, check_circular=False).encode


def state_text(state: Any) -> str | None:
    """``state`` as compact JSON text in its own key order (what :func:`state_diff` takes as
    ``expected_text``), or ``None`` when it is not JSON (NaN, foreign objects)."""
    try:
        return _DUMPS(state)
    except (TypeError, ValueError):
        return None


def state_diff(
    actual: Any,
    expected: Any,
    *,
    bookkeeping: Iterable[str] = (),
    set_fields: Iterable[str] = (),
    limit: int = 50,
    expected_text: str | None = None,
) -> list[StateDiff]:
    """Differences between two canonical states (docs/reward.md).  Empty list ⇔ equivalent.

    Work is proportional to what differs.  Two :class:`~gym_envfactory.environment.cow.FrozenState`
    objects grown from one base (an in-process episode's and its ground truth's) are compared by record
    identity: only the records and root fields that are not the same objects are serialised and walked,
    so equal large states compare in microseconds; a verdict of "equal" is remembered on ``actual`` (both
    are immutable), so the episode's final comparison after its last turn's costs nothing.  Otherwise
    (canonical dicts, or a frozen state against a dict) equal subtrees are recognised in C (equality
    confirmed by their JSON text) and never walked node by node.

    Args:
        actual, expected: canonical states (the form of :meth:`Session.state`) or frozen states
            (:meth:`Session.frozen_state`); the verdict and the paths reported are the same either way.
        bookkeeping: dotted path patterns (``*`` = any key) excluded from the comparison (docs/cases.md C07).
        set_fields: path patterns of lists compared as multisets.
        limit: at most this many differences are reported.
        expected_text: ``expected`` as compact JSON (:func:`state_text`), when the caller keeps it
            (the reward does, per ground-truth state): equal text means equal states, in one
            serialisation of ``actual``.  Ignored when both states are frozen.
    """
    bookkeeping, set_fields = tuple(bookkeeping), tuple(set_fields)  # any iterable, read once
    if isinstance(actual, FrozenState) or isinstance(expected, FrozenState):
        both = type(actual) is type(expected)
        key = (bookkeeping, set_fields)
        if both and actual.known_equal(expected, key):
            return []  # compared equal before (at the end of the last turn): both are immutable
        parts = _frozen_parts(actual, expected) if both else None
        if parts is not None:
            actual_parts, expected_parts = parts
            found = (state_diff(actual_parts, expected_parts, bookkeeping=bookkeeping, set_fields=set_fields,
                                limit=limit) if actual_parts or expected_parts else [])
            if not found and limit > 0:  # with limit 0 nothing is reported, equal or not
                actual.note_equal(expected, key)
            return found
        actual = actual.canonical() if isinstance(actual, FrozenState) else actual
        expected = expected.canonical() if isinstance(expected, FrozenState) else expected
    if expected_text is not None:
        try:
            # equal text and == together: the text tells true from 1, == tells a tuple from a list and 1 from "1"
            if _DUMPS(actual) == expected_text and actual == expected:
                return []
        except (TypeError, ValueError):
            pass
    skip = _compile(bookkeeping)
    sets = _compile(set_fields)
    out: list[StateDiff] = []
    _diff_walk(actual, expected, "", skip, sets, out, limit)
    return out


def _diff_walk(a: Any, e: Any, path: str, skip: Sequence[re.Pattern[str]], sets: Sequence[re.Pattern[str]],
               out: list[StateDiff], limit: int) -> None:
    """Append to ``out`` (at most ``limit`` in all) the differences between ``a`` (actual) and ``e`` (expected)
    at dotted ``path``: the walk of :func:`state_diff`, with ``skip`` (excluded paths) and ``sets`` (set
    fields) compiled."""
    if len(out) >= limit:
        return
    if path and any(p.match(path) for p in skip):
        return
    if (isinstance(a, dict) or isinstance(a, list)) and type(a) is type(e) and _identical(a, e):
        return  # equal subtree: nothing to report, nothing to walk (in C, not node by node)
    if isinstance(a, dict) and isinstance(e, dict):
        for k in e:
            _diff_walk(a.get(k, _ABSENT), e[k], f"{path}.{k}" if path else str(k), skip, sets, out, limit)
        for k in a:
            if k not in e:
                _diff_walk(a[k], _ABSENT, f"{path}.{k}" if path else str(k), skip, sets, out, limit)
        return
    if isinstance(a, list) and isinstance(e, list):
        if any(p.match(path) for p in sets):
            if sorted(map(_canon_key, a)) != sorted(map(_canon_key, e)):
                out.append(StateDiff(path, _short(e), _short(a)))
            return
        if len(a) != len(e):
            out.append(StateDiff(f"{path}.length", str(len(e)), str(len(a))))
        for i, (x, y) in enumerate(zip(a, e, strict=False)):  # a length mismatch is reported above
            _diff_walk(x, y, f"{path}.{i}", skip, sets, out, limit)
        return
    if a is _ABSENT or e is _ABSENT or not values_equal(a, e):
        out.append(StateDiff(path or "<root>", _short(e), _short(a)))


def _root_ok(cls: type[BaseModel]) -> bool:
    """Whether ``cls`` serialises field by field, so that ``include`` picks out exactly the parts of its
    canonical form that belong to the fields and keys included (no model serializer, no computed or
    field serializers at the root)."""
    hit = _ROOT_OK.get(cls)
    if hit is None:
        decorators = cls.__pydantic_decorators__
        hit = _ROOT_OK[cls] = not (decorators.model_serializers or decorators.field_serializers
                                   or cls.model_computed_fields)
    return hit


_ROOT_OK: dict[type[BaseModel], bool] = {}
compile_patterns, root_serialises_by_field = _compile, _root_ok  # what gym_envfactory.digest mirrors


def _differing_keys(a: dict[Any, Any], e: dict[Any, Any]) -> list[Any]:
    """Keys of two dicts whose values are not the very same objects (or that only one has), found in C."""
    if dict.keys(a) == dict.keys(e):
        same = map(operator.is_, dict.values(a), map(dict.__getitem__, itertools.repeat(e), a))
        return list(itertools.compress(a, map(operator.not_, same)))
    out = [k for k in a if k not in e or dict.__getitem__(a, k) is not dict.__getitem__(e, k)]
    return out + [k for k in e if k not in a]


#: Records of one dict field dumped and parsed per call when many differ (:func:`_chunked_parts`): about
#: 100 KB of JSON for a 1 KB record, a few ms of C work between two chances for another thread to run.
PART_CHUNK = 128


def _chunked_parts(ser: Any, model: BaseModel, include: dict[str, Any]) -> dict[str, Any]:
    """``json.loads(ser.to_json(model, include=include))``, built a field and :data:`PART_CHUNK` records
    at a time (fields and records in the model's own order): the same value, in many short C calls."""
    out: dict[str, Any] = {}
    for f, value in model.__dict__.items():
        wanted = include.get(f)
        if wanted is None:
            continue
        if not (isinstance(wanted, set) and isinstance(value, dict)) or len(wanted) <= PART_CHUNK:
            out.update(json.loads(ser.to_json(model, include={f: wanted})))
            continue
        keys = [k for k in value if k in wanted]
        if not keys:
            out.update(json.loads(ser.to_json(model, include={f: wanted})))
            continue
        for i in range(0, len(keys), PART_CHUNK):
            for field, records in json.loads(ser.to_json(model, include={f: set(keys[i:i + PART_CHUNK])})).items():
                out.setdefault(field, {}).update(records)
    return out


def _frozen_parts(actual: FrozenState, expected: FrozenState) -> tuple[Any, Any] | None:
    """The parts of the canonical forms of two frozen states that may differ (root fields and dict
    records that are not the same objects), in the canonical shape (``{env: ...}`` for several
    environments), or ``None`` when that cannot be told this way (other environments, other model
    classes, a root that does not serialise field by field).  Equal states give two empty dicts."""
    if actual.models.keys() != expected.models.keys():
        return None
    single = len(actual.models) == 1
    pa: dict[str, Any] = {}
    pe: dict[str, Any] = {}
    for name, me in expected.models.items():  # in the expected state's order, as the walk reports
        ma = actual.models[name]
        if ma is me:
            continue
        cls = type(ma)
        if type(me) is not cls or not _root_ok(cls) or ma.__pydantic_extra__ or me.__pydantic_extra__:
            return None
        include: dict[str, Any] = {}
        de = me.__dict__
        for f, va in ma.__dict__.items():
            ve = de.get(f, _ABSENT)
            if va is ve:
                continue
            if isinstance(va, dict) and isinstance(ve, dict):
                keys = _differing_keys(va, ve)
                if keys:
                    include[f] = set(keys)
            else:
                include[f] = True
        if not include:
            continue
        ser = cls.__pydantic_serializer__
        if sum(len(v) for v in include.values() if isinstance(v, set)) > PART_CHUNK:
            # many records differ: dumped and parsed a chunk at a time, so no single C call holds the
            # GIL for long (a server scores on its own thread while its worker serves other clients)
            pa[name], pe[name] = _chunked_parts(ser, ma, include), _chunked_parts(ser, me, include)
            continue
        ja, je = ser.to_json(ma, include=include), ser.to_json(me, include=include)
        if ja == je:
            continue  # equal JSON text: equal parts (the common case: records copied by a scan, unchanged)
        # parsed back from the text, exactly as FrozenState.canonical() reads a whole state (NaN -> null)
        pa[name], pe[name] = json.loads(ja), json.loads(je)
    if single:
        return pa.get(next(iter(actual.models)), {}), pe.get(next(iter(actual.models)), {})
    return pa, pe


# ---------------------------------------------------------------------------- what a turn changed

#: What :func:`state_changes` maps a removed key to (reported as ``<absent>``).
ABSENT: Any = _ABSENT


def state_changes(before: Any, after: Any, *, bookkeeping: Iterable[str] = (),
                  set_fields: Iterable[str] = ()) -> dict[str, Any]:
    """What changed from ``before`` to ``after``, as ``{dotted path: new value}`` (docs/reward.md,
    "Turn verdicts: cumulative or delta").

    Dicts are walked key by key: a key only ``after`` has maps to its whole value (added), a key only
    ``before`` has maps to :data:`ABSENT` (removed).  Any other value that differs under the rules of
    :func:`state_diff` (numbers by value, ``set_fields`` lists as multisets, excluded paths inside it
    ignored) is one change at its own path, mapped to its whole new value: a list is never split into
    elements.  Paths matching ``bookkeeping`` never appear.  Equal states give ``{}``.

    Args:
        before, after: canonical states (:meth:`Session.state` form) or frozen states; two frozen states
            grown from one base are compared by record identity (only the parts that differ are read).
        bookkeeping: dotted path patterns (``*`` = any key) left out.
        set_fields: path patterns of lists compared as multisets.
    """
    bookkeeping, set_fields = tuple(bookkeeping), tuple(set_fields)
    if isinstance(before, FrozenState) or isinstance(after, FrozenState):
        parts = _frozen_parts(after, before) if type(before) is type(after) else None
        if parts is not None:
            after, before = parts
        else:
            before = before.canonical() if isinstance(before, FrozenState) else before
            after = after.canonical() if isinstance(after, FrozenState) else after
    skip, sets = _compile(bookkeeping), _compile(set_fields)
    out: dict[str, Any] = {}

    def walk(b: Any, a: Any, path: str) -> None:
        if path and any(p.match(path) for p in skip):
            return
        if isinstance(b, dict) and isinstance(a, dict):
            if _identical(a, b):
                return
            for k in b:
                walk(b[k], a.get(k, _ABSENT), f"{path}.{k}" if path else str(k))
            for k in a:
                if k not in b:
                    walk(_ABSENT, a[k], f"{path}.{k}" if path else str(k))
            return
        if a is _ABSENT and b is _ABSENT:
            return
        if a is not _ABSENT and b is not _ABSENT:
            found: list[StateDiff] = []
            _diff_walk(a, b, path, skip, sets, found, 1)
            if not found:
                return
        out[path or "<root>"] = a

    walk(before, after, "")
    return out


def changes_diff(actual: Mapping[str, Any], expected: Mapping[str, Any], *, bookkeeping: Iterable[str] = (),
                 set_fields: Iterable[str] = (), limit: int = 50) -> list[StateDiff]:
    """Differences between two change sets of :func:`state_changes` (what the agent's turn changed, what the
    ground truth's turn changed).  Empty list ⇔ the same paths changed to equivalent values.

    A path changed on one side only is reported with ``<unchanged>`` on the other; a path changed on both
    sides to different values is compared as :func:`state_diff` compares (numbers by value, set fields,
    excluded paths inside it ignored) and reported at the paths that differ.  At most ``limit`` entries.
    """
    skip, sets = _compile(tuple(bookkeeping)), _compile(tuple(set_fields))
    out: list[StateDiff] = []
    for path, e in expected.items():
        if len(out) >= limit:
            return out
        if path not in actual:
            out.append(StateDiff(path, _short(e), "<unchanged>"))
        elif not (actual[path] is _ABSENT and e is _ABSENT):
            _diff_walk(actual[path], e, path, skip, sets, out, limit)
    for path, a in actual.items():
        if len(out) >= limit:
            break
        if path not in expected:
            out.append(StateDiff(path, "<unchanged>", _short(a)))
    return out
