"""EnvGen end to end against the local OpenAI-compatible test server (real HTTP, no network).

The scripted server answers each request from the canned fixtures ``fixtures/envgen_plant_nursery_*``,
choosing by the stage named in the system prompt (``EnvGen stage: code|test|revise``).  Whether an
environment passes is decided by executing it, never by the model.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from gym_envfactory.environment.catalog import forget_environment, list_environments, programmatic_environments
from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.envgen import (
    SEVERITY,
    EnvGen,
    EnvGenJob,
    EnvGenOptions,
    check_imports,
    check_interface,
    child_environment,
    load_package,
    resume_checkpoint,
    validate_in_child,
    validate_package,
    write_package,
)
from gym_envfactory.generators.prompts import STAGE_MARK
from gym_envfactory.llm import LLMConfig
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.testing import ScriptedChatServer

FIX = Path(__file__).resolve().parents[2] / "generators/fixtures"
METADATA = json.loads((FIX / "envgen_plant_nursery_metadata.json").read_text())
TESTS = json.loads((FIX / "envgen_plant_nursery_tests.json").read_text())
TOOLS_OK = (FIX / "envgen_plant_nursery_tools.py").read_text()
# The planted bug: place_order builds and returns the order but never stores it nor takes the stock.
TOOLS_NOOP = re.sub(r"#WRITE-BEGIN.*?#WRITE-END", "pass  # planted bug: nothing is written", TOOLS_OK, flags=re.S)
TOOLS_MISMATCH = (FIX / "envgen_plant_nursery_tools_mismatch.py").read_text()


def code_answer(tools_py: str) -> dict:
    code = json.loads((FIX / "envgen_plant_nursery_code.json").read_text())
    code.pop("notes", None)
    code["state_py"] = (FIX / "envgen_plant_nursery_state.py").read_text()
    code["tools_py"] = tools_py
    return code


def stage_of(body: dict) -> str:
    first = body["messages"][0]["content"].split("\n", 1)[0]
    assert first.startswith(STAGE_MARK), first
    return first[len(STAGE_MARK):]


class Responder:
    """Answers by stage; ``answers[stage]`` is a JSON answer or a list consumed in order (last repeats)."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.stages: list[str] = []

    def __call__(self, body: dict) -> dict:
        stage = stage_of(body)
        self.stages.append(stage)
        ans = self.answers[stage]
        if isinstance(ans, list):
            ans = ans.pop(0) if len(ans) > 1 else ans[0]
        return {"content": json.dumps(ans)}


@pytest.fixture
def cleanup_registry():
    names: list[str] = []
    catalog_env = os.environ.get("ENVFACTORY_CATALOG")
    yield names
    for n in names:
        forget_environment(n)
        gym.registry.pop(f"envfactory/{n}-v0", None)
        for m in [m for m in sys.modules if m == f"gym_envfactory._envs.{n}" or m.startswith(f"gym_envfactory._envs.{n}.")]:
            del sys.modules[m]
    if catalog_env is None:
        os.environ.pop("ENVFACTORY_CATALOG", None)
    else:
        os.environ["ENVFACTORY_CATALOG"] = catalog_env


def make_gen(tmp_path: Path, server: ScriptedChatServer, **opts) -> EnvGen:
    options = EnvGenOptions(out_dir=tmp_path / "catalog", quarantine_dir=tmp_path / "quarantine",
                            checkpoint_dir=tmp_path / "ckpt", **opts)
    config = LLMConfig(model="scripted", base_url=server.base_url, api_key_env="ENVGEN_TEST_KEY", max_retries=0,
                       cache_dir=options.checkpoint_dir / "cache")
    return EnvGen(config, options)


