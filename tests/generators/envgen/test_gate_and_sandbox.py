"""Issue 11, part 1: generated code cannot escape the static gate, reach the parent's secrets, exhaust
the host during validation, or get a different package published than the one validated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from gym_envfactory.environment.catalog import list_environments
from gym_envfactory.generators.envgen import EnvGenJob, check_imports, validate_in_child, write_package
from gym_envfactory.generators.envgen import pipeline as pipeline_mod
from gym_envfactory.generators.errors import EnvGenError
from gym_envfactory.generators.sandbox import ChildLimits, namespace_prefix, package_digest, run_in_child
from gym_envfactory.testing import ScriptedChatServer

from .test_envgen import METADATA, TESTS, TOOLS_OK, Responder, cleanup_registry, code_answer, make_gen  # noqa: F401

SECRET = "sk-envfactory-test-secret-4242"
ROOT = Path(__file__).resolve().parents[3]

# --------------------------------------------------------------------------------------- the gate

#: The two payloads of the adversarial review, verbatim in spirit: both passed the old gate.
FORMATTER_PAYLOAD = ("import string\n\ndef f():\n    return 1\n\n"
                     "g = string.Formatter().get_field('0.__globals__', (f,), {})[0]\n"
                     "b = g['__builtins__']\n")
CREATE_MODEL_PAYLOAD = ("from pydantic import create_model\n\n"
                        "M = create_model('M', x=(\"open('/proc/self/environ').read()\", ...))\n")

#: The audit's reproductions: each reads os.environ when run (see the test below) and passed the old gate,
#: which refused `.format()` only when called directly on a computed string.
_LEAK_TEMPLATE = "import random\nu = '_' * 2\nt = '{0.seed.' + u + 'globals' + u + '[_os].environ}'\n"
ALIAS_FORMAT_PAYLOADS = {
    "str_format": _LEAK_TEMPLATE + "m = str.format\nLEAK = m(t, random.Random)\n",
    "str_format_map": (_LEAK_TEMPLATE.replace("{0.", "{r.") + "m = str.format_map\nLEAK = m(t, {'r': random.Random})\n"),
    "map_str_format": _LEAK_TEMPLATE + "LEAK = list(map(str.format, [t], [random.Random]))[0]\n",
    "dict_of_methods": _LEAK_TEMPLATE + "F = {'f': str.format}\nLEAK = F['f'](t, random.Random)\n",
    "str_format_called": _LEAK_TEMPLATE.replace("'_' * 2", "chr(95) + chr(95)") + "LEAK = str.format(t, random.Random)\n",
}

ESCAPES = {
    "review_formatter_get_field": FORMATTER_PAYLOAD,
    "review_create_model_string_type": CREATE_MODEL_PAYLOAD,
    # dunder names inside any string constant
    "format_method_globals": "def f():\n    return 1\nx = '{0.__globals__}'.format(f)\n",
    "fstring_constant_dunder": "x = 1\ny = f'{x}__class__'\n",
    "percent_dunder": "y = '%s' % '__subclasses__'\n",
    "bytes_dunder": "y = b'__globals__'.decode()\n",
    "docstring_dunder": "def f():\n    '''see __builtins__'''\n    return 1\n",
    "format_map_private": "x = '{a._secret}'.format_map({'a': 1})\n",
    "format_forbidden_attr": "g = (i for i in [])\nx = '{0.gi_frame}'.format(g)\n",
    # getattr / setattr / vars / format / Formatter chains
    "getattr_call": "x = getattr(1, 'real')\n",
    "setattr_call": "class A:\n    pass\nsetattr(A, 'x', 1)\n",
    "vars_call": "x = vars()\n",
    "format_builtin": "x = format(1, 'd')\n",
    "formatter_import": "from string import Formatter\n",
    "formatter_vformat": "import string\nx = string.Formatter().vformat('{0}', (1,), {})\n",
    "computed_format": "f = '{0' + '.real}'\nx = f.format(1)\n",
    # str.format / format_map reached as a value (the audit of issue 11): a getattr by string with a
    # template computed from constants that hold no dunder (ALIAS_FORMAT_PAYLOADS really leak, below)
    **{f"alias_{k}": v for k, v in ALIAS_FORMAT_PAYLOADS.items()},
    "format_bound_to_literal": "m = '{}'.format\nx = m(1)\n",
    "format_partial": "import functools\nf = functools.partial(str.format, '{0' + '.real}')\n",
    "format_methodcaller": "import operator\nf = operator.methodcaller('format', 1)\n",
    "attrgetter_alias": "import operator as op\ng = op.attrgetter('real')\n",
    "format_literal_attribute_field": "x = '{0.real}'.format(1)\n",
    "format_literal_index_field": "x = '{0[a]}'.format({'a': 1})\n",
    "format_literal_nested_spec_field": "x = '{0:{1.real}}'.format(1, 2)\n",
    "format_map_literal_attribute_field": "x = '{a.real}'.format_map({'a': 1})\n",
    "format_on_own_object": "class A:\n    def f(self, t):\n        return t.format(self)\n",
    # evaluation of strings as types or code through libraries
    "create_model_import": "from pydantic import create_model\n",
    "pydantic_create_model_attr": "import pydantic\nM = pydantic.create_model('M')\n",
    "typeadapter_code_string": "from pydantic import TypeAdapter\nT = TypeAdapter(\"open('/etc/passwd')\")\n",
    "typeadapter_computed_string": ("from pydantic import TypeAdapter\ns = 'op' + 'en(1)'\nT = TypeAdapter(s)\n"),
    "typeadapter_parameter": "from pydantic import TypeAdapter\ndef f(t):\n    return TypeAdapter(t)\n",
    "optional_of_computed_string": ("from typing import Optional\nfrom pydantic import TypeAdapter\n"
                                    "def f(s):\n    return TypeAdapter(Optional[s])\n"),
    "annotation_from_computed_string": ("from pydantic import BaseModel\nS = 'op' + \"en('/etc/passwd')\"\n"
                                        "class M(BaseModel):\n    a: S\n"),
    "annotation_alias_of_string": ("from pydantic import BaseModel\nS = 'op' + 'en(1)'\nT = S\n"
                                   "class M(BaseModel):\n    a: T\n"),
    "string_annotation_call": "from pydantic import BaseModel\nclass M(BaseModel):\n    a: \"open('x')\"\n",
    "code_string_default": "x = \"open('/proc/1/environ').read()\"\n",
    "typevar_bound_computed": "from typing import TypeVar\ns = 'a' + 'b'\nT = TypeVar('T', bound=s)\n",
    "namedtuple_functional": "from typing import NamedTuple\nN = NamedTuple('N', [('a', 'int')])\n",
    "typeddict_functional": "from typing import TypedDict\nD = TypedDict('D', {'a': int})\n",
    "get_type_hints": "from typing import get_type_hints\n",
    "forward_ref": "from typing import ForwardRef\n",
    "typing_ext_evaluate": "from typing_extensions import evaluate_forward_ref\n",
    "pydantic_private_eval": "from pydantic._internal._typing_extra import eval_type_backport\n",
    "fieldinfo_annotation_store": ("from pydantic import BaseModel\nclass M(BaseModel):\n    a: int = 0\n"
                                   "M.model_fields['a'].annotation = 'x' + 'y'\n"),
    "typing_module_eval_attr": "import typing\nx = typing.evaluate_forward_ref\n",
    # attribute access to frames, globals, builtins, subclasses
    "attr_globals": "def f():\n    return 1\nx = f.__globals__\n",
    "attr_builtins": "x = __builtins__\n",
    "attr_subclasses": "x = object.__subclasses__()\n",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_gate_refuses_every_escape_kind(tmp_path, name):
    (tmp_path / "tools.py").write_text(ESCAPES[name])
    findings = check_imports(tmp_path)
    assert findings and all(f.check == "forbidden_import" and f.severity == "high" for f in findings), name


def test_the_review_payloads_really_escape_without_the_gate():
    """The gate test above is not vacuous: the formatter payload reaches the builtins when executed."""
    ns: dict = {}
    exec(compile(FORMATTER_PAYLOAD, "<payload>", "exec"), ns)  # noqa: S102 - the point of the test
    assert "open" in (ns["b"] if isinstance(ns["b"], dict) else vars(ns["b"]))


@pytest.mark.parametrize("name", sorted(ALIAS_FORMAT_PAYLOADS))
def test_the_alias_format_payloads_really_leak_without_the_gate(monkeypatch, name):
    monkeypatch.setenv("ENVFACTORY_TEST_SECRET", SECRET)
    ns: dict = {}
    exec(compile(ALIAS_FORMAT_PAYLOADS[name], "<payload>", "exec"), ns)  # noqa: S102 - the point of the test
    assert SECRET in ns["LEAK"]


def test_gate_accepts_format_on_a_literal_without_attribute_fields(tmp_path):
    (tmp_path / "tools.py").write_text("n = 3\nx = '{} items, {n:>4}'.format(n, n=n)\ny = '{a}'.format_map({'a': 1})\n"
                                       "z = '{0:{1}}'.format(1.5, '>8')\n")
    assert check_imports(tmp_path) == []


def test_gate_still_accepts_ordinary_typed_code(tmp_path):
    pkg = write_package(tmp_path / "Ok", "Ok", code_answer(TOOLS_OK), TESTS["scenarios"], [], {"kind": "generated"})
    (pkg / "more.py").write_text(
        "from __future__ import annotations\nfrom datetime import date\nfrom typing import Annotated, Literal, Optional\n"
        "from pydantic import BaseModel, Field, TypeAdapter\n\n"
        "Status = Literal['open', 'closed']\nPlantId = Annotated[str, Field(description=\"Plant id (e.g. P-001)\")]\n"
        "Day = Optional[date]\n\n\nclass Row(BaseModel):\n    status: Status = 'open'\n    plant: PlantId = 'P-001'\n"
        "    day: Day = None\n    note: str = 'call list_plants first'\n\n\n"
        "ROWS = TypeAdapter(list[Row])\n\n\ndef show(r: Row) -> str:\n    return f'{r.status}: {r.plant} {type(r).__name__}'\n")
    assert check_imports(pkg) == []


# ------------------------------------------------------------------------- the validation child


def ungated_child_main() -> None:
    """A validation child whose static gate is switched off: stands in for code that got past it."""
    from gym_envfactory.generators.envgen import validator

    validator.check_imports = lambda folder: []
    validator.child_main()


def drive_ungated(pkg: str, meta: str, out: str, namespaces: str) -> None:
    """Run in a process started with the secret in its environment: validate ``pkg`` in an ungated child."""
    run = asyncio.run(run_in_child("tests.generators.envgen.test_gate_and_sandbox", "ungated_child_main", [pkg, meta, out, "0"],
                                   timeout_s=120.0, limits=ChildLimits(namespaces=namespaces == "1")))
    assert run.returncode == 0, run.stderr_tail


PROBE = ("import os\nseen = repr(sorted(os.environ.items()))\n"
         "for pid in [os.getppid(), *[p for p in os.listdir('/proc') if p.isdigit()]]:\n"
         "    try:\n        seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1')\n"
         "    except OSError:\n        pass\n"
         f"raise RuntimeError('PROBED leaked=' + str({SECRET!r} in seen or 'ENVFACTORY_TEST_SECRET' in seen)"
         " + ' vars=' + ','.join(sorted(os.environ)))\n")


def _probe(tmp_path: Path, namespaces: bool) -> str:
    pkg = write_package(tmp_path / f"pkg{namespaces}" / "Probe", "Probe", code_answer(PROBE), TESTS["scenarios"], [],
                        {"kind": "generated"})
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    out = tmp_path / f"out{namespaces}.json"
    # the secret is in the *initial* environment of the validating process, where /proc/<pid>/environ shows it
    env = {**os.environ, "ENVFACTORY_TEST_SECRET": SECRET}
    driver = (f"from tests.generators.envgen.test_gate_and_sandbox import drive_ungated; "
              f"drive_ungated({str(pkg)!r}, {str(tmp_path / 'meta.json')!r}, {str(out)!r}, {str(int(namespaces))!r})")
    subprocess.run([sys.executable, "-c", driver], env=env, cwd=ROOT, check=True, timeout=240)
    [finding] = json.loads(out.read_text())["findings"]
    assert "PROBED" in finding["message"] and "HOME" in finding["message"], finding["message"]  # the probe ran
    return finding["message"]


@pytest.mark.skipif(not namespace_prefix(), reason="this host allows no PID namespace for the validation child")
def test_code_past_the_gate_sees_no_secret_of_the_parent(tmp_path):
    assert "PROBED leaked=False" in _probe(tmp_path, namespaces=True)
    # control: the same probe without the PID namespace reads the secret from /proc/<parent>/environ
    assert "PROBED leaked=True" in _probe(tmp_path, namespaces=False)


def test_package_holding_2_5_gb_at_import_fails_validation(tmp_path):
    big = TOOLS_OK + "\nBALLAST = bytearray(2_500_000_000)\n"
    pkg = write_package(tmp_path / "pkg" / "Hog", "Hog", code_answer(big), TESTS["scenarios"], [], {"kind": "generated"})
    assert check_imports(pkg) == []  # nothing the gate can see: the limit must catch it
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    report = asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / "out.json", 0, 120.0, sandbox="process"))
    assert not report.passed
    assert [(f.check, f.severity) for f in report.findings] == [("resource_limit", "high")]
    assert "memory limit" in report.findings[0].message


def test_memory_limit_is_a_parameter(tmp_path):
    small = TOOLS_OK + "\nBALLAST = bytearray(200_000_000)\n"
    pkg = write_package(tmp_path / "pkg" / "Ballast", "Ballast", code_answer(small), TESTS["scenarios"], [],
                        {"kind": "generated"})
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    tight = asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / "o1.json", 0, 120.0, sandbox="process",
                                          limits=ChildLimits(address_space=150 << 20)))
    assert [f.check for f in tight.findings] == ["resource_limit"]
    roomy = asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / "o2.json", 0, 120.0, sandbox="process"))
    assert roomy.passed, [f.message for f in roomy.findings]


def test_package_spinning_at_import_hits_the_cpu_limit(tmp_path):
    spin = TOOLS_OK + "\nwhile True:\n    pass\n"
    pkg = write_package(tmp_path / "pkg" / "Spin", "Spin", code_answer(spin), TESTS["scenarios"], [], {"kind": "generated"})
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    report = asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / "out.json", 0, 120.0, sandbox="process",
                                           limits=ChildLimits(cpu_s=2)))
    # before: "the validator process exited with 1: unshare: sigprocmask unblock failed" (SIGKILL at the limit)
    assert [(f.check, f.severity) for f in report.findings] == [("resource_limit", "high")]
    assert "CPU time limit" in report.findings[0].message


def test_unknown_or_unavailable_sandbox_is_a_typed_error(tmp_path):
    with pytest.raises(EnvGenError, match="sandbox must be"):
        asyncio.run(validate_in_child(tmp_path, tmp_path / "m.json", tmp_path / "o.json", 0, 5.0, sandbox="chroot"))
    with pytest.raises(EnvGenError, match="sandbox='docker'"):
        asyncio.run(validate_in_child(tmp_path, tmp_path / "m.json", tmp_path / "o.json", 0, 5.0, sandbox="docker",
                                      image="envfactory/no-such-image:0"))


# ---------------------------------------------------------------------------- publication


def test_package_digest_sees_every_change(tmp_path):
    pkg = write_package(tmp_path / "D", "D", code_answer(TOOLS_OK), TESTS["scenarios"], [], {"kind": "generated"})
    d0 = package_digest(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "tools.cpython-311.pyc").write_bytes(b"x")
    assert package_digest(pkg) == d0  # bytecode is not the package
    (pkg / "tools.py").write_text(TOOLS_OK + " ")
    assert package_digest(pkg) != d0
    (pkg / "tools.py").write_text(TOOLS_OK)
    assert package_digest(pkg) == d0
    (pkg / "extra.py").write_text("")
    assert package_digest(pkg) != d0


def test_package_rewritten_during_validation_is_not_published(tmp_path, cleanup_registry, monkeypatch):  # noqa: F811
    cleanup_registry.append("PlantNurserySwap")
    real = pipeline_mod.validate_in_child

    async def validate_then_rewrite(pkg, *args, **kw):
        report = await real(pkg, *args, **kw)  # validated as written (and passes) ...
        (Path(pkg) / "tools.py").write_text(TOOLS_OK + "\nx = \"open('/etc/passwd')\"\n")  # ... then rewritten
        return report

    monkeypatch.setattr(pipeline_mod, "validate_in_child", validate_then_rewrite)
    responder = Responder({"code": code_answer(TOOLS_OK), "test": TESTS})
    with ScriptedChatServer(responder) as server:
        gen = make_gen(tmp_path, server, max_revisions=0, sandbox="process")
        res = asyncio.run(gen.generate(EnvGenJob(metadata=METADATA, name="PlantNurserySwap")))
    assert res.status == "quarantined" and not res.passed and res.gym_id is None
    changed = [f for f in res.report.findings if f.check == "package_changed"]
    assert changed and changed[0].severity == "high" and "changed during validation" in changed[0].message
    assert not (tmp_path / "catalog" / "PlantNurserySwap").exists()
    assert not [p for p in (tmp_path / "catalog").iterdir()] if (tmp_path / "catalog").exists() else True
    assert "envfactory/PlantNurserySwap-v0" not in gym.registry and "PlantNurserySwap" not in list_environments()
    # the same run without the rewrite publishes (the check is not refusing everything)
    monkeypatch.setattr(pipeline_mod, "validate_in_child", real)
    cleanup_registry.append("PlantNurseryKept")
    with ScriptedChatServer(Responder({"code": code_answer(TOOLS_OK), "test": TESTS})) as server:
        gen = make_gen(tmp_path, server, max_revisions=0, sandbox="process")
        ok = asyncio.run(gen.generate(EnvGenJob(metadata=METADATA, name="PlantNurseryKept")))
    assert ok.status == "passed" and (tmp_path / "catalog" / "PlantNurseryKept" / "tools.py").read_text() == TOOLS_OK


# The same checks inside the runtime image (docker sandbox): tests/docker/test_sandbox_docker.py, which
# builds the images itself and never skips.


# ------------------------------------------------------------------- the shared sandbox (generators.sandbox)


def test_run_sandboxed_in_a_process_reads_inputs_in_place_and_writes_the_answer(tmp_path):
    from gym_envfactory.generators.sandbox import ANSWER, ReadOnly, run_sandboxed

    src, answer = tmp_path / "in.json", tmp_path / "answer.json"
    src.write_text('{"b": 1}')
    answer.write_text("stale")  # an answer left from an earlier run never passes for this one's
    run = asyncio.run(run_sandboxed("json.tool", "main", [ReadOnly(src), ANSWER], sandbox="process", answer=answer,
                                    timeout_s=60))
    assert (run.timed_out, run.returncode) == (False, 0) and json.loads(answer.read_text()) == {"b": 1}
    src.write_text("{not json")
    failed = asyncio.run(run_sandboxed("json.tool", "main", [ReadOnly(src), ANSWER], sandbox="process", answer=answer,
                                       timeout_s=60))
    assert failed.returncode != 0 and not answer.exists() and "Expecting property name" in failed.stderr_tail


def test_run_sandboxed_in_a_container_mounts_copies_and_brings_the_answer_back(tmp_path, monkeypatch):
    """The container path without an engine: the runner is replaced by one that checks what it was given."""
    from gym_envfactory.generators.sandbox import ANSWER, ReadOnly, container, run_sandboxed

    pkg = tmp_path / "MyPkg"
    pkg.mkdir()
    (pkg / "tools.py").write_text("X = 1\n")
    meta = tmp_path / "meta.json"
    meta.write_text("{}")
    seen = {}

    def fake_run(program, args, volumes, *, timeout_s, image=None, role="", option="", hash_seed=0):
        by_bind = {v["bind"]: (Path(k), v["mode"]) for k, v in volumes.items()}
        seen.update(program=program, args=args, role=role, modes={b: m for b, (_, m) in by_bind.items()})
        host_in = by_bind["/in"][0]
        assert (host_in / "0" / "MyPkg" / "tools.py").read_text() == "X = 1\n"  # the folder keeps its name
        assert (host_in / "1" / "meta.json").read_text() == "{}"
        (by_bind["/out"][0] / "answer").write_text('{"ok": true}')
        return False, 0, ""

    monkeypatch.setattr(container, "docker_available", lambda image=None: True)
    monkeypatch.setattr(container, "run_container", fake_run)
    monkeypatch.setattr("gym_envfactory.containers.images.CONTAINER_UID", os.getuid())
    answer = tmp_path / "answer.json"
    run = asyncio.run(run_sandboxed("some.module", "child_main", [ReadOnly(pkg), ReadOnly(meta), ANSWER, "7"],
                                    sandbox="docker", answer=answer, timeout_s=5, role="test-role"))
    assert (run.timed_out, run.returncode, run.memory_exceeded) == (False, 0, False)
    assert seen == {"program": "from some.module import child_main; child_main()",
                    "args": ["/in/0/MyPkg", "/in/1/meta.json", "/out/answer", "7"], "role": "test-role",
                    "modes": {"/in": "ro", "/out": "rw"}}
    assert json.loads(answer.read_text()) == {"ok": True}


def test_unknown_sandbox_modes_are_a_sandbox_error(tmp_path):
    from gym_envfactory.generators.errors import SandboxError
    from gym_envfactory.generators.sandbox import ANSWER, resolve_sandbox, run_sandboxed

    with pytest.raises(SandboxError, match="sandbox must be 'auto', 'docker' or 'process', not 'chroot'"):
        resolve_sandbox("chroot")
    assert resolve_sandbox("process") == "process"
    with pytest.raises(SandboxError, match="sandbox must be 'docker' or 'process'"):
        asyncio.run(run_sandboxed("json.tool", "main", [ANSWER], sandbox="auto", answer=tmp_path / "a", timeout_s=5))
