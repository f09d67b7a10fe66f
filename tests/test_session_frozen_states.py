"""Frozen states and shared reads (docs/reward.md, "Cost"; docs/performance.md, "Shared reads").

The reward compares an in-process episode's :class:`FrozenState` with its ground truth's by record
identity; these tests hold that the verdict and the difference report are exactly those of comparing the
canonical dicts, for any mix of calls and forks, on one environment and across environments, and that
read-only tools of a ``shared_reads`` environment copy nothing yet never change what other sessions see.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import threading
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, PlainSerializer

from gym_envfactory import Session, ToolError, define_environment, get_environment, tool
from gym_envfactory.environment import cow
from gym_envfactory.environment.cow import FrozenState
from gym_envfactory.environment.states import task_environments
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import RewardConfig, StateDiff, TurnRecord, TurnScore, score_episode, state_diff
from gym_envfactory.validation import validate_environment
from tests.shipped import SHIPPED, call_pool

ENVS = sorted(SHIPPED)


POOLS = {e: call_pool(e) for e in ENVS}


def _both(a: Session, b: Session, spec) -> tuple[list[StateDiff], list[StateDiff]]:
    kw = {"bookkeeping": spec.excluded_fields, "set_fields": spec.set_fields}
    return state_diff(a.frozen_state(), b.frozen_state(), **kw), state_diff(a.state(), b.state(), **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), env_name=st.sampled_from(ENVS))
def test_frozen_comparison_reports_exactly_what_the_dict_comparison_reports(data, env_name):
    """Two sessions from one start (one a fork of the other at a random point) make random calls; at
    random moments their frozen states are compared: same verdict, same paths, same values, same order
    as comparing their canonical dicts."""
    spec, pool = get_environment(env_name), POOLS[env_name]
    a = Session(spec, "small")
    sessions = [a]
    ix = st.integers(0, len(pool) - 1)
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["a", "b", "fork", "compare"]), ix), min_size=1, max_size=25))
    compared = 0
    for op, ci in ops:
        if op == "fork" and len(sessions) == 1:
            sessions.append(a.fork())
        elif op == "compare" and len(sessions) == 2:
            frozen, plain = _both(*sessions, spec)
            assert frozen == plain
            compared += 1
        elif op in ("a", "b"):
            s = sessions[0 if op == "a" or len(sessions) == 1 else 1]
            name, args = pool[ci]
            s.call(name, copy.deepcopy(args))
    b = sessions[1] if len(sessions) == 2 else Session(spec, "small")
    frozen, plain = _both(a, b, spec)
    assert frozen == plain
    assert (not frozen) == (a.state_bytes() == b.state_bytes() or not plain)


def test_frozen_comparison_across_environments_prefixes_paths_like_the_dicts():
    """A cross-environment task's states compare the same way frozen as canonical ({env: state}), paths
    prefixed with the environment."""
    for name in ENVS:
        spec = get_environment(name)
        task = next((spec.tasks.get(t) for t in spec.tasks.ids() if len(spec.tasks.get(t).envs) > 1), None)
        if task is not None:
            break
    assert task is not None, "the catalog has cross-environment tasks"
    ref = task_reference(spec, task)
    envs = task_environments(spec, task)
    s = Session.from_states(envs, ref.initial_state)
    final = ref.turn_frozen[-1]
    assert state_diff(s.frozen_state(), final, bookkeeping=ref.excluded_fields) == \
        state_diff(s.state(), ref.final_state, bookkeeping=ref.excluded_fields)
    for turn in ref.turn_calls:
        for c in turn:
            assert s.call(c.name, dict(c.arguments)).ok
    assert state_diff(s.frozen_state(), final, bookkeeping=ref.excluded_fields) == []
    paths = {d.path.split(".")[0] for d in state_diff(ref.turn_frozen[0], Session.from_states(
        envs, ref.initial_state).frozen_state(), bookkeeping=ref.excluded_fields)}
    assert paths <= {e.name for e in envs}


def test_a_frozen_state_against_a_dict_uses_its_canonical_form():
    spec = get_environment("HotelBooking")
    s = Session(spec, "small")
    assert state_diff(s.frozen_state(), s.state()) == []
    frozen = s.frozen_state()
    assert copy.deepcopy(frozen) is frozen and copy.copy(frozen) is frozen
    assert frozen.canonical() == s.state()


def test_frozen_state_freezes_the_moment_later_calls_do_not_reach_it():
    spec = get_environment("HotelBooking")
    s = Session(spec, "small")
    before = s.frozen_state()
    text = json.dumps(before.canonical(), sort_keys=True)
    ref = task_reference(spec, next(t for t in spec.tasks.ids() if spec.tasks.get(t).initial_state == "small"
                                    and any(c for turn in spec.tasks.get(t).turns for c in turn.ground_truth)))
    for turn in ref.turn_calls:
        for c in turn:
            s.call(c.name, dict(c.arguments))
    after = s.frozen_state()
    assert json.dumps(FrozenState(before.models).canonical(), sort_keys=True) == text
    assert state_diff(after, before) == state_diff(s.state(), json.loads(text))


def test_an_equal_verdict_is_remembered_and_a_differing_one_is_not(monkeypatch):
    """Frozen states are immutable, so a pair found equal stays equal: the episode's final comparison
    after its last turn's reuses the verdict.  Other options, or a pair that differs, are compared again."""
    spec = get_environment("HotelBooking")
    small = [t for t in spec.tasks.ids() if spec.tasks.get(t).initial_state == "small"]
    ref = next(r for r in map(lambda t: task_reference(spec, t), small) if r.turn_states[-1] != r.state_before(0))
    a, b, c = Session(spec, "small"), Session(spec, "small"), Session(spec, "small")
    for s in (a, b):
        for turn in ref.turn_calls:
            for call in turn:
                s.call(call.name, dict(call.arguments))
    fa, fb, fc = a.frozen_state(), b.frozen_state(), c.frozen_state()
    cls = type(fa.models["HotelBooking"])
    real = cls.__pydantic_serializer__
    seen: list[int] = []

    class Counting:  # counts the serialisations a comparison makes of the records that are not shared
        def to_json(self, *args, **kwargs):
            seen.append(1)
            return real.to_json(*args, **kwargs)

        def to_python(self, *args, **kwargs):
            return real.to_python(*args, **kwargs)

    monkeypatch.setattr(cls, "__pydantic_serializer__", Counting())
    assert state_diff(fa, fb) == [] and len(seen) == 2
    assert state_diff(fa, fb, limit=1) == [] and len(seen) == 2  # remembered
    assert state_diff(fa, fb, bookkeeping=["bookings.*.created_at"]) == [] and len(seen) == 4  # other options
    first = state_diff(fa, fc)
    assert first and state_diff(fa, fc) == first and len(seen) == 8  # a difference is computed each time
    assert state_diff(fb, fa) == [] and len(seen) == 10  # remembered on the actual side only


