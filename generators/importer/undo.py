"""Undo of one write call on a live API instance, in place (issue 26, defect 1).

This module is ``generators/importer/undo.py``; the importer copies it byte for byte into every imported
package as ``_undo.py`` beside ``_bridge.py`` (which uses it), so a package runs without the importer.

A failed write call must change nothing.  Rebuilding the instance from the rollback point and replaying
the writes since costs time in proportion to the state; instead :func:`begin` opens a :class:`Journal`
before each write call and the call's changes are undone in place (:meth:`Journal.undo`), at a cost in
proportion to what the call touched:

* the instance's attribute bindings are copied (``self.mileage += km`` is undone by rebinding);
* its ``dict``/``list``/``set``/``defaultdict`` attributes become :class:`JournalDict`,
  :class:`JournalList`, :class:`JournalSet` (real subclasses: ``isinstance``, ``==``, ``json``, Pydantic
  and ``repr`` see the same data).  While a journal is open they record the previous value of each key
  written (a deletion or any list/set change other than ``append``/``extend``/``add`` copies the
  container's slots once, C-level), and a mutable value they hand out (``[]``, ``get``, ``values()``,
  iteration...) gets its contents saved first (:meth:`Journal.protect`: the object graph under it,
  shallow per object, identity kept, so aliases stay aliases);
* every other mutable attribute value (a record, a ``random.Random``, a nested structure) is saved the
  same way when the journal opens.

The journal is *exact* only while everything the call could reach was saved: an object it cannot save
in place (a lock, a file, an iterator), an instance without ``__dict__``, or more than ``budget`` objects
saved by one call make it inexact, and the session then falls back to its exact rebuild-and-replay
rollback.  What a journal cannot see: changes made through an unbound ``dict``/``list`` method
(``dict.__setitem__(d, k, v)``), by C code that bypasses a subclass's methods (``heapq`` on an attribute
list), or to objects reachable only from outside the instance (module globals, class attributes).

It imports only the standard library.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import enum
import random
import re
import types
import uuid
from collections import OrderedDict, defaultdict, deque
from collections.abc import Iterable
from typing import Any

__all__ = ["Journal", "JournalDict", "JournalDefaultDict", "JournalList", "JournalSet", "begin", "BUDGET"]

#: Objects one call may save before its journal gives up (inexact: the session replays instead).
BUDGET = 4096
_MISSING: Any = object()
_ATOMIC = frozenset({str, int, float, bool, type(None), bytes, complex, datetime.date, datetime.datetime,
                     datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal, uuid.UUID, frozenset,
                     range, type(Ellipsis), type(NotImplemented), re.Pattern, re.Match})
#: Objects that are code, not state: never saved.
_CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
         types.CodeType, staticmethod, classmethod, property)


_SKIP = (enum.Enum, *_CODE)


def _atomic(value: Any) -> bool:
    return type(value) in _ATOMIC or isinstance(value, _SKIP)


class Journal:
    """What one write call changed on ``api`` and how to put it back.

    Attributes:
        exact: everything the call could reach was saved; :meth:`undo` restores the instance exactly.
        budget: objects :meth:`protect` may still save before the journal turns inexact.
    """

    __slots__ = ("api", "root", "entries", "seen", "keys", "whole", "containers", "exact", "budget", "spent")

    def __init__(self, api: Any, budget: int | None = None) -> None:
        self.api = api
        self.root: dict[str, Any] = {}
        self.entries: list[tuple[Any, ...]] = []  # undo records, applied in reverse
        self.seen: dict[int, Any] = {id(api): api}  # saved objects (kept alive: ids stay unique)
        self.keys: set[tuple[int, Any]] = set()  # (container id, key) whose old value is recorded
        self.whole: set[int] = set()  # containers whose slots were copied whole
        self.containers: list[Any] = []  # journal containers attached to this journal
        self.exact = True
        self.budget = BUDGET if budget is None else budget
        self.spent = False  # over budget (the instance's later calls skip journaling)

    # ---------------------------------------------------------------- saving
    def protect(self, value: Any) -> None:
        """Save the contents of ``value`` and of every mutable object under it (shallow per object, in
        place: nothing is replaced), once per call.  Turns the journal inexact for an object it cannot
        restore in place, or past the budget."""
        self.protect_all([value])

    def protect_all(self, values: Iterable[Any]) -> None:
        """:meth:`protect` each of ``values`` (not the iterable itself)."""
        stack = [v for v in values if not _atomic(v)]
        while stack and self.exact:
            obj = stack.pop()
            if _atomic(obj) or id(obj) in self.seen:
                continue
            if getattr(obj, "_j", None) is self:  # a journal container of this call records itself
                continue
            self.seen[id(obj)] = obj
            self.budget -= 1
            if self.budget < 0:
                self.exact, self.spent = False, True
                return
            stack.extend(self._save(obj))

    def _save(self, obj: Any) -> Iterable[Any]:
        """Record how to restore ``obj``'s own contents; returns the objects it holds."""
        t = type(obj)
        if isinstance(obj, dict):
            saved = list(dict.items(obj))
            self.entries.append((_restore_mapping if isinstance(obj, OrderedDict) else _restore_dict, obj, saved))
            for k, v in saved:
                yield k
                yield v
        elif isinstance(obj, list):
            saved_list = list.copy(obj)
            self.entries.append((_restore_list, obj, saved_list))
            yield from saved_list
        elif isinstance(obj, (set, deque)):
            saved_items = list(obj)
            self.entries.append((_restore_set if isinstance(obj, set) else _restore_deque, obj, saved_items))
            yield from saved_items
        else:
            t = object
        if t is not object:  # a container: a subclass's own attributes too
            if t not in (dict, list, set, deque, defaultdict, OrderedDict):
                yield from self._save_attrs(obj, required=False)
            return
        if isinstance(obj, tuple):  # cannot change: only what it holds
            yield from obj
            return
        if isinstance(obj, random.Random):
            self.entries.append((_restore_random, obj, obj.getstate()))
        yield from self._save_attrs(obj, required=not isinstance(obj, random.Random))

    def _save_attrs(self, obj: Any, required: bool = True) -> Iterable[Any]:
        """Save an object's ``__dict__`` and slots (and a Pydantic model's private storage)."""
        found = False
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict):
            found = True
            items = list(d.items())
            self.entries.append((_restore_dict, d, items))
            for _, v in items:
                yield v
        slots = _all_slots(type(obj))
        if slots:
            found = True
            values = [(s, getattr(obj, s, _MISSING)) for s in slots]
            self.entries.append((_restore_slots, obj, values))
            for _, v in values:
                if v is not _MISSING:
                    yield v
        if not found and required:
            self.exact = False  # a C object (lock, iterator, file...): cannot be put back in place

    def record_key(self, container: Any, key: Any) -> None:
        """Before ``container[key]`` changes: remember its value (or its absence), once per call."""
        cid = id(container)
        if cid in self.whole or (cid, key) in self.keys:
            return
        self.keys.add((cid, key))
        self.entries.append((_restore_key, container, key, dict.get(container, key, _MISSING)))

    def record_whole(self, container: Any) -> None:
        """Before a change a key record cannot undo (a deletion, a reorder): copy the slots once."""
        cid = id(container)
        if cid in self.whole:
            return
        self.whole.add(cid)
        if isinstance(container, dict):
            self.entries.append((_restore_dict, container, list(dict.items(container))))
        elif isinstance(container, list):
            self.entries.append((_restore_list, container, list.copy(container)))
        else:
            self.entries.append((_restore_set, container, list(container)))

    def record_length(self, container: list) -> None:
        """Before ``append``/``extend``: remember the length (undone by truncating)."""
        if id(container) not in self.whole:
            self.entries.append((_truncate, container, len(container)))

    # ---------------------------------------------------------------- closing
    def close(self) -> None:
        """Detach the journal from its containers (the call is over; undo records are kept)."""
        for c in self.containers:
            c._j = None
        self.containers = []

    def undo(self) -> None:
        """Put the instance back as it was when the journal opened (only meaningful when :attr:`exact`)."""
        self.close()
        for entry in reversed(self.entries):
            entry[0](*entry[1:])
        attrs = vars(self.api)
        attrs.clear()
        attrs.update(self.root)


