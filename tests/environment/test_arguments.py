"""The one argument-validation policy (docs/cases.md C08, C09), one test per parameter kind."""

from __future__ import annotations

import pytest

from gym_envfactory import Session


@pytest.fixture
def s(library):
    return Session(library)


@pytest.mark.parametrize("days", [3, "3", 3.0])
def test_int_parameter_accepts_int_numeric_string_and_integral_float(s, days):
    r = s.call("borrow_book", {"book_id": "B1", "member": "ada", "days": days})
    assert r.ok and r.arguments["days"] == 3 and s.state()["loans"]["L-0001"]["due"] == "2026-12-04"


@pytest.mark.parametrize("days", [3.5, "three", [3], None])
def test_int_parameter_rejects_non_integral(s, days):
    r = s.call("borrow_book", {"book_id": "B1", "member": "ada", "days": days})
    assert not r.ok and r.error_type == "invalid_arguments" and r.is_invalid_call
    assert r.details[0]["field"] == "days"
    assert s.state()["loans"] == {}  # nothing changed


@pytest.mark.parametrize("fee", [5, 5.0, "5"])
def test_float_parameter_accepts_int_float_and_numeric_string(s, fee):
    r = s.call("set_fee", {"book_id": "B1", "fee": fee})
    assert r.ok and r.arguments["fee"] == 5.0 and isinstance(r.arguments["fee"], float)


def test_float_parameter_rejects_text(s):
    assert s.call("set_fee", {"book_id": "B1", "fee": "five"}).error_type == "invalid_arguments"


def test_string_parameter_rejects_number(s):
    # Pydantic lax mode does not turn numbers into strings.
    r = s.call("get_book", {"book_id": 1})
    assert r.error_type == "invalid_arguments"


@pytest.mark.parametrize("flag,expected", [(True, True), ("true", True), (False, False)])
def test_bool_parameter(s, flag, expected):
    r = s.call("borrow_book", {"book_id": "B1", "member": "ada", "express": flag})
    assert r.ok and r.content["express"] is expected


def test_bool_parameter_rejects_text(s):
    assert s.call("borrow_book", {"book_id": "B1", "member": "ada", "express": "maybe"}).error_type == "invalid_arguments"


def test_date_parameter_iso_string(s):
    s.call("borrow_book", {"book_id": "B1", "member": "ada"})
    assert s.call("extend_loan", {"loan_id": "L-0001", "new_due": "2026-12-31"}).ok
    assert s.call("extend_loan", {"loan_id": "L-0001", "new_due": "31/12/2026"}).error_type == "invalid_arguments"


def test_list_of_models_parameter_as_object_or_json_string_is_the_same_call(library):
    a, b = Session(library), Session(library)
    ra = a.call("add_members", {"members": [{"name": "cy", "age": 9}]})
    rb = b.call("add_members", {"members": '[{"name": "cy", "age": 9}]'})
    assert ra.ok and rb.ok and ra.arguments == rb.arguments and a.state() == b.state()


def test_malformed_json_string_for_list_is_invalid_arguments(s):
    r = s.call("add_members", {"members": '[{"name": '})
    assert r.error_type == "invalid_arguments" and r.details[0]["field"].startswith("members")


def test_unknown_parameter_rejected_and_missing_required(s):
    r = s.call("get_book", {"book_id": "B1", "colour": "red"})
    assert r.error_type == "invalid_arguments" and r.details == [{"field": "colour", "message": "unknown parameter"}]
    r = s.call("get_book", {})
    assert r.details == [{"field": "book_id", "message": "required parameter missing"}]


def test_arguments_as_json_string_and_non_object(s):
    assert s.call("get_book", '{"book_id": "B1"}').ok
    assert s.call("get_book", "[1]").error_type == "invalid_arguments"
    assert s.call("get_book", "{oops").error_type == "invalid_arguments"


def test_policy_is_the_same_for_every_tool_and_in_reward_comparison(library):
    """Normalised arguments (used by R_traj) come from the same validation as execution."""
    t = library.tools["borrow_book"]
    assert t.normalize_arguments({"book_id": "B1", "member": "ada", "days": "3"}) == \
        t.normalize_arguments({"book_id": "B1", "member": "ada", "days": 3.0})
