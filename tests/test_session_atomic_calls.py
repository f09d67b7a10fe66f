"""Atomic tool calls (issue 11, part 2): a failed call leaves the state exactly as it was before it, is
logged as failed, names what failed, and the next call works; plus the low items that came with it."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pydantic import BaseModel, ConfigDict, Field

from gym_envfactory import Session, ToolError, define_environment, get_environment, tool
from gym_envfactory.environment.catalog import add_environment, forget_environment
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.errors import SnapshotError, SpecError
from gym_envfactory.server.fastproto import dispatch_frame
from gym_envfactory.server.manager import SessionManager
from gym_envfactory.session import REDO_LIMIT

# tools below leave invalid values in a state on purpose; dumping it warns
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


class Item(BaseModel):
    model_config = ConfigDict(validate_assignment=True)
    qty: int = 0
    tags: list[str] = Field(default_factory=list)


class Shop(BaseModel):
    balance: float = 100.0
    counter: int = 0
    items: dict[str, Item] = Field(default_factory=lambda: {"a": Item(qty=1)})
    notes: list[str] = Field(default_factory=list)


@tool
def add(state: Shop, *, n: int = 1, note: str = "") -> int:
    """Add ``n`` to the counter (and note something); returns the counter."""
    state.counter += n
    state.items["a"].tags.append(f"add{n}")
    if note:
        state.notes.append(note)
    return state.counter


@tool(read_only=True)
def peek(state: Shop) -> int:
    """The counter."""
    return state.counter


@tool
def refuse_late(state: Shop, *, n: int) -> int:
    """Writes, then refuses (a domain error after a partial write)."""
    state.counter += n
    state.items["a"].qty += 1
    state.items["b"] = Item(qty=5)
    state.notes.append("half done")
    raise ToolError("refused after writing", code="refused")


@tool
def crash_late(state: Shop) -> int:
    """Writes, then crashes."""
    state.counter += 1
    del state.items["a"]
    return 1 // 0


@tool
def bad_result(state: Shop) -> int:
    """Writes, then returns a value that fails its declared return type."""
    state.counter += 1
    return {"not": "an int"}  # type: ignore[return-value]


@tool
def bad_write(state: Shop) -> int:
    """Writes, then assigns a value the state model refuses (validate_assignment)."""
    state.counter += 1
    state.items["a"].qty = "many"  # type: ignore[assignment]
    return state.counter


@tool
def silent_bad_write(state: Shop) -> int:
    """Leaves the state invalid without any error (no validate_assignment on Shop)."""
    state.counter = "oops"  # type: ignore[assignment]
    return 1


@tool
def charge(state: Shop, *, amount: float) -> int:
    """Writes, then does arithmetic that overflows for extreme amounts (1e308)."""
    state.balance -= 1
    return int(amount * 100)


@tool
def interrupted(state: Shop) -> int:
    """Writes, then is interrupted."""
    state.counter += 1000
    raise KeyboardInterrupt


@tool(read_only=True)
def lying_read(state: Shop) -> int:
    """Declared read-only, writes, then fails."""
    state.counter += 7
    raise ToolError("no", code="no")


TOOLS = [add, peek, refuse_late, crash_late, bad_result, bad_write, silent_bad_write, charge, interrupted, lying_read]


@pytest.fixture(scope="module")
def shop():
    return define_environment("AtomicShop", Shop, TOOLS, register=False)


def _prime(s: Session) -> None:
    """A few successful writes first, so a rollback has something to replay."""
    assert s.call("add", {"n": 2, "note": "first"}).ok
    assert s.call("peek", {}).ok
    assert s.call("add", {"n": 3}).ok


FAILURES = [
    ("refuse_late", {"n": 4}, "tool_error", "refused"),
    ("crash_late", {}, "internal_error", "internal_error"),
    ("bad_result", {}, "internal_error", "invalid_result"),
    ("bad_write", {}, "internal_error", "invalid_state"),
    ("charge", {"amount": 1e308}, "invalid_arguments", "invalid_arguments"),
]


@pytest.mark.parametrize("check_writes", [False, True])
@pytest.mark.parametrize(("name", "args", "etype", "code"), FAILURES)
def test_a_failed_call_changes_nothing(shop, check_writes, name, args, etype, code):
    s = Session(shop, check_writes=check_writes)
    _prime(s)
    before_state, before_log = s.state(), [r.to_dict() for r in s.action_log]
    r = s.call(name, args)
    if check_writes:  # validation mode reports the partial write itself as a contract violation
        assert (r.ok, r.error_type, r.error_code) == (False, "internal_error", "contract_violation"), r
    else:
        assert (r.ok, r.error_type, r.error_code) == (False, etype, code), r
    assert s.state() == before_state
    log = s.action_log
    assert [x.to_dict() for x in log[:-1]] == before_log
    assert log[-1].name == name and not log[-1].result.ok
    # the next call works on the state as it was
    assert s.call("add", {"n": 1}).content == before_state["counter"] + 1
    assert s.state()["items"]["a"]["tags"] == [*before_state["items"]["a"]["tags"], "add1"]


def test_every_failure_kind_in_a_row(shop):
    s = Session(shop)
    _prime(s)
    want = s.state()
    for name, args, _, _ in FAILURES:
        assert not s.call(name, args).ok
        assert s.state() == want, name
    assert s.call("add", {"n": 1}).ok and s.state()["counter"] == want["counter"] + 1


def test_first_call_failing_rolls_back_to_the_initial_state(shop):
    s = Session(shop)
    initial = s.state()
    assert not s.call("refuse_late", {"n": 1}).ok
    assert s.state() == initial and len(s.action_log) == 1


def test_messages_name_the_field_and_what_was_wrong(shop):
    s = Session(shop)
    r = s.call("bad_result", {})
    assert r.error_code == "invalid_result"
    assert "the tool's result failed its declared return type: result: Input should be a valid integer" in r.error
    assert r.details and r.details[0]["field"] == "result"
    r = s.call("bad_write", {})
    assert r.error_code == "invalid_state"
    assert "the tool's write left the state invalid: Item.qty: Input should be a valid integer" in r.error
    assert json.loads(r.to_text())["error"]["code"] == "invalid_state"
    r = Session(shop, check_writes=True).call("silent_bad_write", {})
    assert r.error_code == "invalid_state"
    assert "the tool's write left the state invalid: state.counter: Input should be a valid integer" in r.error


def test_an_invalid_write_is_rolled_back_in_validation_mode(shop):
    s = Session(shop, check_writes=True)
    _prime(s)
    want = s.state()
    assert not s.call("silent_bad_write", {}).ok
    assert s.state() == want


def test_a_keyboard_interrupt_still_leaves_nothing_half_done(shop):
    s = Session(shop)
    _prime(s)
    want = s.state()
    with pytest.raises(KeyboardInterrupt):
        s.call("interrupted", {})
    assert s.state() == want


def test_a_read_only_tool_that_writes_is_rolled_back_in_validation_mode(shop):
    s = Session(shop, check_writes=True)
    _prime(s)
    want = s.state()
    r = s.call("lying_read", {})
    assert r.error_code == "contract_violation"
    assert s.state() == want


def test_rollback_after_many_writes(shop):
    s = Session(shop)
    for _ in range(REDO_LIMIT + 5):
        assert s.call("add", {"n": 1}).ok
    want = s.state()
    assert not s.call("refuse_late", {"n": 1}).ok
    assert s.state() == want
    assert not s.call("crash_late", {}).ok  # twice in a row
    assert s.state() == want


def test_changes_made_through_state_model_survive_a_rollback(shop):
    s = Session(shop)
    _prime(s)
    s.state_model().counter = 50
    assert not s.call("refuse_late", {"n": 1}).ok
    assert s.state()["counter"] == 50
    assert s.call("add", {"n": 1}).content == 51


def test_forks_roll_back_independently(shop):
    s = Session(shop)
    _prime(s)
    want = s.state()
    kids = s.fork_many(3)
    for k in kids:
        assert not k.call("refuse_late", {"n": 9}).ok
        assert k.state() == want
    assert s.state() == want


def test_multi_environment_rollback_touches_only_the_failing_environment(shop, library):
    s = Session([shop, library])
    assert s.call("borrow_book", {"book_id": "B1", "member": "ada"}).ok
    _prime(s)
    want = s.state()
    assert not s.call("refuse_late", {"n": 1}).ok
    assert s.state() == want


_replays = {"n": 0}


@tool
def flaky(state: Shop) -> int:
    """Succeeds only the first time it ever runs (not deterministic)."""
    _replays["n"] += 1
    if _replays["n"] > 1:
        raise RuntimeError("different the second time")
    state.counter += 1
    return state.counter


def test_a_rollback_that_cannot_replay_says_so():
    spec = define_environment("AtomicFlaky", Shop, [flaky, refuse_late], register=False)
    s = Session(spec)
    assert s.call("flaky", {}).ok
    r = s.call("refuse_late", {"n": 1})
    assert r.error_type == "tool_error" and "could not be rolled back" in r.error


class Ids(BaseModel):
    ids: list[int] = Field(default_factory=list)
    n: int = 0


_next_id = {"n": 0}


@tool
def new_id(state: Ids) -> int:
    """Appends a fresh id from a process-wide counter (does not raise, but is not deterministic)."""
    _next_id["n"] += 1
    state.ids.append(_next_id["n"])
    return _next_id["n"]


@tool
def refuse_after_write(state: Ids) -> int:
    """Writes, then refuses."""
    state.n += 1
    raise ToolError("no", code="no")


@tool
def break_then_refuse(state: Ids) -> int:
    """Leaves the state invalid (no validate_assignment), then refuses."""
    state.n = "broken"  # type: ignore[assignment]
    raise ToolError("no", code="no")


@pytest.fixture
def nondet():
    return define_environment("AtomicNondet", Ids, [new_id, refuse_after_write, break_then_refuse], register=False)


def test_a_rollback_whose_replay_returns_other_results_says_so_and_keeps_the_observed_state(nondet, caplog):
    """The audit of issue 11: replaying a non-deterministic tool silently gave ids [3, 4] for [1, 2]."""
    s = Session(nondet)
    first = [s.call("new_id", {}).content for _ in range(2)]
    with caplog.at_level("WARNING", logger="gym_envfactory.session"):
        r = s.call("refuse_after_write", {})
    assert r.error_code == "no" and r.error.startswith("no (")
    assert "could not be rolled back" in r.error and "not deterministic" in r.error
    assert "replaying the earlier new_id call gave a different result" in r.error
    assert "kept as this call left it" in r.error
    assert s.state() == {"ids": first, "n": 1}  # the ids every earlier result named, plus the partial write
    assert any("could not reproduce the state" in m for m in caplog.messages)
    # the kept state is the new rollback point: the next failure does not replay new_id again
    assert not s.call("refuse_after_write", {}).ok
    assert s.state() == {"ids": first, "n": 1}
    assert s.call("new_id", {}).ok


def test_a_diverging_replay_with_a_broken_live_state_keeps_the_replayed_state(nondet):
    s = Session(nondet)
    assert s.call("new_id", {}).ok
    r = s.call("break_then_refuse", {})
    assert "not deterministic" in r.error and "rebuilt by the replay" in r.error
    state = s.state()
    assert state["n"] == 0 and len(state["ids"]) == 1  # valid: the successful write, run again
    assert s.call("new_id", {}).ok


def test_a_deterministic_replay_adds_no_note(shop):
    s = Session(shop)
    _prime(s)
    want = s.state()
    r = s.call("refuse_late", {"n": 1})
    assert r.error == "refused after writing"
    assert s.state() == want


# ---------------------------------------------------------------------------------- low items of issue 11


def test_overflow_in_a_tool_is_invalid_arguments(shop):
    r = Session(shop).call("charge", {"amount": 1e308})
    assert r.error_type == "invalid_arguments" and r.is_invalid_call
    assert "too large" in r.error and r.details[0]["field"] == "<arguments>"


def test_overflow_in_a_catalog_tool_is_invalid_arguments():
    s = Session(get_environment("PersonalFinance"))
    want = s.state()
    accounts = list(want["accounts"])
    r = s.call("transfer_between_accounts", {"from_account_id": accounts[0], "to_account_id": accounts[1],
                                             "amount": 1e308})
    assert r.error_type == "invalid_arguments", r
    assert s.state() == want


def test_restore_with_a_huge_log_index_is_a_snapshot_error(shop):
    s = Session(shop)
    s.call("add", {"n": 1})
    snap = json.loads(s.snapshot())
    want = s.state()
    for index in ("1e999", "-1e999"):
        text = json.dumps(snap).replace('"index": 0', f'"index": {index}')
        assert index in text
        with pytest.raises(SnapshotError):
            s.restore(text.encode())
    assert s.state() == want and len(s.action_log) == 1


def test_a_state_that_does_not_load_keeps_its_bytes_and_says_what_failed(shop):
    s = Session.from_states(shop, {"AtomicShop": b'{"balance": 1.0, "counter": "many"}'})
    for _ in range(2):  # the second try fails the same way: nothing was deleted
        r = s.call("peek", {})
        assert r.error_type == "internal_error" and r.error_code == "state_load_error", r
        assert "counter" in r.error and "valid integer" in r.error and "missing" not in r.error
    assert s.state() == {"balance": 1.0, "counter": "many"}
    with pytest.raises(SpecError, match="counter"):
        s.state_model()


def test_a_state_that_does_not_load_on_the_server_is_described():
    spec = define_environment("AtomicShopServed", Shop, TOOLS, register=False)
    add_environment(spec, register=False)
    try:
        m = SessionManager(["AtomicShopServed"])
        sid = m.create("AtomicShopServed").session_id
        # a training-mode tool leaves the state invalid without an error; a fork shares that state as it is
        # (copy-on-write, no re-parse), so the fork is given it as bytes, which do not load
        assert m.call(sid, "silent_bad_write", {})["ok"]
        child = m.fork(sid)[0].session_id
        m.get(child).session = Session.from_states(spec, {spec.name: json.dumps(m.state(sid)).encode()})
        for i in range(2):
            out = json.loads(dispatch_frame(m, json.dumps({"jsonrpc": "2.0", "id": i, "method": "call", "params": {
                "session_id": child, "name": "peek", "arguments": {}}})))
            assert "error" not in out, out
            res = out["result"]
            assert res["error_code"] == "state_load_error" and "counter" in res["error"], res
        assert m.state(child)["counter"] == "oops"
    finally:
        forget_environment("AtomicShopServed")


class _HostileRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr refused")


@pytest.mark.parametrize("arguments", [{"x": _HostileRepr()}, _HostileRepr()])
def test_a_typed_action_whose_arguments_repr_raises_is_an_invalid_call(arguments):
    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": env.tasks.ids()[0]})
    want = env.unwrapped.session.state()
    for action in (ToolCall("get_hotel_details", arguments), [ToolCall("get_hotel_details", arguments)]):
        obs, _, _, _, info = env.step(action)
        assert [e["type"] for e in info["errors"]] == ["parse_error"]
        assert json.loads(obs[-1]["content"])["error"]["type"] == "parse_error"
    assert env.unwrapped.session.state() == want
    env.close()


class _Receipts(BaseModel):
    counter: int = 0
    log: list[str] = Field(default_factory=list)


@tool
def add_receipt(state: _Receipts, *, n: int = 1) -> dict:
    """Add n; returns a receipt."""
    state.counter += n
    return {"counter": state.counter, "lines": [f"add {n}"]}


@tool
def refuse_after_writing(state: _Receipts, *, n: int) -> int:
    """Writes, then refuses."""
    state.counter += n
    state.log.append("half done")
    raise ToolError("refused after writing", code="refused")


def test_editing_a_returned_result_does_not_break_a_later_rollback():
    spec = define_environment("AliasShop", _Receipts, [add_receipt, refuse_after_writing], register=False)
    s = Session(spec)
    r = s.call("add_receipt", {"n": 2})
    r.content["lines"].append("seen by the trainer")  # the caller post-processes its result
    bad = s.call("refuse_after_writing", {"n": 100})
    assert not bad.ok and "not deterministic" not in (bad.error or "")
    assert s.state() == {"counter": 2, "log": []}


# ------------------------------------------- a write whose result is constant but whose state is not (issue 25, item 11)
class Tokens(BaseModel):
    token: str = ""
    n: int = 0


@tool
def new_token_random(state: Tokens) -> str:
    """Writes a random token, always answers "ok" (not deterministic, and its result cannot tell)."""
    state.token = uuid.uuid4().hex
    return "ok"


@tool
def new_token_clock(state: Tokens) -> str:
    """Writes the clock as the token, always answers "ok"."""
    state.token = str(time.perf_counter_ns())
    return "ok"


@tool
def refuse_after_bump(state: Tokens) -> int:
    """Writes, then refuses."""
    state.n += 1
    raise ToolError("no", code="no")


@pytest.mark.parametrize("writer", ["new_token_random", "new_token_clock"])
def test_a_rollback_whose_replay_writes_another_state_with_the_same_result_says_so(writer, caplog):
    """Rollback replayed the earlier writes and compared their *results* only: a write drawing a random
    token (or reading the clock) but answering "ok" made the rollback silently swap the token."""
    spec = define_environment("AtomicTokens", Tokens, [new_token_random, new_token_clock, refuse_after_bump],
                              register=False)
    s = Session(spec)
    assert s.call(writer, {}).content == "ok"
    token = s.state()["token"]
    with caplog.at_level("WARNING", logger="gym_envfactory.session"):
        r = s.call("refuse_after_bump", {})
    assert r.error_code == "no" and r.error.startswith("no (")
    assert "could not be rolled back" in r.error and "not deterministic" in r.error
    assert f"replaying the earlier {writer} call wrote different states when replayed twice" in r.error
    assert "kept as this call left it" in r.error
    assert s.state() == {"token": token, "n": 1}  # the token the session held, never a replayed one
    assert any("could not reproduce the state" in m for m in caplog.messages)
    # the kept state is the new rollback point: the next failure replays nothing and rolls back exactly
    r = s.call("refuse_after_bump", {})
    assert r.error == "no" and s.state() == {"token": token, "n": 1}
