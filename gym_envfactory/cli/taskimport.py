"""``envfactory tasks import FILE --format envfactory``: EnvFactory's published RL rows as a tasks file
(docs/synthesis.md, "EnvFactory's own data format"); ``--format envfactory-sft`` reads its SFT rows
(:func:`~gym_envfactory.environment.paperformat.tasks_from_sft_rows`), which carry no state.

The rows become tasks (:func:`gym_envfactory.environment.paperformat.tasks_from_rows`: servers mapped to
environments, tool-name prefixes stripped, one multi-turn task per conversation); then every task is read
like any tasks file (:func:`~gym_envfactory.environment.taskfiles.read_tasks`: unknown environments and
tools refused), its ground truth replayed, and the state after each turn compared with that row's
``final_config`` (the paper's reference state; bookkeeping fields excluded, numbers by value, set fields
as multisets: docs/reward.md).  A task that fails any of these is refused with file, row and field, and
left out; the others are written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gym_envfactory.cli.tasks import err_console, tasks_app
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.paperformat import KWARGS, ImportedTask, read_rows, tasks_from_rows, tasks_from_sft_rows
from gym_envfactory.environment.spec import require_trusted
from gym_envfactory.environment.taskfiles import read_tasks
from gym_envfactory.errors import ArgumentError, DatasetError, EnvFactoryError
from gym_envfactory.replay import task_reference
from gym_envfactory.state_compare import state_diff

__all__ = ["ImportFormat", "import_rows", "check_final_configs", "read_server_map"]


class ImportFormat(StrEnum):
    """Row formats ``tasks import`` reads."""

    envfactory = "envfactory"
    envfactory_sft = "envfactory-sft"


def read_server_map(path: Path) -> dict[str, str]:
    """``{server: environment}`` from a JSON object file.  Raises :class:`DatasetError` (file, field)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(f"cannot read the server map: {exc}", file=path) from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        raise DatasetError('the server map is a JSON object {"server": "Environment", ...}', file=path)
    return obj


def check_final_configs(item: ImportedTask, file: Path | None, *, trust: bool = False) -> None:
    """Replay ``item``'s task and compare the state after each turn that has a row with that row's
    ``final_config`` (canonical form of each environment's state model).

    Raises:
        DatasetError: the task does not load or replay, or a state differs (names the row, the field
            ``extra_info.mcp_factory_kwargs.final_config.<server>.<path>`` and both values).  A refusal
            of the task's own fields is named by the row and row field it came from: an invalid initial
            state by ``...initial_config.<server>.<path>``, a ground-truth call by
            ``reward_model.ground_truth[i]`` (``.arguments.<name>``, ``.masked_arguments``, ``.name``).
        UntrustedPackageError: an environment of the task is untrusted (generated or imported) and
            ``trust`` is false: the replay runs its code in this process, as ``envfactory validate`` does.
    """
    task = item.task
    try:
        groups = read_tasks([task])
    except DatasetError as err:
        raise _at_row(err, item, file) from None
    primary = next(iter(groups))
    taskset = groups[primary]
    spec = get_environment(primary)
    parsed = taskset.get(task["task_id"])
    require_trusted([get_environment(e) for e in parsed.envs], trust=trust,
                    doing="checking the rows (replaying their ground truth)")
    for env, server in item.servers.items():  # each initial_config named by its own row and server
        first = next((r for r in item.rows if r is not None and server in r.initial), None)
        if first is None:
            continue
        try:
            get_environment(env).dump_state(first.initial[server])
        except EnvFactoryError as exc:
            inner = getattr(exc, "field", None)
            raise DatasetError(f"row {first.number}: initial_config of {server!r} is no state of {env}: "
                               f"{getattr(exc, 'message', exc)}", file=file, line=first.number, task_id=task["task_id"],
                               field=f"{KWARGS}.initial_config.{server}" + (f".{inner}" if inner else "")) from None
    try:
        reference = task_reference(spec, parsed, taskset)
    except DatasetError as err:
        raise _at_row(err, item, file) from None
    envs = parsed.envs
    for t, row in enumerate(item.rows):
        if row is None:
            continue
        expected: dict[str, Any] = {}
        for env in envs:
            server = item.servers[env]
            if server not in row.final:
                continue
            try:
                expected[env] = json.loads(get_environment(env).dump_state(row.final[server]))
            except EnvFactoryError as exc:
                raise DatasetError(f"row {row.number}: final_config of {server!r} is no state of {env}: {exc}",
                                   file=file, line=row.number, task_id=task["task_id"],
                                   field=f"{KWARGS}.final_config.{server}") from None
        actual = reference.turn_states[t]
        if len(envs) == 1:
            pairs = [(envs[0], actual, expected.get(envs[0]), reference.excluded_fields, reference.set_fields)]
        else:
            pairs = [(e, actual[e], expected.get(e), _unprefixed(reference.excluded_fields, e),
                      _unprefixed(reference.set_fields, e)) for e in envs]
        for env, got, want, excluded, sets in pairs:
            if want is None:
                continue
            diff = state_diff(got, want, bookkeeping=excluded, set_fields=sets, limit=1)
            if diff:
                d = diff[0]
                raise DatasetError(
                    f"row {row.number}: replaying the ground truth gives a state that differs from final_config at "
                    f"{d.path}: final_config has {d.expected}, the replay {d.actual}", file=file, line=row.number,
                    task_id=task["task_id"],
                    field=f"{KWARGS}.final_config.{item.servers[env]}.{d.path}")