def test_metadata_becomes_a_validated_environment_that_runs_under_gym_make(tmp_path, cleanup_registry):
    cleanup_registry.append("PlantNursery")
    responder = Responder({"code": code_answer(TOOLS_OK), "test": TESTS})
    with ScriptedChatServer(responder) as server:
        gen = make_gen(tmp_path, server)
        [res] = asyncio.run(gen.generate_many([EnvGenJob(metadata=METADATA, source="metadata:test")]))
    assert res.status == "passed" and res.attempts == 1 and res.report.passed
    assert responder.stages == ["code", "test"]
    assert res.report.scenarios_passed == len(TESTS["scenarios"]) and res.report.n_tasks == 1
    assert {t: set(v) for t, v in res.report.coverage.items()} == {t["name"]: {"ok", "error"} for t in METADATA["tools"]}
    # the package in the output catalog
    out = tmp_path / "catalog" / "PlantNursery"
    assert res.path == out
    assert {p.name for p in out.iterdir()} >= {"environment.toml", "__init__.py", "state.py", "tools.py",
                                              "initial_states", "scenarios.jsonl", "tasks.jsonl"}
    loaded = load_environment(out)
    prov = loaded.manifest.provenance
    assert prov.kind == "generated" and prov.model == "scripted" and re.fullmatch(r"\d{4}-\d\d-\d\d", prov.date)
    assert loaded.domain == "commerce" and set(loaded.tools) == {t["name"] for t in METADATA["tools"]}
    # token accounting per stage (the scripted server reports usage)
    assert res.usage["code"]["requests"] == 1 and res.usage["code"]["prompt_tokens"] > 0
    assert gen.client.usage_by_stage["test"]["requests"] == 1
    # registered, and an oracle episode works under gym.make
    assert res.gym_id == "envfactory/PlantNursery-v0" and res.gym_id in gym.registry
    env = gym.make(res.gym_id)
    result = run_episode(env.unwrapped, OraclePolicy(), task_id="order-monstera", seed=0)
    assert result.terminated and result.reward == pytest.approx(1.0)
    assert json.loads(env.unwrapped.session.state_bytes())["orders"]["O-0002"]["quantity"] == 2
    env.close()


def test_planted_silent_write_is_caught_by_execution_and_the_revision_revalidated(tmp_path, cleanup_registry):
    cleanup_registry.append("PlantNurseryFix")
    responder = Responder({"code": code_answer(TOOLS_NOOP), "test": TESTS, "revise": code_answer(TOOLS_OK)})
    with ScriptedChatServer(responder) as server:
        # inline: both attempts load a package of the same name into this process; the revision must run anew
        gen = make_gen(tmp_path, server, isolation="inline")
        [res] = asyncio.run(gen.generate_many([EnvGenJob(metadata=METADATA, name="PlantNurseryFix")]))
        revise_request = next(b for b in server.requests if stage_of(b) == "revise")
    assert responder.stages == ["code", "test", "revise"]
    assert res.status == "passed" and res.attempts == 2
    # attempt 0 failed by execution: the write reported success without changing the state
    first = json.loads((Path(json.loads(res.checkpoint.read_text())["paths"]["work"]) / "attempt-0" / "report.json").read_text())
    silent = [f for f in first["findings"] if f["check"] == "silent_write"]
    assert not first["passed"] and silent and all(f["severity"] == "high" and f["dimension"] == "state"
                                                  and f["tool"] == "place_order" for f in silent)
    # the Reviser saw the failures (not a verdict to agree with), and its code was executed again
    assert "silent no-op write" in revise_request["messages"][1]["content"]
    assert [h["passed"] for h in res.history] == [False, True]
    assert "state.plants.get(plant_id)" in (tmp_path / "catalog" / "PlantNurseryFix" / "tools.py").read_text()
    assert "planted bug" not in (tmp_path / "catalog" / "PlantNurseryFix" / "tools.py").read_text()
    assert res.gym_id in gym.registry


