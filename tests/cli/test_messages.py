"""Issue 14, items 2 and 3: what the command line and the backends say: a progress bar while
validating, and one-line errors that say what to do (unknown environment, a missing or wrong token, an
environment without tasks, a server that failed to start, a code-defined environment on a server backend)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from gym_envfactory import define_environment, tool
from gym_envfactory.environment.catalog import catalog_folders
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import BackendError, BackendUnavailableError, UnknownTaskError
from tests.server.test_app import TOKEN, start_server

BOX = set("│┃╭╮╰╯─━")


def test_validate_shows_a_progress_bar_on_stderr_and_keeps_stdout_clean():
    env = {**os.environ, "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "120"}
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "validate", "HotelBooking"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HotelBooking · scenarios" in r.stderr and "HotelBooking · tasks" in r.stderr  # the bar, per stage
    assert "━" in r.stderr
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", r.stdout).strip().splitlines()  # colours: a forced terminal
    assert len(lines) == 1 and lines[0].startswith("✓ HotelBooking: scenarios") and "·" not in r.stdout


def test_validate_progress_reports_every_scenario_and_task():
    from gym_envfactory import get_environment
    from gym_envfactory.validation import validate_environment

    spec = get_environment("PersonalFinance")
    seen: list[tuple[str, int, int]] = []
    report = validate_environment(spec, progress=lambda *a: seen.append(a))
    scen = [s for s in seen if s[0] == "scenarios"]
    tasks = [s for s in seen if s[0] == "tasks"]
    assert [d for _, d, _ in scen] == list(range(1, len(report.scenarios) + 1))
    assert [d for _, d, _ in tasks] == list(range(1, report.n_tasks + 1)) and {t for *_, t in tasks} == {report.n_tasks}


@pytest.mark.parametrize("args", [["serve", "Nope"], ["serve", "--all", "Nope"], ["serve", "Nope", "--transport", "stdio"]])
def test_serve_an_unknown_environment_is_one_line(args):
    # a subprocess with a timeout: before the fix `serve --all Nope` ignored the name and served forever
    try:
        r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", *args, "--port", "0"], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "300"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"envfactory {' '.join(args)} did not stop")
    assert r.returncode == 1 and r.stdout == ""
    known = ", ".join(sorted(catalog_folders()))  # the server process knows the catalog, not this process's definitions
    assert r.stderr.strip().splitlines() == [f"unknown environment 'Nope'; known: {known}"]


@pytest.fixture(scope="module")
def token_server():
    proc, url = start_server("HotelBooking", token=TOKEN)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.parametrize("token, says", [(None, "wants a bearer token and none was sent"),
                                         ("wrong", "refused the bearer token sent")])
def test_a_missing_or_wrong_token_says_how_to_pass_one(token_server, monkeypatch, token, says):
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    with pytest.raises(BackendUnavailableError) as err:
        gym.make("envfactory/HotelBooking-v0", backend="url", url=token_server, token=token)
    msg = str(err.value)
    assert says in msg and "HTTP 403" in msg
    for way in ("token=", "$ENVFACTORY_TOKEN", "--token-file"):
        assert way in msg
    env = gym.make("envfactory/HotelBooking-v0", backend="url", url=token_server, token=TOKEN)  # the right one works
    env.reset(seed=0)
    env.close()


class Stock(BaseModel):
    items: int = 0


@tool
def restock(state: Stock, *, n: int) -> int:
    """Add `n` items."""
    state.items += n
    return state.items


def test_an_environment_without_tasks_fails_at_reset_saying_where_tasks_come_from():
    define_environment("TasklessStock", Stock, [restock], register=False)
    spec = define_environment("TasklessStock", Stock, [restock])
    env = EnvFactoryEnv(spec)
    with pytest.raises(UnknownTaskError, match=r"TasklessStock has no tasks.*define_environment\(\.\.\., tasks="):
        env.reset()


@pytest.mark.parametrize("backend", ["subprocess", "docker"])
def test_a_code_defined_environment_on_a_server_backend_is_refused_in_one_line(backend):
    define_environment("ServedStock", Stock, [restock], tasks=[
        {"task_id": "r", "turns": [{"user": "Restock two.", "ground_truth": [{"name": "restock", "arguments": {"n": 2}}]}]}])
    # defined inside this test function: importing the module again would not define it
    match = ("ServedStock is defined in code that a server process cannot import again.*top level" if backend == "subprocess"
             else "ServedStock is defined in code.*which a docker server cannot load.*serve --module")
    with pytest.raises(BackendError, match=match):
        gym.make("envfactory/ServedStock-v0", backend=backend)


def test_a_failed_server_start_is_one_line_and_leaves_no_files(tmp_path, monkeypatch):
    import tempfile

    from gym_envfactory.backends.subprocess import start_server_process

    # a temp folder of its own: other processes of a busy machine make envfactory-* files in the shared one
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(BackendError) as err:
        start_server_process(["Nope"], "a-token", 60)
    msg = str(err.value)
    assert "\n" not in msg and not BOX & set(msg)
    assert msg.startswith("environment server exited with 1: unknown environment 'Nope'; known: ")
    assert list(tmp_path.iterdir()) == []  # neither its log nor its token file is left behind


def test_last_error_line_skips_a_rich_boxed_traceback(tmp_path):
    from gym_envfactory.backends.subprocess import last_error_line

    script = tmp_path / "boom.py"
    script.write_text("import typer\napp = typer.Typer()\n\n@app.command()\ndef main() -> None:\n"
                      "    raise RuntimeError('cannot load the state')\n\napp()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TYPER_", "_TYPER_"))}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                       env={**env, "FORCE_COLOR": "1", "COLUMNS": "80"})
    assert "╭" in r.stderr and "Traceback" in r.stderr  # what a child's log held
    assert last_error_line("INFO: starting\n" + r.stderr + "\n\n") == "RuntimeError: cannot load the state"
    assert last_error_line("") == ""


def test_make_demo_says_what_it_does_before_its_quiet_install():
    root = Path(__file__).resolve().parents[2]
    # run as a top-level make even under `make test` (a sub-make prints "make[1]: Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    r = subprocess.run(["make", "--no-print-directory", "-n", "-B", "demo"], cwd=root, capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("make[")]
    for quiet in [i for i, line in enumerate(lines) if "pip install --quiet" in line]:
        said = [line for line in lines[max(0, quiet - 2):quiet] if line.startswith("echo ")]
        assert said and "pip" in said[-1], lines[max(0, quiet - 2): quiet + 1]
    assert "activate" in lines[-1]


def test_rollout_bad_values_name_their_option():
    from gym_envfactory.cli import app

    r = CliRunner().invoke(app, ["rollout", "HotelBooking", "--noise", "2"])
    assert r.exit_code != 0 and "--noise" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["rollout", "HotelBooking", "--backend", "url"])
    assert r.exit_code == 1 and "--url" in r.output and "Traceback" not in r.output


def test_export_from_a_missing_trajectories_file_is_one_line(tmp_path):
    pytest.importorskip("pyarrow")
    from gym_envfactory.cli import app

    missing = tmp_path / "nofile.jsonl"
    r = CliRunner().invoke(app, ["export", "sft", "--from-trajectories", str(missing), "--out", str(tmp_path / "o.json")])
    assert r.exit_code != 0 and "nofile.jsonl" in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_remote_backends_without_the_server_extra_say_which_extra(monkeypatch):
    import builtins

    from gym_envfactory.backends.remote import require_websockets
    from gym_envfactory.errors import BackendError

    real = builtins.__import__

    def no_websockets(name, *args, **kwargs):
        if name == "websockets":
            raise ImportError("No module named 'websockets'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_websockets)
    with pytest.raises(BackendError, match=r"\[server\]"):
        require_websockets()


def test_serve_without_the_server_extra_names_it_in_one_line(monkeypatch):
    import builtins

    from gym_envfactory.cli import app

    real = builtins.__import__

    def no_starlette(name, *args, **kwargs):
        if name == "starlette":
            raise ImportError("No module named 'starlette'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_starlette)
    r = CliRunner().invoke(app, ["serve", "HotelBooking"])
    assert r.exit_code == 2 and "[server]" in r.output and "Traceback" not in r.output
