"""Copy-on-write session states (issue 10 part 2; docs/architecture.md, "Sessions"; docs/cases.md C03).

Sessions share parsed bases and copy records on first hand-out (gym_envfactory/environment/cow.py).  These
tests check that nothing a session does through a view reaches a base, a parent, a sibling or a child,
that a view serialises byte for byte like the plain model, and (hypothesis) that any interleaving of
calls and forks leaves every session in the state a solo replay of its own calls reaches.
"""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym_envfactory import Session, ToolError, define_environment, get_environment, tool
from gym_envfactory.environment import cow
from gym_envfactory.environment.catalog import list_environments
from gym_envfactory.environment.cow import BaseCache, CowDict, copy_value, freeze, make_view
from tests.shipped import call_pool

ENVS = sorted(list_environments())  # the whole catalog


# ---------------------------------------------------------------- a small environment to poke at
class Rec(BaseModel):
    qty: int = 0
    tags: list[str] = Field(default_factory=list)
    meta: dict[str, list[int]] = Field(default_factory=dict)


class Inner(BaseModel):
    level: int = 0
    marks: list[int] = Field(default_factory=list)


class Store(BaseModel):
    counter: int = 0
    recs: dict[str, Rec] = Field(default_factory=lambda: {k: Rec(qty=i, tags=[k], meta={"m": [i]})
                                                          for i, k in enumerate("abcde")})
    log: list[Rec] = Field(default_factory=lambda: [Rec(qty=9)])
    inner: Inner = Field(default_factory=Inner)
    plain: dict[str, int] = Field(default_factory=lambda: {"x": 1})


class Guarded(BaseModel):
    model_config = ConfigDict(validate_assignment=True)
    counter: int = 0
    recs: dict[str, Rec] = Field(default_factory=lambda: {"a": Rec(qty=1)})


@tool
def bump(state: Store, *, key: str) -> int:
    """Mutates a record in place (through ``[]``)."""
    r = state.recs[key]
    r.qty += 1
    r.tags.append("bump")
    r.meta.setdefault("m", []).append(r.qty)
    return r.qty


@tool
def bump_all(state: Store) -> int:
    """Mutates every record through ``values()``."""
    for r in state.recs.values():
        r.qty += 10
    return len(state.recs)


@tool
def bump_then_fail(state: Store, *, key: str) -> int:
    """Writes into a shared record, then refuses."""
    state.recs[key].qty += 100
    state.recs[key].tags.clear()
    state.counter += 1
    raise ToolError("refused after writing", code="refused")


@tool
def rename(state: Store, *, key: str, new: str) -> int:
    """Moves a record with ``pop`` and writes into it."""
    r = state.recs.pop(key)
    r.qty = -1
    state.recs[new] = r
    return r.qty


@tool
def touch_root(state: Store) -> int:
    """Mutates the root's list and nested model."""
    state.log[0].qty += 1
    state.log.append(Rec(qty=1))
    state.inner.marks.append(1)
    state.counter += 1
    return state.counter


@tool(read_only=True)
def total(state: Store) -> int:
    """Sum of quantities (a scan)."""
    return sum(r.qty for r in state.recs.values())


@tool
def guarded_reassign(state: Guarded) -> int:
    """Re-assigns the collection to itself (validated) and mutates a record of the result."""
    state.recs = state.recs
    state.recs["a"].qty += 1
    return state.recs["a"].qty


@pytest.fixture(scope="module")
def store():
    return define_environment("CowStore", Store, [bump, bump_all, bump_then_fail, rename, touch_root, total],
                              register=False)


def _base(model: BaseModel) -> BaseModel:
    return model.model_validate_json(model.model_dump_json())


