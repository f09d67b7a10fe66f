"""Copy-on-write state views: many sessions share one parsed state and copy only the records they touch.

docs/architecture.md, "Sessions" (isolation, docs/cases.md C03) and docs/performance.md, "Lazy state".

A *base* is a parsed state model that nobody mutates any more (frozen by convention: only this module
and :mod:`gym_envfactory.session` hold it, and neither writes to it).  A *view* over a base
(:func:`make_view`) is a shallow copy of the root model in which every ``dict`` field is a
:class:`CowDict`: a real ``dict`` holding the base's record objects that replaces a record by a private
copy (:func:`copy_value`) the first time the view hands it out (``[]``, ``get``, ``values``, ``items``,
``pop``, ``setdefault``, ``popitem``, ``copy``).  Keys, ``in`` and ``len`` copy nothing.  The copy is
copy-on-write in turn: a record's dict fields become :class:`CowDict` over the base's values, its lists and
nested models are copied one level.  Every other mutable root field (lists, nested models, sets) is copied
when the view is made.  Because the
collections are real dicts, Pydantic-core serialises a view byte for byte as it serialises the plain
model.

:func:`freeze` turns a live view back into a base in place (O(number of root fields): its collections
become plain dicts again), which is how a fork of a materialised session shares the parent's current
state without serialising it.  :class:`BaseCache` maps state bytes to their parsed base, so sessions
reset, restored or forked to the same bytes share one parse.

What a view cannot protect: a dict obtained with ``dict.values(view)`` or another unbound ``dict`` method
and, on a root model with ``validate_assignment``, a collection re-validated from itself (for such roots
:func:`make_view` copies the collections whose values are not atomic eagerly instead).
"""

from __future__ import annotations

import copy
import enum
import functools
import json
import threading
import types
import typing
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["CowDict", "BaseCache", "FrozenState", "plain_model", "plain_state", "share_cell", "copy_value", "deep_copy_value", "make_view", "freeze", "frozen_copy", "BASE_CACHE"]

M = TypeVar("M", bound=BaseModel)

#: Types whose values are immutable: shared between a base and its views, never copied.
ATOMIC_TYPES: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes, complex, date, datetime, time,
                                           timedelta, Decimal, uuid.UUID, frozenset, range})


def copy_value(value: Any) -> Any:
    """A private copy of one value taken from a base (copy-on-write all the way down): atomic values
    (:data:`ATOMIC_TYPES`, enums) as they are; a dict holding a mutable value becomes a :class:`CowDict`
    over the same values (each copied in turn when handed out), a dict of atomic values a plain copy (so
    reads of it stay native); lists, tuples and sets holding mutable items and Pydantic
    models are copied one level (a model: a new instance with a copied ``__dict__``, fields-set, extra and
    private attributes, no validation), their items with this function; any other object with
    :func:`copy.deepcopy`.  Output: equal to ``value`` and serialised identically; nothing reachable from
    it through its own methods is shared with ``value``.  Only for values of a base (which nobody
    mutates); :func:`deep_copy_value` copies a value someone may still mutate."""
    t = type(value)
    if t in ATOMIC_TYPES:
        return value
    if t is dict or t is CowDict:
        for v in dict.values(value):
            if type(v) not in ATOMIC_TYPES:  # records: copied when handed out
                return CowDict(value) if t is dict else CowDict(dict.items(value))
        return dict.copy(value) if t is dict else dict(dict.items(value))  # atomic values: a plain copy, native reads
    if t is list:
        return [v if type(v) in ATOMIC_TYPES else copy_value(v) for v in value]
    if isinstance(value, BaseModel):
        return _copy_model(value, copy_value)
    return _copy_other(value, copy_value)


def deep_copy_value(value: Any) -> Any:
    """Like :func:`copy_value`, but dicts become plain dicts of copies made now: the result shares nothing
    mutable with ``value`` even if ``value`` is mutated later."""
    t = type(value)
    if t in ATOMIC_TYPES:
        return value
    if t is dict or t is CowDict:
        return {k: v if type(v) in ATOMIC_TYPES else deep_copy_value(v) for k, v in dict.items(value)}
    if t is list:
        return [v if type(v) in ATOMIC_TYPES else deep_copy_value(v) for v in value]
    if isinstance(value, BaseModel):
        return _copy_model(value, deep_copy_value)
    return _copy_other(value, deep_copy_value)