def test_environment_that_never_passes_is_quarantined_not_registered(tmp_path, cleanup_registry):
    cleanup_registry.append("PlantNurseryBad")
    responder = Responder({"code": code_answer(TOOLS_NOOP), "test": TESTS, "revise": code_answer(TOOLS_NOOP)})
    with ScriptedChatServer(responder) as server:
        gen = make_gen(tmp_path, server, max_revisions=2)
        [res] = asyncio.run(gen.generate_many([EnvGenJob(metadata=METADATA, name="PlantNurseryBad")]))
    assert responder.stages == ["code", "test", "revise", "revise"]  # the budget, and no more
    assert res.status == "quarantined" and res.attempts == 3
    qdir = tmp_path / "quarantine" / "PlantNurseryBad"
    report = json.loads((qdir / "report.json").read_text())
    assert report["status"] == "quarantined" and len(report["history"]) == 3
    assert not report["final"]["passed"] and any(f["check"] == "silent_write" for f in report["final"]["findings"])
    assert (qdir / "pkg" / "tools.py").read_text() == TOOLS_NOOP and (qdir / "code.json").is_file()
    assert not (tmp_path / "catalog" / "PlantNurseryBad").exists()
    assert "envfactory/PlantNurseryBad-v0" not in gym.registry and "PlantNurseryBad" not in list_environments()


def test_killed_run_resumes_from_checkpoint_without_repeating_paid_calls(tmp_path, cleanup_registry):
    cleanup_registry.append("PlantNurseryResume")

    def crash_after_code(stage, run):
        if stage == "code":
            raise RuntimeError("simulated crash after the code stage")

    responder = Responder({"code": code_answer(TOOLS_NOOP), "test": TESTS, "revise": code_answer(TOOLS_OK)})
    with ScriptedChatServer(responder) as server:
        gen = make_gen(tmp_path, server, after_stage=crash_after_code)
        [res] = asyncio.run(gen.generate_many([EnvGenJob(metadata=METADATA, name="PlantNurseryResume")]))
        assert res.status == "crashed" and "simulated crash" in res.error
        ckpt = json.loads(res.checkpoint.read_text())
        assert ckpt["stage"] == "code" and ckpt["attempt"] == 0 and ckpt["status"] == "crashed"
        assert ckpt["usage"]["code"]["requests"] == 1
        assert len(server.requests) == 1
        # resume: the code stage is not asked again; test, validation, revision and re-validation follow
        res2 = asyncio.run(resume_checkpoint(res.checkpoint))
        assert res2.status == "passed" and res2.attempts == 2
        assert responder.stages == ["code", "test", "revise"] and len(server.requests) == 3
        assert res2.usage["code"]["requests"] == 1 and res2.usage["revise"]["requests"] == 1
        # resuming a finished run asks nothing
        assert asyncio.run(resume_checkpoint(res.checkpoint)).status == "passed" and len(server.requests) == 3
        # killed after the revision was answered but before its artefact was written: the LLM cache replays it
        attempt1 = Path(ckpt["paths"]["work"]) / "attempt-1"
        for f in ("code.json", "scenarios.json", "report.json"):
            (attempt1 / f).unlink()
        data = json.loads(res.checkpoint.read_text())
        data.update(status="running", stage="revise", attempt=1)
        res.checkpoint.write_text(json.dumps(data))
        res3 = asyncio.run(resume_checkpoint(res.checkpoint))
        assert res3.status == "passed" and len(server.requests) == 3
        assert res3.usage["revise"]["cached_hits"] == 1


