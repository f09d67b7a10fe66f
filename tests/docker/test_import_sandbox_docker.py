"""Issue 11, part 1, for imports, on the Docker engine: ``envfactory import --sandbox docker``.

Every execution of the imported file's code (the build, probe and check stages of
:mod:`gym_envfactory.generators.importer.sandbox`) runs in the product's runtime image.  Here (tests/docker/,
marker ``docker``) and not in tests/generators/: the images are built by the ``docker_images`` fixture
(the runtime image's hash covers generators/, so a stale one is rebuilt), so these tests never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym_envfactory.generators.importer import ImporterError, import_server_package, import_tool_server
from gym_envfactory.session import Session
from tests.generators.importer.test_importer import COUNTER_SERVER, SCENARIO, SCENARIOS, SERVER, TASKS
from tests.generators.importer.test_sandbox import REWRITER, SECRET, SNOOP

ROOT = Path(__file__).resolve().parents[2]

#: SNOOP (the secret looked for in this process's environment and in /proc/<ppid>/environ and every
#: other /proc/<pid>/environ, at import and in the tool) plus a network probe and a look for the
#: engine's socket, both at import and in the tool; every answer is recorded by the probe.  The probe
#: imports ``socket`` by a computed name, past the importer's static refusal of network client modules
#: (issue 26 item 8), so the test shows what the Docker sandbox itself holds.
NET = '''

def net() -> str:
    # past the importer's static refusal of network modules on purpose: the container must hold anyway
    socket = __import__("so" + "cket")

    for addr in (("1.1.1.1", 53), ("172.17.0.1", 2375), ("10.0.2.2", 80)):
        try:
            socket.create_connection(addr, timeout=2).close()
            return "open:" + addr[0]
        except OSError:
            pass
    try:
        socket.getaddrinfo("example.com", 80)
        return "dns"
    except OSError:
        pass
    return "docker.sock" if os.path.exists("/var/run/docker.sock") else "none"


NET_AT_IMPORT = net()
'''
SNOOP_NET = (SNOOP.replace("\n\nAT_IMPORT = look()\n", NET + "\n\nAT_IMPORT = look()\n")
             .replace('return {"at_import": AT_IMPORT, "in_tool": look()}',
                      'return {"at_import": AT_IMPORT, "in_tool": look(), "net_at_import": NET_AT_IMPORT, '
                      '"net_in_tool": net(), "uid": os.getuid()}'))
assert SNOOP_NET != SNOOP and "NET_AT_IMPORT = net()" in SNOOP_NET


def _import_in_child(src: Path, out: Path, sandbox: str, validate: bool = True) -> subprocess.CompletedProcess:
    """``import_server_package(src, sandbox=...)`` from a fresh interpreter that has the secret in its
    environment (so also in ``/proc/<that process>/environ``)."""
    driver = ("from gym_envfactory.generators.importer import import_server_package as f; "
              f"d = f({str(src)!r}, out_dir={str(out)!r}, sandbox={sandbox!r}, validate={validate!r}); print(d.sandbox, d.path)")
    env = {**os.environ, "ENVFACTORY_TEST_SECRET": SECRET, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", driver], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _probe_results(pkg: Path) -> list[dict]:
    steps = [json.loads(line)["steps"][0] for line in (pkg / "scenarios.jsonl").read_text().splitlines()]
    return [s["result"] for s in steps if isinstance(s.get("result"), dict) and "in_tool" in s["result"]]


def test_imported_code_in_docker_sees_no_secret_no_network_and_publishes_a_clean_package(docker_images, tmp_path):
    src = tmp_path / "snoop_server.py"
    src.write_text(SNOOP_NET)
    done = _import_in_child(src, tmp_path / "out", "docker")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "docker", done.stdout
    pkg = tmp_path / "out" / "Snoop"
    [seen] = _probe_results(pkg)
    assert seen["at_import"] == "clean" and seen["in_tool"] == "clean", seen
    assert seen["net_at_import"] == "none" and seen["net_in_tool"] == "none", seen
    assert seen["uid"] != 0, seen
    for f in pkg.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    assert (pkg / "_source.py").read_bytes() == SNOOP_NET.encode() == src.read_bytes()
    # the published package works (loaded here, as any environment is used after the import)
    from gym_envfactory.environment.package import load_environment

    r = Session(load_environment(pkg)).call("check_env", {})
    assert r.ok and set(r.content) >= {"at_import", "in_tool", "net_in_tool"}, r


def test_control_inline_the_same_payload_finds_the_secret(tmp_path):
    """Without the sandbox the payload does find the secret: the test above can fail."""
    src = tmp_path / "snoop_server.py"
    src.write_text(SNOOP_NET)
    done = _import_in_child(src, tmp_path / "out", "inline", validate=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [seen] = _probe_results(tmp_path / "out" / "Snoop")
    assert seen["at_import"] == SECRET and seen["in_tool"] == SECRET, seen


def test_a_normal_import_in_docker_loads_and_runs_in_a_session(docker_images, tmp_path):
    spec = import_tool_server(SERVER, name="BookStoreDock", out_dir=tmp_path, initial_state=SCENARIO,
                              scenarios=SCENARIOS, tasks=TASKS, sandbox="docker", register=False)
    assert list(spec.tools) == ["search_books", "get_book", "add_to_cart", "place_order", "cancel_order",
                                "list_orders"]
    assert (tmp_path / "BookStoreDock" / "_source.py").read_bytes() == SERVER.read_bytes()
    s = Session(spec, check_writes=True)
    r = s.call("add_to_cart", {"book_id": "B-001", "quantity": 2})
    assert r.ok and r.content == {"success": True, "cart_size": 2}, r
    r = s.call("place_order", {})
    assert r.ok and r.content["order_id"] == "ORD-0002", r
    assert s.state()["books"]["B-001"]["stock"] == 1


def test_docker_import_reports_validation_and_refuses_a_leaky_server(docker_images, tmp_path):
    done = import_server_package(SERVER, name="BookStoreDock2", out_dir=tmp_path, initial_state=SCENARIO,
                                 scenarios=SCENARIOS, tasks=TASKS, sandbox="docker")
    assert done.sandbox == "docker" and done.validation is not None
    assert done.validation["scenarios"] == done.validation["scenarios_passed"] >= 2, done.validation
    assert done.validation["tasks"] == 1 and not done.validation["failures"], done.validation
    # the isolation check runs in the container too: module-level shared state is refused, nothing published
    with pytest.raises(ImporterError, match="not isolated"):
        import_server_package(COUNTER_SERVER, name="TicketsLeakyDock", out_dir=tmp_path, sandbox="docker")
    assert not (tmp_path / "TicketsLeakyDock").exists()


def test_a_file_that_rewrites_itself_in_docker_cannot_and_the_original_bytes_are_published(docker_images, tmp_path):
    src = tmp_path / "rewriter_server.py"
    src.write_text(REWRITER)
    done = import_server_package(src, name="RewriterDock", out_dir=tmp_path / "out", sandbox="docker")
    # the stage is mounted read-only: the rewrite fails inside the tool (a recorded tool error)
    assert (tmp_path / "out" / "RewriterDock" / "_source.py").read_bytes() == REWRITER.encode()
    assert "# rewritten" not in (tmp_path / "out" / "RewriterDock" / "scenarios.jsonl").read_text()
    assert src.read_text() == REWRITER and done.sandbox == "docker"


@pytest.mark.parametrize(("top_level", "timeout_s", "match"), [
    ("B = bytearray(2_500_000_000)", 300.0, "memory limit in the build stage"),
    ("while True:\n    pass", 8.0, "did not finish the build stage in 8 s"),
], ids=["memory", "timeout"])
def test_a_hog_fails_the_docker_import_cleanly(docker_images, tmp_path, top_level, timeout_s, match):
    src = tmp_path / "hog_server.py"
    src.write_text(SNOOP.replace("\n\nAT_IMPORT = look()\n", f"\n\n{top_level}\nAT_IMPORT = look()\n"))
    with pytest.raises(ImporterError, match=match):
        import_server_package(src, out_dir=tmp_path / "out", sandbox="docker", timeout_s=timeout_s)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.fixture(autouse=True)
def _no_import_container_left(docker_client):
    yield
    left = docker_client.containers.list(all=True, filters={"label": "org.envfactory.role=import-validation"})
    assert not left, [c.name for c in left]
