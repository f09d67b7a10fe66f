"""The importer (issue 4, part 5): a single-file tool server and a plain class become environments."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
import tomllib
from pathlib import Path

import gymnasium as gym
import pytest

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.package import load_environment
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.generators.importer import (
    ImporterError,
    analyze_tool_server,
    import_python_class,
    import_tool_server,
)
from gym_envfactory.session import Session
from gym_envfactory.validation import lint_source, validate_environment

FIXTURES = Path(__file__).resolve().parents[2] / "generators/fixtures"
SERVER = FIXTURES / "bookstore_server.py"
SCENARIO = FIXTURES / "bookstore_scenario.json"

SCENARIOS = [
    {"scenario_id": "buy-and-cancel", "level": "complex", "initial_state": "small", "steps": [
        {"call": "add_to_cart", "arguments": {"book_id": "B-001", "quantity": 2}, "expect": "ok",
         "state": {"cart": [{"book_id": "B-001", "quantity": 2}]}},
        {"call": "place_order", "arguments": {}, "expect": "ok", "result": {"order_id": "ORD-0002", "total": 37.0},
         "state": {"books.B-001.stock": 1, "orders.ORD-0002.status": "placed", "next_order_number": 3}},
        {"call": "cancel_order", "arguments": {"order_id": "ORD-0002"}, "expect": "ok",
         "state": {"books.B-001.stock": 3, "orders.ORD-0002.status": "cancelled"}},
        {"call": "cancel_order", "arguments": {"order_id": "ORD-0002"}, "expect": "tool_error"}]},
    {"scenario_id": "out-of-stock", "level": "boundary", "initial_state": "small", "steps": [
        {"call": "add_to_cart", "arguments": {"book_id": "B-003"}, "expect": "tool_error", "error_code": "out_of_stock"},
        {"call": "add_to_cart", "arguments": {"book_id": "B-002", "quantity": 0}, "expect": "tool_error",
         "error_code": "invalid_request"}]},
]

TASKS = [{"task_id": "buy-orchard", "turns": [{
    "user": "Please buy two copies of The Glass Orchard.",
    "ground_truth": [{"name": "add_to_cart", "arguments": {"book_id": "B-001", "quantity": 2}},
                     {"name": "place_order", "arguments": {}}],
    "expected_outputs": ["ORD-0002"]}]}]


def _load_original(module_name: str = "bookstore_server_original"):
    """The fixture imported the ordinary way, with the real fastmcp (as the original server runs)."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SERVER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _process_sandbox(monkeypatch):
    """``sandbox="auto"`` means the process sandbox here: a runtime image on this host may predate the
    importer's stage entry point (the docker mode is tested in tests/docker/)."""
    from gym_envfactory.generators.sandbox import container

    monkeypatch.setattr(container, "docker_available", lambda image=None: False)


@pytest.fixture
def bookstore(tmp_path):
    return import_tool_server(SERVER, name="BookStoreImp", out_dir=tmp_path, initial_state=SCENARIO,
                              scenarios=SCENARIOS, tasks=TASKS)


def test_package_layout_and_manifest(bookstore, tmp_path):
    folder = tmp_path / "BookStoreImp"
    assert bookstore.path == folder.resolve()
    for f in ("environment.toml", "__init__.py", "_source.py", "_bridge.py", "state.py", "tools.py",
              "initial_states/small.json", "scenarios.jsonl", "tasks.jsonl"):
        assert (folder / f).is_file(), f
    assert (folder / "_source.py").read_bytes() == SERVER.read_bytes()  # copied, not edited
    man = tomllib.loads((folder / "environment.toml").read_text())
    assert man["provenance"]["kind"] == "imported" and man["provenance"]["source"] == str(SERVER.resolve())
    assert man["state_model"] == "state:BookStoreScenario" and bookstore.state_model.__name__ == "BookStoreScenario"
    assert json.loads((folder / "initial_states/small.json").read_text()) == json.loads(SCENARIO.read_text())
    again = load_environment(folder)  # a normal environment folder
    assert list(again.tools) == list(bookstore.tools)


