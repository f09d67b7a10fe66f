"""Imported environments keep one live instance per session, are deterministic without editing, and plain
classes import (issue 12, parts 2-4).  Fixtures: tests/generators/fixtures/live/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.importer import ImporterError, import_python_class, import_tool_server
from gym_envfactory.generators.importer.bridge import stable_hash
from gym_envfactory.generators.importer.python_class import import_class_package
from gym_envfactory.generators.packages import purge_modules
from gym_envfactory.session import Session

LIVE = Path(__file__).resolve().parents[2] / "generators/fixtures" / "live"
GARAGE = LIVE / "garage_server.py"
DESK = LIVE / "ticket_desk.py"
GARAGE_STATE = {"drivers": {"ada": "pw", "bo": "pw2"}, "notes": {f"n{i}": "x" * 40 for i in range(50)}}
DESK_SCENARIO = {"agents": {"kim": "pw"}, "tickets": {"7": {"title": "old", "by": "kim", "status": "open"}},
                 "tags": ["b", "a"]}
START = [("login", {"driver": "ada", "password": "pw"}), ("press_brake", {"force": 60.0}), ("start_engine", {})]


@pytest.fixture(scope="module")
def garage(tmp_path_factory):
    out = tmp_path_factory.mktemp("garage")
    spec = import_tool_server(GARAGE, name="LiveGarage", out_dir=out, register=False, validate=False, probe=False,
                              check_isolation=False, sandbox="process", initial_state=GARAGE_STATE)
    yield spec
    purge_modules("LiveGarage")


def run(session, calls):
    out = []
    for name, args in calls:
        r = session.call(name, args)
        out.append((r.ok, r.content, r.error_code))
    return out


def test_private_attributes_survive_between_calls(garage):
    s = Session(garage)
    r = s.call("start_engine", {})
    assert (r.ok, r.error_code) == (False, "forbidden")  # not logged in
    assert s.call("login", {"driver": "ada", "password": "pw"}).ok
    r = s.call("start_engine", {})
    assert not r.ok and "brake" in r.error  # the token survived; the brake is not pressed yet
    assert s.call("press_brake", {"force": 60.0}).ok
    assert s.call("start_engine", {}).ok  # token and brake force both survived
    trip = s.call("drive", {"km": 5}).content
    assert s.state()["trips"][trip["trip_id"]]["driver"] == "ada"
    other = Session(garage)  # sessions do not share an instance
    assert other.call("start_engine", {}).error_code == "forbidden"


def test_repeated_ids_do_not_overwrite_and_random_picks_do_not_repeat(garage):
    s = Session(garage)
    run(s, START)
    trips = [s.call("drive", {"km": 1}).content for _ in range(5)]
    assert len({t["trip_id"] for t in trips}) == 5 and len(s.state()["trips"]) == 5
    assert len({t["lucky_number"] for t in trips}) == 5
    stamps = sorted(t["started_at"] for t in s.state()["trips"].values())
    assert stamps[0].startswith("2025-01-01T00:00") and len(set(stamps)) == 5  # the session clock


def test_reads_do_not_serialise_the_state(garage, monkeypatch):
    module = sys.modules["gym_envfactory._envs.LiveGarage._source"]
    calls = []
    real = module.GarageAPI.save_scenario
    monkeypatch.setattr(module.GarageAPI, "save_scenario", lambda self: calls.append(1) or real(self))
    s = Session(garage)
    run(s, START)
    for _ in range(20):
        assert s.call("count_notes", {}).content == 50
    run(s, [("drive", {"km": 2})] * 3)
    assert calls == []  # nothing read the state yet: no save_scenario
    assert s.state()["mileage"] == 6 and len(calls) == 1
    assert s.state()["mileage"] == 6 and len(calls) == 1  # up to date: not read again


def test_a_failed_call_rolls_the_live_instance_back(garage):
    crashed, clean = Session(garage), Session(garage)
    run(crashed, START + [("drive", {"km": 5})])
    run(clean, START + [("drive", {"km": 5})])
    r = crashed.call("crash", {"km": 100})
    assert not r.ok and crashed.state()["mileage"] == 5
    after = run(crashed, [("drive", {"km": 7}), ("get_mileage", {})])
    assert after == run(clean, [("drive", {"km": 7}), ("get_mileage", {})])  # same ids, same draws
    assert crashed.state_bytes() == clean.state_bytes()
    assert all(t["driver"] == "ada" for t in crashed.state()["trips"].values())  # still logged in


def test_reads_keep_their_draws_and_clock_readings_as_the_original_does(garage):
    """Issue 26 item 5 (reverses the first round's rewinding): a read's draws are kept, so a "random
    pick" read gives a new pick each call and the clock moves on; a failing write after reads is still
    undone in place."""
    assert garage.tools["get_time"].read_only
    s = Session(garage)
    run(s, START)
    first = s.call("get_time", {}).content
    second = s.call("get_time", {}).content
    assert second["draw"] != first["draw"] and second["now"] > first["now"]
    run(s, [("drive", {"km": 5})])
    before = s.state_bytes()
    r = s.call("crash", {"km": 1})
    assert not r.ok and "could not be rolled back" not in r.error
    assert s.state_bytes() == before


def test_validation_mode_rolls_back_onto_a_copy_of_the_instance(garage):
    s = Session(garage, check_writes=True)
    assert [ok for ok, _, _ in run(s, START)] == [True, True, True]  # private-only writes are writes
    r = s.call("press_brake", {"force": 60.0})  # the same force again: nothing changed at all
    assert (r.ok, r.error_code) == (False, "contract_violation") and "no-op" in r.error
    assert s.call("crash", {"km": 100}).error_code == "contract_violation"  # failed after a partial write
    assert s.state()["mileage"] == 0
    trip = s.call("drive", {"km": 3}).content
    assert s.state()["trips"][trip["trip_id"]]["driver"] == "ada"  # the login survived the rollback


def test_forks_copy_the_instance_and_stay_independent(garage):
    s = Session(garage)
    run(s, START)
    a, b = s.fork_many(2)
    assert a.call("drive", {"km": 1}).content == b.call("drive", {"km": 1}).content  # same instance, copied
    trip = a.call("drive", {"km": 4}).content
    assert a.state()["mileage"] == 5 and b.state()["mileage"] == 1
    assert a.state()["trips"][trip["trip_id"]]["driver"] == "ada"  # the login was copied, not rebuilt
    assert s.state()["mileage"] == 0 and s.call("drive", {"km": 2}).ok  # the parent keeps its own, logged in


def test_an_edited_state_model_reloads_the_instance(garage):
    s = Session(garage)
    run(s, START)
    s.state_model().mileage = 1000
    assert s.call("get_mileage", {}).content == 1000
    assert s.call("drive", {"km": 1}).ok and s.state()["mileage"] == 1001


def test_restore_rebuilds_from_the_public_state(garage):
    s = Session(garage)
    run(s, START + [("drive", {"km": 5})])
    snap = s.snapshot()
    t = Session(garage)
    t.restore(snap)
    assert t.state_bytes() == s.state_bytes()
    assert t.call("get_mileage", {}).content == 5
    trip = t.call("drive", {"km": 1}).content  # the engine runs (public); the token was private
    assert t.state()["trips"][trip["trip_id"]]["driver"] == ""


def test_what_cannot_be_made_deterministic_is_named_with_its_line():
    from gym_envfactory.generators.importer.determinism import unfixable_nondeterminism

    src = ("import os, threading, secrets, random, uuid\n"
           "from concurrent.futures import ThreadPoolExecutor as Pool\n"
           "class Timer:\n    pass\n"
           "def f():\n"
           "    return os.urandom(4), threading.Thread(target=f), Pool(2), secrets.token_hex(4), Timer()\n"
           "def g():\n"
           "    return random.choice([1, 2]), uuid.uuid4(), random.SystemRandom().random()\n")
    found = unfixable_nondeterminism(src, "srv.py")
    assert [line.split(" uses ")[0] for line in found] == [
        "srv.py:6: Pool()", "srv.py:6: os.urandom()", "srv.py:6: secrets.token_hex()", "srv.py:6: threading.Thread()",
        "srv.py:8: random.SystemRandom()"]  # the seeded calls and the file's own Timer class are fine
    assert unfixable_nondeterminism(GARAGE.read_text(), "garage.py") == []


def test_stable_hash_does_not_depend_on_the_process():
    assert stable_hash("ada") == stable_hash("ada") and stable_hash("ada") != stable_hash("bo")
    assert stable_hash(("a", 1)) == stable_hash(("a", 1)) and stable_hash(7) == 7


DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    from gym_envfactory.environment.package import load_environment
    from gym_envfactory.session import Session
    spec = load_environment(sys.argv[1])
    s = Session(spec)
    out = []
    for name, args in json.loads(sys.argv[2]):
        r = s.call(name, args)
        out.append([r.ok, r.content])
    print(json.dumps({"results": out, "state": hashlib.sha256(s.state_bytes()).hexdigest()}))
""")


