"""Issue 24, part 2: the gate is an allow-list of modules, of each module's attributes, of builtins and of
dunders.  Every route the review used (builtins and ``inspect`` reached through allowed modules) is refused
by it, and each payload really escapes when run without the gate; every shipped catalog module and the
EnvGen fixtures pass it."""

from __future__ import annotations

import builtins
import importlib
import os
import shutil
import sys
import types
from pathlib import Path

import pytest

from gym_envfactory.generators.envgen import check_imports
from gym_envfactory.generators.envgen.allowlist import ALLOWED_BUILTINS, ALLOWED_MODULES

ROOT = Path(__file__).resolve().parents[3]
SECRET = "sk-envfactory-allowlist-secret-2424"

#: Each sets LEAK to ``os.environ``, a builtin the allow-list refuses, or a string holding the environment.
#: The first group is the review's three routes (builtins and ``inspect`` through allowed modules); the
#: rest are their neighbours in the modules the old gate allowed.
ROUTES = {
    # builtins through an allowed module
    "enum_bltns": "import enum\nLEAK = enum.bltns.open\n",
    "dataclasses_builtins": "import dataclasses\nLEAK = dataclasses.builtins.open\n",
    "from_typing_extensions_builtins": "from typing_extensions import builtins\nLEAK = builtins.open\n",
    "functools_dunder_builtins": "import functools\nLEAK = functools.__builtins__['open']\n",
    "re_enum_bltns": "import re\nLEAK = re.enum.bltns.open\n",
    # inspect through an allowed module
    "dataclasses_inspect": "import dataclasses\nLEAK = dataclasses.inspect.os.environ\n",
    "typing_extensions_inspect": "import typing_extensions as te\nLEAK = te.inspect.os.environ\n",
    "from_dataclasses_inspect_frame": "from dataclasses import inspect\nLEAK = inspect.currentframe().f_builtins['open']\n",
    # sys (and so every imported module) through an allowed module
    "typing_sys": "import typing\nLEAK = typing.sys.modules['os'].environ\n",
    "datetime_sys": "import datetime\nLEAK = datetime.sys.modules['os'].environ\n",
    "from_re_enum": "from re import enum\nLEAK = enum.sys.modules['os'].environ\n",
    "dataclasses_sys": "from dataclasses import sys\nLEAK = sys.modules['os'].environ\n",
    "statistics_sys": "import statistics\nLEAK = statistics.sys.modules['os'].environ\n",
    "calendar_sys": "import calendar\nLEAK = calendar.sys.modules['os'].environ\n",
    "fractions_sys": "import fractions as f\nLEAK = f.sys.modules['os'].environ\n",
    "uuid_os": "import uuid\nLEAK = uuid.os.environ\n",
    "collections_private_sys": "import collections.abc\nLEAK = collections._sys.modules['os'].environ\n",
    "pydantic_v1_typing": "from pydantic.v1 import typing as t\nLEAK = t.sys.modules['os'].environ\n",
    "pydantic_v1_import": "import pydantic.v1.typing\nLEAK = pydantic.v1.typing.sys.modules['os'].environ\n",
    # a module as a value, attribute by string, format-string traversal
    "module_in_a_list": "import typing\nt = [typing][0]\nLEAK = t.sys.modules['os'].environ\n",
    "module_by_getattr": "import typing\nLEAK = getattr(typing, 'sys').modules['os'].environ\n",
    "module_by_vars": "import typing\nLEAK = vars(typing)['sys'].modules['os'].environ\n",
    "module_format_field": "import typing\nLEAK = '{0.sys.modules[os].environ}'.format(typing)\n",
    "module_format_map_field": "import typing\nLEAK = '{t.sys.modules[os].environ}'.format_map({'t': typing})\n",
    # builtins by name: refused unless on ALLOWED_BUILTINS, wherever the name resolves to a builtin
    "builtin_open_shadowed_elsewhere": ("def f():\n    open = 1\n    return open\n\n"
                                        "def g():\n    return open\n\nLEAK = g()\n"),
    "builtin_in_lambda_default": "f = lambda o=open: o\nLEAK = f()\n",
    "builtin_in_class_body": "class C:\n    o = open\nLEAK = C.o\n",
    "builtin_in_comprehension": "LEAK = [o for o in [open]][0]\n",
    "builtin_dir_then_open": "import typing\nLEAK = [m for m in dir(typing) if m == 'sys'] and 0 or open\n",
}