# ---------------------------------------------------------------- CowDict: every way of getting a record
GETTERS = {
    "getitem": lambda d: d["a"],
    "get": lambda d: d.get("a"),
    "values": lambda d: next(iter(d.values())),
    "items": lambda d: next(iter(d.items()))[1],
    "setdefault": lambda d: d.setdefault("a", Rec()),
    "pop": lambda d: d.pop("a"),
    "popitem_first": lambda d: [d.popitem() for _ in range(len(d))][-1][1],
    "copy": lambda d: d.copy()["a"],
    "copy.copy": lambda d: copy.copy(d)["a"],
    "dict()": lambda d: dict(d)["a"],
    "**": lambda d: {**d}["a"],
    "or": lambda d: (d | {})["a"],
    "ror": lambda d: ({} | d)["a"],
    "deepcopy": lambda d: copy.deepcopy(d)["a"],
    "pickle": lambda d: pickle.loads(pickle.dumps(d))["a"],
    "sorted-keys": lambda d: [d[k] for k in sorted(d)][0],
    "list(values)": lambda d: list(d.values())[0],
}


@pytest.mark.parametrize("how", list(GETTERS))
def test_C03_a_record_handed_out_by_a_view_is_never_the_bases(how):
    base = _base(Store())
    want = base.model_dump_json()
    view, sibling = make_view(base), make_view(base)
    rec = GETTERS[how](view.recs)
    assert rec is not base.recs["a"]
    rec.qty += 7
    rec.tags.append("x")
    rec.meta["m"].append(7)
    assert base.model_dump_json() == want
    assert sibling.model_dump_json() == want
    assert sibling.recs["a"].tags == ["a"] and sibling.recs["a"].meta == {"m": [0]}


def test_a_record_read_twice_is_the_same_object_and_writes_stick():
    view = make_view(_base(Store()))
    assert view.recs["b"] is view.recs["b"] is view.recs.get("b")
    view.recs["b"].qty = 42
    assert json.loads(view.model_dump_json())["recs"]["b"]["qty"] == 42


def test_keys_len_and_in_copy_nothing():
    base = _base(Store())
    view = make_view(base)
    assert list(view.recs) == list("abcde") and len(view.recs) == 5 and "c" in view.recs
    assert list(view.recs.keys()) == list("abcde")
    assert all(dict.__getitem__(view.recs, k) is base.recs[k] for k in "abcde")  # still shared


def test_writes_through_update_ior_and_setitem_are_owned():
    base = _base(Store())
    view = make_view(base)
    new, newer = Rec(qty=50), Rec(qty=60)
    view.recs.update({"a": new})
    view.recs |= {"b": newer}
    view.recs["z"] = Rec(qty=70)
    assert view.recs["a"] is new and view.recs["b"] is newer  # a later read hands out what was written
    new.qty = 51
    assert json.loads(view.model_dump_json())["recs"]["a"]["qty"] == 51
    del view.recs["c"]
    assert "c" not in view.recs and "c" in base.recs
    view.recs.clear()
    assert len(base.recs) == 5


def test_root_lists_and_nested_models_are_copied_with_the_view():
    base = _base(Store())
    want = base.model_dump_json()
    view = make_view(base)
    view.log[0].qty += 1
    view.log.append(Rec())
    view.inner.marks.append(3)
    view.plain["x"] += 1
    view.counter += 1
    assert base.model_dump_json() == want


@pytest.mark.parametrize("env_name", ENVS)
@pytest.mark.parametrize("state_name", ["small", "large"])
def test_a_view_serialises_byte_for_byte_like_the_plain_model(env_name, state_name):
    spec = get_environment(env_name)
    raw = spec.initial_state_json(state_name)
    plain = spec.state_model.model_validate_json(raw)
    view = make_view(spec.state_model.model_validate_json(raw))
    assert view.model_dump_json() == plain.model_dump_json()
    assert view.model_dump() == plain.model_dump()
    for name in plain.__dict__:  # every collection: half read, then all read
        v = getattr(view, name)
        if isinstance(v, CowDict):
            for k in list(v)[::2]:
                v[k]
            assert view.model_dump_json() == plain.model_dump_json()
            list(v.values())
    assert view.model_dump_json() == plain.model_dump_json()
    assert view == plain
    frozen = freeze(view)
    assert not any(type(v) is CowDict for v in frozen.__dict__.values())
    assert frozen.model_dump_json() == plain.model_dump_json()