def _slots_of(klass: type) -> tuple[str, ...]:
    """The slot attribute names ``klass`` itself declares (private names mangled)."""
    slots = klass.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    return tuple(f"_{klass.__name__.lstrip('_')}{s}" if s.startswith("__") and not s.endswith("__") else s
                 for s in slots if s not in ("__dict__", "__weakref__", "_j"))


_SLOTS: dict[type, tuple[str, ...]] = {}


def _all_slots(cls: type) -> tuple[str, ...]:
    """Every slot attribute of ``cls``'s instances (cached per class)."""
    out = _SLOTS.get(cls)
    if out is None:
        out = _SLOTS[cls] = tuple(s for k in cls.__mro__ for s in _slots_of(k))
    return out


def _restore_dict(d: dict, items: list) -> None:
    dict.clear(d)
    dict.update(d, items)


def _restore_mapping(d: Any, items: list) -> None:
    d.clear()
    d.update(items)


def _restore_list(lst: list, items: list) -> None:
    list.__setitem__(lst, slice(None), items)


def _restore_set(s: set, items: list) -> None:
    set.clear(s)
    set.update(s, items)


def _restore_deque(d: deque, items: list) -> None:
    d.clear()
    d.extend(items)


def _restore_random(r: random.Random, state: Any) -> None:
    r.setstate(state)


