"""Issue 14, item 4: a catalog per compose project.  `envfactory catalog up|ps|down` take `--dir` and
`--project` alike; the project is recorded in `<dir>/.env` so `ps` and `down` find it from `--dir`; two
folders are two projects.  Checked with a stand-in compose command and container listing (no Docker
engine; tests/docker/test_lifecycle.py runs the real thing)."""

from __future__ import annotations

import json
import sys

import pytest
import typer
from typer.testing import CliRunner

import gym_envfactory.cli.images as cli_images
import gym_envfactory.containers.compose as compose
from gym_envfactory.containers.compose import DEFAULT_DIR, PROJECT, project_of
from gym_envfactory.errors import EnvFactoryError

FAKE_COMPOSE = "import json, sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(json.dumps(sys.argv[2:]) + '\\n')\n"


def test_project_of_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert project_of(DEFAULT_DIR) == PROJECT == "envfactory"  # the README's default keeps its name
    a, b = project_of(tmp_path / "x" / "catalog"), project_of(tmp_path / "y" / "catalog")
    assert a.startswith("envfactory-catalog-") and b.startswith("envfactory-catalog-") and a != b
    assert project_of(tmp_path / "x" / "catalog") == a  # stable
    assert project_of(tmp_path, "team-a_1") == "team-a_1"
    for bad in ("Team", "-x", "a b", ""):
        with pytest.raises(EnvFactoryError, match="invalid compose project name"):
            project_of(tmp_path, bad)


@pytest.fixture
def catalog_cli(tmp_path, monkeypatch):
    """The `envfactory catalog` commands with a compose command that records its arguments and a
    container listing that answers per project."""
    log = tmp_path / "compose-calls.jsonl"
    script = tmp_path / "fake_compose.py"
    script.write_text(FAKE_COMPOSE)
    monkeypatch.setattr(compose, "compose_command", lambda: [sys.executable, str(script), str(log)])
    listed: list[str] = []

    def containers(project: str = PROJECT) -> list[dict]:
        listed.append(project)
        return [{"service": "hotelbooking", "name": f"{project}_hotelbooking_1", "env": "HotelBooking",
                 "gym_id": "envfactory/HotelBooking-v0", "image": "envfactory/hotelbooking:0.1.0", "state": "running",
                 "health": "healthy", "url": "http://127.0.0.1:18765"}]

    monkeypatch.setattr(cli_images, "catalog_containers", containers)
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    app = typer.Typer()
    app.add_typer(cli_images.catalog_app, name="catalog")
    app.command("noop")(lambda: None)

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []

    return app, calls, listed


def _project_arg(call: list[str]) -> str:
    return call[call.index("--project-name") + 1]


def test_up_ps_down_use_the_project_given_or_recorded_in_the_dir(catalog_cli, tmp_path):
    app, calls, listed = catalog_cli
    runner = CliRunner()
    d = tmp_path / "team-a"
    up = runner.invoke(app, ["catalog", "up", "HotelBooking", "--dir", str(d), "--project", "team-a",
                             "--no-build", "--wait", "0", "--port", "18765"])
    assert up.exit_code == 0, up.output
    assert "COMPOSE_PROJECT_NAME=team-a" in (d / ".env").read_text().splitlines()
    assert _project_arg(calls()[-1]) == "team-a" and calls()[-1][-3:] == ["up", "-d", "--remove-orphans"]
    assert "compose project team-a" in up.output
    ps = runner.invoke(app, ["catalog", "ps", "--dir", str(d), "--json"])  # the project comes from the dir
    assert ps.exit_code == 0 and listed[-1] == "team-a" and json.loads(ps.output.splitlines()[0])["env"] == "HotelBooking"
    assert runner.invoke(app, ["catalog", "ps", "--project", "other"]).exit_code == 0 and listed[-1] == "other"
    down = runner.invoke(app, ["catalog", "down", "--dir", str(d)])
    assert down.exit_code == 0, down.output
    assert _project_arg(calls()[-1]) == "team-a" and "down" in calls()[-1]
    assert ("stopped and removed 1 container(s) of compose project team-a" in down.output
            and "team-a_hotelbooking_1 (HotelBooking)" in down.output)


def test_two_dirs_without_project_are_two_projects(catalog_cli, tmp_path):
    app, calls, _ = catalog_cli
    runner = CliRunner()
    for sub, port in (("a", "18765"), ("b", "18766")):
        r = runner.invoke(app, ["catalog", "up", "HotelBooking", "--dir", str(tmp_path / sub / "catalog"),
                                "--no-build", "--wait", "0", "--port", port])
        assert r.exit_code == 0, r.output
    first, second = (_project_arg(c) for c in calls())
    assert first != second and first == project_of(tmp_path / "a" / "catalog")
    r = runner.invoke(app, ["catalog", "up", "--dir", str(tmp_path / "c"), "--project", "Bad Name", "--no-build"])
    assert r.exit_code == 1 and "invalid compose project name 'Bad Name'" in r.output


def test_down_without_a_compose_file_says_so(catalog_cli, tmp_path):
    app, calls, _ = catalog_cli
    r = CliRunner().invoke(app, ["catalog", "down", "--dir", str(tmp_path / "nothing")])
    assert r.exit_code == 1 and "no compose file in" in r.output and calls() == []
