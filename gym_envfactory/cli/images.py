"""``envfactory image ...`` and ``envfactory catalog ...``: build the images offline and run the
catalog as one compose project (docs/containers.md).

- ``envfactory image base [--suite bookworm] [--tag envfactory/base:bookworm] [--force]``
- ``envfactory image runtime [--base IMAGE] [--force]``
- ``envfactory image build <Env>... | --all [--force]``
- ``envfactory image ls``
- ``envfactory catalog up [<Env>...] [--host 127.0.0.1] [--port 8765] [--dir build/catalog] [--project NAME]``
- ``envfactory catalog ps [--dir D] [--project NAME]`` / ``envfactory catalog down [--dir D] [--project NAME]``

Each catalog folder is its own compose project (:func:`gym_envfactory.containers.compose.project_of`):
``envfactory`` for ``build/catalog``, derived from the folder otherwise, recorded in ``<dir>/.env``.

The compose file (format 2.4, understood by docker-compose v1 and ``docker compose`` v2) has one service
per environment image with the hardening of :data:`gym_envfactory.docker_backend.HARDENING`, the token in
``<dir>/.env`` (mode 0600; ``$ENVFACTORY_TOKEN`` wins when set) and ports published from ``--port`` up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_envfactory.containers.compose import (
    DEFAULT_DIR,
    catalog_containers,
    project_of,
    run_compose,
    write_compose,
)
from gym_envfactory.errors import EnvFactoryError

__all__ = ["image_app", "catalog_app"]

image_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Build Docker images offline: base (debootstrap), runtime (wheelhouse), environments.")
catalog_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Run the catalog's environment images as one compose project.")
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)  # an error is one line, however narrow the terminal

DIR_HELP = "the catalog's folder (compose file, .env with the token and the project name)"
PROJECT_HELP = ("compose project name (default: the one recorded in <dir>/.env; else envfactory for build/catalog, "
                "envfactory-<folder>-<hash> for another --dir)")


def _say(msg: str) -> None:
    err_console.print(msg, highlight=False, markup=False)


def _fail(exc: Exception, code: int = 1) -> None:
    err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)  # markup would eat '[docker]'
    raise typer.Exit(code)


# ------------------------------------------------------------------------------------ image
@image_app.command("base")
def image_base(
    suite: Annotated[str, typer.Option(help="Debian suite for debootstrap")] = "bookworm",
    tag: Annotated[str, typer.Option(help="tag of the imported image")] = "envfactory/base:bookworm",
    mirror: Annotated[str, typer.Option(help="Debian mirror")] = "http://deb.debian.org/debian",
    force: Annotated[bool, typer.Option("--force", help="rebuild even if the tag exists")] = False,
) -> None:
    """Base image from Debian packages (debootstrap --variant=minbase + python3, python3-venv,
    ca-certificates; then docker import).  For hosts that reach no registry.  Needs root."""
    from gym_envfactory.containers.images import build_base

    try:
        res = build_base(suite=suite, tag=tag, mirror=mirror, force=force, say=_say)
    except EnvFactoryError as exc:
        _fail(exc)
    console.print(f"{res.tag} {res.id[7:19]} {res.size / 1e6:.0f} MB {'built' if res.built else 'reused'}", markup=False)


@image_app.command("runtime")
def image_runtime(
    base: Annotated[str | None, typer.Option(help="BASE_IMAGE (default: envfactory/base:bookworm if present, else python:3.11-slim)")] = None,
    tag: Annotated[str | None, typer.Option(help="tag (default envfactory/runtime:<package version>)")] = None,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if the sources did not change")] = False,
) -> None:
    """Runtime image: `pip wheel .[server] -w build/wheelhouse` on the host, then the root Dockerfile
    (no network during the build)."""
    from gym_envfactory.containers.images import build_runtime

    try:
        res = build_runtime(base_image=base, tag=tag, force=force, say=_say)
    except EnvFactoryError as exc:
        _fail(exc)
    console.print(f"{res.tag} {res.id[7:19]} {res.size / 1e6:.0f} MB {'built' if res.built else 'reused'}", markup=False)


@image_app.command("build")
def image_build(
    envs: Annotated[list[str] | None, typer.Argument(help="environments (names or gym ids)")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every catalog environment")] = False,
    runtime: Annotated[str | None, typer.Option(help="runtime image (default envfactory/runtime:<version>)")] = None,
    force: Annotated[bool, typer.Option("--force", help="rebuild unchanged images too")] = False,
) -> None:
    """Environment images envfactory/<name>:<version>: the runtime plus /catalog/<Name>/ (and the
    environments its tasks use), labelled; unchanged images are skipped."""
    from gym_envfactory.containers.images import build_env_images
    from gym_envfactory.environment.catalog import get_environment

    if not all_ and not envs:
        raise typer.BadParameter("name environments or pass --all")
    try:
        names = None if all_ else [get_environment(e).name for e in envs or []]
        results = build_env_images(names, runtime=runtime, force=force, say=_say)
    except EnvFactoryError as exc:
        _fail(exc)
    table = Table(title="environment images")
    for col in ("image", "id", "size", "serves", "tools", "content hash", ""):
        table.add_column(col)
    for r in results:
        lab = r.labels
        table.add_row(*map(escape, (r.tag, r.id[7:19], f"{r.size / 1e6:.0f} MB", lab.get("org.envfactory.envs", ""),
                                    lab.get("org.envfactory.tool-count", ""), lab.get("org.envfactory.content-hash", "")[:12],
                                    "built" if r.built else "unchanged")))
    console.print(table)


@image_app.command("ls")
def image_ls() -> None:
    """The local envfactory images with their labels and sizes."""
    from gym_envfactory.containers.images import LABEL, docker_client

    try:
        client = docker_client()
    except EnvFactoryError as exc:
        _fail(exc)
    table = Table(title="envfactory images")
    for col in ("tag", "kind", "size", "serves", "version", "content hash"):
        table.add_column(col)
    for img in sorted(client.images.list(filters={"label": f"{LABEL}.kind"}), key=lambda i: (i.tags or [""])[0]):
        lab = img.labels or {}
        for tag in img.tags:  # untagged build stages are left out
            table.add_row(*map(escape, (tag, lab.get(f"{LABEL}.kind", ""), f"{img.attrs.get('Size', 0) / 1e6:.0f} MB",
                                        lab.get(f"{LABEL}.envs", ""), lab.get(f"{LABEL}.version", ""),
                                        lab.get(f"{LABEL}.content-hash", "")[:12])))
    console.print(table)


def wait_for_health(project: str, wait: float, *, poll_s: float = 0.5,
                    containers: Callable[[str], list[dict[str, Any]]] | None = None,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> list[dict[str, Any]]:
    """Wait until every container of compose project ``project`` is healthy, for at most ``wait``
    seconds (0: look once), as ``docker compose up --wait`` does: ``starting`` and ``unhealthy`` are
    states a container passes through (the engine's health check turns it healthy at its next success;
    the image's start period keeps slow starts from counting), so only a container that stopped
    (``exited``, ``dead``) ends the wait early.  Returns the last rows of
    :func:`~gym_envfactory.containers.compose.catalog_containers` (``containers``: that function, for tests)."""
    look = containers or catalog_containers
    deadline = clock() + wait
    rows = look(project)
    while wait > 0 and clock() < deadline and any(r["health"] != "healthy" for r in rows):
        if any(r["state"] in ("exited", "dead") for r in rows):
            break
        sleep(poll_s)
        rows = look(project)
    return rows


@catalog_app.command("up")
def catalog_up(
    envs: Annotated[list[str] | None, typer.Argument(help="environments (default: the whole catalog)")] = None,
    host: Annotated[str, typer.Option(help="host address the ports are published on (0.0.0.0: every interface)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="first host port; one port per environment")] = 8765,
    directory: Annotated[Path, typer.Option("--dir", help=DIR_HELP)] = DEFAULT_DIR,
    project: Annotated[str | None, typer.Option("--project", help=PROJECT_HELP)] = None,
    build: Annotated[bool, typer.Option("--build/--no-build", help="build missing or stale environment images first")] = True,
    wait: Annotated[float, typer.Option(help="seconds to wait for every service to be healthy (0: do not wait)")] = 60.0,
    mem_limit: Annotated[str, typer.Option(help="memory limit per container")] = "512m",
    cpus: Annotated[float, typer.Option(help="CPUs per container")] = 1.0,
) -> None:
    """Write the compose file and start the catalog as one compose project."""
    from gym_envfactory.containers.images import build_env_images

    try:
        name = project_of(directory, project)
        if build:
            build_env_images(envs or None, say=_say)
        path, token = write_compose(directory, envs or None, token=os.environ.get("ENVFACTORY_TOKEN"), host=host,
                                    port=port, mem_limit=mem_limit, cpus=cpus, project=name)
        run_compose(directory, "up", "-d", "--remove-orphans", project=name)
        rows = wait_for_health(name, wait)
    except EnvFactoryError as exc:
        _fail(exc)
    _print_ps(rows, name)
    console.print(f"compose project {name}, file {path}; token in {directory / '.env'} "
                  f"(export ENVFACTORY_TOKEN=$(sed -n 's/^ENVFACTORY_TOKEN=//p' {directory / '.env'}))", markup=False)
    if wait > 0 and any(r["health"] != "healthy" for r in rows):
        err_console.print(f"not every service is healthy: see `docker-compose -p {name} logs`", style="red", markup=False,
                          highlight=False)
        raise typer.Exit(1)


@catalog_app.command("down")
def catalog_down(
    directory: Annotated[Path, typer.Option("--dir", help=DIR_HELP)] = DEFAULT_DIR,
    project: Annotated[str | None, typer.Option("--project", help=PROJECT_HELP)] = None,
) -> None:
    """Stop and remove the catalog's containers and network; says which containers it stopped."""
    if not (directory / "docker-compose.yml").is_file():
        _fail(EnvFactoryError(f"no compose file in {directory}: nothing to take down (was it started with --dir?)"))
    try:
        name = project_of(directory, project)
        before = catalog_containers(name)
        run_compose(directory, "down", "--remove-orphans", "--timeout", "10", project=name)
    except EnvFactoryError as exc:
        _fail(exc)
    if before:
        names = ", ".join(f"{r['name']} ({r['env'] or r['service']})" for r in before)
        console.print(f"stopped and removed {len(before)} container(s) of compose project {name} ({directory}): {names}",
                      highlight=False, soft_wrap=True, markup=False)
    else:
        console.print(f"compose project {name} ({directory}) had no containers; its network is removed", highlight=False,
                      markup=False)


@catalog_app.command("ps")
def catalog_ps(
    directory: Annotated[Path, typer.Option("--dir", help=DIR_HELP)] = DEFAULT_DIR,
    project: Annotated[str | None, typer.Option("--project", help=PROJECT_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON lines")] = False,
) -> None:
    """The catalog's services with state, health and URL."""
    try:
        name = project_of(directory, project)
        rows = catalog_containers(name)
    except EnvFactoryError as exc:
        _fail(exc)
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    _print_ps(rows, name)


def _print_ps(rows: list[dict[str, Any]], project: str) -> None:
    table = Table(title=escape(f"compose project {project}"))
    for col in ("service", "gym id", "image", "state", "health", "url"):
        table.add_column(col)
    for r in rows:
        color = {"healthy": "green", "unhealthy": "red"}.get(r["health"], "yellow")
        table.add_row(escape(r["service"]), escape(r["gym_id"]), escape(r["image"]), escape(r["state"]),
                      f"[{color}]{escape(r['health'])}[/{color}]", escape(r["url"]))
    if not rows:
        table.caption = "no containers: `envfactory catalog up`"
    console.print(table)


def _standalone() -> None:  # pragma: no cover - `python -m gym_envfactory.cli_images image ...` before cli.py registers us
    root = typer.Typer(add_completion=False, no_args_is_help=True)
    root.add_typer(image_app, name="image")
    root.add_typer(catalog_app, name="catalog")
    root()


if __name__ == "__main__":  # pragma: no cover
    _standalone()
