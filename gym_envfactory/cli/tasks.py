"""``--tasks FILE`` of the commands, and ``envfactory tasks add ENV FILE...`` (docs/synthesis.md, "Using a
tasks file").

``tasks add`` copies tasks into an environment package's ``tasks.jsonl`` (a catalog package under
``env_images/``, or one of yours on ``$ENVFACTORY_CATALOG``), all or nothing: every task is read and
checked (:func:`~gym_envfactory.environment.taskfiles.read_tasks`), must be the package's own (its first
environment), must have a ``task_id`` the package does not hold yet, and must replay to an oracle reward of
1.0 in an episode; any refusal (file:line, field, why) leaves the package unchanged.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.taskfiles import read_tasks, tasks_for
from gym_envfactory.environment.tasks import Task, TaskSet
from gym_envfactory.errors import DatasetError, EnvFactoryError

__all__ = ["tasks_app", "read_tasks_option", "left_out_note", "oracle_refusal", "task_line", "refuse", "append_tasks"]

tasks_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Tasks files: add checked tasks to an environment package.")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # an error is one line, however narrow the terminal

#: The help text of every command's ``--tasks`` option.
TASKS_HELP = ("a tasks file (JSON Lines, e.g. from `envfactory gen tasks`) whose tasks stand in for the "
              "environments' own tasks.jsonl; repeatable")


def read_tasks_option(files: Sequence[Path], env: str | None) -> dict[str, TaskSet]:
    """The tasks of ``--tasks FILE...`` grouped by primary environment (``read_tasks``; a task without
    ``env`` is ``env``'s).  A file that does not load is one red line on stderr and exit status 1."""
    try:
        return read_tasks(list(files), env=env)
    except EnvFactoryError as exc:
        err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def left_out_note(given: Mapping[str, TaskSet], names: Sequence[str]) -> str | None:
    """A note for the tasks of ``given`` whose primary environment is not among ``names`` (they are not
    played), or ``None`` when every task is."""
    others = {n: len(ts) for n, ts in given.items() if n not in names}
    if not others:
        return None
    return (f"left out {sum(others.values())} task(s) of other environments "
            f"({', '.join(f'{n}: {k}' for n, k in others.items())}); name them, or leave the environment out")


def task_line(tasks: TaskSet, task: Task) -> dict[str, Any]:
    """``file``, ``line`` and ``task_id`` of ``task`` in ``tasks``, for a :class:`DatasetError`."""
    return {"file": tasks.file_of(task.task_id), "line": tasks.line_of(task.task_id), "task_id": task.task_id}


def oracle_refusal(tasks: TaskSet, task: Task, reward: float, components: Mapping[str, Any]) -> DatasetError:
    """The refusal of a task whose oracle episode (its own ground truth replayed) scores ``reward`` < 1.0:
    names the file, line, the first turn short of 1.0 (``turns.<t>``) and what the reward found."""
    why = []
    if components.get("missed"):
        why.append(f"missed calls {components['missed']}")
    if components.get("state_diff"):
        d = components["state_diff"][0]
        why.append(f"state {d.get('path')}: want {d.get('expected')} got {d.get('actual')}")
    if components.get("r_output") is not None and components["r_output"] < 1.0:
        why.append(f"expected outputs not in the reply (R_output {components['r_output']:.2f})")
    field = "turns"
    for i, turn in enumerate(components.get("turns") or []):
        if isinstance(turn, Mapping) and isinstance(turn.get("reward"), (int, float)) and turn["reward"] < 1.0:
            field = f"turns.{turn.get('turn', i)}"
            break
    return DatasetError(f"the oracle (the task's own ground truth) scores {reward:.3f}, not 1.0"
                        + (f": {'; '.join(why)}" if why else ""), **task_line(tasks, task), field=field)


@tasks_app.command("add")
def add_cmd(
    env: Annotated[str, typer.Argument(help="the environment package to add to (name or gym id)")],
    files: Annotated[list[Path], typer.Argument(help="tasks files (JSON Lines) to add from")],
    trust: Annotated[bool, typer.Option("--trust", help="play an untrusted package's (generated or imported) episodes in this process instead of an isolated child")] = False,
) -> None:
    """Copy the tasks of FILE... into ENV's package (its tasks.jsonl), after checking each one: it loads
    (file, line, field), is ENV's (its first environment), has a new task_id, and its ground truth replays to
    an oracle reward of 1.0.  All or nothing: any refusal is listed and nothing is written (exit 1)."""
    from gym_envfactory.envs.env import EnvFactoryEnv
    from gym_envfactory.rollout.policies import OraclePolicy
    from gym_envfactory.rollout.runner import run_episode

    try:
        spec = get_environment(env)
        own = spec.tasks
    except EnvFactoryError as exc:
        err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if spec.path is None:
        err_console.print(f"{spec.name} is defined in code and has no package folder to add tasks to; give them to "
                          f"define_environment(..., tasks=...) or gym.make(..., tasks=...)", style="red",
                          markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    target = spec.path / "tasks.jsonl"
    try:
        given = read_tasks(list(files), env=spec.name)
    except EnvFactoryError as exc:  # a file that does not load: refused as a whole
        refuse([exc], target)
    refusals: list[EnvFactoryError] = []
    for name, tasks in given.items():
        if name != spec.name:
            refusals += [DatasetError(f"the task's first environment is {name!r}, not {spec.name!r}: add it to "
                                      f"{name}", **task_line(tasks, t), field="env") for t in tasks]
    mine = tasks_for(given, spec.name)
    fresh: list[Task] = []
    for t in mine:
        if t.task_id in own.ids():
            refusals.append(DatasetError(f"duplicate task_id: {target}:{own.line_of(t.task_id)} already has it",
                                         **task_line(mine, t), field="task_id"))
        else:
            fresh.append(t)
    if fresh:
        playing = TaskSet(spec.name, fresh, source=mine.source,
                          lines={t.task_id: mine.line_of(t.task_id) or 0 for t in fresh},
                          files={t.task_id: p for t in fresh if (p := mine.file_of(t.task_id)) is not None})
        try:
            episodes = EnvFactoryEnv(spec, tasks=playing, trust=trust or None)
        except EnvFactoryError as exc:
            err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        try:
            for t in fresh:
                try:
                    r = run_episode(episodes, OraclePolicy(), task_id=t.task_id)
                except DatasetError as exc:  # the ground truth does not replay: names file, line, field
                    refusals.append(exc)
                    continue
                if r.reward < 1.0:
                    refusals.append(oracle_refusal(playing, t, r.reward, r.components))
        finally:
            episodes.close()
    if refusals:
        refuse(refusals, target)
    if not fresh:
        err_console.print("no task to add", style="red", markup=False, highlight=False)
        raise typer.Exit(1)
    append_tasks(target, fresh, spec.name)
    del spec.tasks  # the cached set of the package's tasks: the next reader loads the file as it now is
    console.print(f"added {len(fresh)} task(s) to {target} ({len(own) + len(fresh)} in all)", markup=False,
                  highlight=False, soft_wrap=True)
    if installed_copy(target):
        err_console.print(f"note: {target} is in an installed copy of the package: the next pip install replaces it "
                          f"and your tasks with it; install the checkout editable (pip install -e .) to add tasks to "
                          f"env_images/, or keep them in a file and pass --tasks FILE", style="yellow", markup=False,
                          highlight=False, soft_wrap=True)


def installed_copy(path: Path) -> bool:
    """Whether ``path`` lies in an installed (non-editable) copy of the package: under this interpreter's
    ``site-packages`` (``sysconfig`` purelib or platlib)."""
    import sysconfig

    resolved = path.resolve()
    for key in ("purelib", "platlib"):
        root = Path(sysconfig.get_paths()[key]).resolve()
        if resolved.is_relative_to(root):
            return True
    return False


def refuse(refusals: Sequence[EnvFactoryError], target: Path) -> NoReturn:
    """Print each refusal (``refused: FILE:LINE field 'F': ...``) and that ``target`` is unchanged; exit 1."""
    for refusal in refusals:
        err_console.print(f"refused: {refusal}", style="red", markup=False, highlight=False, soft_wrap=True)
    err_console.print(f"nothing written: {len(refusals)} refusal(s); {target} is unchanged", style="red",
                      markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def append_tasks(path: Path, tasks: Sequence[Task], env: str) -> None:
    """Append ``tasks`` to the tasks file ``path`` (created when missing) in one atomic replace: one JSON
    object per line, fields at their defaults left out, ``env`` left out where it is ``env`` alone (the
    package's own).  Raises ``OSError`` (the file is then unchanged)."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    lines = []
    for t in tasks:
        obj = t.model_dump(mode="json", exclude_defaults=True)
        if obj.get("env") in (env, [env]):
            del obj["env"]
        lines.append(json.dumps({"task_id": t.task_id, **obj}, ensure_ascii=False) + "\n")
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=".tasks-", suffix=".jsonl", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(old + "".join(lines))
        os.chmod(tmp, mode)  # mkstemp makes it 0600; the package file keeps its own mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
