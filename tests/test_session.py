"""Sessions (docs/architecture.md, "Sessions"): typed results, isolation, snapshot/restore/fork, reset, determinism."""

from __future__ import annotations

import json
import threading

import pydantic
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory import Session, SpecError, define_environment, get_environment, tool
from gym_envfactory.errors import SessionClosedError, SnapshotError
from tests.conftest import LibraryDB


def test_typed_results(library):
    s = Session(library)
    assert s.call("nope", {}).error_type == "unknown_tool"
    assert s.call("get_book", {"book_id": "B9"}).error_type == "tool_error"
    assert s.call("get_book", {"book_id": "B9"}).error_code == "not_found"
    assert s.call("borrow_book", {"book_id": "B3", "member": "ada"}).error_code == "sold_out"
    r = s.call("get_book", {"book_id": "B1"})
    assert r.ok and r.content["title"] == "Dune" and json.loads(r.to_text())["title"] == "Dune"
    assert json.loads(s.call("nope").to_text())["error"]["type"] == "unknown_tool"
    assert len(s.action_log) == 6


@tool
def crash(state: LibraryDB, *, x: int) -> int:
    """Always fails."""
    raise ZeroDivisionError("boom")


@tool
def bad_output(state: LibraryDB) -> int:
    """Returns the wrong type."""
    state.next_loan += 1
    return "not an int"  # type: ignore[return-value]


def test_internal_error_is_an_observation():
    spec = define_environment("Crashy", LibraryDB, [crash, bad_output], register=False)
    s = Session(spec)
    r = s.call("crash", {"x": 1})
    assert r.error_type == "internal_error" and "ZeroDivisionError" in r.error
    assert s.call("bad_output", {}).error_type == "internal_error"


def test_isolation_between_sessions_and_from_spec(library):
    a, b = Session(library), Session(library)
    a.call("borrow_book", {"book_id": "B1", "member": "ada"})
    assert b.state()["books"]["B1"]["copies"] == 2
    assert json.loads(library.initial_state_json())["books"]["B1"]["copies"] == 2


def test_snapshot_restore_roundtrip(library):
    s = Session(library)
    s.call("borrow_book", {"book_id": "B1", "member": "ada"})
    snap = s.snapshot()
    state, log = s.state(), [r.to_dict() for r in s.action_log]
    s.call("return_book", {"loan_id": "L-0001"})
    s.restore(snap)
    assert s.state() == state and [r.to_dict() for r in s.action_log] == log
    with pytest.raises(SnapshotError):
        s.restore(b"not json")
    with pytest.raises(SnapshotError):
        s.restore(b'{"v":1,"envs":{"Other":{}},"log":[]}')


def test_fork_is_independent(library):
    s = Session(library)
    s.call("borrow_book", {"book_id": "B1", "member": "ada"})
    forks = s.fork_many(8)
    for i, f in enumerate(forks):
        f.call("set_fee", {"book_id": "B1", "fee": i})
    assert [f.state()["books"]["B1"]["fee"] for f in forks] == list(map(float, range(8)))
    assert s.state()["books"]["B1"]["fee"] == 0.5
    assert all(len(f.action_log) == 2 for f in forks) and len(s.action_log) == 1


def test_reset_and_close(library):
    s = Session(library)
    s.call("borrow_book", {"book_id": "B1", "member": "ada"})
    s.reset()
    assert s.action_log == [] and s.state()["loans"] == {}
    assert s.call("borrow_book", {"book_id": "B1", "member": "ada"}).content["loan_id"] == "L-0001"
    s.close()
    with pytest.raises(SessionClosedError):
        s.call("get_book", {"book_id": "B1"})


def test_check_writes_catches_silent_noop_write():
    from tests.conftest import make_library

    spec = make_library("LibraryBuggy", with_bug=True, register=False)
    s = Session(spec, check_writes=True)
    r = s.call("buggy_noop_write", {"book_id": "B1"})
    assert r.error_type == "internal_error" and r.error_code == "contract_violation"
    assert Session(spec).call("buggy_noop_write", {"book_id": "B1"}).ok  # only enforced when asked


def test_initial_state_forms(library):
    assert Session(library, "small").state()["books"]["B1"]["copies"] == 2
    st = Session(library).state()
    st["books"]["B1"]["copies"] = 9
    assert Session(library, st).state()["books"]["B1"]["copies"] == 9
    with pytest.raises(SpecError):
        Session(library, {"books": {"B1": {"title": 3}}})
    with pytest.raises(SpecError):
        Session(library, "nonexistent")