def test_copy_value_shares_nothing_mutable():
    base = _base(Store())
    c = copy_value(base)
    assert c == base and c.model_dump_json() == base.model_dump_json()
    c.recs["a"].meta["m"].append(1)
    c.log.append(Rec())
    c.inner.level = 5
    assert base.recs["a"].meta == {"m": [0]} and len(base.log) == 1 and base.inner.level == 0
    assert c.model_fields_set == base.model_fields_set and c.model_fields_set is not base.model_fields_set


def test_a_validate_assignment_root_copies_collections_that_it_may_revalidate():
    base = _base(Guarded())
    view, sibling = make_view(base), make_view(base)
    env = define_environment("CowGuarded", Guarded, [guarded_reassign], register=False)
    assert type(view.recs) is dict  # eager: assigning a CowDict to itself would re-validate the base's records
    s = Session.from_states(env, {"CowGuarded": base.model_dump_json().encode()})
    t = s.fork()
    assert s.call("guarded_reassign", {}).content == 2
    assert s.call("guarded_reassign", {}).content == 3
    assert t.call("guarded_reassign", {}).content == 2
    assert sibling.recs["a"].qty == 1 and base.recs["a"].qty == 1


# ---------------------------------------------------------------- the base cache
def test_the_base_cache_parses_each_state_once_and_is_bounded():
    spec = get_environment("HotelBooking")
    cache = BaseCache(max_entries=2, max_bytes=10 * 1024 * 1024)
    parses = []

    def parse(raw: bytes) -> BaseModel:
        parses.append(raw)
        return spec.state_model.model_validate_json(raw)

    small, large = spec.initial_state_json("small"), spec.initial_state_json("large")
    a = cache.get(spec.state_model, small, parse)
    assert cache.get(spec.state_model, bytes(small), parse) is a  # equal bytes, another object: a hit
    cache.get(spec.state_model, large, parse)
    assert len(parses) == 2 and cache.hits == 1 and cache.misses == 2
    cache.get(spec.state_model, small + b" ", parse)  # a third state evicts the least recently used
    assert len(cache) == 2 and (spec.state_model, small) not in cache.keys()
    tiny = BaseCache(max_entries=8, max_bytes=len(small) - 1)
    tiny.get(spec.state_model, small, parse)
    assert len(tiny) == 0  # longer than the byte budget: parsed, not kept
    with pytest.raises(ValueError):
        cache.get(spec.state_model, b"{not json", parse)
    assert (spec.state_model, b"{not json") not in cache.keys()


def test_sessions_reset_to_the_same_state_share_one_parse(monkeypatch):
    monkeypatch.setattr(cow, "BASE_CACHE", BaseCache())
    spec = get_environment("HotelBooking")
    sessions = [Session(spec, "large") for _ in range(5)]
    for s in sessions:
        s.call("list_hotel_destinations", {})
        s.reset()
        s.call("list_hotel_destinations", {})
    assert cow.BASE_CACHE.misses == 1 and cow.BASE_CACHE.hits == 9


