"""Container lifecycle with testcontainers (Ryuk disabled in conftest) and the catalog as one compose
project (`envfactory catalog up|ps|down`), each environment used over the fast protocol and MCP."""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import gym_envfactory  # noqa: F401
from gym_envfactory.backends.remote import SessionClient
from gym_envfactory.containers.images import env_image_tag
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.rollout.policies import OraclePolicy

from .test_docker_backend import http, play

TOKEN = "lifecycle-token-7d1e"


def test_testcontainers_lifecycle(docker_images, docker_client):
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    assert testcontainers_config.ryuk_disabled, "Ryuk cannot be pulled here; conftest disables it"
    image = env_image_tag("PersonalFinance")
    container = (DockerContainer(image, user="10001:10001", read_only=True,
                                 security_opt=["no-new-privileges:true"], cap_drop=["ALL"], mem_limit="256m",
                                 pids_limit=128)
                 .with_tmpfs_mount("/tmp", "size=16m")
                 .with_env("ENVFACTORY_TOKEN", TOKEN)
                 .with_exposed_ports(8765)
                 .waiting_for(HttpWaitStrategy(8765, "/healthz").for_status_code(200).with_startup_timeout(60)))
    with container:
        cid = container.get_container_id()
        url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8765)}"
        status, ready = http(url + "/readyz", token=TOKEN)
        assert status == 200 and [e["name"] for e in ready["envs"]] == ["PersonalFinance"]
        env = gym.make("envfactory/PersonalFinance-v0", backend="url", url=url, token=TOKEN)
        try:
            tid = env.unwrapped.tasks.ids()[0]
            assert play(env, OraclePolicy(), tid)[0] == 1.0
            # A session left open, then a restart: the restarted server starts clean.
            env.reset(options={"task_id": tid})
            assert http(url + "/v1/rpc", token=TOKEN, body={"jsonrpc": "2.0", "id": 1, "method": "stats"})[1]["result"]["sessions"] == 1
        finally:
            env.close()
        wrapped = container.get_wrapped_container()
        wrapped.restart(timeout=5)
        wrapped.reload()
        port = wrapped.attrs["NetworkSettings"]["Ports"]["8765/tcp"][0]["HostPort"]
        url = f"http://{container.get_container_host_ip()}:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(url + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the restarted container did not become healthy"
            time.sleep(0.1)
        stats = http(url + "/v1/rpc", token=TOKEN, body={"jsonrpc": "2.0", "id": 1, "method": "stats"})[1]["result"]
        assert stats["sessions"] == 0 and stats["created"] == 0
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(cid)


