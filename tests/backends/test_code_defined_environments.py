"""Code-defined environments run remotely (issue 12 part 7): an environment made with
``define_environment`` at a module's top level runs on ``backend="subprocess"`` with no extra
arguments (the server imports the module: ``envfactory serve --module``), and ``envfactory serve
--module NAME`` serves what a module defines.  Each case runs in a fresh Python process, as a user's
script would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from gym_envfactory import tool

REPO = Path(__file__).resolve().parents[2]

MODULE = textwrap.dedent('''
    from pydantic import BaseModel
    from gym_envfactory import ToolError, define_environment, tool

    class Pantry(BaseModel):
        items: dict[str, int] = {"rice": 2}

    @tool(read_only=True)
    def count_item(state: Pantry, *, item: str) -> int:
        """How many of an item the pantry holds."""
        if item not in state.items:
            raise ToolError(f"no {item} in the pantry", code="not_found")
        return state.items[item]

    @tool
    def stock_item(state: Pantry, *, item: str, n: int) -> int:
        """Add n of an item; returns the new count."""
        state.items[item] = state.items.get(item, 0) + n
        return state.items[item]

    define_environment("CodePantry", Pantry, [count_item, stock_item], tasks=[
        {"task_id": "p1", "turns": [{"user": "Add three beans.",
                                      "ground_truth": [{"name": "stock_item", "arguments": {"item": "beans", "n": 3}}]}]}])
''')

DRIVER = textwrap.dedent('''
    import json, sys
    import gymnasium as gym
    {import_line}
    from gym_envfactory.rollout.policies import OraclePolicy
    from gym_envfactory.rollout.runner import run_episode

    def main():
        env = gym.make("envfactory/CodePantry-v0", backend="subprocess")
        result = run_episode(env.unwrapped, OraclePolicy(), task_id="p1")
        backend = type(env.unwrapped.backend).__name__
        env.close()
        print(json.dumps({{"reward": result.reward, "backend": backend}}))

    {guard}
''')


def _run(tmp_path: Path, code: str, *args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args] if not code else [sys.executable, "-c", code, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _result(r: subprocess.CompletedProcess[str]) -> dict:
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_module_defined_environment_runs_on_the_subprocess_backend(tmp_path):
    (tmp_path / "pantry_envs.py").write_text(MODULE)
    script = DRIVER.format(import_line="import pantry_envs", guard="main()")
    out = _result(_run(tmp_path, script))
    assert out["reward"] == 1.0 and "InProcess" not in out["backend"]


def test_a_script_that_defines_and_runs_its_environment_works_directly(tmp_path):
    # define_environment at the script's top level, gym.make under the __main__ guard: the server
    # imports the script by path (not as __main__), so the guard keeps it from recursing
    script = MODULE + DRIVER.format(import_line="", guard='if __name__ == "__main__":\n    main()')
    (tmp_path / "run_pantry.py").write_text(script)
    out = _result(_run(tmp_path, "", "run_pantry.py"))
    assert out["reward"] == 1.0


def test_an_unguarded_script_is_refused_not_recursive(tmp_path):
    script = MODULE + DRIVER.format(import_line="", guard="main()")
    (tmp_path / "unguarded.py").write_text(script)
    r = _run(tmp_path, "", "unguarded.py")
    assert r.returncode != 0
    assert "__name__ == " in r.stderr and "serve --module" in r.stderr


def test_serve_module_serves_what_the_module_defines(tmp_path):
    (tmp_path / "pantry_envs.py").write_text(MODULE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "--module", "pantry_envs", "--port", "0",
                             "--announce"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("{"), proc.stderr.read() if proc.poll() is not None else line
        url = json.loads(line)["listening"]
        driver = DRIVER.format(import_line="import pantry_envs", guard="main()").replace(
            'backend="subprocess"', f'backend="url", url="{url}"')
        out = _result(_run(tmp_path, driver))
        assert out["reward"] == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("module", "words"), [("no_such_module_xyz", "importing no_such_module_xyz failed: ModuleNotFoundError"),
                                               ("empty_mod", "empty_mod defines no environment")])
def test_serve_module_errors_are_one_line(tmp_path, module, words):
    (tmp_path / "empty_mod.py").write_text("X = 1\n")
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "serve", "--module", module, "--port", "0"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"})
    assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("how", ["print", "os.write"])
def test_a_module_printing_a_fake_announcement_cannot_redirect_the_client(tmp_path, how):
    # print() is redirected to stderr while --module imports; a write to fd 1 gets through, and the
    # parent ignores it: only the announcement carrying its nonce counts (the token never leaves)
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    got: list[bytes] = []

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            got.append(c.recv(4096))
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    fake = json.dumps({"listening": f"http://127.0.0.1:{srv.getsockname()[1]}"})
    emit = f"print({fake!r}, flush=True)" if how == "print" else f"import os; os.write(1, ({fake!r} + chr(10)).encode())"
    (tmp_path / "pantry_envs.py").write_text(MODULE + "\n" + emit + "\n")
    script = DRIVER.format(import_line="import pantry_envs", guard="main()")
    out = _result(_run(tmp_path, script))
    srv.close()
    assert out["reward"] == 1.0 and got == []


def test_define_environment_refuses_a_catalog_name_unless_overwrite():
    from gym_envfactory import define_environment, get_environment
    from gym_envfactory.environment.catalog import forget_environment
    from gym_envfactory.errors import SpecError

    shipped = len(get_environment("OnlineStore").tools)
    with pytest.raises(SpecError, match="OnlineStore is a catalog environment .*overwrite=True"):
        define_environment("OnlineStore", Tiny, [bump], register=False)
    assert len(get_environment("OnlineStore").tools) == shipped  # nothing replaced
    try:
        define_environment("OnlineStore", Tiny, [bump], overwrite=True)
        assert list(get_environment("OnlineStore").tools) == ["bump"]
    finally:
        forget_environment("OnlineStore")
    assert len(get_environment("OnlineStore").tools) == shipped


class Tiny(BaseModel):
    n: int = 0


@tool
def bump(state: Tiny) -> int:
    """Add one."""
    state.n += 1
    return state.n


CHATTY = textwrap.dedent('''
    import os, sys, threading, time

    print("importing the pantry tools", end="", flush=True)  # no newline: the next write joins this line

    def chatter():  # a module's own thread: prints forever, never a newline, to sys.stdout and to fd 1
        while True:
            print("tick", end=" ", flush=True)
            os.write(1, b"tock ")
            time.sleep(0.001)

    threading.Thread(target=chatter, daemon=True).start()
''')


def test_a_module_printing_to_stdout_from_a_thread_still_starts_on_the_subprocess_backend(tmp_path):
    # issue 25, finding 9: the server announced itself on stdout, where this module's output joined the
    # announcement's line (the parent never saw a line starting with it, and the start timed out); it now
    # announces on a pipe of its own (--announce-fd), and stdout is the module's to print on
    (tmp_path / "pantry_envs.py").write_text(CHATTY + MODULE)
    # the driver imports the module too, so its own stdout chatters: it writes its result to a file
    script = DRIVER.format(import_line="import pantry_envs", guard="main()").replace(
        "print(json.dumps(", "open('result.json', 'w').write(json.dumps(")
    r = _run(tmp_path, script)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["reward"] == 1.0 and "InProcess" not in out["backend"]


def test_serve_announce_fd_writes_the_announcement_to_that_descriptor_only(tmp_path):
    (tmp_path / "pantry_envs.py").write_text(CHATTY + MODULE)
    r_fd, w_fd = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO), "ENVFACTORY_ANNOUNCE_NONCE": "n0nce"}
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "--module", "pantry_envs", "--port", "0",
                             "--announce-fd", str(w_fd)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, pass_fds=(w_fd,))
    os.close(w_fd)
    try:
        with os.fdopen(r_fd, encoding="utf-8") as fh:
            line = fh.readline()
            rest = fh.read()  # the server closes its end once it has announced: no more comes
        assert line.endswith("\n"), proc.stderr.read() if proc.poll() is not None else line
        msg = json.loads(line)
        assert msg["nonce"] == "n0nce" and msg["listening"].startswith("http://127.0.0.1:") and rest == ""
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("fd", "words"), [("1", "must be 3 or more"), ("987", "not an open file descriptor")])
def test_serve_refuses_an_announce_fd_it_cannot_write(tmp_path, fd, words):
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0", "--announce-fd", fd],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"})
    assert r.returncode == 2 and words in r.stderr, r.stderr