def test_a_root_with_a_model_serializer_falls_back_to_the_dicts():
    """A root that does not serialise field by field is compared through its canonical form."""
    from pydantic import model_serializer

    class Odd(BaseModel):
        items: dict[str, int] = {}

        @model_serializer
        def _ser(self):
            return {"total": sum(self.items.values())}

    a = FrozenState({"E": Odd(items={"x": 1, "y": 2})})
    b = FrozenState({"E": Odd(items={"x": 3})})
    assert state_diff(a, b) == [] and state_diff(a, FrozenState({"E": Odd(items={"x": 4})})) != []


# ---------------------------------------------------------------- shared reads
def test_shared_reads_copy_no_record_and_leave_the_base_as_it_was():
    """A read-only tool of a shared_reads environment scans the shared records in place: after a city
    search and a hotel lookup on the large state, every record is still the base's own object."""
    spec = get_environment("HotelBooking")
    assert spec.manifest.shared_reads
    raw = spec.initial_state_json("large")
    base = cow.BASE_CACHE.get(spec.state_model, raw, spec.state_model.model_validate_json)
    before = base.model_dump_json()
    s = Session.from_states([spec], {"HotelBooking": raw})
    hotels = s.call("search_hotels", {"city": "Lisbon"})
    assert hotels.ok
    frozen = s.frozen_state().models["HotelBooking"]
    assert all(frozen.hotels[k] is base.hotels[k] for k in base.hotels)
    assert base.model_dump_json() == before


class Box(BaseModel):
    """A toy state: items by key."""

    items: dict[str, dict[str, int]] = {}