# ---------------------------------------------------------------- sessions: isolation, rollback, exposure
def test_C03_forks_parent_and_children_never_see_each_others_writes(store):
    s = Session(store)
    s.call("bump", {"key": "a"})
    kids = s.fork_many(3)
    want = s.state_bytes()
    kids[0].call("bump", {"key": "a"})
    kids[1].call("bump_all", {})
    kids[2].call("rename", {"key": "a", "new": "q"})
    grandkid = kids[2].fork()
    grandkid.call("touch_root", {})
    assert s.state_bytes() == want
    s.call("bump", {"key": "b"})
    for k in kids:
        assert k.state()["recs"]["b"]["qty"] == 1 + (10 if k is kids[1] else 0)
    assert kids[0].state()["recs"]["a"]["qty"] == 2 and kids[1].state()["recs"]["a"]["qty"] == 11
    assert "a" not in kids[2].state()["recs"] and kids[2].state()["recs"]["q"]["qty"] == -1
    assert kids[2].state()["counter"] == 0 and grandkid.state()["counter"] == 1


def test_a_failed_call_in_a_view_changes_nothing_here_or_in_a_sibling(store):
    s = Session(store)
    s.call("bump", {"key": "c"})
    a, b = s.fork_many(2)
    want = a.state_bytes()
    r = a.call("bump_then_fail", {"key": "c"})
    assert r.error_code == "refused"
    assert a.state_bytes() == want == b.state_bytes() == s.state_bytes()
    a.call("bump", {"key": "c"})
    r = a.call("bump_then_fail", {"key": "d"})  # with a write to replay
    assert r.error_code == "refused" and a.state()["recs"]["c"]["qty"] == 4
    assert b.state_bytes() == want


def test_an_exposed_state_is_copied_at_fork_not_frozen(store):
    s = Session(store)
    m = s.state_model()
    kid = s.fork()
    m.recs["a"].qty = 99  # the caller keeps editing the model it was handed
    m.counter = 5
    assert kid.state()["recs"]["a"]["qty"] == 0 and kid.state()["counter"] == 0
    assert s.state()["recs"]["a"]["qty"] == 99
    s.call("bump", {"key": "a"})  # a write after outside edits keeps them (and copies the model first)
    m.recs["b"].qty = 7
    assert s.call("bump_then_fail", {"key": "a"}).error_code == "refused"
    st = s.state()
    assert st["recs"]["a"]["qty"] == 100 and st["recs"]["b"]["qty"] == 7 and st["counter"] == 5


def test_reset_and_restore_after_writes_start_clean(store):
    s = Session(store)
    snap = s.snapshot()
    s.call("bump_all", {})
    kid = s.fork()
    s.reset()
    assert s.state() == Session(store).state()
    kid.restore(snap)
    assert kid.state() == Session(store).state()
    assert s.call("total", {}).content == kid.call("total", {}).content == 10


# ---------------------------------------------------------------- property: forks equal solo replays
POOLS = {e: call_pool(e) for e in ENVS}


def _outcome(r) -> tuple:
    return (r.ok, json.dumps(r.content, sort_keys=True), r.error_code)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), env_name=st.sampled_from(ENVS))
def test_C03_any_interleaving_of_calls_and_forks_equals_solo_replays(monkeypatch, data, env_name):
    """Sessions fork from each other at random points and call random (scenario and ground-truth) tools in
    a random interleaving; each one's results and final state equal a fresh solo replay of its own calls
    from the same start, and the shared base of the start state is never changed."""
    spec, pool = get_environment(env_name), POOLS[env_name]
    shared = BaseCache()
    monkeypatch.setattr(cow, "BASE_CACHE", shared)
    root = Session(spec, "small")
    sessions, histories, outcomes = [root], [[]], [[]]
    call_ix = st.integers(0, len(pool) - 1)
    ops = data.draw(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["call"] * 4 + ["fork", "fork2"]), call_ix),
                             min_size=1, max_size=30))
    for who, op, ci in ops:
        j = who % len(sessions)
        s = sessions[j]
        if op.startswith("fork") and len(sessions) < 8:
            kids = s.fork_many(2) if op == "fork2" else [s.fork()]
            for kid in kids:
                sessions.append(kid)
                histories.append(list(histories[j]))
                outcomes.append(list(outcomes[j]))
        else:
            name, args = pool[ci]
            outcomes[j].append(_outcome(s.call(name, copy.deepcopy(args))))
            histories[j].append(ci)
    for s, hist, outs in zip(sessions, histories, outcomes, strict=True):
        monkeypatch.setattr(cow, "BASE_CACHE", BaseCache(max_entries=0))  # a fresh parse for every solo replay
        solo = Session(spec, "small")
        solo_outs = [_outcome(solo.call(pool[ci][0], copy.deepcopy(pool[ci][1]))) for ci in hist]
        assert solo_outs == outs
        assert s.state_bytes() == solo.state_bytes()
    keys = list(shared.keys())  # the start state's base, shared by all (if any call parsed it): unchanged
    assert len(keys) <= 1
    for key in keys:
        assert shared.get(*key, parse=None).model_dump_json() == spec.state_model.model_validate_json(
            spec.initial_state_json("small")).model_dump_json()


