"""``envfactory ui``: serve the browsing pages on a local port (contributed through the ``envfactory.cli``
entry point; docs/ui.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ui_cmd", "UI_PORT"]

#: ``envfactory ui``'s default port: its own, beside ``envfactory serve``'s 8765 and ``envfactory catalog up``'s
#: 8765 and up, so the README's order (serve, then ui) runs both.
UI_PORT = 8760


def ui_cmd(
    rollouts: Annotated[list[Path] | None, typer.Option(
        "--rollouts", "-r", help="trajectories.jsonl to browse (from `envfactory rollout --out`); repeatable")] = None,
    graph: Annotated[Path | None, typer.Option(
        "--graph", help="tool graph JSON from `envfactory graph build` (default: built over the catalog when first shown)")] = None,
    host: Annotated[str, typer.Option("--host", help="interface to listen on (default: this machine only); beyond loopback a --token-file is required")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: any free port); `envfactory serve` uses 8765")] = UI_PORT,
    no_images: Annotated[bool, typer.Option("--no-images", help="do not ask Docker which images are built")] = False,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="read a bearer token from this file (first line; keep it mode 0600): every page then needs Authorization: Bearer <token>")] = None,
    tasks_files: Annotated[list[Path] | None, typer.Option(
        "--tasks", help="a tasks file (JSON Lines, e.g. from `envfactory gen tasks`): the environments its tasks name show them in place of their own; repeatable")] = None,
    training_logs: Annotated[list[Path] | None, typer.Option(
        "--training-log", help="a training log for the Training page: JSON Lines with a 'step' per line (gym_envfactory.training.log.TrainingLog), the recipe's result JSON or a trainer_state.json; repeatable")] = None,
) -> None:
    """Browse the catalog, environments (tools, states, tasks), the tool graph and rollouts in a web browser."""
    try:
        import uvicorn

        from gym_envfactory.ui.app import create_app
    except ImportError as exc:
        typer.echo(f"envfactory ui needs the 'server' extra (pip install -e '.[server]'): {exc}", err=True)
        raise typer.Exit(2) from None
    from gym_envfactory.cli.main import read_token_file
    from gym_envfactory.cli.tasks import read_tasks_option
    from gym_envfactory.errors import InsecureBindError
    from gym_envfactory.ui.rollouts import read_rollouts
    from gym_envfactory.ui.traininglog import read_training_log

    token = read_token_file(token_file) if token_file is not None else None
    tasks = read_tasks_option(tasks_files, None) if tasks_files else None  # a bad line: one line, exit 1
    for p in rollouts or []:
        try:
            found = read_rollouts(p)  # fail now, naming the file and line, rather than on the first page
        except Exception as exc:  # noqa: BLE001 - DatasetError, shown as one line
            typer.echo(f"envfactory ui: {exc}", err=True)
            raise typer.Exit(1) from None
        for why in [*(e.problem for e in found.episodes if e.problem is not None), *found.notes]:
            typer.echo(f"envfactory ui: warning: {why}", err=True)  # shown on its page too; the rest is served
    for p in training_logs or []:
        try:
            read_training_log(p)  # fail now, naming the file and line
        except Exception as exc:  # noqa: BLE001 - DatasetError, shown as one line
            typer.echo(f"envfactory ui: {exc}", err=True)
            raise typer.Exit(1) from None
    if graph is not None and not graph.is_file():
        typer.echo(f"envfactory ui: no graph file {graph}", err=True)
        raise typer.Exit(1)
    try:
        app = create_app(rollouts or [], graph_file=graph, check_images=not no_images, host=host, token=token,
                         tasks=tasks, training_logs=training_logs or [])
    except InsecureBindError as exc:
        typer.echo(f"envfactory ui: {exc}", err=True)
        raise typer.Exit(2) from None
    from gym_envfactory.protocol import listening_socket

    try:
        sock = listening_socket(host, port)  # bound before the URL is announced: a busy port is one line
    except OSError as exc:
        typer.echo(f"envfactory ui: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port "
                   f"(`envfactory serve` defaults to 8765)", err=True)
        raise typer.Exit(1) from None
    bound = sock.getsockname()[1]
    try:
        sock.listen(128)
        typer.echo(f"envfactory ui: http://{f'[{host}]' if ':' in host else host}:{bound}/  (Ctrl-C stops it)")
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        sock.close()