_CALL_FIELD = re.compile(r"^turns\.(\d+)\.ground_truth\.(\d+)(\..*)?$")


def _at_row(err: DatasetError, item: ImportedTask, file: Path | None) -> DatasetError:
    """``err``, raised reading or replaying the task converted from ``item``'s rows and naming a task field
    (``turns.T.ground_truth.C...``, ``initial_state...``), named instead by the file, the row that field
    came from and the row's own field (``reward_model.ground_truth[C].arguments.<name>``,
    ``extra_info.mcp_factory_kwargs.initial_config.<server>...``); ``err`` itself when no row holds it."""
    tid = item.task["task_id"]
    parts = [f"task {tid!r}"] + [f"{k} {v}" for k, v in (("turn", err.turn), ("call", err.call)) if v is not None]
    prefix = ", ".join(parts) + ": "
    core = err.message[len(prefix):] if err.message.startswith(prefix) else err.message
    where = err.field or ""
    m = _CALL_FIELD.match(where)
    if m is not None:
        t, c, rest = int(m[1]), int(m[2]), m[3] or ""
        row = item.rows[t] if t < len(item.rows) else None
        if row is None or c >= len(row.calls):
            return err
        if not rest:  # the call failed: name the argument the tool's argument policy rejects, if one is
            rest = _bad_argument(item, item.task["turns"][t]["ground_truth"][c])
        return DatasetError(f"row {row.number}: {core}", file=file, line=row.number, task_id=tid,
                            field=f"reward_model.ground_truth[{c}]{rest}")
    if where == "initial_state" or where.startswith("initial_state."):
        if len(item.servers) != 1:
            return err
        [server] = item.servers.values()
        first = next((r for r in item.rows if r is not None and server in r.initial), None)
        if first is None:
            return err
        return DatasetError(f"row {first.number}: {core}", file=file, line=first.number, task_id=tid,
                            field=f"{KWARGS}.initial_config.{server}{where[len('initial_state'):]}")
    return err


def _bad_argument(item: ImportedTask, call: Mapping[str, Any]) -> str:
    """``.arguments.<field>`` (or ``.arguments``) when ``call``'s arguments break its tool's argument
    policy (:meth:`~gym_envfactory.environment.tools.ToolSpec.validate_arguments`), else ``""``."""
    for env in item.servers:
        tool = get_environment(env).tools.get(call["name"])
        if tool is None:
            continue
        try:
            tool.validate_arguments(call.get("arguments", {}))
        except ArgumentError as exc:
            inner = exc.details[0]["field"] if exc.details else "<arguments>"
            return ".arguments" + ("" if inner == "<arguments>" else f".{inner}")
        return ""
    return ""


