"""Strict argument mode per environment (issue 12 part 8; docs/argument-policy.md, "Strict mode"):
``strict_arguments = true`` (environment.toml) or ``define_environment(..., strict_arguments=True)``
validates in Pydantic's strict mode on the arguments as JSON: no string -> number (or bool) and no
number -> string coercion; dates, enums and JSON-string lists still work.  The default stays lax."""

from __future__ import annotations

import json
import textwrap

import pytest
from pydantic import BaseModel, Field

from gym_envfactory import EnvFactoryEnv, Session, define_environment, load_environment, tool
from gym_envfactory.environment.manifest import Manifest
from gym_envfactory.errors import DatasetError
from tests.conftest import LIBRARY_STATE, LibraryDB, add_members, borrow_book, extend_loan, get_book, set_fee

LIBRARY_TOOLS = [get_book, borrow_book, set_fee, add_members, extend_loan]


class Desk(BaseModel):
    """Tickets whose ids are numbers in one system and strings in another."""

    seen: list[str] = Field(default_factory=list)


@tool
def open_ticket(state: Desk, *, ticket_id: str | int, priority: int = 1) -> dict:
    """Open a ticket; returns its id as given, the id's JSON type and the priority."""
    state.seen.append(json.dumps(ticket_id))
    return {"ticket_id": ticket_id, "type": type(ticket_id).__name__, "priority": priority}


@pytest.fixture(scope="module")
def strict_library():
    return define_environment("StrictLibrary", LibraryDB, LIBRARY_TOOLS, initial_state=LIBRARY_STATE,
                              strict_arguments=True, register=False)


@pytest.fixture(scope="module")
def desks():
    return {strict: define_environment(f"Desk{'Strict' if strict else 'Lax'}", Desk, [open_ticket],
                                       strict_arguments=strict, register=False) for strict in (True, False)}


@pytest.mark.parametrize("days", ["7", "7.0", 7.0, True])
def test_a_numeric_string_is_refused_for_an_int_in_strict_mode_and_accepted_in_lax(strict_library, library, days):
    strict = Session(strict_library)
    r = strict.call("borrow_book", {"book_id": "B1", "member": "ada", "days": days})
    assert not r.ok and r.error_type == "invalid_arguments" and r.is_invalid_call
    assert r.details == [{"field": "days", "message": "Input should be a valid integer"}]
    assert strict.state()["loans"] == {}  # nothing changed
    lax = Session(library).call("borrow_book", {"book_id": "B1", "member": "ada", "days": days})
    assert lax.ok and lax.arguments["days"] == (1 if days is True else 7)


def test_strict_mode_refuses_number_to_string_and_string_to_float_or_bool(strict_library):
    s = Session(strict_library)
    assert s.call("get_book", {"book_id": 1}).details[0]["field"] == "book_id"
    assert s.call("set_fee", {"book_id": "B1", "fee": "2.5"}).details[0]["field"] == "fee"
    assert s.call("borrow_book", {"book_id": "B1", "member": "ada", "express": "yes"}).details[0]["field"] == "express"
    nested = s.call("add_members", {"members": [{"name": "cy", "age": "30"}]})
    assert nested.details[0]["field"] == "members.0.age"


def test_strict_mode_keeps_what_json_cannot_type_otherwise(strict_library):
    s = Session(strict_library)
    assert s.call("set_fee", {"book_id": "B1", "fee": 2}).arguments["fee"] == 2.0  # int -> float stays fine
    r = s.call("add_members", {"members": '[{"name": "cy", "age": 30}]'})  # a list as a JSON string
    assert r.ok and r.arguments["members"] == [{"name": "cy", "age": 30}]
    s.call("borrow_book", {"book_id": "B1", "member": "ada"})
    r = s.call("extend_loan", {"loan_id": "L-0001", "new_due": "2026-12-31"})  # dates stay strings in JSON
    assert r.ok and r.arguments["new_due"] == "2026-12-31"
    assert s.call("set_fee", {"book_id": "B1", "fee": float("nan")}).error_type == "invalid_arguments"


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("ticket_id", ["1", 1, "T-7"])
def test_a_str_or_int_id_keeps_its_type(desks, strict, ticket_id):
    s = Session(desks[strict])
    r = s.call("open_ticket", {"ticket_id": ticket_id})
    assert r.ok and r.content["ticket_id"] == ticket_id and r.arguments["ticket_id"] == ticket_id
    assert r.content["type"] == type(ticket_id).__name__ and s.state()["seen"] == [json.dumps(ticket_id)]


