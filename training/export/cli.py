"""``envfactory export rl|sft``: training data from environments (mounted through the ``envfactory.cli``
entry-point group; the runtime never imports this module)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gym_envfactory.environment.taskfiles import read_tasks, tasks_for
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import DatasetError, EnvFactoryError
from gym_envfactory.training.export.episodes import oracle_trajectories, read_trajectories, resolve_env_names
from gym_envfactory.training.export.paper import envfactory_rl_rows, envfactory_sft_records, write_rows
from gym_envfactory.training.export.rl import rl_rows, write_parquet
from gym_envfactory.training.export.sft import dataset_info_entry, to_alpaca, to_sharegpt

__all__ = ["export_app"]

export_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Export training data: RL prompts (VeRL parquet) and SFT conversations (LlamaFactory).")


class Per(StrEnum):
    """Row granularity of RL data."""

    turn = "turn"
    task = "task"


class SFTFormat(StrEnum):
    """LlamaFactory dataset formats (``envfactory``: alpaca rows in the paper's own layout)."""

    sharegpt = "sharegpt"
    alpaca = "alpaca"
    envfactory = "envfactory"


class RLFormat(StrEnum):
    """RL row formats: this gym's VeRL rows, or the paper's own (training/export/paper.py)."""

    verl = "verl"
    envfactory = "envfactory"


SEPARATOR_HELP = ("--format envfactory: write tool names as <server><SEPARATOR><tool> (default: as the tasks were "
                  "imported, else bare)")


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


#: The help text of the ``--tasks`` option.
TASKS_HELP = ("a tasks file (JSON Lines, e.g. from `envfactory gen tasks`) whose tasks stand in for the "
              "environments' own tasks.jsonl; without ENVS, the environments its tasks name; repeatable")


def _with_tasks(envs: list[str] | None, files: list[Path] | None) -> tuple[list[str], dict[str, TaskSet] | None]:
    """The environment names to export and the ``--tasks`` files' tasks by environment (``None``: none
    given).  Raises EnvFactoryError: a file that does not load, an unknown environment, nothing named."""
    given = read_tasks(list(files), env=envs[0] if envs and len(envs) == 1 and envs[0] != "all" else None) \
        if files else None
    if envs:
        names = resolve_env_names(envs)
    elif given is not None:
        names = list(given)
    else:
        raise EnvFactoryError("name environments (or 'all'), or give --tasks FILE")
    if given is not None:
        others = [n for n in given if n not in names]
        if others:
            typer.echo(f"note: left out the tasks of {', '.join(others)} (not among the environments named)", err=True)
    return names, given


@export_app.command("rl")
def export_rl(
    out: Annotated[Path, typer.Option("--out", help="parquet file to write")],
    envs: Annotated[list[str] | None, typer.Argument(help="gym ids or environment names; 'all' for the catalog")] = None,
    split: Annotated[str | None, typer.Option(help="only tasks of this split (train, test)")] = None,
    per: Annotated[Per, typer.Option(help="one row per task turn (the paper's unit) or per task")] = Per.turn,
    tasks_files: Annotated[list[Path] | None, typer.Option("--tasks", help=TASKS_HELP)] = None,
    fmt: Annotated[RLFormat, typer.Option("--format", help="verl: this gym's VeRL rows (parquet); envfactory: the paper's own rows (parquet, .jsonl or .json by --out's suffix)")] = RLFormat.verl,
    separator: Annotated[str | None, typer.Option("--separator", help=SEPARATOR_HELP)] = None,
) -> None:
    """RL prompts as VeRL parquet rows; every row rebuilds its episode with env.reset(options=...)
    (with --tasks, on gym.make(..., tasks=FILE)).  --format envfactory: the paper's row shape
    (one row per turn with tool calls; docs/training.md)."""
    try:
        names, given = _with_tasks(envs, tasks_files)
        if fmt is RLFormat.envfactory:
            if per is not Per.turn:
                raise EnvFactoryError("--format envfactory writes one row per turn (the paper's unit); leave out --per")
            rows = envfactory_rl_rows(names, split=split, tasks=given, separator=separator)
        else:
            rows = rl_rows(names, split=split, per=per.value, tasks=given)
        if not rows:
            raise EnvFactoryError(f"no task to export (split={split!r})")
        if fmt is RLFormat.envfactory:
            write_rows(rows, out)
        else:
            write_parquet(rows, out)
    except (EnvFactoryError, ValueError) as exc:
        _fail(exc)
    except ImportError as exc:
        _fail(RuntimeError(f"parquet needs the 'export' extra (pip install -e '.[export]'): {exc}"))
    typer.echo(f"wrote {len(rows)} rows to {out}")


@export_app.command("sft")
def export_sft(
    envs: Annotated[list[str], typer.Argument(help="gym ids or environment names; 'all' for the catalog")] = None,  # type: ignore[assignment]
    out: Annotated[Path, typer.Option("--out", help="JSON file to write (a list of records)")] = Path("sft.json"),
    fmt: Annotated[SFTFormat, typer.Option("--format", help="LlamaFactory format")] = SFTFormat.sharegpt,
    split: Annotated[str | None, typer.Option(help="only tasks of this split (ground-truth source)")] = None,
    from_trajectories: Annotated[Path | None, typer.Option("--from-trajectories",
                                                           help="trajectories.jsonl from `envfactory rollout --out`")] = None,
    min_reward: Annotated[float, typer.Option(help="keep trajectories with at least this reward")] = 1.0,
    name: Annotated[str, typer.Option(help="dataset name in dataset_info.json")] = "envfactory",
    tasks_files: Annotated[list[Path] | None, typer.Option("--tasks", help=TASKS_HELP)] = None,
    separator: Annotated[str | None, typer.Option("--separator", help=SEPARATOR_HELP)] = None,
) -> None:
    """SFT conversations from the tasks' ground truth (oracle episodes) or from rollout trajectories
    filtered by reward; writes the data file and a dataset_info.json entry beside it.  A bad trajectory
    record is one line on stderr naming its file, line and field, and is left out; the rest is exported."""
    skipped: list[DatasetError] = []

    def skip(err: DatasetError) -> None:
        skipped.append(err)
        typer.echo(f"skipped: {err}", err=True)

    try:
        if fmt is SFTFormat.envfactory:
            if from_trajectories is not None:
                raise EnvFactoryError("--format envfactory writes the tasks' ground truth; it does not read --from-trajectories")
            if not envs and not tasks_files:
                raise EnvFactoryError("name environments, or give --tasks FILE")
            names, given = _with_tasks(envs, tasks_files)
            paper = envfactory_sft_records(names, split=split, tasks=given, separator=separator)
            if not paper:
                raise EnvFactoryError(f"no task with tool calls to export (split={split!r})")
            write_rows(paper, out)
            info_path = out.parent / "dataset_info.json"
            info = json.loads(info_path.read_text()) if info_path.is_file() else {}
            info.update(dataset_info_entry(name, out.name, "alpaca"))
            info_path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
            typer.echo(f"wrote {len(paper)} alpaca records (the paper's layout) to {out}; dataset_info entry {name!r} in {info_path}")
            return
        if from_trajectories is not None:
            trajectories = list(read_trajectories(from_trajectories, min_reward=min_reward, on_bad=skip))
        else:
            if not envs and not tasks_files:
                raise EnvFactoryError("name environments, or give --tasks FILE or --from-trajectories")
            names, given = _with_tasks(envs, tasks_files)
            trajectories = [t for e in names for t in oracle_trajectories(
                e, split=split, tasks=None if given is None else tasks_for(given, e))]
        unread = len(skipped)
        records = (to_sharegpt(trajectories, on_bad=skip) if fmt is SFTFormat.sharegpt
                   else to_alpaca(trajectories, on_bad=skip))
        if skipped and not records:
            raise DatasetError(f"no usable trajectory left: {len(skipped)} bad records (above); nothing written")
    except EnvFactoryError as exc:
        _fail(exc)
    except ImportError as exc:  # --format envfactory --out X.parquet without pyarrow
        _fail(RuntimeError(f"parquet needs the 'export' extra (pip install -e '.[export]'): {exc}"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    info_path = out.parent / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info.update(dataset_info_entry(name, out.name, fmt.value))
    info_path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    typer.echo(f"wrote {len(records)} {fmt.value} records from {len(trajectories) - (len(skipped) - unread)} trajectories to {out}; "
               f"dataset_info entry {name!r} in {info_path}"
               + (f"; skipped {len(skipped)} bad records (listed on stderr)" if skipped else ""))