def test_tool_names_descriptions_and_schemas_equal_the_wrappers(bookstore):
    original = _load_original()
    listed = {t.name: t for t in asyncio.run(original.mcp.list_tools())}
    assert set(listed) - set(bookstore.tools) == {"load_scenario", "save_scenario"}
    assert "load_scenario" not in bookstore.tools and "save_scenario" not in bookstore.tools
    assert list(bookstore.tools) == ["search_books", "get_book", "add_to_cart", "place_order", "cancel_order",
                                     "list_orders"]
    for name, spec in bookstore.tools.items():
        assert spec.description == listed[name].description, name
        assert spec.input_schema == listed[name].parameters, name
    assert bookstore.tools["search_books"].input_schema["properties"]["query"]["description"].startswith("Words")
    ann = {n: (t.read_only, t.annotations.destructive) for n, t in bookstore.tools.items()}
    assert ann == {"search_books": (True, False), "get_book": (True, False), "add_to_cart": (False, False),
                   "place_order": (False, False), "cancel_order": (False, True), "list_orders": (True, False)}


def test_write_changes_state_and_scenario_round_trips(bookstore):
    s = Session(bookstore)
    r = s.call("add_to_cart", {"book_id": "B-001", "quantity": "2"})
    assert r.ok and r.content == {"success": True, "cart_size": 2}
    r = s.call("place_order", {})
    assert r.ok and r.content["order_id"] == "ORD-0002" and r.content["total"] == 37.0
    state = s.state()
    assert state["books"]["B-001"]["stock"] == 1 and state["cart"] == [] and state["next_order_number"] == 3
    # the state is the scenario: it loads into a fresh API and saves back unchanged
    original = _load_original()
    api = original.BookStoreAPI()
    api.load_scenario(state)
    assert api.save_scenario() == state
    assert s.call("get_book", {"book_id": "B-001"}).content["stock"] == 1
    snap = s.snapshot()
    s.call("cancel_order", {"order_id": "ORD-0002"})
    s.restore(snap)
    assert s.state() == state


def test_errors_become_tool_errors_and_leave_state_unchanged(bookstore):
    s = Session(bookstore, check_writes=True)
    before = s.state_bytes()
    cases = [
        ("get_book", {"book_id": "B-999"}, "not_found", "Book B-999 not found"),          # KeyError
        ("cancel_order", {"order_id": "ORD-9"}, "invalid_request", "Unknown order id ORD-9"),  # ValueError
        ("add_to_cart", {"book_id": "B-003"}, "out_of_stock", "Only 0 copies of B-003 in stock"),  # custom
        ("add_to_cart", {"book_id": "B-777"}, "tool_error", "Book B-777 not found"),      # {"error": ...}
        ("place_order", {}, "tool_error", "The cart is empty; add books first"),          # {"success": False}
    ]
    for name, args, code, message in cases:
        r = s.call(name, args)
        assert (r.ok, r.error_type, r.error_code, r.error) == (False, "tool_error", code, message), name
        assert s.state_bytes() == before
    r = s.call("get_book", {"book_id": "B-001", "extra": 1})
    assert r.error_type == "invalid_arguments"


def _script(tag: str) -> list[tuple[str, dict]]:
    if tag == "a":
        return [("add_to_cart", {"book_id": "B-001"}), ("add_to_cart", {"book_id": "B-004", "quantity": 2}),
                ("place_order", {}), ("cancel_order", {"order_id": "ORD-0001"}), ("list_orders", {})]
    return [("add_to_cart", {"book_id": "B-002"}), ("place_order", {}), ("add_to_cart", {"book_id": "B-001", "quantity": 3}),
            ("cancel_order", {"order_id": "ORD-0002"}), ("place_order", {})]


def test_two_concurrent_sessions_stay_isolated(bookstore):
    original = _load_original()
    shared_before = original.api.save_scenario()
    sessions = {"a": Session(bookstore), "b": Session(bookstore)}
    barrier = threading.Barrier(2)
    results: dict[str, list] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def run(tag: str) -> None:
        try:
            for name, args in _script(tag):
                barrier.wait(timeout=10)  # interleave: both sessions write at every step
                results[tag].append(sessions[tag].call(name, args).to_dict())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for tag in "ab":
        solo = Session(bookstore)
        solo_results = [solo.call(n, a).to_dict() for n, a in _script(tag)]
        assert results[tag] == solo_results
        assert sessions[tag].state_bytes() == solo.state_bytes()
        assert all(r["ok"] for r in results[tag]), results[tag]
    assert sessions["a"].state() != sessions["b"].state()
    assert sessions["a"].state()["orders"]["ORD-0002"]["items"] == [
        {"book_id": "B-001", "quantity": 1}, {"book_id": "B-004", "quantity": 2}]
    # neither the original module's shared instance nor the package's copy of it was used
    assert original.api.save_scenario() == shared_before == original.BookStoreAPI().save_scenario()
    source = sys.modules[f"gym_envfactory._envs.{bookstore.name}._source"]
    with pytest.raises(RuntimeError, match="shared module-level instance"):
        source.api.save_scenario()
    assert type(source.mcp).__name__ == "StubServer"  # the package never starts or needs a real FastMCP


