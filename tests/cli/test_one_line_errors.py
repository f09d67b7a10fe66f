"""Issue 29, part 3: one-line errors that say what to do.  Extras' names survive Rich markup
(``[docker]``, user paths with brackets), ``gen tasks``/``gen env`` without their extras, ``gen tasks``
with its endpoint down, ``ui``'s own default port and a busy one, a url without a scheme, and
``rollout --task-id``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from gym_envfactory.cli import app


def _lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()]


# ------------------------------------------------------------------------------- markup eats nothing
@pytest.mark.parametrize("args", [["image", "ls"], ["catalog", "ps"]])
def test_docker_commands_without_the_sdk_name_the_docker_extra(monkeypatch, args):
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1
    assert _lines(res.output) == ["the docker SDK is missing: pip install 'gym-envfactory[docker]' (in a checkout: pip install -e '.[docker]')"]


def test_a_path_with_brackets_is_printed_as_given(tmp_path):
    out = tmp_path / "run[final].jsonl"
    res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "oracle", "--episodes", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote 1 trajectories to {out}" in res.output.replace("\n", "")


# ------------------------------------------------------------------------------- gen without extras
def _envfactory_without(modules: list[str], *args: str) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            f"for m in {modules!r}: sys.modules[m] = None\n"
            "from gym_envfactory.cli.main import main\n"
            f"sys.argv = ['envfactory', *{list(args)!r}]\n"
            "main()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "300"})


@pytest.mark.parametrize(("modules", "args", "extras"), [
    (["jsonschema"], ["gen", "tasks", "HotelBooking", "--model", "m"], "gen"),
    (["networkx"], ["gen", "tasks", "HotelBooking", "--model", "m"], "synthesis"),
    (["jsonschema", "networkx"], ["gen", "tasks", "HotelBooking", "--model", "m"], "gen,synthesis"),
    (["jsonschema"], ["gen", "env", "--metadata", "tools.json", "--model", "m"], "gen"),
])
def test_gen_without_its_extras_is_one_line_naming_them(modules, args, extras):
    r = _envfactory_without(modules, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    [line] = _lines(r.stderr)
    assert f"pip install 'gym-envfactory[{extras}]'" in line and f"pip install -e '.[{extras}]'" in line
    assert line.startswith(f"envfactory {args[0]} {args[1]} needs the ")


# ------------------------------------------------------------------------------- gen tasks, endpoint down
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gen_tasks_with_its_endpoint_down_says_the_endpoint_and_the_error_once(tmp_path, monkeypatch):
    from gym_envfactory.generators.cli import gen_app
    from gym_envfactory.llm import client
    from tests.generators.tasks.querygen_script import ADA_CALLS, make_chain

    monkeypatch.setattr(client.LLMClient, "_wait", lambda self, state: 0.0)  # retries without the backoff
    chains = tmp_path / "chains.jsonl"
    chains.write_text(json.dumps(make_chain("ada", ADA_CALLS)) + "\n")
    base_url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    res = CliRunner().invoke(gen_app, ["tasks", "HotelBooking", "--chains", str(chains), "--n", "1", "--model", "m",
                                       "--base-url", base_url, "--out", str(tmp_path / "tasks.jsonl"),
                                       "--checkpoint-dir", str(tmp_path / "qg")])
    assert res.exit_code == 1, res.output
    said = [line for line in res.output.splitlines() if "no answer from" in line]
    assert len(said) == 1, res.output
    assert "1 of 1 chain(s) dropped, the LLM endpoint failed" in said[0] and base_url in said[0]
    assert "APIConnectionError" in said[0] and "check base_url and that the server is up" in said[0]


# ------------------------------------------------------------------------------- ui: its own port
def _default(*path: str, param: str = "port") -> object:
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return next(p.default for p in cmd.params if p.name == param)


def test_ui_has_its_own_default_port_beside_serve_and_the_catalog():
    assert _default("serve") == _default("catalog", "up") == 8765
    ui_port = _default("ui")
    assert isinstance(ui_port, int) and not 8765 <= ui_port < 8765 + 64  # below the catalog's ports from 8765 up


def _ui(monkeypatch, *args: str):
    import uvicorn

    from gym_envfactory.ui.cli import ui_cmd

    served: list[object] = []  # the port bound, when it serves
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(sockets[0].getsockname()[1]))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: served.append(kw))  # what the old code called
    ui = typer.Typer()
    ui.command()(ui_cmd)
    return CliRunner().invoke(ui, ["--no-images", *args]), served


def test_ui_on_a_busy_port_fails_in_one_line_before_any_url(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res, served = _ui(monkeypatch, "--port", str(port))
    assert res.exit_code == 1 and not served
    [line] = _lines(res.output)
    assert line.startswith(f"envfactory ui: cannot listen on 127.0.0.1:{port}") and "--port" in line
    assert "http://" not in res.output


def test_ui_announces_the_port_it_bound(monkeypatch):
    res, served = _ui(monkeypatch, "--port", "0")
    assert res.exit_code == 0 and len(served) == 1, res.output
    port = served[0]
    assert port != 0 and f"http://127.0.0.1:{port}/" in res.output


# ------------------------------------------------------------------------------- a url without a scheme
def test_a_url_without_a_scheme_asks_for_http():
    res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "oracle", "--episodes", "1",
                                   "--backend", "url", "--url", "127.0.0.1:8765"])
    assert res.exit_code == 1
    [line] = _lines(res.output)
    assert "http://host:port" in line and "'127.0.0.1:8765'" in line and "wss" not in line


# ------------------------------------------------------------------------------- rollout --task-id
def test_rollout_task_id_runs_only_those_tasks_in_order(tmp_path):
    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "oracle", "--task-id", "hotel-003",
                                   "--task-id", "hotel-001", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == ["hotel-003", "hotel-001"]
    res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "oracle", "--task-id", "hotel-001",
                                   "--episodes", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == ["hotel-001"] * 3


def test_rollout_an_unknown_task_id_is_one_line(tmp_path):
    res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "oracle", "--task-id", "nope",
                                   "--out", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 2 and not (tmp_path / "t.jsonl").exists()
    [line] = _lines(res.output)
    assert line.startswith("HotelBooking has no task 'nope'; its tasks: hotel-001, ")