def test_concurrent_sessions_in_threads(library):
    """Many sessions stepping in threads: each ends in its solo state."""
    results = {}

    def run(i):
        s = Session(library)
        for _ in range(20):
            s.call("set_fee", {"book_id": "B1", "fee": i})
            s.call("borrow_book", {"book_id": "B1", "member": "ada"})
            s.call("return_book", {"loan_id": f"L-{s.state()['next_loan'] - 1:04d}"})
        results[i] = s.state_bytes()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(16):
        solo = Session(library)
        for _ in range(20):
            solo.call("set_fee", {"book_id": "B1", "fee": i})
            solo.call("borrow_book", {"book_id": "B1", "member": "ada"})
            solo.call("return_book", {"loan_id": f"L-{solo.state()['next_loan'] - 1:04d}"})
        assert results[i] == solo.state_bytes()


def test_from_states_with_bad_bytes_destroys_the_session_state():
    """DEFECT (low): ``Session.from_states`` defers parsing; with bytes that do not validate, the first
    ``call`` raises a raw pydantic ValidationError (the module promises a bad call never raises) and
    ``_model`` has already popped the pending state, so every later ``state()``/``snapshot()``/``fork()``
    raises ``KeyError``.  Should: validate up front (SpecError) or keep the session consistent."""
    spec = get_environment("HotelBooking")
    try:
        s = Session.from_states(spec, {"HotelBooking": b'{"x": 1}'})
    except Exception:  # noqa: BLE001 - refusing at construction is fine
        return
    try:
        s.call("list_hotel_destinations", {})
    except Exception:  # noqa: BLE001
        pass
    try:
        s.state()
    except KeyError as exc:
        pytest.fail(f"session lost its state after a failed lazy parse: KeyError {exc}")
    except Exception:  # noqa: BLE001 - a clear error is fine
        pass



def test_restore_is_lazy_and_an_invalid_state_surfaces_on_first_use(library):
    """restore keeps the state bytes (no model parse); a state that is a JSON object but not a valid state
    is refused on first use, as a bad initial state is, and the session stays usable."""
    import json as _json

    from gym_envfactory.errors import SpecError

    s = Session(library)
    good = s.snapshot()
    obj = _json.loads(good)
    name = next(iter(obj["envs"]))
    bad = dict(obj, envs={name: {"no_such_field": 1, **{k: "not the right type" for k in obj["envs"][name]}}})
    s.restore(_json.dumps(bad).encode())  # the envelope and the log are fine: accepted, nothing parsed
    assert s._states == {}
    res = s.call("get_book", {"book_id": "B1"})
    assert not res.ok and res.error_code == "state_load_error"
    for read in (s.state, s.snapshot, s.state_model):
        with pytest.raises(SpecError):
            read()
    with pytest.raises(SnapshotError):  # a state that is not a JSON object is refused up front
        s.restore(_json.dumps(dict(obj, envs={name: [1]})).encode())
    s.restore(good)  # still usable
    assert s.snapshot() == good
    fork = s.fork()
    assert fork.state() == s.state()


# ------------------------------------------------- a state whose JSON does not load back (issue 25, item 5)
class Rated(pydantic.BaseModel):
    rate: float = 1.0
    n: int = 0


@tool
def bump_rated(state: Rated) -> int:
    """Add one to n."""
    state.n += 1
    return state.n


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_state_whose_json_does_not_load_back_is_refused_at_creation(bad):
    """A float NaN or infinity is written to JSON as null: the session would keep bytes that no call,
    state read or restore of its own snapshot can load.  Refused up front, naming the field."""
    spec = define_environment("RatedNaN", Rated, [bump_rated], register=False)
    with pytest.raises(SpecError) as ei:
        Session(spec, {"rate": bad})
    assert ei.value.field == "rate" and "written as null" in str(ei.value)
    s = Session(spec)
    with pytest.raises(SpecError, match="written as null"):
        s.reset({"rate": bad})
    assert s.call("bump_rated", {}).ok and s.state() == {"rate": 1.0, "n": 1}  # the session is untouched
    s.restore(s.snapshot())
    assert s.state() == {"rate": 1.0, "n": 1}
