"""Issue 26 item 11: a folder imports with per-file options from a mapping file (``envfactory import DIR
--map FILE``); two files giving one name are told to take a name, not to overwrite; a malformed map names
the map, the key and the field.  Item 9: a stateless tool class imports as a tools-only environment.
Fixtures: tests/generators/fixtures/corpus/ (written for this project)."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.cli import import_cmd
from gym_envfactory.generators.importer import ImporterError, import_python_class
from gym_envfactory.generators.importer.mapfile import ImportMapError, load_import_map
from gym_envfactory.generators.packages import purge_modules
from gym_envfactory.session import Session

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


@pytest.fixture(autouse=True)
def _process_sandbox(monkeypatch):
    from gym_envfactory.generators.sandbox import container

    monkeypatch.setattr(container, "docker_available", lambda image=None: False)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)
    return app


def _flat(text: str) -> str:
    return "".join(text.replace("│", " ").split())


def _copy(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "servers"
    d.mkdir()
    for n in names:
        shutil.copy(CORPUS / n, d / n)
    return d


def test_a_folder_imports_in_one_command_with_each_files_options(tmp_path):
    d = _copy(tmp_path, "parcel_desk.py", "parcel_depot.py", "parcel_desk.json", "calculator.py")
    (d / "map.toml").write_text('[files."parcel_desk.py"]\nname = "MapDesk"\ndomain = "commerce"\n'
                                'initial_state = "parcel_desk.json"\n\n[files.parcel_depot]\nname = "MapDepot"\n'
                                'domain = "travel"\n\n[files."calculator.py"]\nclass = "Calculator"\nname = "MapCalc"\n',
                                encoding="utf-8")
    out = tmp_path / "out"
    # --sandbox auto (docker absent: process for the servers; the class entry runs here, as --class does)
    res = CliRunner().invoke(_app(), ["import", str(d), "--map", str(d / "map.toml"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 of 3 imported and validated" in res.output
    domains = {p.name: tomllib.loads((p / "environment.toml").read_text())["domain"] for p in out.iterdir()
               if (p / "environment.toml").is_file()}
    assert domains == {"MapDesk": "commerce", "MapDepot": "travel", "MapCalc": "utilities"}
    desk = json.loads((out / "MapDesk" / "initial_states" / "small.json").read_text())
    assert set(desk["parcels"]) == {"P9", "P2"} and desk["next_id"] == 10  # the map's initial state


def test_two_files_giving_one_name_are_asked_for_a_name_not_to_overwrite(tmp_path):
    d = _copy(tmp_path, "parcel_desk.py", "parcel_depot.py")
    for extra in ([], ["--overwrite"]):
        out = tmp_path / f"out{len(extra)}"
        res = CliRunner().invoke(_app(), ["import", str(d), "--out", str(out), "--sandbox", "process", "--no-validate",
                                          *extra])
        text = _flat(res.output)
        assert res.exit_code == 1, res.output
        assert "1of2imported(notvalidated);1refused" in text
        assert "Parcelisalsothenameofparcel_depot.py,importedbeforeitinthisrun" in text
        assert "--nameNAME" in text and "--map" in text and "pass--overwrite" not in text
        # the first file's package is kept, not replaced by the second
        assert (out / "Parcel" / "_source.py").read_bytes() == (d / "parcel_depot.py").read_bytes()


@pytest.mark.parametrize(("text", "suffix", "field", "message"), [
    ('[files."a.py"]\nnmae = "X"\n', ".toml", 'files."a.py".nmae', "unknown field; the fields are"),
    ('[files."a.py"]\ndomain = "space"\n', ".toml", 'files."a.py".domain', "unknown domain 'space'"),
    ('[files."a.py"]\nskip = "yes please"\n', ".toml", 'files."a.py".skip', "valid boolean"),
    ('[files."a.py"]\ninitial_state = "missing.json"\n', ".toml", 'files."a.py".initial_state', "no such file"),
    ('[files."zzz.py"]\nname = "Z"\n', ".toml", 'files."zzz.py"', "names no *.py file"),
    ('[files."a.py"]\nclass = "A"\nstate_model = "S"\n', ".toml", 'files."a.py".class', "plain class"),
    ('[other]\n', ".toml", "files", "one table 'files'"),
    ('{"files": {"a": 3}}', ".json", 'files."a"', "must be a table"),
    ('{"files": {', ".json", None, "not JSON"),
    ('[files\n', ".toml", None, "not TOML"),
    # review fixes (branch fix-import-map): strict booleans, environment names, deep nesting
    ('[files."a.py"]\nlenient_types = "yes"\n', ".toml", 'files."a.py".lenient_types', "valid boolean"),
    ('[files."a.py"]\nname = "../../escaped"\n', ".toml", 'files."a.py".name', "'../../escaped' is not an environment"),
    ('[files."a.py"]\nclass = "A"\nname = "lower_case"\n', ".toml", 'files."a.py".name', "'lower_case' is not an"),
    ('{"files": ' + "[" * 100_000, ".json", None, "nested too deeply"),
])
def test_a_malformed_map_names_the_file_the_key_and_the_field(tmp_path, text, suffix, field, message):
    d = tmp_path / "servers"
    d.mkdir()
    (d / "a.py").write_text("x = 1\n", encoding="utf-8")
    m = tmp_path / f"map{suffix}"
    m.write_text(text, encoding="utf-8")
    with pytest.raises(ImportMapError) as info:
        load_import_map(m, d)
    assert str(info.value.file) == str(m) and message in str(info.value)
    if field is not None:
        assert info.value.field == field
    res = CliRunner().invoke(_app(), ["import", str(d), "--map", str(m), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--map:" in res.output and str(m) in _flat(res.output).replace("\n", "")


def test_map_needs_a_folder(tmp_path):
    m = tmp_path / "m.toml"
    m.write_text("[files]\n", encoding="utf-8")
    res = CliRunner().invoke(_app(), ["import", str(CORPUS / "parcel_desk.py"), "--map", str(m)])
    assert res.exit_code == 2 and "--map gives per-file options for a folder" in res.output


# ----------------------------------------------------------------------------- item 9
def test_a_stateless_tool_class_is_a_tools_only_environment():
    class Calc:
        def add(self, a: float, b: float) -> float:
            """Add."""
            return a + b

        def divide(self, a: float, b: float) -> float:
            """Divide."""
            if b == 0:
                raise ValueError("division by zero")
            return a / b

    spec = import_python_class(Calc, name="CalcImp", register=False)
    assert all(t.read_only for t in spec.tools.values())
    s = Session(spec)
    assert s.state() == {}
    assert s.call("add", {"a": 2, "b": 3}).content == 5
    r = s.call("divide", {"a": 1, "b": 0})
    assert not r.ok and "division by zero" in r.error and s.state() == {}


def test_class_annotations_without_an_initial_state_ask_for_one():
    class Ledger:
        accounts: dict[str, int]
        owner: str

        def _load_scenario(self, scenario: dict) -> None:
            self.accounts, self.owner = dict(scenario["accounts"]), scenario["owner"]

        def balance(self, account: str) -> int:
            return self.accounts[account]

    with pytest.raises(ImporterError, match=r"Ledger declares accounts, owner .*pass --initial-state"):
        import_python_class(Ledger, name="LedgerImp", register=False)
    spec = import_python_class(Ledger, name="LedgerImp", register=False,
                               initial_state={"accounts": {"a": 3}, "owner": "kim"})
    assert Session(spec).call("balance", {"account": "a"}).content == 3


def test_the_corpus_calculator_package_runs(tmp_path):
    res = CliRunner().invoke(_app(), ["import", str(CORPUS / "calculator.py"), "--class", "Calculator", "--name",
                                      "CorpusCalcPkg", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    purge_modules("CorpusCalcPkg")
    try:
        s = Session(load_environment(tmp_path / "CorpusCalcPkg"))
        assert s.call("divide", {"a": 9, "b": 3}).content == 3 and s.state() == {}
    finally:
        purge_modules("CorpusCalcPkg")


# ----------------------------------------------------------------------------- review fixes (fix-import-map)
def test_a_non_utf8_map_is_one_line_naming_the_map(tmp_path):
    d = _copy(tmp_path, "calculator.py")
    m = tmp_path / "map.toml"
    m.write_bytes(b"\xff\xfe[files]\n")
    with pytest.raises(ImportMapError, match="not UTF-8") as info:
        load_import_map(m, d)
    assert info.value.file == str(m)
    res = CliRunner().invoke(_app(), ["import", str(d), "--map", str(m), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "Traceback" not in res.output and "not UTF-8" in res.output


def test_a_map_tasks_file_that_is_not_json_lines_names_the_file_and_the_field(tmp_path):
    d = _copy(tmp_path, "calculator.py")
    (tmp_path / "t.jsonl").write_text('{"id": "a"}\nroot:x:0:0:root:/root:/bin/bash\n', encoding="utf-8")
    m = tmp_path / "map.toml"
    m.write_text('[files."calculator.py"]\nclass = "Calculator"\ntasks = "t.jsonl"\n', encoding="utf-8")
    with pytest.raises(ImportMapError) as info:
        load_import_map(m, d)
    assert info.value.field == 'files."calculator.py".tasks'
    assert f"{tmp_path / 't.jsonl'} line 2: not JSON Lines" in str(info.value) and str(m) in str(info.value)


_MARKING_CLASS = """from pathlib import Path
Path({marker!r}).write_text("ran")