def _leaky_env(shared: bool):
    @tool(read_only=True)
    def peek(state: Box, *, key: str) -> int:
        """Read an item (and, wrongly, count the read in it)."""
        if key not in state.items:
            raise ToolError("unknown", code="not_found")
        item = state.items[key]
        item["reads"] = item.get("reads", 0) + 1  # a read-only tool that writes: a bug
        return item["value"]

    @tool
    def put(state: Box, *, key: str, value: int) -> int:
        """Store an item."""
        state.items[key] = {"value": value}
        return value

    return define_environment(f"LeakyBox{int(shared)}", Box, [peek, put], shared_reads=shared, register=False,
                              initial_state=Box(items={"a": {"value": 1}}),
                              scenarios=[{"scenario_id": "peek", "steps": [
                                  {"call": "peek", "arguments": {"key": "a"}, "expect": "ok"}]}])


def test_validation_catches_a_read_only_tool_that_writes_before_shared_reads_can_spread_it():
    """``envfactory validate`` runs with copies (check_writes): a read-only tool that writes is a contract
    violation there, and the base other sessions start from is untouched."""
    spec = _leaky_env(True)
    report = validate_environment(spec, replay_tasks=False)
    assert not report.passed
    assert any("read-only tool changed the state" in f for f in report.failures())
    assert Session(spec).state() == {"items": {"a": {"value": 1}}}


def test_without_shared_reads_a_read_only_tool_that_writes_stays_in_its_session():
    spec = _leaky_env(False)
    a, b = Session(spec), Session(spec)
    assert a.call("peek", {"key": "a"}).ok
    assert b.state() == {"items": {"a": {"value": 1}}}


# ---------------------------------------------------------------- reward plumbing
def test_score_dicts_hold_every_field():
    ref = task_reference(get_environment("HotelBooking"), get_environment("HotelBooking").tasks.ids()[0])
    score = score_episode([], ref, ref.final_state, RewardConfig())
    d = score.to_dict()
    plain = {k: v for k, v in dataclasses.asdict(score.config).items() if k not in ("components", "weights")}
    assert d["config"] == plain  # the extension fields appear only when a config has extra components
    assert set(d) == {f.name for f in dataclasses.fields(score)} - {"extra"}  # extra components merge in by name
    t = TurnScore(0, 1.0, None, 0.5, 1, 1, 0, 0, 0.0, 1.0, ["r_state"], [])
    assert t.to_dict() == {k: v for k, v in dataclasses.asdict(t).items() if k != "extra"}


def test_a_turn_window_starts_from_the_references_own_records():
    """A per-turn window's episode starts from the bytes of the ground-truth state before its first turn;
    the session parses them to the reference's own frozen records, so the comparison stays by identity."""
    spec = get_environment("HotelBooking")
    tid = next(t for t in spec.tasks.ids() if len(spec.tasks.get(t).turns) > 1 and len(spec.tasks.get(t).envs) == 1)
    ref = task_reference(spec, tid)
    win = ref.window(1, ref.n_turns, [spec])
    raw = win.initial_state["HotelBooking"]
    cow.BASE_CACHE.put(spec.state_model, raw, spec.state_model.model_validate_json(raw))  # another parse of them
    assert ref.window(1, ref.n_turns, [spec]) is win  # memoised: validated and dumped once per window
    win.share_start([spec])  # what the env does at every reset
    s = Session.from_states([spec], win.initial_state)
    mine, theirs = s.frozen_state().models["HotelBooking"], ref.turn_frozen[0].models["HotelBooking"]
    for field, value in theirs.__dict__.items():
        if isinstance(value, dict):
            assert all(mine.__dict__[field][k] is v for k, v in value.items()), field
    assert win.turn_frozen == ref.turn_frozen[1:]


def test_an_episode_starts_on_the_references_records_even_after_the_cache_evicted_them():
    """The base cache is bounded (32 bases): once the reference's start state was evicted, a parse of the
    same bytes would share no record with the reference and every comparison would serialise whole
    collections.  The env puts the reference's own base back at every reset."""
    from gym_envfactory.envs.env import EnvFactoryEnv

    spec = get_environment("HotelBooking")
    tid = next(t for t in spec.tasks.ids() if spec.tasks.get(t).initial_state == "large"
               and len(spec.tasks.get(t).envs) == 1)
    ref = task_reference(spec, tid)
    assert ref.start_frozen is not None
    env = EnvFactoryEnv("HotelBooking", task_id=tid)
    for _ in range(2):
        cow.BASE_CACHE.clear()
        env.reset()
        assert env.session.frozen_state().models["HotelBooking"] is ref.start_frozen.models["HotelBooking"]
    env.close()