@pytest.mark.parametrize("which", ["server", "class"])
def test_two_processes_give_byte_identical_state(garage, tmp_path, which):
    if which == "server":
        folder, calls = garage.path, START + [("drive", {"km": 3}), ("get_time", {}), ("drive", {"km": 4}), ("list_trips", {})]
    else:
        folder = import_class_package(DESK, "TicketDesk", name="DeskTwice", out_dir=tmp_path,
                                      initial_state=DESK_SCENARIO, validate=False)
        calls = [("login", {"agent": "kim", "password": "pw"}), ("open_ticket", {"title": "printer"}),
                 ("open_ticket", {"title": "vpn"}), ("tag", {"label": "z"}), ("get_ticket", {"ticket_id": 9})]
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT, str(folder), json.dumps(calls)],
                              capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    assert all(ok for ok, _ in outs[0]["results"])


# ------------------------------------------------------------------ plain classes (part 4)
def desk_class():
    sys.path.insert(0, str(LIVE))
    try:
        import ticket_desk
    finally:
        sys.path.remove(str(LIVE))
    return ticket_desk.TicketDesk


def test_plain_class_with_annotated_attributes_a_set_int_keys_and_a_private_login():
    spec = import_python_class(desk_class(), name="LiveDesk", initial_state=DESK_SCENARIO, register=False)
    assert set(spec.state_model.model_fields) == {"agents", "tickets", "tags", "next_id", "motd"}
    assert "_load_scenario" not in spec.tools and "login" in spec.tools
    s = Session(spec)
    assert s.state()["tags"] == ["a", "b"] and s.state()["next_id"] == 8
    assert s.call("open_ticket", {"title": "x"}).error_code == "forbidden"
    assert s.call("login", {"agent": "kim", "password": "no"}).error_type == "tool_error"  # {"error": ...}
    assert s.call("login", {"agent": "kim", "password": "pw"}).ok
    assert s.call("open_ticket", {"title": "printer"}).content == {"ticket_id": 8}  # the private flag survived
    assert s.call("tag", {"label": "c"}).content == ["a", "b", "c"]
    assert s.call("close_ticket", {"ticket_id": 7}).ok  # int keys kept
    state = s.state()
    assert state["tickets"]["7"]["status"] == "closed" and state["tags"] == ["a", "b", "c"]
    assert s.call("close_ticket", {"ticket_id": 99}).error_code == "not_found"
    assert s.state_model().tickets[8]["by"] == "kim"  # typed: int keys, a set
    assert s.state_model().tags == {"a", "b", "c"}