def _gate(tmp_path: Path, source: str) -> list[str]:
    (tmp_path / "tools.py").write_text(source)
    findings = check_imports(tmp_path)
    assert all(f.check == "forbidden_import" and f.severity == "high" for f in findings)
    return [f.message for f in findings]


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_gate_refuses_every_route_of_the_review(tmp_path, name):
    messages = _gate(tmp_path, ROUTES[name])
    assert messages, name
    assert all(m.startswith("tools.py:") and m.split(":")[1].isdigit() for m in messages), messages


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_route_really_escapes_without_the_gate(monkeypatch, name):
    monkeypatch.setenv("ENVFACTORY_TEST_SECRET", SECRET)
    ns: dict = {}
    exec(compile(ROUTES[name], "<payload>", "exec"), ns)  # noqa: S102 - the point of the test
    leak = ns["LEAK"]
    refused_builtin = any(leak is getattr(builtins, b) for b in dir(builtins) if b not in ALLOWED_BUILTINS
                          and not b.startswith("_") and callable(getattr(builtins, b)))
    assert leak is os.environ or refused_builtin or SECRET in str(leak), (name, leak)


#: Package-level routes: a module another module of the package imports, taken through a relative import.
PACKAGE_ROUTES = {
    "from_state_import_module": ("from .state import typing\nLEAK = typing.sys.modules['os'].environ\n"),
    "state_dot_module": ("from . import state\nLEAK = state.typing.sys.modules['os'].environ\n"),
    "from_state_import_submodule": ("from .state import abc\nLEAK = abc.sys\n"),
}


@pytest.mark.parametrize("name", sorted(PACKAGE_ROUTES))
def test_gate_refuses_a_module_reexported_by_the_package(tmp_path, name):
    (tmp_path / "state.py").write_text("import typing\nfrom collections import abc\nX = typing.Literal['a']\n"
                                       "Y = abc.Mapping\n")
    assert check_imports(tmp_path) == []
    (tmp_path / "tools.py").write_text(PACKAGE_ROUTES[name])
    messages = [f.message for f in check_imports(tmp_path)]
    assert messages and all(m.startswith("tools.py:") for m in messages), messages


def test_a_module_reexported_by_the_package_really_escapes_without_the_gate(tmp_path, monkeypatch):
    pkg = tmp_path / "ReexportPkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "state.py").write_text("import typing\n")
    (pkg / "tools.py").write_text(PACKAGE_ROUTES["from_state_import_module"])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert importlib.import_module("ReexportPkg.tools").LEAK is os.environ
    finally:
        for name in ("ReexportPkg.tools", "ReexportPkg.state", "ReexportPkg"):
            sys.modules.pop(name, None)