@pytest.mark.parametrize("env_name", ENVS)
def test_oracle_episodes_score_the_same_frozen_or_as_dicts(env_name):
    """Every task's ground truth replayed in a session: the episode score from frozen states equals the
    score from canonical dicts, component by component."""
    spec = get_environment(env_name)
    for tid in spec.tasks.ids()[:12]:
        ref = task_reference(spec, tid)
        s = Session.from_states(task_environments(spec, spec.tasks.get(tid)), ref.initial_state)
        frozen_recs, dict_recs = [], []
        for turn in ref.turn_calls:
            calls = []
            for c in turn:
                r = s.call(c.name, dict(c.arguments))
                calls.append((c.name, r.arguments, not r.ok))
            frozen_recs.append(TurnRecord(calls=list(calls), state=s.frozen_state()))
            dict_recs.append(TurnRecord(calls=list(calls), state=s.state()))
        cfg = RewardConfig()
        a = score_episode(frozen_recs, ref, frozen_recs[-1].state, cfg).to_dict()
        b = score_episode(dict_recs, ref, dict_recs[-1].state, cfg).to_dict()
        assert a == b and a["reward"] == 1.0, tid


# ---------------------------------------------------------------- review findings (stop 21)
class _NanRec(BaseModel):
    score: float = 0.0
    touched: int = 0


class _NanBox(BaseModel):
    recs: dict[str, _NanRec] = {}


@tool
def nan_rate(state: _NanBox, *, key: str) -> float:
    """Store NaN as the record's score."""
    state.recs[key].score = float("nan")
    return 0.0


@tool
def nan_touch(state: _NanBox, *, key: str) -> int:
    """Bump the bookkeeping counter."""
    state.recs[key].touched += 1
    return state.recs[key].touched


class _BoxA(BaseModel):
    a_items: dict[str, dict[str, int]] = {}


class _BoxB(BaseModel):
    b_items: dict[str, dict[str, int]] = {}


@tool
def put_a(state: _BoxA, *, key: str, value: int) -> int:
    """Store in A."""
    state.a_items[key] = {"v": value}
    return value


@tool
def put_b(state: _BoxB, *, key: str, value: int) -> int:
    """Store in B."""
    state.b_items[key] = {"v": value}
    return value


def test_limit_zero_iterators_nan_and_environment_order_match_the_dicts():
    """Edge cases of the frozen comparison: a limit-0 comparison is not remembered as "equal";
    one-shot iterators of patterns are read once; NaN compares as the canonical form has it (null);
    several environments are reported in the expected state's order."""
    spec = get_environment("HotelBooking")
    a, b = Session(spec, "small"), Session(spec, "small")
    assert b.call("cancel_hotel_booking", {"booking_id": "BK-0001", "reason": "x"}).ok
    fa, fb = a.frozen_state(), b.frozen_state()
    plain = state_diff(fa.canonical(), fb.canonical())
    assert plain and state_diff(fa, fb, limit=0) == [] and state_diff(fa, fb) == plain
    pats = ["hotels", "guests", "bookings", "refunds", "next_refund_seq"]
    assert state_diff(fa, fb, bookkeeping=iter(pats)) == state_diff(fa.canonical(), fb.canonical(), bookkeeping=pats) == []

    nan_spec = define_environment("NanBoxReview", _NanBox, [nan_rate, nan_touch], register=False,
                                  bookkeeping_fields=["recs.*.touched"], initial_state=_NanBox(recs={"a": _NanRec()}))
    x = Session(nan_spec)
    assert x.call("nan_rate", {"key": "a"}).ok
    y = x.fork()
    assert y.call("nan_touch", {"key": "a"}).ok
    fx, fy = x.frozen_state(), y.frozen_state()
    assert state_diff(fy, fx, bookkeeping=nan_spec.excluded_fields) == []
    assert state_diff(fy.canonical(), fx.canonical(), bookkeeping=nan_spec.excluded_fields) == []

    env_a = define_environment("OrderAReview", _BoxA, [put_a], register=False, initial_state=_BoxA(a_items={"k": {"v": 0}}))
    env_b = define_environment("OrderBReview", _BoxB, [put_b], register=False, initial_state=_BoxB(b_items={"k": {"v": 0}}))
    p, q = Session([env_a, env_b]), Session([env_b, env_a])
    for sess, v in ((p, 1), (q, 0)):
        assert sess.call("put_a", {"key": "k", "value": v}).ok and sess.call("put_b", {"key": "k", "value": v}).ok
    fp, fq = p.frozen_state(), q.frozen_state()
    for limit in (1, 50):
        assert state_diff(fp, fq, limit=limit) == state_diff(fp.canonical(), fq.canonical(), limit=limit)