def test_a_class_without_state_is_refused_with_what_to_do():
    class Stateless:
        def __init__(self) -> None:
            self._cache: dict = {}

        def ping(self) -> str:
            return "pong"

    with pytest.raises(ImporterError, match=r"Stateless has no state.*public attributes.*to_dict"):
        import_python_class(Stateless, name="StatelessImp", register=False)


def test_an_object_graph_goes_through_the_class_serialiser():
    class Node:
        def __init__(self, name: str) -> None:
            self.name: str = name
            self.children: list[Node] = []

    class Tree:
        def __init__(self) -> None:
            self.root = Node("root")
            self._cursor = self.root

        def to_dict(self) -> dict:
            def walk(n: Node) -> dict:
                return {"name": n.name, "children": [walk(c) for c in n.children]}
            return {"root": walk(self.root)}

        @classmethod
        def from_dict(cls, data: dict) -> Tree:
            def build(d: dict) -> Node:
                n = Node(d["name"])
                n.children = [build(c) for c in d["children"]]
                return n
            t = cls()
            t.root = t._cursor = build(data["root"])
            return t

        def add(self, name: str) -> int:
            """Add a child under the cursor and move the cursor to it."""
            node = Node(name)
            self._cursor.children.append(node)
            self._cursor = node
            return len(self._cursor.children)

    spec = import_python_class(Tree, name="TreeImp", register=False)
    s = Session(spec)
    assert s.call("add", {"name": "a"}).ok and s.call("add", {"name": "b"}).ok  # the cursor (private) moved
    assert s.state() == {"root": {"name": "root", "children": [{"name": "a", "children": [
        {"name": "b", "children": []}]}]}}


