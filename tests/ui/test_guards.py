"""`envfactory ui` refuses what the environment server refuses (issue 25, finding 6; docs/ui.md,
"Security"): a page of another site (``Origin``) or a DNS-rebound name (``Host``) reading states and
rollouts, and a bind beyond loopback without a token."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from gym_envfactory.errors import InsecureBindError
from gym_envfactory.ui.app import create_app
from gym_envfactory.ui.cli import ui_cmd
from tests.ui.helpers import client_of

PAGES = ["/", "/env/HotelBooking/state/small", "/rollouts", "/rollouts/0/0", "/compare?a=0&b=0", "/training"]


@pytest.fixture
def rollouts(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"task_id": "secret-task", "reward": 1.0, "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    return f


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize(("host", "headers"), [("evil.example:8765", {}), ("127.0.0.1.evil.example", {}),
                                               ("127.0.0.1:8765", {"Origin": "http://evil.example"}),
                                               ("localhost:8765", {"Origin": "null"})])
def test_a_foreign_page_cannot_read_the_ui(rollouts, path, host, headers):
    c = client_of(create_app([rollouts], check_images=False), host=host)
    r = c.get(path, headers=headers)
    assert r.status_code == 403 and "secret-task" not in r.text and "BK-" not in r.text
    assert c.get("/healthz").status_code == 200  # liveness stays open, as on the server


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1"])
def test_the_loopback_ui_answers_its_own_host(rollouts, host):
    c = client_of(create_app([rollouts], check_images=False), host=host)
    assert c.get("/rollouts").status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::"])
def test_a_ui_beyond_loopback_needs_a_token(rollouts, host):
    with pytest.raises(InsecureBindError, match=f"refusing to serve the UI on {host} without a token"):
        create_app([rollouts], check_images=False, host=host)


def test_a_ui_with_a_token_wants_the_bearer_header_on_every_page(rollouts):
    app = create_app([rollouts], check_images=False, host="0.0.0.0", token="s3cret-ui")
    c = client_of(app, host="gpu-box.lan:8765")  # beyond loopback any Host is fine: the token is the check
    for path in PAGES:
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
        assert c.get(path, headers={"Authorization": "Bearer s3cret-ui"}).status_code == 200, path
    assert c.get("/healthz").status_code == 200


def _cli(monkeypatch, *args: str):
    import uvicorn

    served: list[dict] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(
        {"app": self.config.app, "host": sockets[0].getsockname()[0], "port": sockets[0].getsockname()[1]}))
    app = typer.Typer()
    app.command()(ui_cmd)
    return CliRunner().invoke(app, ["--no-images", "--port", "0", *args]), served


def test_the_cli_refuses_a_public_bind_without_a_token(monkeypatch):
    res, served = _cli(monkeypatch, "--host", "0.0.0.0")
    assert res.exit_code == 2 and not served
    assert "refusing to serve the UI on 0.0.0.0 without a token" in res.output and "--token-file" in res.output


def test_the_cli_serves_a_public_bind_with_a_token_file(monkeypatch, tmp_path):
    (tmp_path / "tok").write_text("s3cret-ui\n")
    res, served = _cli(monkeypatch, "--host", "0.0.0.0", "--token-file", str(tmp_path / "tok"))
    assert res.exit_code == 0, res.output
    assert served and served[0]["host"] == "0.0.0.0"
    c = client_of(served[0]["app"], host="gpu-box.lan:8765")
    assert c.get("/").status_code == 401
    assert c.get("/rollouts", headers={"Authorization": "Bearer s3cret-ui"}).status_code == 200


def test_the_cli_warns_about_a_malformed_record_and_serves_the_rest(monkeypatch, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"task_id": "a", "reward": 1.0, "messages": []}) + "\n"
                 + '{"task_id": "b", "reward": 1' + "0" * 400 + ', "messages": []}\n{"task_id": "c", "mess')
    res, served = _cli(monkeypatch, "--rollouts", str(f))
    assert res.exit_code == 0 and served, res.output
    assert "t.jsonl:2 field 'reward'" in res.output and "t.jsonl:3: skipped an incomplete last line" in res.output
