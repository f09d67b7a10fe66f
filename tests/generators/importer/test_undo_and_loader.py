"""Issue 26, defects 1-3: a failing write of an imported environment is undone in place (no rebuild, no
replay of earlier writes), the rollback's replay logs only the arguments the caller gave, and a plain
class's per-session instance is built the way the class builds itself (constructor, loader on the
stored scenario, public fields).  Fixtures: tests/generators/fixtures/undo/."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.importer import import_python_class, import_tool_server
from gym_envfactory.generators.importer.python_class import import_class_package
from gym_envfactory.generators.packages import purge_modules
from gym_envfactory.session import Session

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "undo"
DEPOT_STATE = {"bins": {"A": {"sku": "bolt", "qty": 5, "history": ["+5"]}}, "log": ["opened"]}
RAFFLE = {"prizes": ["bike", "mug", "pen"], "tickets": {"T1": {"holder": "ada", "won": None, "refunded": False},
                                                        "T2": {"holder": "bo", "won": None, "refunded": False}},
          "random_seed": 11, "first_ticket": 50}


def _import(name: str, file: str, tmp_path_factory, state=None):
    out = tmp_path_factory.mktemp(name)
    return import_tool_server(HERE / file, name=name, out_dir=out, register=False, validate=False, probe=False,
                              check_isolation=False, sandbox="process", initial_state=state)


@pytest.fixture(scope="module")
def depot(tmp_path_factory):
    yield _import("UndoDepot", "depot_server.py", tmp_path_factory, DEPOT_STATE)
    purge_modules("UndoDepot")


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    yield _import("UndoMemoBoard", "memo_board.py", tmp_path_factory)
    purge_modules("UndoMemoBoard")


def run(session, calls):
    return [(r.ok, r.content, r.error_code) for r in (session.call(n, a) for n, a in calls)]


def _count_calls(monkeypatch, cls, names):
    calls: list[str] = []

    def counting(name, real):
        def method(self, *a, **k):
            calls.append(name)
            return real(self, *a, **k)
        return method

    for name in names:
        monkeypatch.setattr(cls, name, counting(name, getattr(cls, name)))
    return calls


# ----------------------------------------------------------------------------- defect 1
def test_a_failing_write_is_undone_in_place_without_rebuild_or_replay(depot, monkeypatch):
    failed, clean = Session(depot), Session(depot)
    plan = [("stock", {"bin_id": "A", "sku": "bolt", "qty": 2}), ("stock", {"bin_id": "B", "sku": "nut", "qty": 4})]
    assert run(failed, plan) == run(clean, plan)
    api_cls = sys.modules["gym_envfactory._envs.UndoDepot._source"].DepotAPI
    calls = _count_calls(monkeypatch, api_cls, ("load_scenario", "save_scenario", "stock", "__init__"))
    # changes a nested record and its list, another record, the log, a set, a defaultdict, a counter, the
    # private Random and a private field, then fails
    r = failed.call("move", {"src": "A", "dst": "C", "qty": 9})
    assert (r.ok, r.error_code) == (False, "invalid_request") and "too few" in r.error
    assert "rolled back" not in r.error
    missing = failed.call("move", {"src": "nope", "dst": "C", "qty": 1})  # fails before any change
    assert (missing.ok, missing.error_code) == (False, "not_found")
    assert calls == []  # no instance rebuilt, no earlier write replayed, nothing serialised
    monkeypatch.undo()
    after = [("stock", {"bin_id": "A", "sku": "bolt", "qty": 1}), ("move", {"src": "A", "dst": "B", "qty": 8}),
             ("get_bin", {"bin_id": "B"}), ("move", {"src": "B", "dst": "C", "qty": 12})]
    assert run(failed, after) == run(clean, after)  # same draws of the private Random, same records
    assert failed.state_bytes() == clean.state_bytes()
    assert [rec.name for rec in failed.action_log][2:4] == ["move", "move"]  # the failed calls stay logged


def test_undo_keeps_aliases_and_the_next_failure_is_undone_too(depot):
    s, clean = Session(depot), Session(depot)
    for sess in (s, clean):
        run(sess, [("stock", {"bin_id": "A", "sku": "bolt", "qty": 1})])
    for _ in range(3):
        assert not s.call("move", {"src": "A", "dst": "Z", "qty": 50}).ok
    assert s.state_bytes() == clean.state_bytes()
    fork, clean_fork = s.fork(), clean.fork()  # a fork copies the (undone) instance
    step = [("move", {"src": "A", "dst": "Z", "qty": 6}), ("get_bin", {"bin_id": "Z"})]
    assert run(fork, step) == run(clean_fork, step) and fork.state_bytes() == clean_fork.state_bytes()


def test_one_state_read_costs_one_serialisation_not_one_per_later_call(depot, monkeypatch):
    s = Session(depot)
    run(s, [("stock", {"bin_id": "A", "sku": "bolt", "qty": 1})])
    api_cls = sys.modules["gym_envfactory._envs.UndoDepot._source"].DepotAPI
    calls = _count_calls(monkeypatch, api_cls, ("save_scenario",))
    assert s.state()["bins"]["A"]["qty"] == 6 and calls == ["save_scenario"]
    run(s, [("stock", {"bin_id": "A", "sku": "bolt", "qty": 1})] * 5)  # the first is brought up to date in the call
    assert calls == ["save_scenario"] * 2 and s.state()["bins"]["A"]["qty"] == 11


def test_a_call_that_reaches_too_much_falls_back_to_the_replay(depot, monkeypatch):
    undo = sys.modules["gym_envfactory._envs.UndoDepot._undo"]
    monkeypatch.setattr(undo, "BUDGET", 1)  # every journal goes over budget
    failed, clean = Session(depot), Session(depot)
    plan = [("stock", {"bin_id": "A", "sku": "bolt", "qty": 2})]
    run(failed, plan)
    run(clean, plan)
    r = failed.call("move", {"src": "A", "dst": "C", "qty": 9})
    assert not r.ok and "rolled back" not in r.error
    after = [("move", {"src": "A", "dst": "C", "qty": 3}), ("get_bin", {"bin_id": "C"})]
    assert run(failed, after) == run(clean, after) and failed.state_bytes() == clean.state_bytes()


# ----------------------------------------------------------------------------- defect 2
def test_rollback_replays_defaulted_none_parameters(board):
    failed, clean = Session(board), Session(board)
    plan = [("post", {"text": "milk"}), ("post", {"text": "eggs", "tag": "shop"}), ("pin", {"memo_id": 1})]
    assert run(failed, plan) == run(clean, plan)
    assert failed.action_log[0].result.arguments == {"text": "milk", "tag": None}  # the canonical form is kept
    r = failed.call("pin", {"memo_id": 2, "note": "far too long a note"})  # pins, then fails: replayed back
    assert (r.ok, r.error_code) == (False, "invalid_request")
    assert "could not be rolled back" not in r.error and "ValidationError" not in r.error
    assert failed.state_bytes() == clean.state_bytes()
    after = [("post", {"text": "bread"}), ("pin", {"memo_id": 3, "note": "ok"})]
    assert run(failed, after) == run(clean, after) and failed.state_bytes() == clean.state_bytes()


# ----------------------------------------------------------------------------- defect 3
def _raffle_module():
    spec = importlib.util.spec_from_file_location("undo_raffle_desk", HERE / "raffle_desk.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAN = [("sell_ticket", {"holder": "cy"}), ("draw", {}), ("sell_ticket", {"holder": "ada"}), ("draw", {}),
        ("refund", {"holder": "bo"}), ("refund", {"holder": "ada"}), ("draw", {})]


def _original_results(cls):
    desk = cls()
    desk._load_scenario(copy.deepcopy(RAFFLE))
    out = []
    for name, args in PLAN:
        snapshot = copy.deepcopy(desk)  # a failed call changes nothing: the original is put back by hand
        try:
            out.append((True, getattr(desk, name)(**args), None))
        except ValueError:
            desk = snapshot
            out.append((False, None, "invalid_request"))
    return out, desk


def test_a_plain_class_instance_runs_its_loader_before_the_fields():
    module = _raffle_module()
    spec = import_python_class(module.RaffleDesk, name="UndoRaffle", initial_state=RAFFLE, register=False)
    s = Session(spec)
    got = run(s, PLAN)
    want, desk = _original_results(module.RaffleDesk)
    assert got == want  # the seeded _random and the _next_ticket counter exist and match the original's
    assert s.state()["tickets"] == desk.tickets and s.state()["prizes"] == desk.prizes


def test_a_class_package_runs_its_loader_too(tmp_path):
    dest = import_class_package(HERE / "raffle_desk.py", "RaffleDesk", name="UndoRafflePkg", out_dir=tmp_path,
                                initial_state=RAFFLE, validate=False)
    try:
        spec = load_environment(dest)
        got = run(Session(spec), PLAN)
        assert got == _original_results(_raffle_module().RaffleDesk)[0]
        assert (dest / "_undo.py").is_file()  # the undo journal travels with the package
    finally:
        purge_modules("UndoRafflePkg")