def _copy_other(value: Any, copier: Callable[[Any], Any]) -> Any:
    if isinstance(value, enum.Enum):
        return value
    t = type(value)
    if t is tuple:
        return value if all(type(v) in ATOMIC_TYPES for v in value) else tuple(copier(v) for v in value)
    if t is set:
        return set(value) if all(type(v) in ATOMIC_TYPES for v in value) else copy.deepcopy(value)
    return copy.deepcopy(value)


def _model_like(model: M, d: dict[str, Any], copy_extra: Callable[[Any], Any],
                copy_private: Callable[[Any], Any]) -> M:
    """A new instance of ``model``'s class with field values ``d`` and ``model``'s fields-set, extra and
    private attributes copied by the given copiers; no validation runs."""
    cls = type(model)
    new = cls.__new__(cls)
    _set = object.__setattr__
    _set(new, "__dict__", d)
    _set(new, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    extra = model.__pydantic_extra__
    _set(new, "__pydantic_extra__", None if extra is None else copy_extra(extra))
    private = getattr(model, "__pydantic_private__", None)
    _set(new, "__pydantic_private__", None if private is None else copy_private(private))
    return new


def _copy_model(model: BaseModel, copier: Callable[[Any], Any]) -> BaseModel:
    d = model.__dict__.copy()
    for k, v in model.__dict__.items():
        if type(v) not in ATOMIC_TYPES:
            d[k] = copier(v)
    return _model_like(model, d, copier, deep_copy_value)


def plain_model(cls: type[BaseModel]) -> bool:
    """Whether every instance of the state model ``cls`` is all in its fields, so that a session's view
    can be frozen in place and replaced by a fresh view of it, and reading a record leaves no trace in it:
    no model class reachable from ``cls``'s field types declares private attributes, allows extra fields,
    hooks attribute access or has a property (``property`` or ``functools.cached_property``: a read that
    may store a value in the record), and every field
    type is built from atomic types, enums, literals, models that are plain in turn, and
    ``list``/``dict``/``set``/``frozenset``/``tuple``/``Optional``/unions of those (``Any`` or another
    class could hold anything: not plain).  Decided once per class, from the types alone.

    What depends on it (docs/performance.md, "Shared reads"; docs/reward.md, "Cost"): shared reads are
    used only for plain state models, :meth:`Session.frozen_state` freezes a plain session in place (any
    other is deep-copied, leaving the session untouched, and the env's reward reads it as dicts), and
    :meth:`TaskReference.share_start` seeds the base cache only with a plain model that also equals a
    fresh parse of its bytes.  Those callers ask :func:`plain_state` of an instance."""
    hit = _PLAIN.get(cls)
    if hit is None:
        hit = _PLAIN[cls] = _plain_class(cls, set())
    return hit


def plain_state(model: BaseModel) -> bool:
    """Whether the state ``model`` is all in its fields: its class is plain (:func:`plain_model`) and it
    holds no private storage set at run time (``__pydantic_private__``)."""
    return plain_model(type(model)) and not model.__pydantic_private__


_PLAIN: dict[type, bool] = {}
_PYDANTIC_MRO = frozenset(BaseModel.__mro__)


def _plain_class(cls: type[BaseModel], seen: set[type]) -> bool:
    if cls in seen:
        return True  # a recursive model: decided by the first visit
    seen.add(cls)
    if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
        return False
    if any("__getattribute__" in vars(k) for k in cls.__mro__ if k is not object):
        return False  # attribute access is hooked (an imported API's live instance behind the fields)
    own = [k for k in cls.__mro__ if k not in _PYDANTIC_MRO]  # the model's own classes and mixins
    if any(isinstance(v, (property, functools.cached_property)) for k in own for v in vars(k).values()):
        return False  # a property may cache into the record it reads (a read that leaves a trace)
    return all(_plain_type(f.annotation, seen) for f in cls.model_fields.values())


_CONTAINERS = (list, dict, set, frozenset, tuple, typing.Union, types.UnionType)


def _plain_type(t: Any, seen: set[type]) -> bool:
    if t is None or t is type(None) or t is Ellipsis:
        return True
    origin = typing.get_origin(t)
    if origin is None:
        if not isinstance(t, type):
            return False
        if t in ATOMIC_TYPES or issubclass(t, enum.Enum):
            return True
        return issubclass(t, BaseModel) and _plain_class(t, seen)
    if origin is typing.Literal:
        return True
    if origin is typing.Annotated:
        return _plain_type(typing.get_args(t)[0], seen)
    return origin in _CONTAINERS and all(_plain_type(a, seen) for a in typing.get_args(t))


_OFF: list[bool] = [False]  # the cell of every CowDict not in a view's root (never set)


def share_cell(model: BaseModel) -> list[bool]:
    """The one-item list that suspends copy-on-write for reads on every root collection of the view
    ``model`` at once: set its item to ``True`` around code that never writes to what it reads (a
    read-only tool of a ``shared_reads`` environment), and back to ``False`` after; while it is
    ``True``, ``[]``, ``get``, ``values``, ``items`` and ``copy`` hand out the stored values, which may be
    the base's own records.  Writes still own what they write.  Made on first use; one per view."""
    cell: list[bool] | None = None
    for v in model.__dict__.values():
        if type(v) is CowDict:
            if cell is None:
                cell = v._cell if v._cell is not _OFF else [False]
            v._cell = cell
    return cell if cell is not None else [False]


class CowDict(dict):
    """A ``dict`` whose values start out shared with a base and are copied on first hand-out.

    The storage is the dict itself (so serialisers and ``==`` see the current values); ``_owned`` holds
    the keys whose stored value already belongs to this view (copied, or written by it; ``None`` until the
    first).  ``CowDict(d)`` runs in C (no Python ``__init__``): every value of ``d`` starts out shared.  A
    value is copied with :func:`copy_value` the first time it is returned; a written value is owned as
    written.  Copies (``copy()``, ``dict(view)``, ``{**view}``, ``view | other``) are plain dicts of owned
    values; :func:`copy.deepcopy` and pickling give a plain dict too.
    """

    _owned: set[Any] | None = None
    #: A key was removed (``pop``, ``del``, ``clear``): with ``_owned`` still ``None``, the dict is not
    #: what it was made from any more.
    _touched: bool = False
    #: The base's dict a root collection of a view was made from (:func:`make_view`), or ``None``.  While
    #: :meth:`pristine`, the view holds exactly its items: a digest may reuse what it computed for it.
    _origin: dict[Any, Any] | None = None
    #: A one-item list shared by the root collections of one view (:func:`share_cell`): while its item
    #: is ``True`` (a shared-reads tool runs), reads hand out the stored values as they are, shared with
    #: the base, instead of copying them (docs/performance.md, "Shared reads").
    _cell: list[bool] = _OFF

    # -- reads that hand out values
    def _own(self, key: Any, value: Any) -> Any:
        if type(value) not in ATOMIC_TYPES:
            value = copy_value(value)
            dict.__setitem__(self, key, value)
        owned = self._owned
        if owned is None:
            self._owned = {key}
        else:
            owned.add(key)
        return value

    def own_all(self) -> None:
        """Copy every value not owned yet (what ``values()``/``items()`` need before handing out a view)."""
        owned = self._owned or ()
        if len(owned) == dict.__len__(self):
            return
        for k, v in list(dict.items(self)):
            if k not in owned and type(v) not in ATOMIC_TYPES:
                dict.__setitem__(self, k, copy_value(v))
        self._owned = set(dict.keys(self))

    def __getitem__(self, key: Any) -> Any:
        """``view[key]``: the owned value (copied now if still shared)."""
        value = dict.__getitem__(self, key)
        owned = self._owned
        if owned is not None and key in owned or self._cell[0]:
            return value
        return self._own(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        """``view.get(key, default)``: as ``[]``, or ``default`` when absent."""
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            return default
        owned = self._owned
        if owned is not None and key in owned or self._cell[0]:
            return value
        return self._own(key, value)

    def pristine(self) -> dict[Any, Any] | None:
        """The base dict this root collection was made from, while it still holds exactly that dict's
        items and has handed none out (nothing read, written or removed); else ``None``."""
        return self._origin if self._owned is None and not self._touched else None

    def _disown(self, key: Any) -> bool:
        """Forget ``key`` (removed); whether its value was owned."""
        self._touched = True
        owned = self._owned
        if owned is not None and key in owned:
            owned.discard(key)
            return True
        return False

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """``view.setdefault(key, default)``: the owned value, or ``default`` stored and owned."""
        if dict.__contains__(self, key):
            return self[key]
        self[key] = default
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        """``view.pop(key[, default])``: the value removed, a private copy if it was shared."""
        if not dict.__contains__(self, key):
            return dict.pop(self, key, *default)
        value = dict.pop(self, key)
        return value if self._disown(key) else copy_value(value)

    def popitem(self) -> tuple[Any, Any]:
        """``view.popitem()``: the last pair removed, its value a private copy if it was shared."""
        key, value = dict.popitem(self)
        return key, value if self._disown(key) else copy_value(value)

    def values(self) -> Any:
        """``view.values()``: every value owned first (copies the shared ones once), then the dict's view."""
        if not self._cell[0]:
            self.own_all()
        return dict.values(self)

    def items(self) -> Any:
        """``view.items()``: every value owned first (copies the shared ones once), then the dict's view."""
        if not self._cell[0]:
            self.own_all()
        return dict.items(self)

    def __iter__(self) -> Iterator[Any]:
        """Keys (no copy).  Defined so that ``dict(view)`` and ``{**view}`` go through ``[]``."""
        return dict.__iter__(self)

    def copy(self) -> dict[Any, Any]:
        """A plain shallow copy holding this view's (owned) values."""
        if not self._cell[0]:
            self.own_all()
        return dict(dict.items(self))

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        """A plain dict of deep copies (nothing shared with the base or the view)."""
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in dict.items(self)}

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled as a plain dict of the current values."""
        return (dict, (dict(dict.items(self)),))

    def __or__(self, other: Any) -> Any:
        """``view | other``: a plain dict."""
        if not isinstance(other, dict):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __ror__(self, other: Any) -> Any:
        """``other | view``: a plain dict."""
        if not isinstance(other, dict):
            return NotImplemented
        new = dict(other)
        new.update(self.copy())
        return new

    # -- writes: the stored value is this view's own
    def __setitem__(self, key: Any, value: Any) -> None:
        """``view[key] = value``: stored and owned."""
        dict.__setitem__(self, key, value)
        owned = self._owned
        if owned is None:
            self._owned = {key}
        else:
            owned.add(key)

    def __delitem__(self, key: Any) -> None:
        """``del view[key]``."""
        dict.__delitem__(self, key)
        self._disown(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``view.update(...)``: like ``dict.update``; the values written are owned."""
        new = dict(*args, **kwargs)
        dict.update(self, new)
        self._owned = set(new) if self._owned is None else self._owned | new.keys()

    def __ior__(self, other: Any) -> CowDict:
        """``view |= other``."""
        self.update(other)
        return self

    def clear(self) -> None:
        """``view.clear()``."""
        dict.clear(self)
        self._owned = None
        self._touched = True


def _eager_fields(cls: type[BaseModel]) -> bool:
    return bool(cls.model_config.get("validate_assignment"))


def make_view(base: M) -> M:
    """A copy-on-write view of ``base`` (a parsed state model nobody mutates): a new root instance whose
    ``dict`` fields are :class:`CowDict` over the base's dicts and whose other mutable fields are copied
    (:func:`copy_value`).  Cost: one C-level dict copy per collection (pointers, not records) plus the
    copies of non-dict mutable fields.  On a root with ``validate_assignment`` a collection whose values
    are not all atomic is copied eagerly (assigning a collection to itself re-validates it natively)."""
    eager = _eager_fields(type(base))
    d: dict[str, Any] = {}
    for k, v in base.__dict__.items():
        t = type(v)
        if t in ATOMIC_TYPES:
            d[k] = v
        elif (t is dict or t is CowDict) and eager and not all(type(x) in ATOMIC_TYPES for x in dict.values(v)):
            d[k] = deep_copy_value(v)
        else:
            d[k] = copy_value(v)  # a dict of records: a CowDict over the base's values
            if t is dict and type(d[k]) is CowDict:
                d[k]._origin = v
    return _model_like(base, d, copy_value, copy_value)


def freeze(model: M) -> M:
    """Make ``model`` (a view or plain model no one else holds) a base, in place: its :class:`CowDict`
    fields become plain dicts holding the same objects, and so does every :class:`CowDict` inside what
    the view copied or wrote (its owned records, its other mutable root fields), so that a base holds no
    copy-on-write dict a later reader could fill.  The caller must not mutate it afterwards (make a
    :func:`make_view` of it instead).  O(number of records) pointer copies plus the size of what the view
    owned; no record copied.  Returns ``model``."""
    d = model.__dict__
    for k, v in list(d.items()):
        if type(v) is CowDict:
            d[k] = _settled(v)
        elif type(v) not in ATOMIC_TYPES:
            _settle(v)  # copied with the view: it may hold copy-on-write dicts
    return model


def _settled(view: CowDict) -> dict[Any, Any]:
    """A plain dict of ``view``'s values, the owned ones settled (:func:`_settle`); the shared ones are a
    base's already."""
    _settle_items(view, [(k, dict.__getitem__(view, k)) for k in view._owned or () if dict.__contains__(view, k)],
                  dict.__setitem__)
    return dict(dict.items(view))


def _settle(value: Any) -> None:
    """Replace, in place, every :class:`CowDict` inside ``value`` (a value a view owns) by a plain dict."""
    if isinstance(value, BaseModel):
        _settle_items(value.__dict__, list(value.__dict__.items()), dict.__setitem__)
    elif type(value) is list:
        _settle_items(value, list(enumerate(value)), list.__setitem__)
    elif type(value) is dict:
        _settle_items(value, list(value.items()), dict.__setitem__)
    elif type(value) is tuple:  # cannot be changed: only what it holds
        _settle_items(value, list(enumerate(value)), None)


def _settle_items(target: Any, items: list[tuple[Any, Any]], store: Callable[[Any, Any, Any], None] | None) -> None:
    for k, v in items:
        if type(v) is CowDict:
            settled = _settled(v)
            if store is not None:
                store(target, k, settled)
        elif type(v) not in ATOMIC_TYPES:
            _settle(v)


def frozen_copy(model: M) -> M:
    """A new base equal to ``model`` sharing nothing mutable with it (:func:`copy_value`): for a model
    that someone else may still mutate (handed out by ``Session.state_model``)."""
    return deep_copy_value(model)


class BaseCache:
    """A process-wide bounded LRU map ``(state model class, state JSON bytes) -> parsed base``.

    Args:
        max_entries: bases kept at most.
        max_bytes: total length of the JSON bytes of the bases kept, at most (a parsed base takes about
            8 times its JSON size in memory: HotelBooking's 272 KiB large state parses to ~2.2 MiB, so the
            default 16 MiB keeps ~140 MiB of parsed bases at most); a state longer than this is parsed but
            not kept.

    Thread-safe (one lock around lookups and inserts; a parse runs outside it, so two threads missing on
    the same bytes may both parse and the second result wins).  Keys hold the bytes themselves, so there
    are no hash collisions; Python caches a bytes object's hash, so a session resetting to the same
    bytes object pays one hash ever.
    """

    def __init__(self, max_entries: int = 32, max_bytes: int = 16 * 1024 * 1024) -> None:
        """An empty cache with the given bounds."""
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[type[BaseModel], bytes], BaseModel] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, model_cls: type[M], raw: bytes, parse: Callable[[bytes], M]) -> M:
        """The base for ``raw``: cached, or ``parse(raw)`` (which may raise; nothing is cached then),
        kept if it fits the bounds.  The caller must not mutate the result (make a view of it)."""
        key = (model_cls, raw)
        with self._lock:
            base = self._entries.get(key)
            if base is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return base  # type: ignore[return-value]  # keyed by model_cls, so an M
            self.misses += 1
        base = parse(raw)
        size = len(raw)
        if size <= self.max_bytes and self.max_entries > 0:
            with self._lock:
                if key not in self._entries:
                    self._entries[key] = base
                    self._bytes += size
                while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                    (_, old_raw), _ = self._entries.popitem(last=False)
                    self._bytes -= len(old_raw)
        return base

    def put(self, model_cls: type[M], raw: bytes, base: M) -> None:
        """Make ``base`` (a parsed state equal to ``raw``, that nobody mutates any more) the base for
        ``raw``, replacing any other (sessions holding that one keep it), if it fits the bounds."""
        if len(raw) > self.max_bytes or self.max_entries <= 0:
            return
        key = (model_cls, raw)
        with self._lock:
            if key in self._entries:
                self._entries[key] = base
                self._entries.move_to_end(key)
                return
            self._entries[key] = base
            self._bytes += len(raw)
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                (_, old_raw), _ = self._entries.popitem(last=False)
                self._bytes -= len(old_raw)

    def clear(self) -> None:
        """Drop every cached base (sessions holding one keep it)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        """Bases kept."""
        return len(self._entries)

    def keys(self) -> Iterable[tuple[type[BaseModel], bytes]]:
        """The cached keys, oldest first (a snapshot)."""
        with self._lock:
            return list(self._entries)


#: The cache every :class:`~gym_envfactory.session.Session` in this process shares.
BASE_CACHE = BaseCache()


class FrozenState:
    """A session's states at one moment as frozen bases, one per environment (docs/reward.md, "Cost").

    Made by :meth:`~gym_envfactory.session.Session.frozen_state` in O(records' pointers), with no
    serialisation.  Records the session never changed are the very objects of the base it started from,
    so two frozen states grown from one base (an episode's and its task's ground truth) are compared by
    object identity, and only the records that differ are serialised
    (:func:`~gym_envfactory.reward.state_diff`).  Immutable: the models are bases nobody mutates, so a
    copy (``copy.copy``, ``copy.deepcopy``) is the object itself.

    Args:
        models: environment name -> frozen state model, in the session's environment order.
    """

    __slots__ = ("models", "_canonical", "_equal")

    def __init__(self, models: dict[str, BaseModel]) -> None:
        """Hold ``models`` (which the caller must never mutate afterwards)."""
        self.models = dict(models)
        self._canonical: Any = None
        self._equal: list[tuple[FrozenState, Any]] = []

    def known_equal(self, other: FrozenState, key: Any) -> bool:
        """Whether :meth:`note_equal` recorded ``other`` (the very object) as equal to this state under
        the comparison options ``key`` (both states are immutable, so the verdict still holds)."""
        return any(o is other and k == key for o, k in self._equal)

    def note_equal(self, other: FrozenState, key: Any) -> None:
        """Record that ``other`` compared equal to this state under the options ``key`` (the last four
        such verdicts are kept: an episode compares its final state with the one its last turn ended on)."""
        self._equal = [*self._equal[-3:], (other, key)]

    def canonical(self) -> Any:
        """The canonical JSON-compatible form, as :meth:`Session.state` returns it (one environment: its
        state dict; several: ``{env_name: state dict}``).  Computed once (one serialisation per
        environment) and cached: treat the result as read-only."""
        if self._canonical is None:
            parsed = {n: json.loads(m.model_dump_json()) for n, m in self.models.items()}
            self._canonical = next(iter(parsed.values())) if len(parsed) == 1 else parsed
        return self._canonical

    def __copy__(self) -> FrozenState:
        """The object itself (immutable)."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenState:
        """The object itself (immutable)."""
        return self

    def __repr__(self) -> str:
        """``FrozenState(env, ...)``."""
        return f"FrozenState({', '.join(self.models)})"