def test_strict_priority_refuses_a_string_where_lax_coerces(desks):
    assert Session(desks[True]).call("open_ticket", {"ticket_id": 1, "priority": "2"}).error_type == "invalid_arguments"
    assert Session(desks[False]).call("open_ticket", {"ticket_id": 1, "priority": "2"}).arguments["priority"] == 2


def test_the_reward_compares_calls_under_the_same_strict_policy():
    tasks = [{"task_id": "t", "turns": [{"user": "Borrow Dune for ada for a week.", "ground_truth": [
        {"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada", "days": 7}}]}]}]
    spec = define_environment("StrictRewardLibrary", LibraryDB, LIBRARY_TOOLS, initial_state=LIBRARY_STATE,
                              tasks=tasks, strict_arguments=True, register=False)
    env = EnvFactoryEnv(spec)
    try:
        env.reset(options={"task_id": "t"})
        _, _, _, _, info = env.step({"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada", "days": "7"}})
        assert info["errors"][0]["type"] == "invalid_arguments"
        env.step({"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada", "days": 7}})
        _, reward, terminated, _, info = env.step("Done.")
        assert terminated and info["score"]["invalid"] == 1 and info["score"]["r_state"] == 1.0 and reward < 1.0
    finally:
        env.close()


def test_a_ground_truth_the_strict_policy_refuses_is_a_dataset_error():
    tasks = [{"task_id": "t", "turns": [{"user": "Borrow Dune for ada for a week.", "ground_truth": [
        {"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada", "days": "7"}}]}]}]
    spec = define_environment("StrictBadTask", LibraryDB, LIBRARY_TOOLS, initial_state=LIBRARY_STATE,
                              tasks=tasks, strict_arguments=True, register=False)
    env = EnvFactoryEnv(spec)
    try:
        with pytest.raises(DatasetError, match="days"):
            env.reset(options={"task_id": "t"})
    finally:
        env.close()


PACKAGE_STATE = '''
from pydantic import BaseModel, Field


class Desk(BaseModel):
    seen: list[str] = Field(default_factory=list)
'''

PACKAGE_TOOLS = '''
from gym_envfactory import tool

from .state import Desk


@tool
def open_ticket(state: Desk, *, ticket_id: str | int, priority: int = 1) -> dict:
    """Open a ticket."""
    state.seen.append(str(ticket_id))
    return {"ticket_id": ticket_id, "priority": priority}
'''


@pytest.mark.parametrize("strict", [True, False])
def test_environment_toml_declares_strict_arguments(tmp_path, strict):
    name = f"TomlDesk{'Strict' if strict else 'Lax'}"
    folder = tmp_path / name
    (folder / "initial_states").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text(PACKAGE_STATE)
    (folder / "tools.py").write_text(PACKAGE_TOOLS)
    (folder / "initial_states" / "small.json").write_text("{}")
    (folder / "environment.toml").write_text(textwrap.dedent(f'''
        name = "{name}"
        version = "0.1.0"
        domain = "utilities"
        description = "Tickets."
        state_model = "state:Desk"
        {"strict_arguments = true" if strict else ""}
    '''))
    spec = load_environment(folder)
    assert spec.manifest.strict_arguments is strict
    r = Session(spec).call("open_ticket", {"ticket_id": "7", "priority": "2"})
    assert r.ok is not strict
    if strict:
        assert r.details == [{"field": "priority", "message": "Input should be a valid integer"}]


def test_manifest_toml_round_trip_keeps_strict_arguments():
    m = Manifest(name="Desk", version="0.1.0", domain="utilities", description="d", strict_arguments=True)
    assert "strict_arguments = true" in m.to_toml()
    import tomllib

    assert Manifest.model_validate(tomllib.loads(m.to_toml())) == m
    lax = Manifest(name="Desk", version="0.1.0", domain="utilities", description="d")
    assert "strict_arguments" not in lax.to_toml()