class _Desk(BaseModel):
    agents: dict[str, str] = {"kim": "pw"}
    tickets: dict[str, dict[str, str]] = {}
    _user: str | None = None


@tool
def desk_login(state: _Desk, *, agent: str, password: str) -> str:
    """Log in (kept in a private attribute, not in the JSON state)."""
    if state.agents.get(agent) != password:
        raise ToolError("wrong agent or password", code="forbidden")
    state._user = agent
    return agent


@tool
def desk_open_ticket(state: _Desk, *, title: str) -> str:
    """Open a ticket as the logged-in agent."""
    if state._user is None:
        raise ToolError("log in first", code="forbidden")
    tid = f"T{len(state.tickets) + 1}"
    state.tickets[tid] = {"title": title, "by": state._user}
    return tid


_DESK_TASKS = [{"task_id": "t", "turns": [
    {"user": "log in", "ground_truth": [{"name": "desk_login", "arguments": {"agent": "kim", "password": "pw"}}]},
    {"user": "open", "ground_truth": [{"name": "desk_open_ticket", "arguments": {"title": "vpn"}}]}]}]


def test_hidden_state_neither_leaks_through_a_window_nor_is_lost_by_scoring():
    """A model with private attributes is not plain: reading its frozen state leaves the session as it
    is (still logged in), a two-turn ground truth replays, and a turn window does not hand the ground
    truth's login to fresh sessions through the base cache (docs/cases.md C03, C05)."""
    spec = define_environment("PrivDeskReview", _Desk, [desk_login, desk_open_ticket], register=False,
                              initial_state=_Desk(), tasks=_DESK_TASKS)
    assert not cow.plain_model(_Desk)
    s = Session(spec)
    assert s.call("desk_login", {"agent": "kim", "password": "pw"}).ok
    frozen = s.frozen_state()
    assert frozen.canonical() == s.state()
    assert s.call("desk_open_ticket", {"title": "x"}).ok  # still logged in
    ref = task_reference(spec, "t")
    ref.window(1, 2, [spec])
    fresh = Session(spec).call("desk_open_ticket", {"title": "x"})
    assert not fresh.ok and fresh.error_code == "forbidden"


class LockedDesk:
    """An imported API whose instance cannot be deep-copied (it holds a lock)."""

    def __init__(self) -> None:
        self.agents = {"kim": "pw"}
        self.opened = 0
        self._token: str | None = None
        self._lock = threading.Lock()

    def login(self, agent: str, password: str) -> str:
        """Log in."""
        if self.agents.get(agent) != password:
            raise PermissionError("wrong agent or password")
        self._token = agent
        return agent

    def open_ticket(self) -> int:
        """Open a ticket (needs a login)."""
        if self._token is None:
            raise PermissionError("log in first")
        with self._lock:
            self.opened += 1
            return self.opened


def test_an_imported_api_that_cannot_be_copied_keeps_its_login_through_frozen_states(caplog):
    from gym_envfactory.generators.importer import import_python_class

    tasks = [{"task_id": "two-turns", "turns": [
        {"user": "log in", "ground_truth": [{"name": "login", "arguments": {"agent": "kim", "password": "pw"}}]},
        {"user": "open a ticket", "ground_truth": [{"name": "open_ticket", "arguments": {}}]}]}]
    spec = import_python_class(LockedDesk, name="LockedDeskReview", register=False, tasks=tasks)
    assert not cow.plain_model(spec.state_model)
    s = Session(spec)
    assert s.call("login", {"agent": "kim", "password": "pw"}).ok
    s.frozen_state()
    assert s.call("open_ticket", {}).ok
    ref = task_reference(spec, "two-turns")  # replays turn by turn, reading frozen states between
    assert ref.final_state["opened"] == 1
    ref.window(1, 2, [spec])
    assert not Session(spec).call("open_ticket", {}).ok  # no login inherited through the base cache


_STARTED, _GO = threading.Event(), threading.Event()


class _SlowBox(BaseModel):
    items: dict[str, dict[str, int]] = {}


