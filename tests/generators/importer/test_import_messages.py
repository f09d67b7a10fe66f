"""Issue 26 item 8 (messages and edges) and items 5-6 (classification), each with its own small source
written here: what the import refuses says what to do, and nothing is silently wrong."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from gym_envfactory.generators.importer import ImporterError, import_python_class, import_server_package
from gym_envfactory.generators.importer.analysis import written_attributes
from gym_envfactory.generators.importer.python_class import import_class_package

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
ROOT = Path(__file__).resolve().parents[3]

SERVER = '''"""A tiny store (a fixture written by the test)."""
{imports}
from typing import Dict

from fastmcp import FastMCP
from pydantic import BaseModel, Field


class ShopScenario(BaseModel):
    items: Dict[str, int] = Field(default_factory=dict)


class OtherScenario(BaseModel):
    widgets: Dict[str, int] = Field(default_factory=dict)


class ShopAPI:
    def __init__(self):
        self.items: Dict[str, int] = {{}}

    def load_scenario(self, scenario: dict) -> None:
        self.items = dict(scenario.get("items", {{}}))

    def save_scenario(self) -> dict:
        return {{"items": dict(self.items)}}

    def buy(self, item: str) -> dict:
        if item == "bug":
            raise TypeError("a programming error")
        if self.items.get(item, 0) <= 0:
            raise ValueError(f"{{item}} is sold out")
        self.items[item] -= 1
        return {{"item": item, "left": self.items[item]}}


api = ShopAPI()
mcp = FastMCP("shop")


@mcp.tool()
def buy(item: str) -> dict:
    """Buy one item."""
    return api.buy(item)
'''


def _server(tmp_path: Path, imports: str = "") -> Path:
    p = tmp_path / "shop.py"
    p.write_text(SERVER.format(imports=imports), encoding="utf-8")
    return p


def _import(src: Path, tmp_path: Path, **kw):
    kw.setdefault("sandbox", "process")
    return import_server_package(src, out_dir=tmp_path / "out", **kw)


def test_a_server_needing_a_network_client_is_refused_as_making_live_calls(tmp_path):
    src = _server(tmp_path, "import requests")
    with pytest.raises(ImporterError) as info:
        _import(src, tmp_path, name="NetShop")
    text = str(info.value)
    assert "shop.py:2: imports requests, a network client library: the server makes live network calls" in text
    assert "No module named" not in text
    cls_src = tmp_path / "client.py"
    cls_src.write_text("from httpx import Client\n\nclass Weather:\n    def __init__(self):\n        self.cities = {}\n",
                       encoding="utf-8")
    with pytest.raises(ImporterError, match=r"client.py:1: imports httpx, a network client library"):
        import_class_package(cls_src, "Weather", out_dir=tmp_path / "out")


def test_a_state_model_that_does_not_know_the_scenario_keys_is_refused(tmp_path):
    src = _server(tmp_path)
    with pytest.raises(ImporterError) as info:
        _import(src, tmp_path, name="ShopWrong", state_model="OtherScenario", initial_state={"items": {"pen": 2}},
                probe=False, validate=False)
    text = str(info.value)
    assert "has key(s) 'items' that OtherScenario (fields: widgets) does not know" in text
    assert "--state-model" in text
    done = _import(src, tmp_path, name="ShopRight", initial_state={"items": {"pen": 2}}, probe=False, validate=False)
    assert json.loads((done.path / "initial_states" / "small.json").read_text()) == {"items": {"pen": 2}}


def test_a_validation_refusal_counts_cites_the_users_file_and_keeps_tracebacks_at_debug(tmp_path, caplog):
    src = _server(tmp_path)
    tasks = tmp_path / "my_tasks.jsonl"
    lines = [{"task_id": f"t{i}", "initial_state": "small",
              "turns": [{"user": "buy", "ground_truth": [{"name": "buy", "arguments": {"item": "pen" if i < 2 else "cup" if i < 12 else "bug"}}]}]}
             for i in range(25)]
    tasks.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    caplog.set_level(logging.WARNING)
    with pytest.raises(ImporterError) as info:
        _import(src, tmp_path, name="ShopTasks", initial_state={"items": {"pen": 5}}, tasks=tasks, sandbox="inline")
    text = str(info.value)
    assert "failed validation (23 of 25 tasks failed to replay)" in text
    assert f"{tasks}:4 field" in text and "... and 3 more" in text
    assert "envfactory-import-" not in text  # no deleted temporary path
    assert "tool buy raised" in caplog.text and "Traceback" not in caplog.text  # one line, traceback at debug


def test_import_python_class_at_a_modules_top_level_serves_in_a_subprocess(tmp_path):
    mod = tmp_path / "calc_env.py"
    mod.write_text("from gym_envfactory.generators.importer import import_python_class\n\n\n"
                   "class Calc:\n    def add(self, a: int, b: int) -> int:\n        '''Add.'''\n        return a + b\n\n\n"
                   "SPEC = import_python_class(Calc, name='TopCalc')\n", encoding="utf-8")
    code = ("import sys, gymnasium; sys.path.insert(0, sys.argv[1]); import calc_env; "
            "from gym_envfactory.backends.subprocess import module_argument; "
            "print(module_argument(calc_env.SPEC)); "
            "from gym_envfactory.session import Session; print(Session(calc_env.SPEC).call('add', {'a': 2, 'b': 3}).content)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [f"('calc_env', '{tmp_path}')", "5"]

    def inside() -> object:
        class Local:
            def add(self, a: int) -> int:
                return a

        return import_python_class(Local, name="LocalCalc", register=False)

    assert inside().defined_in[1] is None  # inside a function: no file


# ----------------------------------------------------------------------------- plain classes
def test_class_save_and_load_helpers_are_not_agent_tools():
    class Book:
        def __init__(self) -> None:
            self.pages: list[str] = []

        def load_scenario(self, scenario: dict) -> None:
            self.pages = list(scenario["pages"])

        def save_scenario(self) -> dict:
            return {"pages": self.pages}

        def to_json(self) -> str:
            return json.dumps(self.pages)

        def restore_state(self, data: dict) -> None:
            self.pages = data["pages"]

        def add_page(self, text: str) -> int:
            """Add a page."""
            self.pages.append(text)
            return len(self.pages)

    spec = import_python_class(Book, name="BookImp", register=False, initial_state={"pages": ["a"]})
    assert sorted(spec.tools) == ["add_page"]


def test_a_non_json_attribute_type_is_refused_per_field_with_file_and_line(tmp_path):
    src = tmp_path / "garden.py"
    src.write_text('''import threading


class Shovel:
    pass


class Garden:
    def __init__(self):
        self.beds: dict = {}
        self.tool: Shovel = Shovel()
        self.lock: threading.Lock = threading.Lock()

    def plant(self, bed: str) -> str:
        self.beds[bed] = "seeded"
        return bed
''', encoding="utf-8")
    with pytest.raises(ImporterError) as info:
        import_class_package(src, "Garden", out_dir=tmp_path / "out")
    text = str(info.value)
    assert "Garden: 2 attribute(s) cannot be state" in text
    assert f"{src}:11: attribute 'tool' of type Shovel is not JSON data" in text
    assert f"{src}:12: attribute 'lock'" in text
    assert "PydanticSchemaGenerationError" in text and "Traceback" not in text and "For further information" not in text


# ----------------------------------------------------------------------------- items 5, 6: classification
def test_written_attributes_follow_aliases_and_calls():
    import importlib.util

    spec = importlib.util.spec_from_file_location("taxi_fixture", CORPUS / "taxi_dispatch.py")
    assert spec is not None and spec.loader is not None
    from gym_envfactory.generators.importer import bridge

    mod = bridge.load_source("taxi_fixture_mod", CORPUS / "taxi_dispatch.py")
    try:
        api = mod.TaxiAPI
        assert written_attributes(api, "get_ride") == {"rides"}  # ride = self.rides.get(...); ride.status = ...
        assert written_attributes(api, "pick_driver") == set()
        assert written_attributes(api, "cancel_ride") == {"rides"}
    finally:
        sys.modules.pop("taxi_fixture_mod", None)


def test_a_read_named_tool_whose_code_writes_a_state_field_stays_a_write(tmp_path):
    done = import_server_package(CORPUS / "taxi_dispatch.py", name="TaxiRW", out_dir=tmp_path, sandbox="process",
                                 initial_state=CORPUS / "taxi_dispatch.json")
    assert done.tools == {"get_ride": False, "pick_driver": True, "cancel_ride": False}
    assert "get_ride" not in done.reclassified
    assert not any(n.startswith("pick_driver") for n in done.noop_writes)  # a read is never a "no-op write"


# ----------------------------------------------------------------------------- item 10
class Advisory:
    """Annotations that are advice only, as in some benchmark classes."""

    def __init__(self) -> None:
        self.balance: int = 0
        self.owners: list[str] = []

    def _load_scenario(self, scenario: dict) -> None:
        self.balance = scenario["balance"]  # 12.5: contradicts ``int``
        self.owners = scenario["owners"]

    def deposit(self, amount: float) -> bool:
        """Deposit; returns a receipt, not the bool it announces."""
        self.balance += amount  # type: ignore[assignment]  # the class is deliberately mistyped
        return {"balance": self.balance}  # type: ignore[return-value]


def test_lenient_types_are_opt_in():
    state = {"balance": 12.5, "owners": ["ada"]}
    with pytest.raises(ImporterError, match=r"contradicts its annotations: .* first at balance: .*--lenient-types"):
        import_python_class(Advisory, name="AdvStrict", register=False, initial_state=state)
    spec = import_python_class(Advisory, name="AdvLenient", register=False, initial_state=state, lenient_types=True)
    from gym_envfactory.session import Session

    s = Session(spec)
    r = s.call("deposit", {"amount": 1.5})
    assert r.ok and r.content == {"balance": 14.0}
    assert s.state() == {"balance": 14.0, "owners": ["ada"]}


def test_lenient_types_need_a_class_on_the_command_line(tmp_path):
    import typer
    from typer.testing import CliRunner

    from gym_envfactory.generators.cli import import_cmd

    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)
    res = CliRunner().invoke(app, ["import", str(CORPUS / "parcel_desk.py"), "--lenient-types"])
    assert res.exit_code == 2 and "--lenient-types applies to plain classes" in res.output
    res = CliRunner().invoke(app, ["import", str(CORPUS / "calculator.py"), "--class", "Calculator", "--lenient-types",
                                   "--name", "LenientCalc", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "lenient_types=True" in (tmp_path / "LenientCalc" / "tools.py").read_text()