def test_C03_nested_collections_of_a_copied_record_are_copy_on_write_too():
    spec = get_environment("HotelBooking")
    raw = spec.initial_state_json("large")
    base = spec.state_model.model_validate_json(raw)
    want = base.model_dump_json()
    view, sibling = make_view(base), make_view(base)
    for h in view.hotels.values():  # every hotel, every room type, every calendar dict
        assert type(h.room_types) is CowDict
        for rt in h.room_types.values():
            rt.rooms_sold[max(rt.rooms_sold, default=base.last_bookable_night)] = 99
            rt.rate_overrides.clear()
        h.rate_multipliers.pop(next(iter(h.rate_multipliers), None), None)
        h.amenities.append("moat")
    for g in view.guests.values():
        for pm in g.payment_methods.values():
            pm.balance += 1
    assert base.model_dump_json() == want == sibling.model_dump_json()
    assert view.model_dump_json() != want
    again = make_view(freeze(view))  # a view of the frozen view sees its writes, and shares nothing with it
    assert again.model_dump_json() == view.model_dump_json()
    next(iter(again.hotels.values())).amenities.append("drawbridge")
    assert "drawbridge" not in view.model_dump_json() and base.model_dump_json() == want


# ---------------------------------------------------------------- Session.call fast path keeps validation
class Checked(BaseModel):
    x: int

    @model_validator(mode="after")
    def _non_negative(self) -> Checked:
        if self.x < 0:
            raise ValueError("x must be >= 0")
        return self


class Revalidated(BaseModel):
    model_config = ConfigDict(revalidate_instances="always")
    x: int


class Plain(BaseModel):
    x: int


@tool(read_only=True)
def checked_out(state: Store, *, x: int) -> Checked:
    """Returns an instance built without validation (its after-validator must still run)."""
    return Checked.model_construct(x=x)


@tool(read_only=True)
def revalidated_out(state: Store, *, x: str) -> Revalidated:
    """Returns an instance holding a wrong type (revalidate_instances="always" must catch it)."""
    return Revalidated.model_construct(x=x)


@tool(read_only=True)
def plain_out(state: Store, *, as_dict: bool) -> Plain:
    """Returns the declared model, or a dict for it (validated into the model)."""
    return {"x": "7"} if as_dict else Plain(x=3)  # type: ignore[return-value]


def test_the_result_fast_path_still_runs_every_validator():
    env = define_environment("CowResults", Store, [checked_out, revalidated_out, plain_out], register=False)
    s = Session(env)
    assert s.call("checked_out", {"x": 1}).content == {"x": 1}
    r = s.call("checked_out", {"x": -1})
    assert r.error_code == "invalid_result" and "x must be >= 0" in r.error
    assert s.call("revalidated_out", {"x": "5"}).content == {"x": 5}
    assert s.call("revalidated_out", {"x": "five"}).error_code == "invalid_result"
    assert s.call("plain_out", {"as_dict": False}).content == {"x": 3}
    assert s.call("plain_out", {"as_dict": True}).content == {"x": 7}