def test_gym_make_runs_an_episode(bookstore):
    assert get_environment("BookStoreImp") is bookstore
    env = gym.make("envfactory/BookStoreImp-v0", task_id="buy-orchard")
    obs, info = env.reset(seed=0)
    assert obs[-1]["content"].startswith("Please buy") and len(info["tools"]) == 6
    obs, r, term, trunc, info = env.step([ToolCall("add_to_cart", {"book_id": "B-001", "quantity": 2}),
                                          ToolCall("place_order", {})])
    assert all(t["ok"] for t in info["tool_results"]) and not term
    obs, r, term, trunc, info = env.step("Done: order ORD-0002 is placed.")
    assert term and r == 1.0
    env.close()


def test_validate_environment_passes(bookstore):
    report = validate_environment(bookstore)
    assert report.passed, report.failures()
    assert report.n_tasks == 1 and not report.lint_failures
    assert {s.scenario_id for s in report.scenarios} >= {"buy-and-cancel", "probe-get_book-ok", "probe-get_book-error"}
    for f in sorted(bookstore.path.glob("*.py")):
        assert lint_source(f.read_text(), str(f)) == [], f.name


def test_reimport_replaces_and_default_name(tmp_path):
    spec = import_tool_server(SERVER, out_dir=tmp_path, register=False)
    assert spec.name == "BookStore" and json.loads(spec.initial_state_json()) == {
        "books": {}, "cart": [], "orders": {}, "next_order_number": 1}
    with pytest.raises(ImporterError, match="exists"):
        import_tool_server(SERVER, out_dir=tmp_path, register=False)
    again = import_tool_server(SERVER, out_dir=tmp_path, register=False, overwrite=True, initial_state=SCENARIO)
    assert json.loads(again.initial_state_json())["next_order_number"] == 2


def test_not_the_layout_is_rejected(tmp_path):
    bad = tmp_path / "plain_server.py"
    bad.write_text("from fastmcp import FastMCP\nmcp = FastMCP('x')\n\n@mcp.tool()\ndef ping() -> str:\n    return 'pong'\n")
    with pytest.raises(ImporterError, match="load_scenario"):
        analyze_tool_server(bad)
    leaky = tmp_path / "leaky_server.py"
    leaky.write_text(SERVER.read_text().replace("class BookStoreAPI:\n", "class BookStoreAPI:\n    seen = []\n"))
    with pytest.raises(ImporterError, match="mutable class attribute"):
        analyze_tool_server(leaky)
    assert not (tmp_path / "BookStore").exists()


# ----------------------------------------------------------------------------- plain classes


