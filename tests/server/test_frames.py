"""One frame's oversized answer is refused by its own id: the frame's other answers (a write that ran,
another session's call) still reach their callers (review finding: a single id-less error used to fail
every request pending on the connection, and a client retrying an already applied write would apply it
twice)."""

from __future__ import annotations

import json

from gym_envfactory.server import SessionManager, fastproto
from gym_envfactory.server.fastproto import dispatch_frame


def rpc(m, *reqs):
    out = dispatch_frame(m, json.dumps([{"jsonrpc": "2.0", "id": i, "method": meth, "params": p}
                                         for i, (meth, p) in enumerate(reqs)]))
    return {r["id"]: r for r in json.loads(out)}


def test_an_oversized_answer_is_refused_by_its_id_and_the_rest_of_the_frame_is_answered(monkeypatch):
    m = SessionManager(["HotelBooking"])
    big = rpc(m, ("create", {"env": "HotelBooking", "initial_state": "large"}))[0]["result"]["session_id"]
    small = rpc(m, ("create", {"env": "HotelBooking"}))[0]["result"]["session_id"]
    size_of_large = len(json.dumps(rpc(m, ("state", {"session_id": big}))[0]["result"]))
    monkeypatch.setattr(fastproto, "MAX_RESPONSE_BYTES", size_of_large // 2)
    out = rpc(m, ("state", {"session_id": big}),
              ("call", {"session_id": small, "name": "cancel_hotel_booking",
                        "arguments": {"booking_id": "BK-0001", "reason": "plans changed"}}),
              ("ping", {}))
    assert out[0]["error"]["code"] == fastproto.ERR_INVALID_REQUEST and "frame of its own" in out[0]["error"]["message"]
    assert out[1]["result"]["ok"] is True  # the write ran and its caller hears so
    assert "result" in out[2]
    state = rpc(m, ("state", {"session_id": small}))[0]["result"]
    assert state["bookings"]["BK-0001"]["status"] == "cancelled"


def test_a_single_oversized_answer_keeps_its_id(monkeypatch):
    m = SessionManager(["HotelBooking"])
    sid = rpc(m, ("create", {"env": "HotelBooking", "initial_state": "large"}))[0]["result"]["session_id"]
    monkeypatch.setattr(fastproto, "MAX_RESPONSE_BYTES", 1000)
    out = json.loads(dispatch_frame(m, json.dumps({"jsonrpc": "2.0", "id": "s-1", "method": "state",
                                                    "params": {"session_id": sid}})))
    assert out["id"] == "s-1" and out["error"]["code"] == fastproto.ERR_INVALID_REQUEST


def test_reset_gives_back_a_large_restore_reservation():
    m = SessionManager(["HotelBooking"])
    big = rpc(m, ("create", {"env": "HotelBooking", "initial_state": "large"}))[0]["result"]["session_id"]
    sid = rpc(m, ("create", {"env": "HotelBooking"}))[0]["result"]["session_id"]
    small_reserved = m.sessions[sid].reserved
    snap = rpc(m, ("snapshot", {"session_id": big}))[0]["result"]
    rpc(m, ("restore", {"session_id": sid, "snapshot": snap}))
    assert m.sessions[sid].reserved > 5 * small_reserved
    before = m.admission.reserved
    rpc(m, ("reset", {"session_id": sid}))
    assert m.sessions[sid].reserved < 2 * small_reserved
    assert 0 <= m.admission.reserved < before  # released, never negative


def test_action_log_and_snapshot_reads_count_the_log_the_calls_grew():
    # review finding: a session's size was its state's, so a log grown by large calls was read back
    # (60 MiB) past the memory budget; action_log reads were not estimated at all
    from gym_envfactory.server.admission import Admission, MemoryBudget

    MiB = 1024 * 1024
    adm = Admission(MemoryBudget(300 * MiB, "test budget", 0), rss=lambda: 100 * MiB, trim=lambda: None)
    m = SessionManager(["HotelBooking"], memory_budget=adm)
    sid = rpc(m, ("create", {"env": "HotelBooking"}))[0]["result"]["session_id"]
    for method in ("action_log", "snapshot"):  # a short log reads fine
        assert "result" in rpc(m, (method, {"session_id": sid}))[0]
    for _ in range(20):  # 20 calls of 1 MiB arguments each: the log holds them
        rpc(m, ("call", {"session_id": sid, "name": "get_hotel_details", "arguments": {"hotel_id": "x" * MiB}}))
    assert m.sessions[sid].log_bytes > 20 * MiB
    for method in ("action_log", "snapshot"):
        out = rpc(m, (method, {"session_id": sid}))[0]
        assert out["error"]["code"] == fastproto.ERR_MEMORY, (method, out)
    assert "result" in rpc(m, ("state", {"session_id": sid}))[0]  # the state alone is small
    rpc(m, ("reset", {"session_id": sid}))  # the log is gone: reads fit again
    assert m.sessions[sid].log_bytes == 0 and "result" in rpc(m, ("action_log", {"session_id": sid}))[0]


def test_create_refuses_a_state_whose_json_does_not_load_back():
    """Issue 25, item 5: ``create`` with an initial state holding a float NaN (written to JSON as null)
    used to make a session whose every call failed and whose own snapshot could not be restored."""
    m = SessionManager(["HotelBooking"])
    state = json.loads(m.spec("HotelBooking").initial_state_json())
    state["new_card_limit"] = float("nan")  # json.dumps writes the NaN literal, which the server parses
    out = rpc(m, ("create", {"env": "HotelBooking", "initial_state": state}))[0]
    assert "error" in out and "new_card_limit" in out["error"]["message"] and "null" in out["error"]["message"]
    assert m.sessions == {}  # nothing was created
    state["new_card_limit"] = 5000.0
    assert "result" in rpc(m, ("create", {"env": "HotelBooking", "initial_state": state}))[0]
