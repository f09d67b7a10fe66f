"""Trust is a property of a package (issue 24, part 1): a package EnvGen or the importer wrote, made with
``gym.make`` and no options, runs on the ``isolated`` backend, in a child that cannot read this process's
environment variables or home folder and cannot open a socket; ``trust=True`` runs it here.

The probes are the package's own tools, so the attempts are made from inside the untrusted code.  Where
the host lacks ``unshare`` the namespace guarantees (home folder, network) are skipped with a message and
only the scrubbed environment is checked.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from pathlib import Path

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401
from gym_envfactory.backends import backend_kind, resolve_backend
from gym_envfactory.environment.catalog import get_environment, register_catalog
from gym_envfactory.errors import UntrustedPackageError
from gym_envfactory.isolation import namespace_prefix
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode

NAME = "ProbeGenerated"

STATE = "from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    n: int = 0\n"
TOOLS = '''import os
import socket

from gym_envfactory import tool

from .state import State


@tool(read_only=True)
def read_secret(state: State) -> str:
    """The parent's secret environment variable, or 'absent'."""
    return os.environ.get("ENVFACTORY_TEST_SECRET", "absent")


@tool(read_only=True)
def read_home_file(state: State, *, path: str) -> str:
    """The text of a file, or the error reading it."""
    try:
        with open(path, encoding="utf-8") as fh:
            return "read:" + fh.read()
    except OSError as exc:
        return "denied:" + type(exc).__name__


@tool(read_only=True)
def open_socket(state: State, *, port: int) -> str:
    """Connect to 127.0.0.1:port and read one line, or the error."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return "connected:" + s.recv(64).decode()
    except OSError as exc:
        return "denied:" + type(exc).__name__


@tool(read_only=True)
def capabilities(state: State) -> str:
    """The effective capabilities of this process (CapEff of /proc/self/status)."""
    with open("/proc/self/status", encoding="utf-8") as fh:
        return next(line.split()[1] for line in fh if line.startswith("CapEff:"))


@tool(read_only=True)
def undo_mounts(state: State, *, path: str) -> str:
    """Try to unmount path (the hidden home) and remount this package writable; what happened."""
    import subprocess
    out = []
    for cmd in (["umount", "-l", path], ["mount", "-o", "remount,bind,rw", os.path.dirname(__file__)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        out.append(f"{cmd[0]}:{r.returncode}")
    return " ".join(out)


@tool
def bump(state: State) -> str:
    """Add one to the count."""
    state.n += 1
    return str(state.n)
'''
TASK = {"task_id": "probe-001", "split": "train", "initial_state": "small",
        "turns": [{"user": "Bump the counter once.", "ground_truth": [{"name": "bump", "arguments": {}}],
                   "expected_outputs": ["1"]}],
        "provenance": {"kind": "generated"}}


def write_package(catalog: Path, name: str = NAME, kind: str = "generated") -> Path:
    folder = catalog / name
    (folder / "initial_states").mkdir(parents=True)
    (folder / "environment.toml").write_text(
        f'name = "{name}"\nversion = "0.1.0"\ndomain = "utilities"\ndescription = "Probes isolation."\n\n'
        f'[provenance]\nkind = "{kind}"\nmodel = "test"\n')
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text(STATE)
    (folder / "tools.py").write_text(TOOLS)
    (folder / "initial_states" / "small.json").write_text('{"n": 0}')
    (folder / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    return folder


@pytest.fixture(scope="module")
def listener():
    """A TCP listener on 127.0.0.1 in this process that answers every connection with ``hello``."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello")
    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()


@pytest.fixture
def probe_env(tmp_path, monkeypatch):
    """The generated package on $ENVFACTORY_CATALOG, a secret in this process's environment and a file
    in this process's (temporary) HOME; yields the secret file's path."""
    catalog = tmp_path / "catalog"
    write_package(catalog)
    home = tmp_path / "home"
    home.mkdir()
    secret_file = home / "credentials"
    secret_file.write_text("s3cr3t-file")
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(catalog))
    monkeypatch.setenv("ENVFACTORY_TEST_SECRET", "s3cr3t-env")
    monkeypatch.setenv("HOME", str(home))
    register_catalog()
    return secret_file


def call(env, name: str, **arguments) -> str:
    obs, *_ = env.step({"role": "assistant", "content": "",
                        "tool_calls": [{"id": "c1", "type": "function",
                                        "function": {"name": name, "arguments": json.dumps(arguments)}}]})
    content = [m for m in obs if m.get("role") == "tool"][-1]["content"]
    return str(json.loads(content))  # a tool's str result is sent as JSON text


def probes(env, secret_file: Path, port: int) -> dict[str, str]:
    env.reset(options={"task_id": "probe-001"})
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="isolation-probe-", suffix=".txt") as tmp:
        tmp.write("s3cr3t-tmp")
        tmp.flush()
        return {"env": call(env, "read_secret"), "home": call(env, "read_home_file", path=str(secret_file)),
                "net": call(env, "open_socket", port=port), "tmp": call(env, "read_home_file", path=tmp.name)}


def test_the_trust_rule_follows_provenance(probe_env):
    spec = get_environment(NAME)
    assert spec.manifest.provenance.kind == "generated" and not spec.manifest.provenance.trusted
    assert get_environment("HotelBooking").manifest.provenance.trusted
    assert resolve_backend(None, [spec]) == "isolated"
    assert resolve_backend(None, [spec], trust=True) == "inprocess"
    assert resolve_backend(None, [get_environment("HotelBooking")]) == "inprocess"
    assert backend_kind("isolated").capabilities.isolated