def _wallet_class():
    spec = importlib.util.spec_from_file_location("counter_shop_fixture", FIXTURES / "counter_shop.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["counter_shop_fixture"] = mod
    spec.loader.exec_module(mod)
    return mod.Wallet


def test_plain_class_under_gym_make_with_isolated_sessions():
    Wallet = _wallet_class()
    spec = import_python_class(Wallet, name="WalletImp", tasks=[{"task_id": "dep", "turns": [{
        "user": "Deposit 50 cents for the coffee.",
        "ground_truth": [{"name": "deposit", "arguments": {"amount": 50, "note": "coffee"}}]}]}])
    assert list(spec.tools) == ["get_balance", "deposit", "withdraw"]
    assert set(spec.state_model.model_fields) == {"owner", "balance", "history"}
    assert spec.tools["get_balance"].read_only and not spec.tools["deposit"].read_only
    assert spec.tools["deposit"].input_schema["required"] == ["amount"]
    env = gym.make("envfactory/WalletImp-v0", task_id="dep")
    env.reset(seed=0)
    _, _, term, _, info = env.step([ToolCall("deposit", {"amount": 50, "note": "coffee"})])
    assert info["tool_results"][0]["content"] == 150
    _, r, term, _, _ = env.step("Deposited.")
    assert term and r == 1.0
    a, b = Session(spec, check_writes=True), Session(spec, check_writes=True)
    assert a.call("deposit", {"amount": 5}).content == 105
    assert b.call("withdraw", {"amount": 30}).content == 70
    assert a.state() == {"owner": "ada", "balance": 105, "history": ["+5"]}
    assert b.state() == {"owner": "ada", "balance": 70, "history": ["-30"]}
    r = b.call("withdraw", {"amount": 1000})
    assert (r.error_type, r.error_code, r.error) == ("tool_error", "insufficient_funds", "balance 70 is less than 1000")
    r = a.call("deposit", {"amount": -1})
    assert (r.error_type, r.error_code) == ("tool_error", "invalid_request")
    assert b.state()["balance"] == 70 and a.state()["balance"] == 105
    report = validate_environment(spec, require_coverage=False)
    assert report.passed, report.failures()


def test_plain_class_needs_typed_methods():
    class Untyped:
        def __init__(self) -> None:
            self.n = 0

        def bump(self, by):  # no annotation
            self.n += by

    with pytest.raises(ImporterError, match="no type annotation"):
        import_python_class(Untyped, name="UntypedImp", register=False)


VARIANT = '''\
"""Notes server: the other common spellings of the layout."""
from __future__ import annotations

import json
from typing import Dict

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel


class Note(BaseModel):
    text: str


class NotesScenario(BaseModel):
    notes: Dict[str, Note] = {}
    seq: int = 0


class NotesAPI:
    def __init__(self):
        self.notes: Dict[str, Note] = {}
        self.seq = 0

    def load_scenario(self, scenario: dict) -> None:
        s = NotesScenario(**scenario)
        self.notes, self.seq = dict(s.notes), s.seq

    def save_scenario(self) -> dict:
        return {"notes": {k: v.model_dump() for k, v in self.notes.items()}, "seq": self.seq}

    def add_note(self, text: str) -> str:
        self.seq += 1
        self.notes[f"N{self.seq}"] = Note(text=text)
        return f"N{self.seq}"

    def delete_note(self, note_id: str) -> None:
        self.notes.pop(note_id)


notes_api = NotesAPI()
mcp = FastMCP("notes")


def _count() -> int:
    return len(notes_api.notes)


@mcp.tool
async def add_note(text: str, ctx: Context = None) -> str:
    """Add a note; returns JSON with its id and the note count."""
    note_id = notes_api.add_note(text)
    return json.dumps({"note_id": note_id, "count": _count()})


@mcp.tool("remove_note")
def delete(note_id: str) -> str:
    """Delete a note by id."""
    try:
        notes_api.delete_note(note_id)
    except KeyError:
        return f"Error: no note {note_id}"
    return "deleted"
'''


def test_variant_layout_mcp_sdk_async_context_helpers(tmp_path):
    """`from mcp.server.fastmcp import FastMCP` (absent from mcp 2.x: stubbed), bare `@mcp.tool`, a named
    registration, async wrappers, a Context parameter, a helper that reads the shared instance, and
    errors reported as "Error: ..." strings."""
    src = tmp_path / "notes_server.py"
    src.write_text(VARIANT)
    spec = import_tool_server(src, out_dir=tmp_path / "out", register=False)
    assert spec.name == "Notes" and list(spec.tools) == ["add_note", "remove_note"]
    assert set(spec.tools["add_note"].input_schema["properties"]) == {"text"}
    a, b = Session(spec, check_writes=True), Session(spec, check_writes=True)
    assert json.loads(a.call("add_note", {"text": "x"}).content) == {"note_id": "N1", "count": 1}
    assert json.loads(a.call("add_note", {"text": "y"}).content) == {"note_id": "N2", "count": 2}
    assert json.loads(b.call("add_note", {"text": "z"}).content) == {"note_id": "N1", "count": 1}
    r = a.call("remove_note", {"note_id": "N9"})
    assert (r.error_type, r.error) == ("tool_error", "Error: no note N9")
    assert a.call("remove_note", {"note_id": "N1"}).content == "deleted"
    assert a.state() == {"notes": {"N2": {"text": "y"}}, "seq": 2} and b.state()["seq"] == 1
    assert spec.tools["remove_note"].annotations.destructive


# ------------------------------------------------------------------------------ session isolation

COUNTER_SERVER = FIXTURES / "counter_server.py"


def test_module_level_counter_and_audit_list_are_refused(tmp_path):
    with pytest.raises(ImporterError) as err:
        import_tool_server(COUNTER_SERVER, name="TicketsLeaky", out_dir=tmp_path)
    msg = str(err.value)
    assert "not isolated" in msg and "_ids" in msg and "AUDIT" in msg and "TicketAPI" in msg
    assert not (tmp_path / "TicketsLeaky").exists()
    assert "envfactory/TicketsLeaky-v0" not in gym.registry
    # the static part names exactly the shared globals (not the API class, the instance, models or mcp)
    from gym_envfactory.generators.importer import shared_module_globals

    assert shared_module_globals(analyze_tool_server(COUNTER_SERVER)) == {"AUDIT": ["TicketAPI"], "_ids": ["TicketAPI"]}


def test_state_derived_ids_and_constants_import_fine(tmp_path, caplog):
    src = COUNTER_SERVER.read_text()
    src = src.replace("_ids = itertools.count(1)\nAUDIT: List[str] = []\n",
                      'PREFIX = "T"\nMAX_TITLE = 80\nlabels = ("ticket", "bug")\n')
    src = src.replace('tid = f"T-{next(_ids)}"\n        AUDIT.append(title)',
                      'tid = f"{PREFIX}-{len(self.tickets) + 1}"\n        title = title[:MAX_TITLE]')
    src = src.replace('"audit_size": len(AUDIT)', '"kind": labels[0]')
    (tmp_path / "fixed_server.py").write_text(src)
    spec = import_tool_server(tmp_path / "fixed_server.py", name="TicketsFixed", out_dir=tmp_path / "out")
    try:
        a, b = Session(spec), Session(spec)
        assert a.call("open_ticket", {"title": "a1"}).content == {"ticket_id": "T-1", "kind": "ticket"}
        assert b.call("open_ticket", {"title": "b1"}).content == {"ticket_id": "T-1", "kind": "ticket"}
        # a lower-case module-level name is reported as a warning, not refused; UPPER_CASE constants are fine
        assert "labels" in caplog.text and "MAX_TITLE" not in caplog.text and "PREFIX (used" not in caplog.text
    finally:
        from gym_envfactory.environment.catalog import forget_environment

        forget_environment("TicketsFixed")
        gym.registry.pop("envfactory/TicketsFixed-v0", None)


def test_isolation_check_can_be_switched_off(tmp_path):
    spec = import_tool_server(COUNTER_SERVER, name="TicketsUnchecked", out_dir=tmp_path, check_isolation=False,
                              register=False, validate=False)  # validation's lint still names the mutated AUDIT
    assert set(spec.tools) == {"open_ticket", "list_tickets"}


def _import_app():
    import typer

    from gym_envfactory.generators.cli import import_cmd

    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps "import" as a subcommand
    return app


def test_cli_reimport_says_overwrite_flag_and_tasks_are_pointed_to(tmp_path):
    """Issue 14: from the CLI, an existing folder says to pass ``--overwrite`` (not the Python API's
    ``overwrite=True``); an import without tasks says so, and ``reset()`` then points to ``--tasks``."""
    from typer.testing import CliRunner

    from gym_envfactory.envs.env import EnvFactoryEnv
    from gym_envfactory.errors import UnknownTaskError

    app, runner = _import_app(), CliRunner()
    args = ["import", str(SERVER), "--name", "NoTaskShop", "--out", str(tmp_path), "--sandbox", "process", "--no-validate"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "NoTaskShop has no tasks" in first.output and "--tasks" in first.output
    assert f"export ENVFACTORY_CATALOG={tmp_path.resolve()}" in first.output
    with pytest.raises(UnknownTaskError, match=r"NoTaskShop has no tasks.*tasks add NoTaskShop FILE.*tasks=FILE"):
        EnvFactoryEnv(load_environment(tmp_path / "NoTaskShop")).reset()
    again = runner.invoke(app, args)
    assert again.exit_code == 1
    assert "NoTaskShop exists; pass --overwrite to replace it" in again.output
    assert "overwrite=True" not in again.output
    with pytest.raises(ImporterError, match="overwrite=True"):  # the Python API keeps its own wording
        import_tool_server(SERVER, name="NoTaskShop", out_dir=tmp_path, register=False)


def test_gen_env_and_import_write_to_a_user_folder_by_default():
    """Issue 14: ``gen env`` (and ``import``) wrote into the checkout's ``env_images/`` by default."""
    import typer

    from gym_envfactory.generators.cli import DEFAULT_OUT, catalog_hint, gen_app

    assert DEFAULT_OUT == Path("envfactory_envs")
    for cmd in (typer.main.get_command(gen_app).commands["env"], typer.main.get_command(_import_app()).commands["import"]):
        out = next(p for p in cmd.params if p.name == "out")
        assert Path(out.default) == DEFAULT_OUT
    from gym_envfactory.environment.catalog import catalog_dirs

    assert catalog_hint(catalog_dirs()[-1]) is None  # already searched: nothing to say
