"""Shared fixtures: a small programmatic environment ("Library") covering every argument kind."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from gym_envfactory import ToolError, define_environment, tool


class Book(BaseModel):
    book_id: str
    title: str
    copies: int
    fee: float = 0.0
    tags: list[str] = Field(default_factory=list)


class Member(BaseModel):
    name: str
    age: int


class Loan(BaseModel):
    loan_id: str
    book_id: str
    member: str
    due: dt.date
    status: Literal["open", "returned"] = "open"
    express: bool = False


class LibraryDB(BaseModel):
    now: dt.datetime = dt.datetime(2026, 12, 1, 9)
    books: dict[str, Book] = Field(default_factory=dict)
    members: dict[str, Member] = Field(default_factory=dict)
    loans: dict[str, Loan] = Field(default_factory=dict)
    next_loan: int = 1
    request_count: int = 0


@tool(read_only=True)
def get_book(state: LibraryDB, *, book_id: Annotated[str, Field(description="Book id, e.g. B1")]) -> Book:
    """Get one book by id."""
    _ = state.request_count  # read only
    if book_id not in state.books:
        raise ToolError(f"no book {book_id}", code="not_found")
    return state.books[book_id]


@tool
def borrow_book(state: LibraryDB, *, book_id: str, member: str, days: int = 14, express: bool = False) -> Loan:
    """Borrow a book for `days` days; returns the loan."""
    book = state.books.get(book_id)
    if book is None:
        raise ToolError(f"no book {book_id}", code="not_found")
    if member not in state.members:
        raise ToolError(f"no member {member}", code="not_found")
    if book.copies <= 0:
        raise ToolError(f"{book.title} has no copies left", code="sold_out")
    if not 1 <= days <= 60:
        raise ToolError("days must be 1..60", code="invalid_dates")
    loan = Loan(loan_id=f"L-{state.next_loan:04d}", book_id=book_id, member=member,
                due=state.now.date() + dt.timedelta(days=days), express=express)
    state.next_loan += 1
    book.copies -= 1
    state.loans[loan.loan_id] = loan
    return loan


@tool(destructive=True)
def return_book(state: LibraryDB, *, loan_id: str) -> Loan:
    """Return a borrowed book."""
    loan = state.loans.get(loan_id)
    if loan is None:
        raise ToolError(f"no loan {loan_id}", code="not_found")
    if loan.status == "returned":
        raise ToolError(f"loan {loan_id} already returned", code="already_returned")
    loan.status = "returned"
    state.books[loan.book_id].copies += 1
    return loan


@tool
def set_fee(state: LibraryDB, *, book_id: str, fee: float) -> Book:
    """Set a book's late fee per day."""
    if book_id not in state.books:
        raise ToolError(f"no book {book_id}", code="not_found")
    if fee < 0:
        raise ToolError("fee must be >= 0", code="invalid_amount")
    if state.books[book_id].fee == fee:
        raise ToolError(f"the fee of {book_id} is already {fee}", code="no_change")
    state.books[book_id].fee = fee
    return state.books[book_id]


@tool
def add_members(state: LibraryDB, *, members: list[Member]) -> list[str]:
    """Register several members at once."""
    if not members:
        raise ToolError("no members given", code="invalid_state")
    for m in members:
        if m.name in state.members:
            raise ToolError(f"member {m.name} exists", code="duplicate")
    for m in members:
        state.members[m.name] = m
    return [m.name for m in members]


@tool
def extend_loan(state: LibraryDB, *, loan_id: str, new_due: dt.date, reason: str = "") -> Loan:
    """Move a loan's due date."""
    loan = state.loans.get(loan_id)
    if loan is None:
        raise ToolError(f"no loan {loan_id}", code="not_found")
    if new_due <= loan.due:
        raise ToolError("new due date must be later", code="invalid_dates")
    loan.due = new_due
    return loan


@tool
def buggy_noop_write(state: LibraryDB, *, book_id: str) -> dict:
    """A planted bug: a write tool that reports success without changing anything (docs/cases.md C14)."""
    return {"ok": True, "book_id": book_id}


LIBRARY_STATE = {
    "books": {
        "B1": {"book_id": "B1", "title": "Dune", "copies": 2, "fee": 0.5, "tags": ["sf", "classic"]},
        "B2": {"book_id": "B2", "title": "Emma", "copies": 1, "fee": 0.25},
        "B3": {"book_id": "B3", "title": "Ulysses", "copies": 0},
    },
    "members": {"ada": {"name": "ada", "age": 36}, "bob": {"name": "bob", "age": 41}},
}

LIBRARY_TASKS: list[dict[str, Any]] = [
    {"task_id": "borrow-dune", "turns": [
        {"user": "Borrow Dune for ada.", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}],
         "expected_outputs": ["L-0001"]}]},
    {"task_id": "borrow-return", "split": "test", "turns": [
        {"user": "Borrow Emma for bob for 7 days.", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B2", "member": "bob", "days": 7}}]},
        {"user": "Actually he is done, return it. Also lend Dune to ada.",
         "ground_truth": [{"name": "return_book", "arguments": {"loan_id": "L-0001"}},
                          {"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}]}]},
    {"task_id": "ask-first", "turns": [
        {"user": "Please lend a book to ada.", "clarification": True},
        {"user": "Emma, for 10 days.", "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B2", "member": "ada", "days": 10}}]}]},
    {"task_id": "extend", "turns": [
        {"user": "Lend Dune to bob and push the due date to 2026-12-31 because of holidays.",
         "ground_truth": [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "bob"}},
                          {"name": "extend_loan", "arguments": {"loan_id": "L-0001", "new_due": "2026-12-31", "reason": "holidays"},
                           "masked_arguments": ["reason"]}]}]},
    {"task_id": "lookup", "turns": [
        {"user": "How many copies of Dune are there?", "ground_truth": [{"name": "get_book", "arguments": {"book_id": "B1"}}],
         "expected_outputs": ["2"]}]},
]


def make_library(name: str = "Library", *, with_bug: bool = False, register: bool = True):
    tools: list[Callable[..., Any]] = [get_book, borrow_book, return_book, set_fee, add_members, extend_loan]
    if with_bug:
        tools.append(buggy_noop_write)
    return define_environment(
        name, LibraryDB, tools, initial_state=LIBRARY_STATE, tasks=LIBRARY_TASKS,
        bookkeeping_fields=["request_count"], set_fields=["books.*.tags"], register=register,
        description="A small lending library.",
    )


@pytest.fixture(scope="session")
def library():
    return make_library()


#: The bearer token of :func:`catalog_server`.
CATALOG_SERVER_TOKEN = "catalog-server-token"


@pytest.fixture(scope="session")
def catalog_server():
    """``envfactory serve --all`` on a free loopback port, guarded by :data:`CATALOG_SERVER_TOKEN`; its URL.
    One server for the whole test session (sampled tasks may span HotelBooking + TeamCalendar)."""
    from tests.server.test_app import start_server

    proc, url = start_server("--all", token=CATALOG_SERVER_TOKEN)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
    proc.stdout.close()
    proc.stderr.close()
