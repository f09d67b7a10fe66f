"""``envfactory rollout`` and ``envfactory --version`` (README, "Run"): the url backend's ``--token``,
``--episodes`` below one refused in one line, the version string."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import gym_envfactory
from gym_envfactory.cli import app
from tests.conftest import CATALOG_SERVER_TOKEN as TOKEN


def test_version_prints_the_package_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"envfactory {gym_envfactory.__version__}"


@pytest.mark.parametrize("n", ["0", "-3"])
def test_rollout_episodes_below_one_is_refused_in_one_line(n):
    res = CliRunner().invoke(app, ["rollout", "envfactory/HotelBooking-v0", "--policy", "oracle", "--episodes", n])
    assert res.exit_code == 2
    text = res.output.strip()
    assert "no tasks" not in text and "--episodes must be >= 1" in text and f"got {n}" in text
    assert len(text.splitlines()) == 1


def test_rollout_url_backend_takes_token_option(catalog_server, tmp_path, monkeypatch):
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    out = tmp_path / "t.jsonl"
    args = ["rollout", "envfactory/HotelBooking-v0", "--policy", "oracle", "--episodes", "1", "--backend", "url",
            "--url", catalog_server, "--out", str(out)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and not out.exists()
    res = CliRunner().invoke(app, [*args, "--token", TOKEN])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["reward"] == 1.0