def test_cli_imports_a_plain_class(tmp_path):
    import typer
    from typer.testing import CliRunner

    from gym_envfactory.generators.cli import import_cmd

    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)
    state = tmp_path / "desk.json"
    state.write_text(json.dumps(DESK_SCENARIO))
    scenarios = tmp_path / "scenarios.jsonl"  # validated on import: the private login is a write
    scenarios.write_text(json.dumps({"scenario_id": "login-then-open", "level": "complex", "initial_state": "small",
                                     "steps": [
        {"call": "open_ticket", "arguments": {"title": "early"}, "expect": "tool_error", "error_code": "forbidden"},
        {"call": "login", "arguments": {"agent": "kim", "password": "pw"}, "expect": "ok"},
        {"call": "open_ticket", "arguments": {"title": "vpn"}, "expect": "ok", "state": {"next_id": 9}},
        {"call": "tag", "arguments": {"label": "net"}, "expect": "ok", "state": {"tags": ["a", "b", "net"]}}]}) + "\n")
    res = CliRunner().invoke(app, ["import", str(DESK), "--class", "TicketDesk", "--name", "CliDesk",
                                   "--out", str(tmp_path / "out"), "--initial-state", str(state),
                                   "--scenarios", str(scenarios)])
    assert res.exit_code == 0, res.output
    spec = load_environment(tmp_path / "out" / "CliDesk")
    try:
        s = Session(spec)
        assert [r[0] for r in run(s, [("login", {"agent": "kim", "password": "pw"}),
                                      ("open_ticket", {"title": "vpn"})])] == [True, True]
        ticket = s.state()["tickets"]["8"]
        assert ticket["opened"] == "2025-01-01T00:00:01"  # the file's clock is the session's
        assert ticket["shard"] == stable_hash("vpn") % 8
    finally:
        purge_modules("CliDesk")


def test_an_instance_that_cannot_be_copied_is_rebuilt_on_a_fork(caplog):
    import threading

    class LockedCounter:
        def __init__(self) -> None:
            self.n = 0
            self._lock = threading.Lock()

        def bump(self) -> int:
            """Count one."""
            with self._lock:
                self.n += 1
                return self.n

    spec = import_python_class(LockedCounter, name="LockedCounterImp", register=False)
    s = Session(spec)
    assert s.call("bump", {}).content == 1
    child = s.fork()
    assert child.call("bump", {}).content == 2 and s.call("bump", {}).content == 2
    assert child.state() == {"n": 2} and "cannot be copied" in caplog.text