class {cls}:
    \"\"\"Counts.\"\"\"

    def __init__(self):
        self.total: int = 0

    def add(self, x: int) -> int:
        \"\"\"Add x.\"\"\"
        self.total += x
        return self.total
"""


def test_a_class_entry_under_a_process_sandbox_is_refused_and_the_others_import(tmp_path):
    d = _copy(tmp_path, "parcel_desk.py")
    marker = tmp_path / "ran"
    (d / "counter.py").write_text(_MARKING_CLASS.format(marker=str(marker), cls="Counter"), encoding="utf-8")
    m = tmp_path / "map.toml"
    m.write_text('[files."counter.py"]\nclass = "Counter"\n', encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), ["import", str(d), "--map", str(m), "--out", str(out), "--sandbox", "process",
                                      "--no-validate"])
    text = _flat(res.output)
    assert res.exit_code == 1, res.output
    assert not marker.exists()  # the file never ran in this process
    assert "1of2imported(notvalidated);1refused" in text
    assert _flat(f'{m} field files."counter.py".class') in text and "--sandboxprocesscannotapply" in text
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["Parcel"]


def test_a_bad_name_writes_nothing_outside_out_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    src = tmp_path / "counter.py"
    src.write_text(_MARKING_CLASS.format(marker=str(marker), cls="counter"), encoding="utf-8")
    out = tmp_path / "a" / "out"
    for extra in (["--name", "../../escaped"], []):  # given, or the class's own (not CamelCase) name
        res = CliRunner().invoke(_app(), ["import", str(src), "--class", "counter", "--out", str(out), *extra])
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        assert "isnotCamelCaseASCII" in _flat(res.output) and ("passing--name" in _flat(res.output)) == (not extra)
    assert not marker.exists() and not out.exists() and not (tmp_path / "escaped").exists()
    from gym_envfactory.generators.importer import import_server_package

    with pytest.raises(ImporterError, match="'../x' is not CamelCase"):
        import_server_package(CORPUS / "parcel_desk.py", name="../x", out_dir=out, sandbox="process")
    assert not out.exists() and not (tmp_path / "a" / "x").exists()


def test_any_failure_of_one_file_is_a_row_not_a_traceback(tmp_path, monkeypatch):
    from gym_envfactory.generators.importer import folder as folder_mod
    from gym_envfactory.generators.importer.options import ImportOptions, OutputOptions

    d = _copy(tmp_path, "parcel_desk.py", "parcel_depot.py")

    def boom(src, options):
        raise RuntimeError(f"unexpected in {src.name}")

    monkeypatch.setattr(folder_mod, "import_one", boom)
    rows = folder_mod.import_folder(d, ImportOptions(output=OutputOptions(out_dir=tmp_path / "out")))
    assert [r["error"] for r in rows] == ["RuntimeError: unexpected in parcel_depot.py",
                                          "RuntimeError: unexpected in parcel_desk.py"]