def test_messages_name_the_line_the_refused_name_and_what_is_allowed(tmp_path):
    [msg] = _gate(tmp_path, "x = 1\nimport typing\ny = typing.sys\n")
    assert msg.startswith("tools.py:3: typing.sys is not on the allow-list of typing; allowed: ")
    assert "Literal" in msg and "Optional" in msg
    [msg] = _gate(tmp_path, "from re import enum\n")
    assert msg.startswith("tools.py:1: `from re import enum`: 'enum' is not on re's allow-list; allowed: ")
    [msg] = _gate(tmp_path, "import inspect\n")
    assert msg.startswith("tools.py:1: import of 'inspect' is not allowed: an environment imports only ")
    assert "pydantic" in msg and "typing" in msg
    [msg] = _gate(tmp_path, "\n\ndef f():\n    return getattr\n")
    assert msg.startswith("tools.py:4: getattr is not an allowed builtin") and "isinstance" in msg
    [msg] = _gate(tmp_path, "import json\njson.dumps = len\n")
    assert msg.startswith("tools.py:2: json.dumps is assigned or deleted: modules are read-only")
    [msg] = _gate(tmp_path, "def f(x):\n    return x.__class__\n")
    assert msg.startswith("tools.py:2: dunder attribute .__class__ is not allowed") and "__init__" in msg


def test_allow_listed_names_are_not_refused(tmp_path):
    src = ("from __future__ import annotations\nimport collections.abc\nimport re\nfrom collections import abc\n"
           "from datetime import date, timedelta\nimport math\nfrom typing import Literal\n"
           "from pydantic import BaseModel, Field\nfrom gym_envfactory import ToolError, tool\n\n"
           "PAT = re.compile(r'^x$')\nC = collections.abc.Container\nD = abc.Mapping\n\n\n"
           "class M(BaseModel):\n    kind: Literal['a'] = 'a'\n    d: date = Field(default=date(2026, 1, 1))\n\n\n"
           "def f(m: M, open: int = 0, input: str = '') -> int:\n"
           "    if not isinstance(m, M):\n        raise ToolError('no')\n"
           "    return math.ceil(len(sorted({open: input}.items())) + (m.d + timedelta(days=1)).day)\n")
    assert _gate(tmp_path, src) == []


def _catalog_modules() -> list[Path]:
    """The modules of every shipped environment that run at ``gym.make`` (``build_states.py`` is a build
    script that writes the initial states with pathlib and sys; the runtime never imports it)."""
    return sorted(p for p in (ROOT / "env_images").glob("*/*.py") if p.name != "build_states.py")


def test_every_shipped_catalog_module_passes_the_gate(tmp_path):
    envs = sorted({p.parent for p in _catalog_modules()})
    assert len(envs) >= 8
    for env in envs:
        pkg = tmp_path / env.name
        pkg.mkdir()
        for f in env.glob("*.py"):
            if f.name != "build_states.py":
                shutil.copy(f, pkg / f.name)
        assert [f.message for f in check_imports(pkg)] == [], env.name


def test_the_envgen_fixtures_pass_the_gate(tmp_path):
    fixtures = ROOT / "tests" / "generators" / "fixtures"
    for name in ("envgen_plant_nursery_tools.py", "envgen_plant_nursery_tools_mismatch.py"):
        pkg = tmp_path / name.removesuffix(".py")
        pkg.mkdir()
        shutil.copy(fixtures / "envgen_plant_nursery_state.py", pkg / "state.py")
        shutil.copy(fixtures / name, pkg / "tools.py")
        assert [f.message for f in check_imports(pkg)] == [], name


def test_every_allowed_name_exists_and_no_allowed_name_is_an_unlisted_module():
    """The lists name real things, and none of them is (or reaches in one public step) a module that is
    not itself on the list: ``typing.sys`` must stay unreachable however the lists grow."""
    for mod_name, names in ALLOWED_MODULES.items():
        if mod_name == "__future__":
            continue
        mod = importlib.import_module(mod_name)
        for name in names:
            assert hasattr(mod, name), f"{mod_name}.{name}"
            value = getattr(mod, name)
            if isinstance(value, types.ModuleType):
                assert f"{mod_name}.{name}" in ALLOWED_MODULES, f"{mod_name}.{name} is a module"
                continue
            for attr in dir(value):
                if attr.startswith("_"):
                    continue
                try:
                    step = getattr(value, attr)
                except Exception:  # noqa: BLE001 - properties of a class may raise
                    continue
                assert not isinstance(step, types.ModuleType), f"{mod_name}.{name}.{attr} is a module"
    for b in ALLOWED_BUILTINS:
        assert hasattr(builtins, b), b
    assert not {"open", "eval", "exec", "compile", "getattr", "setattr", "delattr", "hasattr", "vars", "globals",
                "locals", "dir", "__import__", "breakpoint", "input", "help", "memoryview", "format"} & ALLOWED_BUILTINS