def test_an_untrusted_package_made_with_no_options_cannot_reach_env_home_or_network(probe_env, listener):
    env = gym.make(f"envfactory/{NAME}-v0").unwrapped
    try:
        assert env.backend.name == "isolated"
        seen = probes(env, probe_env, listener)
    finally:
        env.close()
    assert seen["env"] == "absent", seen  # checked on every host: the environment is an allow-list
    if not namespace_prefix():
        pytest.skip(f"this host has no unshare namespaces: only the scrubbed environment was checked ({seen})")
    assert seen["home"].startswith("denied:"), seen
    assert seen["net"].startswith("denied:"), seen
    assert seen["tmp"].startswith("denied:"), seen  # /tmp is its own: nothing the trainer left there


def test_trust_true_runs_it_in_process_where_every_probe_succeeds(probe_env, listener):
    env = gym.make(f"envfactory/{NAME}-v0", trust=True).unwrapped
    try:
        assert env.backend.name == "inprocess"
        seen = probes(env, probe_env, listener)
    finally:
        env.close()
    # the probes can fail: in this process they reach all three
    assert seen == {"env": "s3cr3t-env", "home": "read:s3cr3t-file", "net": "connected:hello", "tmp": "read:s3cr3t-tmp"}


def test_inprocess_without_trust_is_refused_with_the_opt_in(probe_env):
    with pytest.raises(UntrustedPackageError, match="trust=True"):
        gym.make(f"envfactory/{NAME}-v0", backend="inprocess")


def test_imported_packages_are_untrusted_too(tmp_path, monkeypatch):
    write_package(tmp_path / "cat", "ProbeImported", kind="imported")
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path / "cat"))
    register_catalog()
    assert resolve_backend(None, [get_environment("ProbeImported")]) == "isolated"


def test_the_shipped_catalog_keeps_the_in_process_default():
    env = gym.make("envfactory/HotelBooking-v0").unwrapped
    try:
        assert env.backend.name == "inprocess"
    finally:
        env.close()


def test_oracle_reward_is_one_on_the_isolated_backend(probe_env):
    env = gym.make(f"envfactory/{NAME}-v0", task_id="probe-001").unwrapped
    server = env.backend.server_process
    try:
        assert env.backend.name == "isolated" and env.backend.url.startswith("unix:")
        result = run_episode(env, OraclePolicy())
    finally:
        env.close()
    assert result.reward == pytest.approx(1.0), result.components
    assert not server.alive and not Path(server.private_dir).exists()  # stopped with the last env; its folder gone


def test_the_cli_refuses_to_validate_an_untrusted_package_without_trust(probe_env):
    from typer.testing import CliRunner

    from gym_envfactory.cli.main import app

    refused = CliRunner().invoke(app, ["validate", NAME])
    assert refused.exit_code == 1 and "--trust" in " ".join(refused.output.split())
    trusted = CliRunner().invoke(app, ["validate", NAME, "--trust"])  # it runs (this probe package has no scenarios)
    assert "untrusted" not in trusted.output and "tasks replayed 1/1" in trusted.output, trusted.output


def test_rollout_trust_runs_in_process_and_refuses_inprocess_without_it(probe_env):
    from typer.testing import CliRunner

    from gym_envfactory.cli.main import app

    refused = CliRunner().invoke(app, ["rollout", f"envfactory/{NAME}-v0", "--policy", "oracle", "--backend", "inprocess"])
    assert refused.exit_code == 1 and "trust=True" in " ".join(refused.output.split())
    ok = CliRunner().invoke(app, ["rollout", f"envfactory/{NAME}-v0", "--policy", "oracle", "--trust"])
    assert ok.exit_code == 0, ok.output


def test_without_unshare_the_child_still_gets_a_scrubbed_environment_and_a_warning(probe_env, listener, monkeypatch,
                                                                                  caplog):
    """The fallback on a host without namespaces, forced here: the environment is still an allow-list and
    a warning says what is not isolated (network and home folder, not checked: they are reachable)."""
    import gym_envfactory.backends.isolated as isolated

    monkeypatch.setattr(isolated, "namespace_prefix", lambda: [])
    with caplog.at_level("WARNING", logger=isolated.__name__):
        env = gym.make(f"envfactory/{NAME}-v0").unwrapped
    try:
        assert env.backend.name == "isolated"
        seen = probes(env, probe_env, listener)
    finally:
        env.close()
    assert seen["env"] == "absent", seen
    assert "WITHOUT network isolation" in caplog.text


def test_a_missing_catalog_folder_under_home_does_not_stop_the_start(probe_env, monkeypatch):
    """Paths the child needs are mounted back over the hidden home; one that does not exist is skipped."""
    import os

    missing = Path(os.environ["HOME"]) / "no-such-catalog"
    monkeypatch.setenv("ENVFACTORY_CATALOG", os.pathsep.join([os.environ["ENVFACTORY_CATALOG"], str(missing)]))
    env = gym.make(f"envfactory/{NAME}-v0").unwrapped
    try:
        env.reset(options={"task_id": "probe-001"})
        assert call(env, "bump") == "1"
    finally:
        env.close()


@pytest.mark.skipif(not namespace_prefix(), reason="this host does not allow `unshare` namespaces")
def test_the_isolated_server_has_no_capability_and_cannot_undo_its_mounts(probe_env):
    """Review finding: with root's capabilities the child could `umount` the tmpfs over the home folder,
    remount its package writable and `setns` into the parent's network."""
    env = gym.make(f"envfactory/{NAME}-v0").unwrapped
    try:
        env.reset(options={"task_id": "probe-001"})
        assert int(call(env, "capabilities"), 16) == 0
        undo = call(env, "undo_mounts", path=str(probe_env.parent))
        assert "umount:0" not in undo and "mount:0" not in undo.replace("umount", ""), undo
        assert call(env, "read_home_file", path=str(probe_env)).startswith("denied:")
    finally:
        env.close()
