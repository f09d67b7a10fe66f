"""A catalog as one compose project: the compose file (format 2.4) with one hardened service per
environment image, and running ``docker-compose`` / ``docker compose`` on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gym_envfactory.errors import EnvFactoryError

__all__ = ["PROJECT", "DEFAULT_DIR", "compose_command", "compose_spec", "write_compose", "run_compose",
           "catalog_containers", "check_project", "project_of"]

#: The compose project of the catalog in :data:`DEFAULT_DIR` (the compose label of its containers).
PROJECT = "envfactory"
#: Where ``envfactory catalog up`` writes the compose project by default (relative to the working directory).
DEFAULT_DIR = Path("build/catalog")
_PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def check_project(project: str) -> str:
    """``project`` if it is a valid compose project name (lower-case letters, digits, ``-``, ``_``;
    starting with a letter or digit).

    Raises:
        EnvFactoryError: it is not.
    """
    if not _PROJECT_NAME.fullmatch(project):
        raise EnvFactoryError(f"invalid compose project name {project!r}: use lower-case letters, digits, '-' and '_', "
                              f"starting with a letter or digit")
    return project


def project_of(directory: Path, project: str | None = None) -> str:
    """The compose project of the catalog in ``directory`` (docs/containers.md, "The catalog"):
    ``project`` when given; else the ``COMPOSE_PROJECT_NAME`` its ``.env`` records (written by
    :func:`write_compose`); else :data:`PROJECT` for :data:`DEFAULT_DIR` and
    ``envfactory-<folder name>-<6 hex of its absolute path>`` for any other folder, so two folders are
    two projects (one ``up --remove-orphans`` never removes the other's containers).

    Raises:
        EnvFactoryError: ``project`` is not a valid compose project name.
    """
    if project is not None:
        return check_project(project)
    env_file = Path(directory) / ".env"
    if env_file.is_file():
        for line in env_file.read_text().splitlines():
            if line.startswith("COMPOSE_PROJECT_NAME="):
                recorded = line.split("=", 1)[1].strip()
                if _PROJECT_NAME.fullmatch(recorded):
                    return recorded
    where = Path(directory).resolve()
    if where == DEFAULT_DIR.resolve():
        return PROJECT
    slug = re.sub(r"[^a-z0-9_-]+", "-", where.name.lower()).strip("-_") or "catalog"
    return f"{PROJECT}-{slug[:40]}-{hashlib.sha256(str(where).encode()).hexdigest()[:6]}"


# ------------------------------------------------------------------------------------ catalog (compose)
def compose_command() -> list[str]:
    """``docker-compose`` (v1, as Debian ships it) or ``docker compose`` (v2 plugin).

    Raises:
        EnvFactoryError: neither is installed.
    """
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    raise EnvFactoryError("neither docker-compose nor the docker compose plugin is installed "
                          "(apt-get install docker-compose)")


def compose_spec(envs: list[str] | None = None, *, host: str = "127.0.0.1", port: int = 8765,
                 mem_limit: str = "512m", cpus: float = 1.0, pids_limit: int = 256) -> dict[str, Any]:
    """The compose file as a dict: one hardened service per environment image, ports from ``port`` up.
    Environments whose image serves another listed environment's image are still separate services."""
    from gym_envfactory.containers.images import catalog_environments, env_image_tag
    from gym_envfactory.containers.run import HARDENING, TOKEN_PATH
    from gym_envfactory.environment.catalog import get_environment

    specs = [get_environment(e) for e in envs] if envs else catalog_environments()
    services: dict[str, Any] = {}
    for i, s in enumerate(specs):
        services[s.name.lower()] = {
            "image": env_image_tag(s),
            "command": ["--all"],
            "restart": "unless-stopped",
            # the token reaches the server as a read-only mounted file, never as a container variable
            # (variables show in `docker inspect`); write_compose puts it in ./secrets/token
            "environment": {"ENVFACTORY_TOKEN_FILE": TOKEN_PATH},
            "volumes": [f"./secrets/token:{TOKEN_PATH}:ro"],
            "ports": [f"{host}:{port + i}:8765"],
            "user": HARDENING["user"],
            "read_only": True,
            "tmpfs": [f"{path}:{opts}" for path, opts in HARDENING["tmpfs"].items()],
            "security_opt": list(HARDENING["security_opt"]),
            "cap_drop": list(HARDENING["cap_drop"]),
            "mem_limit": mem_limit,
            "memswap_limit": mem_limit,
            "cpus": cpus,
            "pids_limit": pids_limit,
            "labels": {"org.envfactory.catalog": "1", "org.envfactory.name": s.name,
                       "org.envfactory.gym-id": s.gym_id},
        }
    return {"version": "2.4", "services": services}


def write_compose(directory: Path, envs: list[str] | None = None, *, token: str | None = None,
                  project: str | None = None, **kw: Any) -> tuple[Path, str]:
    """Write ``docker-compose.yml`` (JSON is valid YAML), ``.env`` (the token, mode 0600, for you to read,
    and ``COMPOSE_PROJECT_NAME``: the project, :func:`project_of`, which compose and later ``ps``/``down``
    read) and ``secrets/token`` (the token the services mount read-only; folder 0700) into ``directory``;
    reuses the token already in ``.env`` unless ``token`` is given.  Returns (file, token)."""
    from gym_envfactory.containers.run import write_token_file

    project = project_of(directory, project)
    directory.mkdir(parents=True, exist_ok=True)
    env_file = directory / ".env"
    if token is None and env_file.is_file():
        for line in env_file.read_text().splitlines():
            if line.startswith("ENVFACTORY_TOKEN="):
                token = line.split("=", 1)[1].strip() or None
    token = token or secrets.token_urlsafe(32)
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"ENVFACTORY_TOKEN={token}\nCOMPOSE_PROJECT_NAME={project}\n")
    os.chmod(env_file, 0o600)
    secret_dir = directory / "secrets"
    secret_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(secret_dir, 0o700)
    token_path = secret_dir / "token"
    if token_path.exists():
        token_path.chmod(0o600)  # write_token_file may have left it read-only
    write_token_file(secret_dir, token)
    path = directory / "docker-compose.yml"
    path.write_text("# generated by `envfactory catalog up`; edit the command line, not this file\n"
                    + json.dumps(compose_spec(envs, **kw), indent=2) + "\n")
    return path, token


