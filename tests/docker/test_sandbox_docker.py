"""Issue 11, part 1, on the Docker engine: EnvGen validation inside the product's runtime image.

Here (tests/docker/, marker ``docker``) and not in tests/generators/: the images are built by the
``docker_images`` fixture, so these tests run wherever the Docker tests run and never skip.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from gym_envfactory.generators.envgen import sandbox as sandbox_mod
from gym_envfactory.generators.envgen import validate_in_child, write_package
from gym_envfactory.generators.sandbox import CONTAINER_LIMITS
from tests.generators.envgen.test_envgen import METADATA, TESTS, TOOLS_OK, code_answer
from tests.generators.envgen.test_gate_and_sandbox import SECRET

#: The image's Validator with its static gate switched off: stands in for code that got past the gate,
#: so what is checked below is the container's confinement alone.
UNGATED = ("from gym_envfactory.generators.envgen import validator\n"
           "validator.check_imports = lambda folder: []\n"
           "validator.child_main()\n")

#: Runs at import of the package's tools.py: looks for the secret in every process it can see, for a
#: network, for a writable package and for further processes, and reports through the import error.
PROBE = ("import os, socket, time\nseen = repr(sorted(os.environ.items()))\n"
         "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
         "    try:\n        seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1')\n"
         "    except OSError:\n        pass\n"
         "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=3).close()\n    net = 'open'\n"
         "except OSError:\n    net = 'none'\n"
         "try:\n    open(__file__, 'a').close()\n    pkg = 'writable'\nexcept OSError:\n    pkg = 'read-only'\n"
         "kids = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n            time.sleep(5)\n"
         "            os._exit(0)\n        kids += 1\nexcept OSError:\n    pass\n"
         f"raise RuntimeError('PROBED leaked=' + str({SECRET!r} in seen or 'ENVFACTORY_TEST_SECRET' in seen)"
         " + f' net={net} pkg={pkg} uid={os.getuid()} kids={kids} vars=' + ','.join(sorted(os.environ)))\n")


def _validate(tmp_path, name: str, tools: str, sandbox: str = "docker"):
    (tmp_path / "meta.json").write_text(json.dumps(METADATA))
    pkg = write_package(tmp_path / "pkg" / name, name, code_answer(tools), TESTS["scenarios"], [], {"kind": "generated"})
    return asyncio.run(validate_in_child(pkg, tmp_path / "meta.json", tmp_path / f"{name}.json", 0, 300.0,
                                         sandbox=sandbox))


def test_auto_validates_in_the_runtime_image(docker_images, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        report = _validate(tmp_path, "InBox", TOOLS_OK, sandbox="auto")
    assert report.passed, [f.message for f in report.findings]
    assert "NOT a sandbox" not in caplog.text  # with the image there, auto means docker


def test_package_holding_2_5_gb_fails_in_the_runtime_image(docker_images, tmp_path):
    report = _validate(tmp_path, "Hog", TOOLS_OK + "\nB = bytearray(2_500_000_000)\n")
    assert not report.passed and [f.check for f in report.findings] == ["resource_limit"]


def test_code_past_the_gate_is_confined_in_the_runtime_image(docker_images, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVFACTORY_TEST_SECRET", SECRET)
    monkeypatch.setattr(sandbox_mod, "CHILD_PROGRAM", UNGATED)
    report = _validate(tmp_path, "Probe", PROBE)
    [finding] = report.findings
    msg = finding.message
    assert "PROBED" in msg and "HOME" in msg, msg  # the probe ran, past the gate
    assert "leaked=False" in msg and "net=none" in msg and "pkg=read-only" in msg, msg
    assert "uid=0 " not in msg, msg
    kids = int(msg.split("kids=")[1].split()[0])
    assert kids < CONTAINER_LIMITS["pids_limit"], msg


@pytest.fixture(autouse=True)
def _no_validation_container_left(docker_client):
    yield
    left = docker_client.containers.list(all=True, filters={"label": "org.envfactory.role=envgen-validation"})
    assert not left, [c.name for c in left]
