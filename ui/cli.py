"""``envfactory ui``: serve the browsing pages on a local port (contributed through the ``envfactory.cli``
entry point; docs/ui.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ui_cmd"]


def ui_cmd(
    rollouts: Annotated[list[Path] | None, typer.Option(
        "--rollouts", "-r", help="trajectories.jsonl to browse (from `envfactory rollout --out`); repeatable")] = None,
    graph: Annotated[Path | None, typer.Option(
        "--graph", help="tool graph JSON from `envfactory graph build` (default: built over the catalog when first shown)")] = None,
    host: Annotated[str, typer.Option("--host", help="interface to listen on (default: this machine only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port")] = 8765,
    no_images: Annotated[bool, typer.Option("--no-images", help="do not ask Docker which images are built")] = False,
) -> None:
    """Browse the catalog, environments (tools, states, tasks), the tool graph and rollouts in a web browser."""
    try:
        import uvicorn

        from gym_envfactory.ui.app import create_app
    except ImportError as exc:
        typer.echo(f"envfactory ui needs the 'server' extra (pip install '.[server]'): {exc}", err=True)
        raise typer.Exit(2) from None
    from gym_envfactory.ui.rollouts import load_rollouts

    for p in rollouts or []:
        try:
            load_rollouts(p)  # fail now, naming the file and line, rather than on the first page
        except Exception as exc:  # noqa: BLE001 - DatasetError, shown as one line
            typer.echo(f"envfactory ui: {exc}", err=True)
            raise typer.Exit(1) from None
    if graph is not None and not graph.is_file():
        typer.echo(f"envfactory ui: no graph file {graph}", err=True)
        raise typer.Exit(1)
    app = create_app(rollouts or [], graph_file=graph, check_images=not no_images)
    typer.echo(f"envfactory ui: http://{host}:{port}/  (Ctrl-C stops it)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