def test_interface_mismatch_is_a_high_severity_interface_failure(tmp_path):
    tests = TESTS
    pkg = write_package(tmp_path / "PlantNurseryIface", "PlantNurseryIface", code_answer(TOOLS_MISMATCH),
                        tests["scenarios"], [], {"kind": "generated"})
    report = validate_package(pkg, METADATA)
    assert not report.passed
    iface = {(f.check, f.tool) for f in report.findings if f.dimension == "interface"}
    assert ("missing_tool", "cancel_order") in iface
    assert ("missing_param", "place_order") in iface and ("extra_required_param", "place_order") in iface
    assert ("type_mismatch", "place_order") in iface
    assert all(f.severity == "high" for f in report.findings if f.dimension == "interface")
    assert any("'qty'" in f.message for f in report.findings if f.check == "extra_required_param")
    # severities come from the check, whatever the message says
    assert all(f.severity == SEVERITY[f.check] for f in report.findings)
    # the correct code has no interface finding; an extra tool and enum drift are caught too
    ok = write_package(tmp_path / "ok" / "PlantNurseryOk", "PlantNurseryOk", code_answer(TOOLS_OK), tests["scenarios"], [],
                       {"kind": "generated"})
    spec = load_package(ok)
    assert check_interface(spec, METADATA) == []
    meta = json.loads(json.dumps(METADATA))
    meta["tools"] = meta["tools"][1:]  # list_plants is now extra
    meta["tools"][0]["input_schema"]["properties"]["plant_id"] = {"type": "string", "enum": ["P-001"]}
    checks = {(f.check, f.tool, f.severity) for f in check_interface(spec, meta)}
    assert ("extra_tool", "list_plants", "high") in checks
    assert ("enum_mismatch", "get_plant", "medium") not in checks  # code has no enum: accepts more, not flagged
    meta["tools"][0]["input_schema"]["properties"]["plant_id"] = {"type": "integer"}
    assert ("type_mismatch", "get_plant", "high") in {(f.check, f.tool, f.severity) for f in check_interface(spec, meta)}