@tool
def slow_put(state: _SlowBox, *, key: str) -> int:
    """Two writes with a pause between them."""
    state.items[key + "-1"] = {"v": 1}
    if key == "slow":
        _STARTED.set()
        _GO.wait(10)
    state.items[key + "-2"] = {"v": 2}
    return 1


def test_a_frozen_state_read_while_a_call_runs_waits_for_the_call():
    """env.score() (and info["score"]) may be read from another thread while astep runs a tool: reading
    the frozen state must neither lose the call's later writes nor hand out a state that changes after."""
    _STARTED.clear()
    _GO.clear()
    spec = define_environment("SlowBoxReview", _SlowBox, [slow_put], register=False, initial_state=_SlowBox())
    s = Session(spec)
    assert s.call("slow_put", {"key": "warm"}).ok
    worker = threading.Thread(target=s.call, args=("slow_put", {"key": "slow"}))
    worker.start()
    assert _STARTED.wait(10)
    got: list[FrozenState] = []
    reader = threading.Thread(target=lambda: got.append(s.frozen_state()))
    reader.start()
    reader.join(0.2)
    assert not got  # waiting for the call (the lock), not reading half of it
    _GO.set()
    worker.join(10)
    reader.join(10)
    taken = sorted(got[0].models["SlowBoxReview"].items)
    assert taken == ["slow-1", "slow-2", "warm-1", "warm-2"] == sorted(s.state()["items"])
    assert s.call("slow_put", {"key": "after"}).ok
    assert sorted(got[0].models["SlowBoxReview"].items) == taken  # frozen: later calls do not reach it


class _Line(BaseModel):
    price: float
    qty: int

    @functools.cached_property
    def total(self) -> float:
        """Cached in the record's ``__dict__`` on first read."""
        return self.price * self.qty


class _Cart(BaseModel):
    lines: dict[str, _Line] = {}


@tool(read_only=True)
def get_total(state: _Cart, *, line_id: str) -> float:
    """A line's total."""
    return state.lines[line_id].total


@tool
def set_price(state: _Cart, *, line_id: str, price: float) -> float:
    """Change a line's unit price."""
    state.lines[line_id].price = price
    return price


def test_shared_reads_are_off_for_a_model_whose_reads_leave_a_trace():
    """A cached_property stores its value in the record it is read from: under shared reads that record
    is the base every session shares, so such a model never gets shared reads."""
    spec = define_environment("CachedCartReview", _Cart, [get_total, set_price], shared_reads=True, register=False,
                              initial_state=_Cart(lines={"L1": _Line(price=10.0, qty=2)}))
    assert not cow.plain_model(_Cart) and not spec.tools["get_total"].shared_reads
    a, b = Session(spec), Session(spec)
    assert a.call("get_total", {"line_id": "L1"}).content == 20.0
    assert b.call("set_price", {"line_id": "L1", "price": 1.0}).ok
    assert b.call("get_total", {"line_id": "L1"}).content == 2.0


@pytest.mark.parametrize("env_name", ENVS)
def test_every_shipped_state_model_is_plain(env_name):
    """The catalog keeps its state in its fields: shared reads, in-place frozen states and window seeding
    all apply (a model that is not plain still scores right, only slower)."""
    spec = get_environment(env_name)
    assert cow.plain_model(spec.state_model)
    assert all(t.shared_reads == t.read_only for t in spec.tools.values())


class _Leaf(BaseModel):
    tags: list[str] = []
    kind: Literal["a", "b"] = "a"
    size: Optional[int] = None  # noqa: UP045 - the typing form is what is being tested


class _Tree(BaseModel):
    leaves: dict[str, _Leaf] = {}
    children: list[_Tree] = []
    pair: tuple[int, ...] | None = None


class _Loose(BaseModel):
    anything: Any = None


class _Extra(BaseModel, extra="allow"):
    x: int = 0


def test_plain_model_decides_from_the_field_types():
    assert cow.plain_model(_Tree) and cow.plain_model(_Leaf)
    assert not cow.plain_model(_Loose) and not cow.plain_model(_Extra) and not cow.plain_model(_Desk)


# ---------------------------------------------------------------- review findings, second round
class _ExcludedDesk(BaseModel):
    agents: dict[str, str] = {"kim": "pw"}
    user: str | None = Field(default=None, exclude=True)  # the login: deliberately not in the JSON