def run_compose(directory: Path, *args: str, check: bool = True, project: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``docker compose <args>`` on the catalog project written in ``directory`` (its
    ``docker-compose.yml``; the project ``project``, default :func:`project_of` the directory),
    capturing output (docs/containers.md).

    Raises:
        EnvFactoryError: ``check`` and a non-zero exit (with the command and the output's tail), no
            compose command installed, or an invalid project name.
    """
    project = project_of(directory, project)
    directory = Path(directory).resolve()  # compose runs with cwd=directory: relative paths would resolve twice
    cmd = [*compose_command(), "--project-name", project, "--project-directory", str(directory),
           "-f", str(directory / "docker-compose.yml"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=directory)
    if check and proc.returncode != 0:
        raise EnvFactoryError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                              f"{(proc.stdout + proc.stderr).strip()[-3000:]}")
    return proc


def catalog_containers(project: str = PROJECT) -> list[dict[str, Any]]:
    """The containers of compose project ``project``: service, name, state, health, published URL."""
    from gym_envfactory.containers.images import docker_client

    client = docker_client()
    rows = []
    for c in client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"}):
        st = c.attrs.get("State", {})
        ports = (c.attrs.get("NetworkSettings", {}).get("Ports") or {}).get("8765/tcp") or []
        url = f"http://{ports[0]['HostIp'] or '127.0.0.1'}:{ports[0]['HostPort']}" if ports else ""
        rows.append({"service": c.labels.get("com.docker.compose.service", ""), "name": c.name,
                     "env": c.labels.get("org.envfactory.name", ""), "gym_id": c.labels.get("org.envfactory.gym-id", ""),
                     "image": (c.image.tags or [c.image.id[7:19]])[0], "state": st.get("Status", ""),
                     "health": (st.get("Health") or {}).get("Status", "none"), "url": url})
    return sorted(rows, key=lambda r: r["service"])