def test_a_builtin_is_reported_where_it_resolves_to_the_builtin(tmp_path):
    [msg] = _gate(tmp_path, ROUTES["builtin_open_shadowed_elsewhere"])
    assert msg.startswith("tools.py:6: open is not an allowed builtin")


def test_a_route_through_typing_reads_the_parents_secret_in_an_ungated_child(tmp_path):
    """End to end, like the review: ``typing.sys`` gives ``os`` inside the validation child when the gate is
    off (here without the PID namespace, so the parent's ``/proc/<pid>/environ`` is visible), and the gate
    refuses the same package."""
    import json
    import subprocess

    from gym_envfactory.generators.envgen import write_package

    from .test_envgen import METADATA, TESTS, code_answer
    from .test_gate_and_sandbox import PROBE
    from .test_gate_and_sandbox import SECRET as PROBE_SECRET

    probe = PROBE.replace("import os\n", "import typing\nos = typing.sys.modules['os']\n", 1)
    assert "import os" not in probe
    pkg = write_package(tmp_path / "pkg" / "Probe", "Probe", code_answer(probe), TESTS["scenarios"], [],
                        {"kind": "generated"})
    refused = [f.message for f in check_imports(pkg)]
    assert any("typing.sys is not on the allow-list of typing" in m for m in refused), refused
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    out = tmp_path / "out.json"
    driver = ("from tests.generators.envgen.test_gate_and_sandbox import drive_ungated; "
              f"drive_ungated({str(pkg)!r}, {str(tmp_path / 'meta.json')!r}, {str(out)!r}, '0')")
    subprocess.run([sys.executable, "-c", driver], env={**os.environ, "ENVFACTORY_TEST_SECRET": PROBE_SECRET},
                   cwd=ROOT, check=True, timeout=240)
    [finding] = json.loads(out.read_text())["findings"]
    assert "PROBED leaked=True" in finding["message"], finding["message"]


PYDANTIC_V1_ROUTES = {
    "parse_raw_pickle": ("from pydantic import BaseModel\nclass Loot(BaseModel):\n    x: int = 0\n"
                         "def boom() -> None:\n    Loot.parse_raw(b'...', proto='pickle', allow_pickle=True)\n"),
    "parse_file": ("from pydantic import BaseModel\nclass Loot(BaseModel):\n    x: int = 0\n"
                   "def peek(path: str) -> str:\n    return repr(Loot.parse_file(path))\n"),
    "from_orm": ("from pydantic import BaseModel\nclass Loot(BaseModel):\n    x: int = 0\n"
                 "def read(o: object) -> str:\n    return repr(Loot.from_orm(o))\n"),
}


@pytest.mark.parametrize("name", sorted(PYDANTIC_V1_ROUTES))
def test_pydantic_v1_methods_that_unpickle_or_read_files_are_refused(tmp_path, name):
    messages = _gate(tmp_path, PYDANTIC_V1_ROUTES[name])
    assert messages and "deprecated v1 API" in messages[0], messages


def test_the_pickle_route_really_runs_code_without_the_gate():
    pydantic = importlib.import_module("pydantic")

    class Loot(pydantic.BaseModel):
        x: int = 0

    payload = b"cbuiltins\nlen\n(S'abc'\ntR."  # pickle: builtins.len('abc') -> 3, code run by unpickling
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as info:
            Loot.parse_raw(payload, proto="pickle", allow_pickle=True)
    assert "3" in str(info.value) or "int" in str(info.value)  # the unpickled call ran: its result failed validation