@tool
def ex_login(state: _ExcludedDesk, *, agent: str) -> str:
    """Log in."""
    state.user = agent
    return agent


@tool(read_only=True)
def ex_whoami(state: _ExcludedDesk) -> str:
    """Who is logged in."""
    return state.user or "<nobody>"


class _Price(BaseModel):
    price: Annotated[float, PlainSerializer(lambda v: round(v, 2), return_type=float)] = 1.0


@tool
def set_third(state: _Price) -> str:
    """Set the price to a third of ten (the JSON holds it rounded)."""
    state.price = 10 / 3
    return "ok"


@tool(read_only=True)
def total_3000(state: _Price) -> float:
    """The total of 3,000 items."""
    return state.price * 3000


class _Points(BaseModel):
    points: int = 0


@tool
def add_half_twice(state: _Points) -> str:
    """Add 2.0 (a float in an int field: equal to 2, not the same value)."""
    state.points += 2.0  # type: ignore[assignment]
    return "ok"


@tool(read_only=True)
def show_points(state: _Points) -> str:
    """The points as text."""
    return f"{state.points} points"


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic: 2.0 serialised from an int field
@pytest.mark.parametrize("model, tools, first, probe", [
    (_ExcludedDesk, [ex_login, ex_whoami], ("ex_login", {"agent": "kim"}), "ex_whoami"),
    (_Price, [set_third, total_3000], ("set_third", {}), "total_3000"),
    (_Points, [add_half_twice, show_points], ("add_half_twice", {}), "show_points"),
])
def test_a_window_episode_behaves_as_a_parse_of_its_start_bytes(model, tools, first, probe):
    """A plain model whose values do not all round-trip through its JSON (a field excluded from it, a
    rounding serializer): the episode of a window, in process, must behave exactly as a session parsed
    from the window's start bytes (what a remote backend, a restore or another process runs), so the
    reference's own model is not handed to sessions, and nothing leaks to later episodes (C03)."""
    from gym_envfactory.envs.env import EnvFactoryEnv

    tasks = [{"task_id": "t", "turns": [{"user": "one", "ground_truth": [{"name": first[0], "arguments": first[1]}]},
                                        {"user": "two", "ground_truth": [{"name": probe, "arguments": {}}]}]}]
    spec = define_environment(f"RoundTrip{model.__name__.strip('_')}", model, tools, register=False, initial_state=model(),
                              tasks=tasks)
    env = EnvFactoryEnv(spec)
    env.reset(options={"task_id": "t", "start_turn": 1})
    in_process = env.session.call(probe, {}).content
    raw = env.reference.initial_state
    cow.BASE_CACHE.clear()
    assert in_process == Session.from_states([spec], raw).call(probe, {}).content
    env.reset(options={"task_id": "t"})
    assert env.session.call(probe, {}).content == Session(spec).call(probe, {}).content
    env.close()


class _AnyShop(BaseModel):
    stock: dict[str, Annotated[int, Field(ge=0)]] = {"apple": 1}
    meta: dict[str, Any] = {}  # an Any field: not plain


@tool
def sell(state: _AnyShop, *, item: str, n: int) -> int:
    """Sell ``n`` items (no check: may leave the stock negative, which the model forbids)."""
    state.stock[item] -= n
    return state.stock[item]


def test_a_model_that_is_not_plain_is_read_without_validation_and_compared_as_dicts():
    """A state model that is not plain is scored from its canonical dicts (as before frozen states), and
    a frozen state of it is a copy: a write that left the state invalid for its model does not crash the
    end of the turn, and the session is left as it was."""
    from gym_envfactory.envs.env import EnvFactoryEnv

    tasks = [{"task_id": "t", "turns": [{"user": "sell one", "ground_truth": [
        {"name": "sell", "arguments": {"item": "apple", "n": 1}}]}]}]
    spec = define_environment("AnyShopReview", _AnyShop, [sell], register=False, initial_state=_AnyShop(), tasks=tasks)
    assert not cow.plain_model(_AnyShop) and not Session(spec).frozen_in_place
    assert task_reference(spec, "t").turn_frozen is None
    env = EnvFactoryEnv(spec)
    env.reset(options={"task_id": "t"})
    env.step('<tool_call>{"name": "sell", "arguments": {"item": "apple", "n": 5}}</tool_call>')
    _, reward, terminated, _, info = env.step("done")
    assert terminated and reward == 0.0 and info["state_diff"]
    assert env.session.state()["stock"]["apple"] == -4
    frozen = env.session.frozen_state()
    assert frozen.canonical() == env.session.state()
    env.close()