def _unprefixed(paths: Sequence[str], env: str) -> tuple[str, ...]:
    return tuple(p[len(env) + 1:] for p in paths if p.startswith(env + "."))


def import_rows(file: Path, *, mapping: Mapping[str, str] | None = None, separator: str | None = None,
                split: str = "train", id_prefix: str | None = None, fmt: str = "envfactory",
                initial_state: str | None = None, trust: bool = False,
                on_bad: Callable[[DatasetError], None] | None = None) -> list[dict[str, Any]]:
    """The checked tasks (JSON objects) of the paper's RL rows in ``file`` (module docstring); ``fmt``
    ``"envfactory-sft"``: its SFT rows (alpaca), which carry no state: the tasks start from
    ``initial_state`` (a named state; default the environment's) and are checked by their replay alone.
    ``trust``: replay untrusted packages' tasks in this process (else :class:`UntrustedPackageError`).

    Raises:
        DatasetError: without ``on_bad``, the first refused row or task; with it, each is handed to
            ``on_bad`` and left out.
    """
    def refuse(err: DatasetError) -> None:
        if on_bad is None:
            raise err
        on_bad(err)

    out = []
    rows = read_rows(file)
    items = (tasks_from_sft_rows(rows, file=file, mapping=mapping, separator=separator, split=split,
                                 id_prefix=id_prefix, initial_state=initial_state, on_bad=on_bad)
             if fmt == ImportFormat.envfactory_sft else
             tasks_from_rows(rows, file=file, mapping=mapping, separator=separator, split=split, id_prefix=id_prefix,
                             on_bad=on_bad))
    for item in items:
        try:
            check_final_configs(item, file, trust=trust)
        except DatasetError as err:
            refuse(err)
            continue
        out.append(item.task)
    return out


@tasks_app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="the rows: parquet, JSON (a list) or JSON Lines")],
    out: Annotated[Path, typer.Option("--out", help="tasks file (JSON Lines) to write")],
    fmt: Annotated[ImportFormat, typer.Option("--format", help="the rows' format: envfactory (the paper's RL rows) or envfactory-sft (its alpaca SFT rows)")] = ImportFormat.envfactory,
    server_map: Annotated[Path | None, typer.Option("--map", help='JSON {"server": "Environment"}; servers it leaves out are matched by name')] = None,
    separator: Annotated[str | None, typer.Option("--separator", help="between server and tool in a prefixed tool name (default: try - __ . : _)")] = None,
    split: Annotated[str, typer.Option(help="the tasks' split")] = "train",
    id_prefix: Annotated[str | None, typer.Option("--id-prefix", help="task ids are PREFIX<first row>; default <file stem>-row")] = None,
    initial_state: Annotated[str | None, typer.Option("--initial-state", help="envfactory-sft: the named initial state the tasks start from (default: the environment's)")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="replay the tasks of untrusted packages (generated or imported) in this process")] = False,
) -> None:
    """Read EnvFactory's published RL rows as tasks: one multi-turn task per conversation, for the
    environments its servers map to, each replayed and checked against the rows' final_config
    (--format envfactory-sft: its alpaca SFT rows, replayed from --initial-state).  A refused
    row or task is one line on stderr (file:row, field, why) and is left out; the rest is written."""
    refused: list[DatasetError] = []

    def bad(err: DatasetError) -> None:
        refused.append(err)
        err_console.print(f"refused: {err}", style="red", markup=False, highlight=False, soft_wrap=True)

    try:
        mapping = read_server_map(server_map) if server_map is not None else None
        tasks = import_rows(file, mapping=mapping, separator=separator, split=split, id_prefix=id_prefix,
                            fmt=fmt.value, initial_state=initial_state, trust=trust, on_bad=bad)
    except (EnvFactoryError, ImportError) as exc:
        err_console.print(f"error: {exc}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if not tasks:
        err_console.print(f"no task imported from {file}" + (f": {len(refused)} refusal(s) above" if refused else ""),
                          style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")
    turns = sum(len(t["turns"]) for t in tasks)
    typer.echo(f"wrote {len(tasks)} task(s) ({turns} turns) to {out}"
               + (f"; refused {len(refused)} (listed on stderr)" if refused else ""))