def test_import_error_and_determinism_lint_are_execution_failures(tmp_path):
    broken = code_answer(TOOLS_OK.replace("from .state import", "from .nowhere import"))
    report = validate_package(write_package(tmp_path / "a" / "Broken", "Broken", broken, TESTS["scenarios"], [],
                                            {"kind": "generated"}), METADATA)
    assert not report.passed and [f.check for f in report.findings] == ["import"]
    assert report.findings[0].dimension == "execution" and report.findings[0].severity == "high"
    clocky = code_answer(TOOLS_OK.replace("from gym_envfactory import ToolError, tool",
                                          "import datetime\nfrom gym_envfactory import ToolError, tool\n"
                                          "STAMP = datetime.datetime.now()"))
    report = validate_package(write_package(tmp_path / "b" / "Clocky", "Clocky", clocky, TESTS["scenarios"], [],
                                            {"kind": "generated"}), METADATA)
    lint = [f for f in report.findings if f.check == "determinism_lint"]
    assert not report.passed and lint and lint[0].dimension == "execution" and "datetime.datetime.now" in lint[0].message
    # code that reaches for the OS is refused before it is executed
    marker = tmp_path / "executed"
    nosy = code_answer(TOOLS_OK + f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    report = validate_package(write_package(tmp_path / "c" / "Nosy", "Nosy", nosy, TESTS["scenarios"], [],
                                            {"kind": "generated"}), METADATA)
    assert not report.passed and [(f.check, f.severity) for f in report.findings] == [("forbidden_import", "high")]
    assert not marker.exists()


def test_several_environments_concurrently_and_the_cli_report(tmp_path, cleanup_registry, monkeypatch):
    cleanup_registry.extend(["PlantNurseryOne", "PlantNurseryTwo"])
    meta_two = dict(METADATA, class_name="PlantNurseryTwo")
    meta_one = dict(METADATA, class_name="PlantNurseryOne")
    (tmp_path / "metas.json").write_text(json.dumps([meta_one, meta_two]))
    responder = Responder({"code": code_answer(TOOLS_OK), "test": TESTS})
    from gym_envfactory.generators.cli import gen_app

    with ScriptedChatServer(responder) as server:
        result = CliRunner().invoke(gen_app, [
            "env", "--metadata", str(tmp_path / "metas.json"), "--model", "scripted", "--base-url", server.base_url,
            "--api-key-env", "ENVGEN_TEST_KEY", "--out", str(tmp_path / "catalog"), "--quarantine", str(tmp_path / "q"),
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--concurrency", "2", "--max-revisions", "1"])
    assert result.exit_code == 0, result.output
    assert sorted(responder.stages) == ["code", "code", "test", "test"]
    for n in ("PlantNurseryOne", "PlantNurseryTwo"):
        assert (tmp_path / "catalog" / n / "environment.toml").is_file() and n in result.output
    assert "passed" in result.output and "prompt_tokens" in result.output
    # a name that already exists in the catalog is refused before any paid call
    with ScriptedChatServer(responder) as server:
        result = CliRunner().invoke(gen_app, [
            "env", "--metadata", str(FIX / "envgen_plant_nursery_metadata.json"), "--name", "HotelBooking",
            "--model", "scripted", "--base-url", server.base_url, "--out", str(tmp_path / "catalog"),
            "--checkpoint-dir", str(tmp_path / "ckpt")])
        assert result.exit_code == 2 and "already exists" in result.output and server.requests == []


def test_generated_code_that_hangs_is_a_timeout_finding_not_a_hung_run(tmp_path):
    hang = code_answer("while True:\n    pass\n")
    pkg = write_package(tmp_path / "pkg" / "Hang", "Hang", hang, TESTS["scenarios"], [], {"kind": "generated"})
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    report = asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / "out.json", 0, 4.0))
    assert not report.passed and [(f.dimension, f.check, f.severity) for f in report.findings] == [("execution", "timeout", "high")]


def test_import_command_reports_the_imported_environment(tmp_path):
    import typer

    from gym_envfactory.generators.cli import import_cmd

    app = typer.Typer()
    app.command("import")(import_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps "import" as a subcommand
    try:
        result = CliRunner().invoke(app, ["import", str(FIX / "bookstore_server.py"), "--name", "EnvGenCliBookStore",
                                          "--out", str(tmp_path), "--initial-state", str(FIX / "bookstore_scenario.json"),
                                          "--domain", "commerce", "--sandbox", "process"])
        assert result.exit_code == 0, result.output
        assert "process sandbox" in result.output
        assert "EnvGenCliBookStore" in result.output and "scenarios" in result.output
        assert (tmp_path / "EnvGenCliBookStore" / "environment.toml").is_file()
    finally:
        forget_environment("EnvGenCliBookStore")
        gym.registry.pop("envfactory/EnvGenCliBookStore-v0", None)


# ----------------------------------------------------------------------------------- security

GATE_BYPASSES = {
    "uuid_os": "import uuid\nuuid.os.system('echo pwned')\n",
    "random_os": "import random\nrandom._os.system('echo pwned')\n",
    "alias_open": "_o = open\n_o('/tmp/x', 'w').write('x')\n",
    "builtins_dict": "__builtins__['__import__']('subprocess').run(['true'])\n",
    "runtime_submodule": "import gym_envfactory.backends as _b\n_b.subprocess.run(['true'])\n",
    "runtime_from_submodule": "from gym_envfactory.backends import subprocess\n",
    "runtime_other_name": "from gym_envfactory import load_environment\n",
    "bare_runtime": "import gym_envfactory\n",
    "functools_sys": "import functools\nfunctools.sys.modules\n",
    "star_import": "from uuid import *\n",
    "from_import_os": "from uuid import os\n",
    "getattr_ref": "g = getattr\n",
    "attrgetter": "from operator import attrgetter\n",
    "dunder_class": "x = ().__class__.__base__.__subclasses__()\n",
    "generator_frame": "g = (i for i in [])\nx = g.gi_frame\n",
    "import_string": "from pydantic import ImportString\n",
    "json_codecs": "import json\njson.codecs.open('/etc/passwd')\n",
    "format_leak": "x = '{0.__init__.__globals__}'.format(object)\n",
    "computed_format": "f = '{0' + '}'\nx = f.format(1)\n",
    "string_annotation": "from pydantic import BaseModel\nclass M(BaseModel):\n    a: \"__import__('os').getcwd()\"\n",
    "relative_escape": "from ... import backends\n",
    "private_module_attr": "import typing\ntyping._eval_type\n",
}


@pytest.mark.parametrize("name", sorted(GATE_BYPASSES))
def test_static_gate_refuses_known_bypasses(tmp_path, name):
    (tmp_path / "tools.py").write_text(GATE_BYPASSES[name])
    findings = check_imports(tmp_path)
    assert findings and all(f.check == "forbidden_import" and f.severity == "high" for f in findings), name


def test_static_gate_accepts_ordinary_environment_code(tmp_path):
    pkg = write_package(tmp_path / "Ok", "Ok", code_answer(TOOLS_OK), TESTS["scenarios"], [], {"kind": "generated"})
    assert check_imports(pkg) == []
    (pkg / "extra.py").write_text(
        "from __future__ import annotations\nimport re\nfrom typing import Annotated, Literal\n"
        "from pydantic import BaseModel, Field\nfrom gym_envfactory import ToolError, tool\n"
        "from .state import Plant\nPAT = re.compile(r'^P-\\d+$')\n"
        "class Ticket(BaseModel):\n    open: bool = True\n    kind: Literal['open', 'input'] = 'open'\n"
        "    def __eq__(self, other):\n        return super().__eq__(other)\n"
        "def f(state, *, input: Annotated[str, Field(description='open the door, e.g. eval')], t: 'Ticket') -> str:\n"
        "    return f'{input} {t.open} {type(t).__name__}'\n")
    assert check_imports(pkg) == []


def test_validation_child_gets_an_allow_listed_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2@db/prod")
    monkeypatch.setenv("AWS_SESSION_TOKN", "abc")  # a secret whose name a deny-list would miss
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path))
    env = child_environment(tmp_path / "home")
    assert "DATABASE_URL" not in env and "AWS_SESSION_TOKN" not in env and "ENVGEN_TEST_KEY" not in env
    assert env["HOME"] == str(tmp_path / "home") and env["PYTHONHASHSEED"] == "0"
    assert env["ENVFACTORY_CATALOG"] == str(tmp_path) and env["PATH"] == os.environ["PATH"]
    # what a child really sees, and the runtime still imports there
    out = subprocess.run([sys.executable, "-c", "import os, gym_envfactory.generators.envgen; print(sorted(os.environ))"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "DATABASE_URL" not in out and "AWS_SESSION_TOKN" not in out


def test_passing_environment_is_registered_without_importing_its_code(tmp_path, cleanup_registry, monkeypatch):
    cleanup_registry.append("PlantNurseryLazy")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2@db/prod")
    responder = Responder({"code": code_answer(TOOLS_OK), "test": TESTS})
    with ScriptedChatServer(responder) as server:
        gen = make_gen(tmp_path, server)
        res = asyncio.run(gen.generate(EnvGenJob(metadata=METADATA, name="PlantNurseryLazy")))
    assert res.status == "passed" and res.gym_id == "envfactory/PlantNurseryLazy-v0" and res.gym_id in gym.registry
    assert gym.registry[res.gym_id].entry_point == "gym_envfactory.envs.env:EnvFactoryEnv"
    # nothing of the generated package was executed in this process
    assert not [m for m in sys.modules if m.startswith("gym_envfactory._envs.PlantNurseryLazy")]
    # registered from the manifest only: neither defined in code nor loaded (loading would import the modules)
    assert "PlantNurseryLazy" not in programmatic_environments()
    assert str((tmp_path / "catalog").resolve()) in os.environ["ENVFACTORY_CATALOG"].split(os.pathsep)
    assert "PlantNurseryLazy" in list_environments()
    # an explicit gym.make imports it
    env = gym.make(res.gym_id)
    env.reset(seed=0)
    assert "gym_envfactory._envs.PlantNurseryLazy" in sys.modules
    env.close()