def _restore_slots(obj: Any, values: list) -> None:
    for name, v in values:
        if v is _MISSING:
            try:
                object.__delattr__(obj, name)
            except AttributeError:
                pass
        else:
            object.__setattr__(obj, name, v)


def _restore_key(d: dict, key: Any, old: Any) -> None:
    if old is _MISSING:
        dict.pop(d, key, None)
    else:
        dict.__setitem__(d, key, old)


def _truncate(lst: list, n: int) -> None:
    list.__delitem__(lst, slice(n, None))


# ---------------------------------------------------------------- journal containers
#: ``dict`` for the mixin (its methods take the subclass instance).
_dict: Any = dict


class _DictMixin:
    """The journaling methods of :class:`JournalDict` and :class:`JournalDefaultDict`."""

    __slots__ = ()
    _j: Journal | None

    def __getitem__(self, key: Any) -> Any:
        value = _dict.__getitem__(self, key)
        if self._j is not None and not _atomic(value):
            self._j.protect(value)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        """``dict.get`` (a mutable value is saved first while a journal is open)."""
        value = _dict.get(self, key, default)
        if self._j is not None and not _atomic(value):
            self._j.protect(value)
        return value

    def values(self) -> Any:
        """``dict.values`` (every mutable value saved first while a journal is open)."""
        if self._j is not None:
            self._j.protect_all(_dict.values(self))
        return _dict.values(self)

    def items(self) -> Any:
        """``dict.items`` (every mutable value saved first while a journal is open)."""
        if self._j is not None:
            self._j.protect_all(_dict.values(self))
        return _dict.items(self)

    def __iter__(self) -> Any:  # a Python __iter__: dict(d), {**d}, update(d) go through keys() and d[k]
        return _dict.__iter__(self)

    def copy(self) -> dict:
        """A plain ``dict`` with the same values (saved first while a journal is open)."""
        if self._j is not None:
            self._j.protect_all(_dict.values(self))
        return dict(_dict.items(self))

    def __or__(self, other: Any) -> Any:
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other: Any) -> Any:
        out = dict(other)
        out.update(self.copy())
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._j is not None:
            self._j.record_key(self, key)
        _dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        if self._j is not None:
            self._j.record_whole(self)
        _dict.__delitem__(self, key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """``dict.setdefault`` (journaled)."""
        if self._j is not None:
            self._j.record_key(self, key)
        value = _dict.setdefault(self, key, default)
        if self._j is not None and not _atomic(value):
            self._j.protect(value)
        return value

    def pop(self, key: Any, *default: Any) -> Any:
        """``dict.pop`` (journaled)."""
        if self._j is not None:
            self._j.record_whole(self)
            if _dict.__contains__(self, key):
                self._j.protect(_dict.__getitem__(self, key))
        return _dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        """``dict.popitem`` (journaled)."""
        if self._j is not None:
            self._j.record_whole(self)
        key, value = _dict.popitem(self)
        if self._j is not None:
            self._j.protect(value)
        return key, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update`` (journaled)."""
        new = dict(*args, **kwargs)
        if self._j is not None:
            for k in new:
                self._j.record_key(self, k)
        _dict.update(self, new)

    def __ior__(self, other: Any) -> Any:
        self.update(other)
        return self

    def clear(self) -> None:
        """``dict.clear`` (journaled)."""
        if self._j is not None:
            self._j.record_whole(self)
        _dict.clear(self)


class JournalDict(_DictMixin, dict):
    """A ``dict`` attribute of a live instance that records a write call's changes (module docstring)."""

    __slots__ = ("_j",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        self._j = None

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (), None, None, iter(dict.items(self)))

    def __deepcopy__(self, memo: dict) -> JournalDict:
        new = JournalDict()
        memo[id(self)] = new
        dict.update(new, [(copy.deepcopy(k, memo), copy.deepcopy(v, memo)) for k, v in dict.items(self)])
        return new


class JournalDefaultDict(_DictMixin, defaultdict):  # type: ignore[misc]
    """A ``defaultdict`` attribute of a live instance that records a write call's changes."""

    __slots__ = ("_j",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        defaultdict.__init__(self, *args, **kwargs)
        self._j = None

    def __missing__(self, key: Any) -> Any:
        if self._j is not None:
            self._j.record_key(self, key)
        return defaultdict.__missing__(self, key)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (self.default_factory,), None, None, iter(dict.items(self)))

    def __repr__(self) -> str:
        return defaultdict.__repr__(self).replace(type(self).__name__, "defaultdict", 1)


def _whole(name: str) -> Any:
    real = getattr(list, name)

    def method(self: JournalList, *args: Any, **kwargs: Any) -> Any:
        if self._j is not None:
            self._j.record_whole(self)
        return real(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``list.{name}`` (journaled)."
    return method


class JournalList(list):
    """A ``list`` attribute of a live instance that records a write call's changes (module docstring)."""

    __slots__ = ("_j",)

    def __init__(self, *args: Any) -> None:
        list.__init__(self, *args)
        self._j: Journal | None = None

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (), None, iter(list.__iter__(self)))

    def __deepcopy__(self, memo: dict) -> JournalList:
        new = JournalList()
        memo[id(self)] = new
        list.extend(new, [copy.deepcopy(v, memo) for v in list.__iter__(self)])
        return new

    def __getitem__(self, index: Any) -> Any:
        value = list.__getitem__(self, index)
        if self._j is not None and not _atomic(value):
            self._j.protect(value)
        return value

    def __iter__(self) -> Any:
        if self._j is not None:
            self._j.protect_all(list.__iter__(self))
        return list.__iter__(self)

    def __reversed__(self) -> Any:
        if self._j is not None:
            self._j.protect_all(list.__iter__(self))
        return list.__reversed__(self)

    def copy(self) -> list:
        """A plain ``list`` with the same items (saved first while a journal is open)."""
        if self._j is not None:
            self._j.protect_all(list.__iter__(self))
        return list.copy(self)

    def __add__(self, other: Any) -> Any:
        return self.copy() + list(other)

    def __mul__(self, n: Any) -> Any:
        return self.copy() * n

    __rmul__ = __mul__

    def append(self, value: Any) -> None:
        """``list.append`` (journaled)."""
        if self._j is not None:
            self._j.record_length(self)
        list.append(self, value)

    def extend(self, values: Any) -> None:
        """``list.extend`` (journaled)."""
        if self._j is not None:
            self._j.record_length(self)
        list.extend(self, values)

    def __iadd__(self, values: Any) -> Any:
        self.extend(values)
        return self

    def pop(self, *index: Any) -> Any:
        """``list.pop`` (journaled)."""
        if self._j is not None:
            self._j.record_whole(self)
        value = list.pop(self, *index)
        if self._j is not None:
            self._j.protect(value)
        return value

    insert = _whole("insert")
    remove = _whole("remove")
    sort = _whole("sort")
    reverse = _whole("reverse")
    clear = _whole("clear")
    __setitem__ = _whole("__setitem__")
    __delitem__ = _whole("__delitem__")
    __imul__ = _whole("__imul__")


def _set_whole(name: str) -> Any:
    real = getattr(set, name)

    def method(self: JournalSet, *args: Any, **kwargs: Any) -> Any:
        if self._j is not None:
            self._j.record_whole(self)
        return real(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``set.{name}`` (journaled)."
    return method


class JournalSet(set):
    """A ``set`` attribute of a live instance that records a write call's changes (module docstring;
    its items are hashable, so they are not saved when handed out)."""

    __slots__ = ("_j",)

    def __init__(self, *args: Any) -> None:
        set.__init__(self, *args)
        self._j: Journal | None = None

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (list(set.__iter__(self)),))

    def __repr__(self) -> str:
        return "{" + ", ".join(map(repr, set.__iter__(self))) + "}" if self else "set()"

    def add(self, value: Any) -> None:
        """``set.add`` (journaled)."""
        j = self._j
        if j is not None and id(self) not in j.whole and not set.__contains__(self, value):
            j.entries.append((set.discard, self, value))
        set.add(self, value)

    discard = _set_whole("discard")
    remove = _set_whole("remove")
    pop = _set_whole("pop")
    clear = _set_whole("clear")
    update = _set_whole("update")
    difference_update = _set_whole("difference_update")
    intersection_update = _set_whole("intersection_update")
    symmetric_difference_update = _set_whole("symmetric_difference_update")
    __ior__ = _set_whole("__ior__")
    __iand__ = _set_whole("__iand__")
    __isub__ = _set_whole("__isub__")
    __ixor__ = _set_whole("__ixor__")


_JOURNALED = (JournalDict, JournalDefaultDict, JournalList, JournalSet)


def _journaled(value: Any) -> Any:
    """``value`` as a journal container (the same items in the same order), or None when it is not a
    plain container or a copy would iterate in another order (a set whose table has another size)."""
    t = type(value)
    if t is dict:
        return JournalDict(value)
    if t is list:
        return JournalList(value)
    if t is defaultdict:
        return JournalDefaultDict(value.default_factory, value)
    if t is set:
        new = JournalSet(value)
        return new if list(set.__iter__(new)) == list(value) else None
    return None


def begin(api: Any, budget: int | None = None) -> Journal:
    """Open a journal on ``api`` before a write call: its plain container attributes become journal
    containers (once; the same data), the containers are attached, every other mutable attribute value
    is saved (:meth:`Journal.protect`).  Close it after the call (:meth:`Journal.close`); undo it
    (:meth:`Journal.undo`) when the call failed and the journal is :attr:`~Journal.exact`."""
    journal = Journal(api, BUDGET if budget is None else budget)
    attrs = getattr(api, "__dict__", None)
    if not isinstance(attrs, dict):
        journal.exact = False
        return journal
    converted: dict[int, Any] = {}
    plain: list[Any] = []
    for name, value in list(attrs.items()):
        if _atomic(value):
            continue
        t = type(value)
        if t not in _JOURNALED:
            new = converted.get(id(value), _MISSING)
            if new is _MISSING:
                new = converted[id(value)] = _journaled(value)
            if new is not None:
                attrs[name] = value = new
                t = type(value)
        if t in _JOURNALED:
            if value._j is not journal:
                value._j = journal
                journal.containers.append(value)
                journal.seen[id(value)] = value
        else:
            plain.append(value)
    slots = _all_slots(type(api))
    if slots:  # a slotted class (a Pydantic model's own storage): its slot values too
        values = [(s, getattr(api, s, _MISSING)) for s in slots]
        journal.entries.append((_restore_slots, api, values))
        plain.extend(v for _, v in values if v is not _MISSING)
    journal.protect_all(plain)
    journal.root = dict(attrs)
    return journal