def test_fork_many_takes_states_and_log_as_of_one_moment():
    """A call in another thread never lands half in the forks (its log record without its write): the
    session lock is held across the whole fork."""
    spec = get_environment("HotelBooking")
    s = Session(spec, "small")
    s.call("list_hotel_destinations", {})
    gate = threading.Event()

    class SlowLock:  # the session's lock, slowed down while the fork holds it
        def __init__(self) -> None:
            self.inner = threading.Lock()

        def __enter__(self):
            self.inner.acquire()
            if not gate.is_set():
                gate.set()
                racer.start()
                racer.join(0.1)  # the racer now waits on the lock, at the worst moment

        def __exit__(self, *exc):
            self.inner.release()
            if threading.current_thread() is not racer:
                racer.join(0.1)  # the racer runs right after the release

    done: list = []
    racer = threading.Thread(target=lambda: done.append(
        s.call("cancel_hotel_booking", {"booking_id": "BK-0001", "reason": "x"})))
    s._lock = SlowLock()
    child = s.fork_many(1)[0]
    racer.join(10)
    assert done and done[0].ok  # the parent's call ran, after the fork
    names = [r.name for r in child.action_log]
    assert names == ["list_hotel_destinations"]
    assert child.call("cancel_hotel_booking", {"booking_id": "BK-0001", "reason": "x"}).ok  # not cancelled there


class _WithProperty(BaseModel):
    price: float = 1.0

    @property
    def doubled(self) -> float:
        """Twice the price."""
        return self.price * 2


def test_a_model_with_a_property_is_not_plain():
    """A property may cache into the record it reads (a hand-written cached_property): not plain."""
    assert not cow.plain_model(_WithProperty)


def test_a_frozen_base_holds_no_copy_on_write_dict():
    """Freezing settles the copy-on-write dicts inside what the view owned: a base that every session and
    the reference share is never filled in by a later reader (a shared read of a nested collection)."""
    spec = get_environment("HotelBooking")
    s = Session(spec, "small")
    hotel = next(iter(json.loads(spec.initial_state_json("small"))["hotels"]))
    assert s.call("get_hotel_details", {"hotel_id": hotel}).ok
    assert s.call("cancel_hotel_booking", {"booking_id": "BK-0001", "reason": "x"}).ok
    base = s.frozen_state().models["HotelBooking"]

    def cowdicts(value, path="") -> list[str]:
        found = [path] if type(value) is cow.CowDict else []
        if isinstance(value, BaseModel):
            for k, v in value.__dict__.items():
                found += cowdicts(v, f"{path}.{k}")
        elif isinstance(value, dict):
            for k, v in dict.items(value):
                found += cowdicts(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                found += cowdicts(v, f"{path}.{i}")
        return found

    assert cowdicts(base) == []
    before = base.model_dump_json()
    for other in (s, s.fork(), Session(spec, "small")):
        assert other.call("get_hotel_details", {"hotel_id": hotel}).ok
    assert cowdicts(base) == [] and base.model_dump_json() == before


@pytest.mark.parametrize("env_name", ENVS)
def test_a_comparison_read_in_chunks_reports_what_the_dicts_report(env_name, monkeypatch):
    """Many differing records are dumped and parsed a chunk at a time (``state_compare.PART_CHUNK``, so a
    score on the server's scoring thread never holds the GIL for one long C call): with chunks of one
    record, the verdicts, paths, values and order are those of comparing the canonical dicts, and what a
    turn changed is the same."""
    import random

    from gym_envfactory import state_compare
    from gym_envfactory.state_compare import state_changes

    monkeypatch.setattr(state_compare, "PART_CHUNK", 1)
    spec, pool = get_environment(env_name), POOLS[env_name]
    rng = random.Random(env_name)
    a = Session(spec, "small")
    before = a.frozen_state()
    b = a.fork()
    for s in (a, a, a, b) * 6:
        name, args = pool[rng.randrange(len(pool))]
        s.call(name, copy.deepcopy(args))
    frozen, plain = _both(a, b, spec)
    assert frozen == plain
    kw = {"bookkeeping": spec.excluded_fields, "set_fields": spec.set_fields}
    assert state_changes(before, a.frozen_state(), **kw) == state_changes(before.canonical(), a.state(), **kw)
