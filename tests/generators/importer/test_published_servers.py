"""Published-style tool servers through the CLI with validation on (issue 12, parts 1 and 5).

The fixtures (tests/generators/fixtures/published/, one file per cause) follow the layout of the
single-file FastMCP servers published with the EnvFactory paper: Pydantic record models, a root
scenario model, an API class with load_scenario/save_scenario, ``api = XAPI()``, ``mcp = FastMCP(...)``
and ``@mcp.tool()`` wrappers.  A scenario JSON beside a server (``<stem>.json``) is its initial state.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.cli import import_cmd
from gym_envfactory.generators.importer import (
    ImporterError,
    analyze_tool_server,
    bridge,
    classify_tool,
    import_tool_server,
)
from gym_envfactory.generators.importer.isolation import static_refusals
from gym_envfactory.generators.importer.server import name_collision
from gym_envfactory.session import Session
from gym_envfactory.validation import lint_source, module_mutations, validate_environment

PUBLISHED = Path(__file__).resolve().parents[2] / "generators/fixtures" / "published"
IMPORTED = ("Bank", "Clinic", "Desk", "InnRooms", "Profiles")


@pytest.fixture(autouse=True)
def _process_sandbox(monkeypatch):
    """``sandbox="auto"`` means the process sandbox here (the docker mode is tested in tests/docker/)."""
    from gym_envfactory.generators.sandbox import container

    monkeypatch.setattr(container, "docker_available", lambda image=None: False)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps "import" as a subcommand
    return app


@pytest.fixture(scope="module")
def folder_import(tmp_path_factory):
    """``envfactory import tests/generators/fixtures/published --out OUT`` (defaults: validation on)."""
    out = tmp_path_factory.mktemp("published")
    result = CliRunner().invoke(_app(), ["import", str(PUBLISHED), "--out", str(out), "--sandbox", "process"])
    return out, result


def test_folder_import_summary_refusals_name_file_line_and_reason(folder_import):
    out, result = folder_import
    text = " ".join(result.output.split())  # the table wraps long cells
    joined = text.replace("│", " ").replace("  ", " ")
    assert result.exit_code == 1, result.output  # some files are refused...
    assert sorted(p.name for p in out.iterdir() if (p / "environment.toml").is_file()) == list(IMPORTED)  # ...others written
    assert "5 of 8 imported and validated; 3 refused" in text
    for col in ("file", "environment", "tools", "reads/writes", "result", "notes"):
        assert col in text
    squeezed = joined.replace(" ", "")
    # a mutated module list: the file, the line of the append, the name and why
    assert "audit_mutated.py:32:module-levelmutable'audit_log'(line8)ismutated(.append())" in squeezed
    # the name of a shipped environment
    assert "HotelBookingisthenameofaregisteredenvironment(theshippedcatalog" in squeezed
    # two API classes: both named with their lines, and the option that decides
    assert "LegacyLibraryAPI(line18),LibraryAPI(line29);chooseonewith--api-classNAME" in squeezed
    # the silent no-op write the probe observed is reported, not dropped
    assert "no-opwritesobserved:set_theme(user_id='U-1',theme='light')" in squeezed
    assert "read-only(probesawnochange):inn_search_rooms" in squeezed


@pytest.mark.parametrize("env", IMPORTED)
def test_folder_imports_pass_validate_unedited(folder_import, env):
    out, _ = folder_import
    spec = load_environment(out / env)
    report = validate_environment(spec)
    assert report.passed, report.failures()
    source = PUBLISHED / {"Bank": "bank_results.py", "Clinic": "clinic_required.py", "Desk": "ticket_ids.py",
                          "InnRooms": "inn_rooms.py", "Profiles": "profile_noop.py"}[env]
    assert (out / env / "_source.py").read_bytes() == source.read_bytes()  # unedited


def test_read_write_from_annotations_and_service_prefixes(folder_import):
    out, _ = folder_import
    tools = load_environment(out / "InnRooms").tools
    assert {n: t.read_only for n, t in tools.items()} == {
        "inn_get_room": True, "inn_list_rooms": True,  # service prefix skipped
        "inn_search_rooms": True,  # its method writes self.last_search; the probe saw no change
        "room_availability": True,  # annotations={"readOnlyHint": True}
        "rate_card": True,  # annotations=ToolAnnotations(readOnlyHint=True)
        "book_room": False}
    assert classify_tool("hotel_get_room", None, [], None, None) == (True, False)
    assert classify_tool("crmListLeads", None, [], None, None) == (True, False)
    assert classify_tool("hotel_cancel_stay", None, [], None, None) == (False, True)
    assert classify_tool("get_x", None, [], None, None, {"readOnlyHint": False, "destructiveHint": True}) == (False, True)


def test_the_root_model_comes_from_the_state_interface_not_the_empty_state(tmp_path):
    clinic = PUBLISHED / "clinic_required.py"
    # the empty save_scenario() validates only with ClinicSnapshot; load_scenario builds ClinicScenario
    assert analyze_tool_server(clinic).state_model.__name__ == "ClinicScenario"
    assert analyze_tool_server(clinic, state_model="ClinicSnapshot").state_model.__name__ == "ClinicSnapshot"
    # profile_noop annotates save_scenario() -> ProfilesScenario
    assert analyze_tool_server(PUBLISHED / "profile_noop.py").state_model.__name__ == "ProfilesScenario"
    # without a scenario (none given, no clinic_required.json beside the file), the empty state fails the
    # required field: said, with the option that fixes it
    runner = CliRunner()
    alone = tmp_path / "src" / "clinic_required.py"
    alone.parent.mkdir()
    alone.write_bytes(clinic.read_bytes())
    res = runner.invoke(_app(), ["import", str(alone), "--out", str(tmp_path), "--sandbox", "inline",
                                 "--state-model", "ClinicScenario"])
    assert res.exit_code == 1
    flat = " ".join(res.output.split())
    assert "does not validate with ClinicScenario" in flat and "clinic_name" in flat and "--initial-state" in flat
    res = runner.invoke(_app(), ["import", str(clinic), "--out", str(tmp_path), "--sandbox", "inline",
                                 "--initial-state", str(PUBLISHED / "clinic_required.json")])
    assert res.exit_code == 0, res.output
    # a single file picks up <stem>.json beside it, as the option's help says
    res = runner.invoke(_app(), ["import", str(clinic), "--out", str(tmp_path / "again"), "--sandbox", "inline"])
    assert res.exit_code == 0, res.output


def test_cli_api_class(tmp_path):
    # --name: the session-scoped `library` fixture may already define an environment called "Library" in code
    res = CliRunner().invoke(_app(), ["import", str(PUBLISHED / "two_apis.py"), "--api-class", "LibraryAPI",
                                      "--initial-state", str(PUBLISHED / "two_apis.json"), "--out", str(tmp_path),
                                      "--sandbox", "inline", "--name", "TwoApisLibrary"])
    assert res.exit_code == 0, res.output
    assert load_environment(tmp_path / "TwoApisLibrary").manifest.provenance.model_dump()["api_class"] == "LibraryAPI"


def test_failure_shaped_results_are_tool_errors_and_change_nothing(folder_import):
    out, _ = folder_import
    spec = load_environment(out / "Bank")
    s = Session(spec)
    before = s.state_bytes()
    for call, args in (("get_balance", {"account_id": "nope"}),  # "Error: account not found"
                       ("withdraw", {"account_id": "nope", "amount": 1.0}),  # {"status": "Error", ...}
                       ("withdraw", {"account_id": "A-1", "amount": 500.0}),  # {"success": False, ...}
                       ("close_account", {"account_id": "A-2"})):  # {"error": "already closed"}
        res = s.call(call, args)
        assert not res.ok and res.error_type == "tool_error", (call, res)
    assert s.state_bytes() == before
    assert s.call("withdraw", {"account_id": "A-1", "amount": 10.0}).ok


@pytest.mark.parametrize(("result", "expected"), [
    ({"status": "Error", "message": "no such room"}, ("no such room", "tool_error")),
    ({"status": "failed"}, ('{"status": "failed"}', "tool_error")),
    ({"success": False, "reason": "closed"}, ("closed", "tool_error")),
    ({"ok": False, "detail": "x", "code": "not_found"}, ("x", "not_found")),
    ({"error": {"message": "bad", "code": "invalid"}}, ("bad", "invalid")),
    ({"errors": ["a", "b"]}, ("a; b", "tool_error")),
    ("Error: no room", ("Error: no room", "tool_error")),
    ("Failed to book the room", ("Failed to book the room", "tool_error")),
    ('{"error": "nope"}', ("nope", "tool_error")),
    ({"status": "ok", "error": None}, None),
    ({"payment_id": "P-1", "status": "failed"}, None),  # a record's own status is data
    ({"success": True}, None),
    ("Errors found: none", None),
    ("Booked: no errors", None),
    ([{"error": "inside a list is data"}], None),
    # issue 26 item 6: failure-shaped replies that carry an id, action flags set to false, shell-style text
    ({"order_id": "O-1", "status": "Error"}, ('{"order_id": "O-1", "status": "Error"}', "tool_error")),
    ({"id": 4, "status": "error", "message": "card declined"}, ("card declined", "tool_error")),
    ({"deleted": False}, ('{"deleted": false}', "tool_error")),
    ({"cancelled": False, "reason": "too late"}, ("too late", "tool_error")),
    ({"deleted": True}, None),
    ({"verified": False}, None),  # a read's answer, not an action's
    ({"active": False, "name": "x"}, None),
    ("error: unknown flag --x", ("error: unknown flag --x", "tool_error")),
    ("bash: frob: command not found", ("bash: frob: command not found", "tool_error")),
    ("cat: notes.txt: No such file or directory", ("cat: notes.txt: No such file or directory", "tool_error")),
    ("ran: found the command", None),
])
def test_error_in_rule(result, expected):
    assert bridge.error_in(result) == expected


def test_lint_flags_mutation_not_type():
    src = (
        "import heapq\n"
        "Scenario_Schema = [dict]\n"          # 2: never mutated: fine
        "RATES = {'a': 1}\n"                  # 3: read only: fine
        "audit = []\n"                        # 4
        "queue = []\n"                        # 5
        "seen = set()\n"                      # 6
        "shadowed = {}\n"                     # 7
        "def f(x):\n"
        "    audit.append(x)\n"               # 9
        "    heapq.heappush(queue, x)\n"      # 10
        "    return RATES.get(x)\n"
        "def g(shadowed):\n"
        "    shadowed['k'] = 1\n"             # a parameter: not the module's
        "def h():\n"
        "    global seen\n"
        "    seen = set()\n"                  # 16
    )
    found = module_mutations(__import__("ast").parse(src))
    assert {n: line for n, (line, _) in found.items()} == {"audit": 9, "queue": 10, "seen": 16}
    lines = lint_source(src, "srv.py", module_state="mutation")
    assert any(x.startswith("srv.py:9: module-level mutable 'audit' (line 4) is mutated (.append())") for x in lines)
    assert not any("Scenario_Schema" in x or "RATES" in x or "shadowed" in x for x in lines)
    # the convention mode (hand-written and generated environments) is unchanged
    assert any("'Scenario_Schema'" in x for x in lint_source(src, "srv.py"))


def test_nondeterministic_calls_are_refused_naming_the_line_unless_seeded(monkeypatch):
    src = (PUBLISHED / "ticket_ids.py").read_text()
    monkeypatch.setattr(bridge, "SEEDED_CALLS", (), raising=False)
    lines = static_refusals(src, "ticket_ids.py")
    text = "\n".join(lines)
    assert "ticket_ids.py:40: uuid.uuid4() is nondeterministic" in text
    assert "ticket_ids.py:41: random.choice() uses the global random state" in text
    assert "ticket_ids.py:42: datetime.now() is nondeterministic" in text
    monkeypatch.setattr(bridge, "SEEDED_CALLS", ("uuid4", "choice", "now"), raising=False)
    assert static_refusals(src, "ticket_ids.py") == []
    # what no stand-in fixes is refused whatever the bridge seeds
    threaded = src.replace("import uuid\n", "import uuid\nimport threading\n").replace(
        "        tid = ", "        threading.Thread(target=print).start()\n        tid = ")
    assert any(x.startswith("ticket_ids.py:41: threading.Thread() uses a thread")
               for x in static_refusals(threaded, "ticket_ids.py")), static_refusals(threaded, "ticket_ids.py")


def test_overwrite_never_replaces_a_shipped_package(tmp_path):
    shipped = Path(__file__).resolve().parents[3] / "env_images" / "HotelBooking"
    before = sorted(p.name for p in shipped.iterdir())
    assert name_collision("HotelBooking", shipped) is not None
    with pytest.raises(ImporterError, match="registered environment"):
        import_tool_server(PUBLISHED / "hotel_booking.py", out_dir=shipped.parent, overwrite=True, register=False,
                           initial_state=PUBLISHED / "hotel_booking.json", sandbox="inline")
    assert sorted(p.name for p in shipped.iterdir()) == before
    # a previous import in the output folder is replaced; a hand-written folder there is not
    kw = {"name": "HotelStays", "out_dir": tmp_path, "initial_state": PUBLISHED / "hotel_booking.json",
          "register": False, "sandbox": "inline", "validate": False}
    import_tool_server(PUBLISHED / "hotel_booking.py", **kw)
    import_tool_server(PUBLISHED / "hotel_booking.py", overwrite=True, **kw)
    shutil.rmtree(tmp_path / "HotelStays")
    shutil.copytree(shipped, tmp_path / "HotelStays")
    with pytest.raises(ImporterError, match="replaces only a previous import"):
        import_tool_server(PUBLISHED / "hotel_booking.py", overwrite=True, **kw)
    assert (tmp_path / "HotelStays" / "tools.py").read_bytes() == (shipped / "tools.py").read_bytes()


def test_a_login_tool_that_changes_only_private_state_imports_and_validates(tmp_path):
    # walkthrough finding: the probe recorded a login's success as "state changes" (it is a write), and the
    # import's own validation then refused it; a login changes only a private attribute
    src = Path(__file__).resolve().parents[2] / "generators/fixtures" / "login" / "bookstore_login.py"
    res = CliRunner().invoke(_app(), ["import", str(src), "--name", "LoginShop", "--out", str(tmp_path),
                                      "--sandbox", "inline"])
    assert res.exit_code == 0, res.output
    assert "imported + validated" in " ".join(res.output.split())