def _free_ports(n: int) -> int:
    for _ in range(200):
        base = random.randint(20000, 40000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def _mcp_tools(url: str, token: str, env: str) -> tuple[list[str], bool]:
    """List the tools of ``url/mcp/<env>`` with the official mcp client and call one that needs no
    arguments; returns (tool names, whether that call succeeded)."""
    import anyio
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from gym_envfactory.session import Session

    spec = get_environment(env)
    local = Session([spec])  # the default initial state, as an MCP session gets it
    no_args = [n for n, t in spec.tools.items()
               if not t.mcp_schema()["inputSchema"].get("required") and local.call(n, {}).ok]
    out: dict[str, object] = {}

    async def main() -> None:
        hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with hc, Client(streamable_http_client(f"{url}/mcp/{env}", http_client=hc)) as client:
            out["tools"] = [t.name for t in (await client.list_tools()).tools]
            res = await client.call_tool(no_args[0], {}) if no_args else None
            out["ok"] = res is None or not res.is_error

    anyio.run(main)
    return out["tools"], bool(out["ok"])  # type: ignore[return-value]


def test_catalog_up_ps_down(docker_images, tmp_path, monkeypatch):
    import typer

    from gym_envfactory.cli.images import catalog_app, image_app
    from gym_envfactory.containers.compose import catalog_containers

    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    app = typer.Typer()
    app.add_typer(image_app, name="image")
    app.add_typer(catalog_app, name="catalog")
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)  # a relative --dir, as in the README's default (build/catalog)
    d = Path("build") / "catalog"
    port = _free_ports(3)
    up = runner.invoke(app, ["catalog", "up", "--dir", str(d), "--port", str(port), "--wait", "90"])
    try:
        assert up.exit_code == 0, up.output
        compose = json.loads((d / "docker-compose.yml").read_text().split("\n", 1)[1])
        env_file = d / ".env"
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        env_lines = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        token = env_lines["ENVFACTORY_TOKEN"]
        assert env_lines["COMPOSE_PROJECT_NAME"] == "envfactory"  # build/catalog keeps the default project
        names = sorted(s.name for s in gym_envfactory.containers.images.catalog_environments())
        assert sorted(compose["services"]) == [n.lower() for n in names]
        for svc in compose["services"].values():
            assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"] and svc["user"] == "10001:10001"
            assert "no-new-privileges:true" in svc["security_opt"]
            assert "ENVFACTORY_TOKEN" not in svc["environment"]  # a mounted file, not a variable
        assert (d / "secrets" / "token").read_text().strip() == token
        assert oct((d / "secrets").stat().st_mode & 0o777) == "0o700"
        import docker as docker_sdk

        for c in docker_sdk.from_env().containers.list(filters={"label": "org.envfactory.catalog=1"}):
            attrs = c.attrs
            assert token not in json.dumps(attrs["Config"]["Env"]) and token not in json.dumps(attrs["Config"]["Cmd"])
        rows = {r["env"]: r for r in catalog_containers()}
        assert sorted(rows) == names and all(r["health"] == "healthy" for r in rows.values()), rows
        ps = runner.invoke(app, ["catalog", "ps", "--json"])
        assert ps.exit_code == 0 and len(ps.output.strip().splitlines()) == len(names)
        for name, row in rows.items():
            # the fast session protocol
            client = SessionClient(row["url"], token=token, timeout=30)
            try:
                sid = client.request("create", env=name)["session_id"]
                assert client.request("state", session_id=sid)
                client.request("close", session_id=sid)
            finally:
                client.close()
            # and an MCP client over streamable HTTP: only the agent tools, callable
            tools, ok = _mcp_tools(row["url"], token, name)
            assert sorted(tools) == sorted(get_environment(name).tools) and ok
        # unauthenticated requests are refused on every service
        req = urllib.request.Request(rows[names[0]]["url"] + "/readyz")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(req, timeout=5)
    finally:
        down = runner.invoke(app, ["catalog", "down", "--dir", str(d)])
    assert down.exit_code == 0, down.output
    assert catalog_containers() == []


def test_two_catalog_folders_are_two_compose_projects(docker_images, docker_client, tmp_path, monkeypatch):
    """Issue 14: every catalog was compose project `envfactory`, so `up --dir B` (with --remove-orphans)
    took down the containers of `--dir A`.  Now each folder is its own project, and `down` says what it stopped."""
    import typer

    from gym_envfactory.cli.images import catalog_app
    from gym_envfactory.containers.compose import project_of

    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    app = typer.Typer()
    app.add_typer(catalog_app, name="catalog")
    app.command("noop")(lambda: None)
    runner = CliRunner()
    a, b = tmp_path / "a" / "catalog", tmp_path / "b" / "catalog"
    port = _free_ports(2)

    def project_containers(project: str) -> list:
        return docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})

    try:
        for d, p in ((a, port), (b, port + 1)):
            up = runner.invoke(app, ["catalog", "up", "HotelBooking", "--dir", str(d), "--port", str(p),
                                     "--no-build", "--wait", "0"])
            assert up.exit_code == 0, up.output
        pa, pb = project_of(a), project_of(b)
        assert pa != pb and len(project_containers(pa)) == 1 and len(project_containers(pb)) == 1
        down = runner.invoke(app, ["catalog", "down", "--dir", str(a)])
        assert down.exit_code == 0, down.output
        assert f"stopped and removed 1 container(s) of compose project {pa}" in down.output
        assert project_containers(pa) == [] and len(project_containers(pb)) == 1
    finally:
        for d in (a, b):
            runner.invoke(app, ["catalog", "down", "--dir", str(d)])
