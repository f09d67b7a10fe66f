"""Hostile and careless inputs (issue 11, parts 3 and 4): catalog impersonation, broken packages in the
catalog, deep or huge JSON lines, junk on every transport (MCP stdio, WebSocket, MCP over HTTP; the
control plane's is in tests/server/test_app.py), Host/Origin checks on every route, backend start timeouts
and liveness, and the token kept out of ``ps``."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401
from gym_envfactory.environment.package import load_environment, unload_package
from gym_envfactory.environment.states import task_initial_state
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import BackendError, DatasetError, SpecError

ROOT = Path(__file__).resolve().parent.parent

STATE = "from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    n: int = 0\n"
TOOLS = ('from gym_envfactory import tool\n\nfrom .state import State\n\nMARK = {mark!r}\n\n\n'
         '@tool(read_only=True)\ndef get(state: State) -> str:\n    """The count and which copy answered."""\n'
         '    return f"{{state.n}} from {{MARK}}"\n')


def make_package(folder: Path, name: str, *, mark: str = "original", tasks: str | None = None,
                 small: str = '{"n": 1}') -> Path:
    """Write a minimal environment package ``name`` into ``folder`` (which need not be named ``name``)."""
    (folder / "initial_states").mkdir(parents=True)
    (folder / "environment.toml").write_text(
        f'name = "{name}"\nversion = "0.1.0"\ndomain = "utilities"\ndescription = "A hostile-input fixture."\n')
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text(STATE)
    (folder / "tools.py").write_text(TOOLS.format(mark=mark))
    (folder / "initial_states" / "small.json").write_text(small)
    if tasks is not None:
        (folder / "tasks.jsonl").write_text(tasks)
    return folder


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVFACTORY_TOKEN", "ENVFACTORY_TOKEN_FILE")}
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------ catalog integrity
def test_folder_named_otherwise_than_its_manifest_is_refused(tmp_path):
    folder = make_package(tmp_path / "Impostor", "HostileRenamed")
    with pytest.raises(SpecError) as ei:
        load_environment(folder)
    text = str(ei.value)
    assert str(folder) in text and str(tmp_path / "HostileRenamed") in text and ei.value.field == "name"


def test_a_copy_keeping_another_packages_name_does_not_swap_code(tmp_path):
    first = make_package(tmp_path / "a" / "HostileTwin", "HostileTwin", mark="first")
    second = make_package(tmp_path / "b" / "HostileTwin", "HostileTwin", mark="second")
    try:
        spec = load_environment(first)
        with pytest.raises(SpecError) as ei:
            load_environment(second)  # before the fix: silently the first folder's code under the second's path
        assert str(first) in str(ei.value) and str(second) in str(ei.value)
        assert spec.tools["get"].fn.__module__.startswith("gym_envfactory._envs.HostileTwin")
        assert load_environment(first).path == first  # the same folder again is fine
        unload_package("HostileTwin")
        again = load_environment(second)  # replaced on purpose
        from gym_envfactory import Session

        s = Session([again])
        assert s.call("get", {}).content == "1 from second"
    finally:
        unload_package("HostileTwin")


def test_deep_and_huge_task_lines_name_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    ok = '{"task_id": "ok", "turns": [{"user": "hi"}]}\n'
    for bad in ("[" * 100_000, '{"task_id": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
                '{"task_id": 1' + "0" * 50_000 + "}"):
        path.write_text(ok + bad + "\n")
        with pytest.raises(DatasetError) as ei:
            TaskSet.from_jsonl("X", path)
        assert ei.value.line == 2 and f"{path}:2" in str(ei.value)


def test_deep_scenario_and_state_files_are_spec_errors(tmp_path):
    from gym_envfactory.environment.scenarios import load_scenarios

    (tmp_path / "s.jsonl").write_text("[" * 100_000 + "\n")
    with pytest.raises(SpecError, match="s.jsonl:1"):
        load_scenarios(tmp_path / "s.jsonl")
    folder = make_package(tmp_path / "HostileDeepState", "HostileDeepState", small='{"n": ' + "[" * 100_000 + "}")
    try:
        with pytest.raises(SpecError, match="small.json"):
            load_environment(folder).initial_state_json()
    finally:
        unload_package("HostileDeepState")


def test_invalid_initial_state_through_a_task_names_state_file_and_field(tmp_path):
    tasks = ('{"task_id": "t1", "turns": [{"user": "x"}]}\n'
             '{"task_id": "t2", "initial_state": {"name": "small", "patches": [{"op": "replace", "path": "/n", '
             '"value": "many"}]}, "turns": [{"user": "x"}]}\n')
    folder = make_package(tmp_path / "HostileBadState", "HostileBadState", tasks=tasks, small='{"n": "lots"}')
    try:
        spec = load_environment(folder)
        with pytest.raises(DatasetError) as ei:
            task_initial_state(spec, "t1")
        e = ei.value
        assert str(folder / "initial_states" / "small.json") in str(e) and "'n'" in str(e)
        assert e.field == "initial_state.n" and e.task_id == "t1" and e.line == 1 and "tasks.jsonl:1" in str(e)
        (folder / "initial_states" / "small.json").write_text('{"n": 2}')
        spec2 = load_environment(folder)
        with pytest.raises(DatasetError) as ei:
            task_initial_state(spec2, "t2")
        assert "small.json" in str(ei.value) and ei.value.field == "initial_state.n"
    finally:
        unload_package("HostileBadState")


@pytest.fixture
def broken_catalog(tmp_path) -> Path:
    """A catalog folder with a good package, one with a 100k-deep tasks line, one impersonating HotelBooking."""
    cat = tmp_path / "catalog"
    make_package(cat / "HostileGood", "HostileGood")
    make_package(cat / "HostileDeep", "HostileDeep", tasks="[" * 100_000 + "\n")
    make_package(cat / "HostileFake", "HotelBooking", mark="fake")
    return cat


def test_envfactory_list_reports_broken_packages_and_goes_on(broken_catalog):
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "list"], capture_output=True, text=True,
                       timeout=240, env=cli_env(ENVFACTORY_CATALOG=str(broken_catalog), COLUMNS="400"))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    assert "envfactory/HostileGood-v0" in r.stdout and "envfactory/HotelBooking-v0" in r.stdout
    err = " ".join(r.stderr.split())
    assert "tasks.jsonl:1" in err and "HostileDeep" in err
    assert "HostileFake" in err and "HotelBooking" in err


def test_serving_the_whole_catalog_skips_broken_packages(broken_catalog, monkeypatch):
    from gym_envfactory.server import SessionManager

    monkeypatch.setenv("ENVFACTORY_CATALOG", str(broken_catalog))
    m = SessionManager()
    assert {"HostileGood", "HotelBooking"} <= set(m.specs) and set(m.skipped) == {"HostileDeep", "HostileFake"}
    assert "tasks.jsonl:1" in m.skipped["HostileDeep"]
    assert m.specs["HotelBooking"].path == ROOT / "env_images" / "HotelBooking"
    unload_package("HostileGood")


def test_serve_all_starts_with_a_broken_package(broken_catalog):
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "--all", "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(ENVFACTORY_CATALOG=str(broken_catalog)))
    try:
        line = proc.stdout.readline()
        assert line.startswith('{"listening"'), proc.stderr.read() if proc.poll() is not None else line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert "not serving HostileDeep" in err and "tasks.jsonl:1" in err


# ------------------------------------------------------------------------------------ server routes
def _app(**config):
    from starlette.testclient import TestClient

    from gym_envfactory.server import SessionManager
    from gym_envfactory.server.app import ServerConfig, build_app

    return TestClient(build_app(SessionManager(["HotelBooking"]), ServerConfig(**config)), base_url="http://127.0.0.1")


def test_host_check_is_exact():
    from gym_envfactory.server.app import host_header_name, is_loopback

    assert not is_loopback("127.0.0.1.evil.com") and not is_loopback("127.evil") and is_loopback("127.0.0.2")
    assert is_loopback("[::1]") and is_loopback("localhost")
    assert host_header_name("127.0.0.1:8765") == "127.0.0.1" and host_header_name("[::1]:80") == "::1"
    assert host_header_name("127.0.0.1:evil") is None
    client = _app()
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    for host in ("127.0.0.1.evil.com", "127.0.0.1.evil.com:8765", "127.evil:80", "evil.com", "127.0.0.1:x"):
        assert client.post("/v1/rpc", json=body, headers={"Host": host}).status_code == 403, host
    for host in ("127.0.0.1:8765", "localhost", "[::1]:8765", "127.0.0.2"):
        assert client.post("/v1/rpc", json=body, headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize("route", ["/readyz", "/metrics"])
def test_readyz_and_metrics_apply_host_and_origin_checks(route):
    client = _app()
    assert client.get(route).status_code == 200
    assert client.get(route, headers={"Host": "127.0.0.1.evil.com"}).status_code == 403
    assert client.get(route, headers={"Origin": "http://evil.com"}).status_code == 403
    assert client.get("/healthz", headers={"Host": "127.0.0.1.evil.com"}).status_code == 200


# ------------------------------------------------------------------------------------ MCP over stdio
def _read_json_line(proc: subprocess.Popen, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        line = proc.stdout.readline()
        if not line:
            return None
        if line.strip():
            return json.loads(line)
    return None


def test_stdio_answers_junk_lines_with_json_rpc_errors():
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--transport", "stdio"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=cli_env(), bufsize=1)
    try:
        def send(text: str) -> None:
            proc.stdin.write(text + "\n")
            proc.stdin.flush()

        send("this is not json")
        r = _read_json_line(proc, 60)
        assert r is not None and r["id"] is None and r["error"]["code"] == -32700
        send('{"jsonrpc": "2.0", "id": 41, "method": 12}')
        r = _read_json_line(proc, 20)
        assert r is not None and r["id"] == 41 and r["error"]["code"] == -32600
        send("[" * 100_000)
        r = _read_json_line(proc, 20)
        assert r is not None and r["id"] is None and "error" in r
        send(json.dumps({"jsonrpc": "2.0", "id": 42, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        r = _read_json_line(proc, 20)
        assert r is not None and r["id"] == 42 and "result" in r  # still serving
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()


JUNK = ["this is not json", "[" * 100_000, '{"jsonrpc": "2.0", "id": 41, "method": 12}', "[]", "null", '"x"']


def test_websocket_and_mcp_http_answer_junk_and_keep_serving():
    """The other transports: every junk frame or body gets a JSON-RPC error (an id when it had one), and
    the same connection or endpoint then serves a real request."""
    from starlette.testclient import TestClient

    from gym_envfactory.server import SessionManager
    from gym_envfactory.server.app import ServerConfig, build_app
    from gym_envfactory.server.mcp_server import mcp_routes

    manager, config = SessionManager(["HotelBooking"]), ServerConfig()
    routes, hook = mcp_routes(manager, config)
    app = build_app(manager, config, extra_routes=routes, lifespan_hooks=[hook])
    with TestClient(app, base_url="http://127.0.0.1") as client:
        with client.websocket_connect("ws://127.0.0.1/v1/ws") as ws:
            for junk in JUNK:
                ws.send_text(junk)
                r = json.loads(ws.receive_text())
                assert r["error"]["code"] in (-32700, -32600) and r["id"] == (41 if '"id": 41' in junk else None), junk
            ws.send_bytes(b"\xff\xfe")
            assert json.loads(ws.receive_text())["error"]["code"] == -32700
            ws.send_text('{"jsonrpc": "2.0", "id": 8, "method": "ping"}')
            assert json.loads(ws.receive_text()) == {"jsonrpc": "2.0", "id": 8, "result": {"ok": True}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        for junk in [*JUNK, "\udcff"]:
            r = client.post("/mcp/HotelBooking", content=junk.encode(errors="surrogateescape"), headers=headers)
            assert r.status_code == 400 and r.json()["error"]["code"] in (-32700, -32600, -32602), junk
        r = client.post("/mcp/HotelBooking", headers=headers, json={"jsonrpc": "2.0", "id": 42, "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "t", "version": "0"}}})
        assert r.status_code == 200 and r.json()["id"] == 42 and "result" in r.json()


# ------------------------------------------------------------------------------------ backends
@pytest.fixture
def silent_python(tmp_path, monkeypatch):
    """Make the subprocess backend start a 'server' that never announces itself (it sleeps)."""
    script = tmp_path / "silent-python"
    pidfile = tmp_path / "pid"
    script.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sys, "executable", str(script))
    return pidfile


def _gone(pidfile: Path) -> bool:
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_subprocess_start_timeout_is_honoured(silent_python):
    from gym_envfactory.backends.subprocess import start_server_process

    t0 = time.monotonic()
    with pytest.raises(BackendError, match="did not start within 1.5 s"):
        start_server_process(["HotelBooking"], None, 1.5)
    assert time.monotonic() - t0 < 5  # before the fix: blocked in readline until the child wrote or exited
    assert _gone(silent_python)


def test_gym_make_accepts_a_timeout(silent_python):
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="within 1.0 s"):
        gym.make("envfactory/HotelBooking-v0", backend="subprocess", timeout=1.0)  # before: TypeError
    assert time.monotonic() - t0 < 5


def test_a_pooled_backend_whose_server_died_is_not_handed_out():
    from gym_envfactory.backends import acquire_backend
    from gym_envfactory.environment.catalog import get_environment

    spec = get_environment("PersonalFinance")
    a = acquire_backend("subprocess", envs=["PersonalFinance"])
    try:
        proc = a.server_process
        assert proc is not None and proc.alive
        proc.proc.kill()
        proc.proc.wait(timeout=10)
        b = acquire_backend("subprocess", envs=["PersonalFinance"])  # milliseconds after the death
        try:
            assert b.server_process is not proc and b.url != a.url
            s = b.create_session([spec], {spec.name: spec.initial_state_json()}, None)
            assert s.state()
            s.close()
        finally:
            b.release()
    finally:
        a.release()


def _cmdline_and_environ(pid: int) -> tuple[str, str]:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    env = Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
    return cmd, env


def test_subprocess_backend_keeps_the_token_out_of_argv_and_environment(monkeypatch):
    from gym_envfactory.backends.remote import SessionClient
    from gym_envfactory.backends.subprocess import start_server_process

    token = "hostile-inputs-t0ken-" + os.urandom(6).hex()
    monkeypatch.setenv("ENVFACTORY_TOKEN", token)  # the parent's variable is not passed on either
    url, stop = start_server_process(["PersonalFinance"], token, 120)
    try:
        cmd, env = _cmdline_and_environ(stop.pid)
        assert token not in cmd and token not in env and "--token-file" in cmd
        assert stop.token_path is None  # the file is gone once the server is up
        c = SessionClient(url, token=token, timeout=20)
        assert c.request("ping") == {"ok": True}
        c.close()
        from gym_envfactory.errors import BackendUnavailableError

        with pytest.raises(BackendUnavailableError):
            SessionClient(url, token="wrong", timeout=20)
    finally:
        stop()


def test_serve_token_file(tmp_path):
    import urllib.error
    import urllib.request

    token_file = tmp_path / "token"
    token_file.write_text("file-t0ken\n")
    token_file.chmod(0o600)
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "PersonalFinance", "--port", "0",
                             "--announce", "--token-file", str(token_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        line = proc.stdout.readline()
        assert line.startswith("{"), proc.stderr.read() if proc.poll() is not None else line
        url = json.loads(line)["listening"]
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(url + "/readyz", timeout=10)
        assert ei.value.code == 401
        req = urllib.request.Request(url + "/readyz", headers={"Authorization": "Bearer file-t0ken"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "serve", "PersonalFinance", "--token-file",
                        str(tmp_path / "missing")], capture_output=True, text=True, timeout=120, env=cli_env())
    assert r.returncode == 2 and "token file" in r.stderr



@pytest.mark.parametrize("via", ["command_line", "environment", "token_file"])
def test_serve_warns_that_a_command_line_token_is_visible_in_ps(monkeypatch, tmp_path, via):
    """Audit of issue 11, item (m): `serve --token X` still works but says the token shows in `ps`;
    $ENVFACTORY_TOKEN and --token-file do not warn.  The server start is patched out."""
    from typer.testing import CliRunner

    import gym_envfactory.server as server_mod
    from gym_envfactory.cli.main import app

    started: list[str | None] = []
    monkeypatch.setattr(server_mod, "serve", lambda names, **kw: started.append(kw["token"]))
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    monkeypatch.delenv("ENVFACTORY_TOKEN_FILE", raising=False)
    args = ["serve", "PersonalFinance", "--port", "0"]
    if via == "command_line":
        args += ["--token", "cli-t0ken"]
    elif via == "environment":
        monkeypatch.setenv("ENVFACTORY_TOKEN", "cli-t0ken")
    else:
        (tmp_path / "token").write_text("cli-t0ken\n")
        args += ["--token-file", str(tmp_path / "token")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert started == ["cli-t0ken"]
    warned = "visible to every user in `ps`" in r.stderr
    assert warned == (via == "command_line"), r.stderr
    if warned:
        assert "--token-file" in r.stderr and "ENVFACTORY_TOKEN" in r.stderr


def test_serve_refuses_both_token_and_token_file(tmp_path):
    from typer.testing import CliRunner

    from gym_envfactory.cli.main import app

    (tmp_path / "token").write_text("a\n")
    r = CliRunner().invoke(app, ["serve", "PersonalFinance", "--token", "b", "--token-file", str(tmp_path / "token")])
    assert r.exit_code == 2 and "not both" in r.stderr
