"""The ``envfactory`` command line: list, info, validate, rollout.

``envfactory rollout envfactory/HotelBooking-v0`` runs the noisy oracle on every task of the
environment on the in-process backend and prints a per-episode reward table and a summary.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gym_envfactory.cli.tasks import TASKS_HELP, left_out_note, read_tasks_option
from gym_envfactory.environment.catalog import get_environment, import_environment_module, list_environments
from gym_envfactory.environment.spec import EnvironmentSpec, require_trusted
from gym_envfactory.environment.taskfiles import tasks_for
from gym_envfactory.environment.tasks import Task
from gym_envfactory.errors import EnvFactoryError

if TYPE_CHECKING:  # pragma: no cover
    from gym_envfactory.rollout.runner import EpisodeResult

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="gym_envfactory: stateful, verifiable tool-use environments for RL (EnvFactory).")
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)  # an error is one line, however narrow the terminal


def _version(value: bool) -> None:
    if value:
        from gym_envfactory import __version__

        console.print(f"envfactory {__version__}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _app_options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                  help="print the package version and exit")] = False,
) -> None:
    """gym_envfactory: stateful, verifiable tool-use environments for RL (EnvFactory)."""


class PolicyKind(StrEnum):
    """The ``--policy`` choices of ``envfactory rollout`` (see :func:`gym_envfactory.rollout.policies.make_policy`)."""

    oracle = "oracle"
    noisy = "noisy"
    random = "random"
    openai = "openai"


class Backend(StrEnum):
    """The ``--backend`` choices of ``envfactory rollout``: where sessions run (docs/architecture.md, "Backends")."""

    inprocess = "inprocess"
    subprocess = "subprocess"
    isolated = "isolated"
    docker = "docker"
    url = "url"


def _fmt(v: object) -> str:
    if v is None:
        return "vacuous"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def split_counts(tasks: Iterable[Task]) -> str:
    """Tasks per split for ``envfactory list``: ``train 30 / test 8`` (``train`` first, then ``test``, then
    the others by name); ``0`` when there are none."""
    counts = Counter(t.split for t in tasks)
    order = sorted(counts, key=lambda s: (s != "train", s != "test", s))
    return " / ".join(f"{escape(s)} {counts[s]}" for s in order) or "0"


@app.command("list")
def list_cmd() -> None:
    """List the catalog: every environment with its gym id, domain, tools and tasks per split."""
    table = Table(title="envfactory catalog")
    for col in ("gym id", "domain", "version", "tools (write)", "tasks per split (multi-turn)", "initial states"):
        table.add_column(col)
    broken: list[str] = []
    for name in list_environments():
        try:
            spec = get_environment(name)
            tasks = spec.tasks
        except Exception as exc:  # noqa: BLE001 - a broken package is reported and skipped, never fatal
            table.add_row(escape(name), "-", "-", "-", "-", "[red]broken (see below)[/red]")
            broken.append(f"{name}: {exc if isinstance(exc, EnvFactoryError) else repr(exc)[:500]}")
            continue
        writes = sum(not t.read_only for t in spec.tools.values())
        table.add_row(escape(spec.gym_id), escape(spec.domain), escape(spec.version), f"{len(spec.tools)} ({writes})",
                      f"{split_counts(tasks)} ({sum(t.multi_turn for t in tasks)})", escape(", ".join(spec.initial_state_names())))
    console.print(table)
    for line in broken:
        err_console.print(f"broken: {line}", style="red", soft_wrap=True, markup=False, highlight=False)
    if broken:
        raise typer.Exit(1)


@app.command("info")
def info_cmd(env: Annotated[str, typer.Argument(help="environment name or gym id")]) -> None:
    """Show an environment's manifest, tools, initial states and task statistics."""
    spec = _load(env)
    console.print(f"[bold]{escape(spec.name)}[/bold] " + escape(f"v{spec.version} ({spec.domain}) — {spec.description}"))
    console.print(f"gym id: {spec.gym_id}   provenance: {spec.manifest.provenance.kind}   path: {spec.path}",
                  markup=False)
    table = Table(title="tools")
    for col in ("tool", "kind", "parameters", "description"):
        table.add_column(col)
    for t in spec.tools.values():
        kind = "read" if t.read_only else ("write, destructive" if t.annotations.destructive else "write")
        params = ", ".join(f"{p}{'' if p in t.input_schema.get('required', []) else '?'}"
                           for p in t.input_schema.get("properties", {}))
        table.add_row(escape(t.name), kind, escape(params), escape(_first_sentence(t.description)))
    console.print(table)
    try:
        tasks = spec.tasks
        n_scenarios = len(spec.scenarios)
    except EnvFactoryError as exc:
        err_console.print(str(exc), style="red", soft_wrap=True, markup=False, highlight=False)
        raise typer.Exit(1) from None
    clar = sum(any(tt.clarification for tt in t.turns) for t in tasks)
    cross = [t.task_id for t in tasks if len(t.envs) > 1]
    console.print(f"initial states: {', '.join(spec.initial_state_names())}", markup=False)
    console.print(f"tasks: {len(tasks)} (multi-turn {sum(t.multi_turn for t in tasks)}, with clarification {clar}, "
                  f"splits {', '.join(f'{s}={len(tasks.ids(s))}' for s in tasks.splits()) or 'none'}); "
                  f"validation scenarios: {n_scenarios}", markup=False)
    if cross:
        console.print(f"tasks spanning several environments (their episodes also get those environments' tools): "
                      f"{', '.join(cross)}", markup=False)


def _first_sentence(text: str) -> str:
    import re

    para = " ".join(text.split("\n\n", 1)[0].split())
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)\.\s", para)
    return para if m is None else para[: m.start() + 1]


@app.command("validate")
def validate_cmd(
    env: Annotated[str | None, typer.Argument(help="environment name or gym id")] = None,
    all_: Annotated[bool, typer.Option("--all", help="validate every catalog environment")] = False,
    trust: Annotated[bool, typer.Option("--trust", help="validate untrusted packages too (provenance generated or imported): their code then runs in this process, with your environment variables, files and network")] = False,
    tasks_files: Annotated[list[Path] | None, typer.Option("--tasks", help=TASKS_HELP + "; without ENV or --all, the environments the tasks name are validated")] = None,
) -> None:
    """Run validation scenarios (every tool's success and error paths), replay every task's ground
    truth (and, with the scenarios, once more in two child processes under different PYTHONHASHSEEDs,
    which must agree) and lint the package for nondeterminism.  Exit code 1 if anything fails.  Validation imports a package into this process, so an
    untrusted one (written by EnvGen or the importer) is refused unless --trust.  With --tasks FILE the
    tasks of the files are replayed in place of the package's own tasks.jsonl."""
    from gym_envfactory.validation import validate_environment

    given = read_tasks_option(tasks_files, env) if tasks_files else None
    if all_:
        names = list_environments()
    elif env:
        names = [env]
    elif given is not None:
        names = list(given)
    else:
        raise typer.BadParameter("give an environment, --all or --tasks FILE")
    if given is not None:
        note = left_out_note(given, [_load(n).name for n in names])
        if note:
            err_console.print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)
    ok = True
    for name in names:
        try:
            spec = get_environment(name)
            if given is not None:
                spec = spec.with_tasks(tasks_for(given, spec.name))
            require_trusted([spec], trust=trust, doing="validating")
            with _validation_progress(spec.name) as progress:
                report = validate_environment(spec, progress=progress)
        except Exception as exc:  # noqa: BLE001 - one broken package never stops the others' validation
            console.print(f"✗ {name}: {exc if isinstance(exc, EnvFactoryError) else repr(exc)[:500]}", style="red",
                          markup=False, highlight=False)
            ok = False
            continue
        n_pass = sum(s.passed for s in report.scenarios)
        status = "[green]✓[/green]" if report.passed else "[red]✗[/red]"
        console.print(f"{status} {escape(spec.name)}: scenarios {n_pass}/{len(report.scenarios)} passed, "
                      f"tools covered {sum(len(v) == 2 for v in report.coverage.values())}/{len(report.coverage)}, "
                      f"tasks replayed {report.n_tasks - len(report.task_failures)}/{report.n_tasks}")
        for f in report.failures():
            console.print(f"    {f}", style="red", markup=False, highlight=False)
        for f in report.coverage_warnings:  # an imported environment's coverage gaps (as the import reports them)
            console.print(f"    warning: {f}", style="yellow", markup=False, highlight=False)
        ok &= report.passed
    raise typer.Exit(0 if ok else 1)


@contextlib.contextmanager
def _validation_progress(env_name: str) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar on stderr for one environment's validation (scenarios, then task replays),
    removed when done so stdout keeps only the result lines; yields the ``progress(stage, done, total)``
    callback of :func:`gym_envfactory.validation.validate_environment`."""
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        tid = bar.add_task(escape(f"{env_name} · scenarios"), total=None)

        def progress(stage: str, done: int, total: int) -> None:
            bar.update(tid, description=escape(f"{env_name} · {stage}"), completed=done, total=total)

        yield progress


class ToolFormat(StrEnum):
    """The ``--tool-format`` choices of ``envfactory rollout`` (openai policy): ``native`` sends the
    endpoint ``tools``; ``prompt`` renders them into the system message, for endpoints without tool support."""

    native = "native"
    prompt = "prompt"


#: ``envfactory rollout`` stops after this many episodes in a row failed on the policy (an endpoint down).
MAX_CONSECUTIVE_POLICY_FAILURES = 3


@app.command("rollout")
def rollout_cmd(
    ctx: typer.Context,
    env_id: Annotated[str | None, typer.Argument(help="gym id (envfactory/HotelBooking-v0) or environment name (with --tasks whose tasks are all of one environment, it may be left out)")] = None,
    policy: Annotated[PolicyKind, typer.Option(help="oracle replays ground truth; noisy (default) perturbs it; random samples tools; openai calls an endpoint")] = PolicyKind.noisy,
    episodes: Annotated[int | None, typer.Option(help="number of episodes, >= 1 (default: every task once)")] = None,
    seed: Annotated[int, typer.Option(help="seed for task order and policy randomness")] = 0,
    split: Annotated[str | None, typer.Option(help="only tasks of this split (train/test)")] = None,
    task_ids: Annotated[list[str] | None, typer.Option("--task-id", help="only this task (repeatable; each once, in the order given; with --episodes N, N episodes over them)")] = None,
    out: Annotated[Path | None, typer.Option(help="write trajectories as JSON Lines")] = None,
    noise: Annotated[float, typer.Option(help="perturbation probability per call (noisy policy)")] = 0.3,
    model: Annotated[str | None, typer.Option(help="model name (openai policy)")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")] = None,
    api_key_env: Annotated[str, typer.Option(help="environment variable holding the API key")] = "OPENAI_API_KEY",
    tool_format: Annotated[ToolFormat, typer.Option(help="openai policy: native sends the endpoint tools (tool_choice auto); prompt writes them into the system message (Hermes/Qwen <tool_call> format) for endpoints without tool support")] = ToolFormat.native,
    max_tokens: Annotated[int, typer.Option(help="openai policy: max_tokens of every request")] = 1024,
    timeout: Annotated[float, typer.Option(help="openai policy: seconds per request")] = 60.0,
    alpha: Annotated[float, typer.Option(help="reward weight of R_traj (R_state gets 1-alpha)")] = 0.5,
    gamma: Annotated[float, typer.Option(help="penalty per surplus or invalid call")] = 0.05,
    max_steps: Annotated[int, typer.Option(help="assistant actions per episode before truncation")] = 32,
    backend: Annotated[Backend | None, typer.Option(help="where sessions run (default: inprocess for trusted packages, isolated for untrusted ones)")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="run an untrusted package (provenance generated or imported) like a trusted one: in this process by default, with your environment variables, files and network")] = False,
    url: Annotated[str | None, typer.Option(help="server URL for --backend url")] = None,
    token: Annotated[str | None, typer.Option(help="bearer token of the --backend url server (default $ENVFACTORY_TOKEN; visible in `ps` when given here)")] = None,
    tasks_files: Annotated[list[Path] | None, typer.Option("--tasks", help=TASKS_HELP)] = None,
) -> None:
    """Run a policy through episodes and print a per-episode reward table and a summary.

    With --task-id ID (repeatable) only those tasks run.  With --tasks FILE the episodes play the tasks of the files that are the environment's (a task
    without env is its) instead of its own tasks.jsonl.  An episode whose policy fails (an endpoint's
    failed request) is kept, marked with its error; the run goes on (it stops after 3 such episodes in a
    row), writes --out, then exits 2."""
    from gym_envfactory.envs.env import EnvFactoryEnv
    from gym_envfactory.rollout.policies import make_policy
    from gym_envfactory.rollout.runner import (
        episode_task_ids,
        run_episode,
        write_trajectories,
    )

    if episodes is not None and episodes < 1:
        err_console.print(f"--episodes must be >= 1 (got {episodes}); leave it out to run every task once",
                          style="red", markup=False, highlight=False)
        raise typer.Exit(2)
    if token and _from_command_line(ctx, "token"):
        err_console.print("warning: a --token on the command line is visible to every user in `ps`; "
                          "prefer $ENVFACTORY_TOKEN", style="yellow", markup=False)
    given = read_tasks_option(tasks_files, env_id) if tasks_files else None
    if env_id is None:
        if given is None or len(given) != 1:
            many = f": the tasks are of {', '.join(given)}; name one" if given else ""
            err_console.print(f"give an environment (gym id or name){many}", style="red", markup=False,
                              highlight=False)
            raise typer.Exit(2)
        env_id = next(iter(given))
    spec = _load(env_id)
    if given is not None:
        note = left_out_note(given, [spec.name])
        if note:
            err_console.print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)
    try:
        pol = make_policy(policy.value, seed=seed, noise=noise, model=model, base_url=base_url, api_key_env=api_key_env,
                          tool_format=tool_format.value, max_tokens=max_tokens, timeout=timeout)
        env = EnvFactoryEnv(spec, tasks=None if given is None else tasks_for(given, spec.name),
                            reward={"alpha": alpha, "gamma": gamma}, max_steps=max_steps,
                            backend=None if backend is None else backend.value, url=url, token=token, trust=trust)
    except ValueError as exc:
        hint = " (--noise)" if "p must be" in str(exc) else ""
        raise typer.BadParameter(f"{exc}{hint}") from None
    except EnvFactoryError as exc:
        text = str(exc).replace("url='http://host:port'", "--url http://host:port")
        err_console.print(f"backend {backend.value if backend else 'default'}: {text}", style="red", markup=False,
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    try:
        ids = episode_task_ids(env, episodes, seed, split, task_ids)
    except EnvFactoryError as exc:
        env.close()
        err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if not ids:
        env.close()
        where = " in the --tasks files" if given is not None else ""
        err_console.print(f"{spec.name} has no tasks{where}{' in split ' + split if split else ''}", style="red",
                          markup=False, highlight=False)
        raise typer.Exit(1)
    results = []
    code = 0
    in_a_row = 0
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        bar = progress.add_task(escape(f"{spec.name} · {pol.name} · {env.backend.name}"), total=len(ids))
        for i, tid in enumerate(ids):
            try:
                r = run_episode(env, pol, task_id=tid, seed=seed + i, keep_policy_errors=True)
            except EnvFactoryError as exc:  # the backend failed: the episodes so far are still reported
                err_console.print(f"{tid}: {exc}", style="red", markup=False, highlight=False)
                code = 1
                break
            except Exception as exc:  # noqa: BLE001 - a defect anywhere still leaves the finished episodes written
                err_console.print(f"{tid}: unexpected {type(exc).__name__}: {exc}", style="red", markup=False,
                                  highlight=False)
                code = 1
                break
            results.append(r)
            progress.advance(bar)
            if r.error is None:
                in_a_row = 0
                continue
            code = code or 2
            in_a_row += 1
            err_console.print(f"policy failed on {tid}: {r.error}", style="red", markup=False, highlight=False)
            if in_a_row >= MAX_CONSECUTIVE_POLICY_FAILURES and i + 1 < len(ids):
                err_console.print(f"stopping: {in_a_row} episodes in a row failed on the policy; "
                                  f"{len(ids) - i - 1} not run", style="red", markup=False, highlight=False)
                break
    env.close()
    if results:
        _print_results(spec.gym_id, pol.name, results)
    if out:
        n = write_trajectories(out, results)
        failed = sum(r.error is not None for r in results)
        console.print(f"wrote {n} trajectories to {out}" + (f" ({failed} failed, marked with an error)" if failed else ""),
                      markup=False, highlight=False)
    if code:
        raise typer.Exit(code)


def _from_command_line(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


def read_token_file(path: Path) -> str:
    """The bearer token held in ``path`` (its first line, surrounding whitespace stripped).

    Raises:
        typer.BadParameter: the file cannot be read or holds no token.
    """
    from gym_envfactory.protocol import read_token_file as read

    try:
        return read(path)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command("serve")
def serve_cmd(
    ctx: typer.Context,
    envs: Annotated[list[str] | None, typer.Argument(help="environments to serve (default: --all)")] = None,
    all_: Annotated[bool, typer.Option("--all", help="serve every catalog environment")] = False,
    host: Annotated[str, typer.Option(help="bind address; beyond loopback a token is required")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 = any free port)")] = 8765,
    token: Annotated[str | None, typer.Option(envvar="ENVFACTORY_TOKEN", help="bearer token for every route but /healthz (visible in `ps` when given here: prefer --token-file or $ENVFACTORY_TOKEN)")] = None,
    token_file: Annotated[Path | None, typer.Option(envvar="ENVFACTORY_TOKEN_FILE", help="read the bearer token from this file (first line; keep it mode 0600)")] = None,
    ttl: Annotated[float, typer.Option(help="idle seconds before a session expires")] = 900.0,
    max_sessions: Annotated[int, typer.Option(help="most live sessions")] = 10_000,
    max_sessions_per_client: Annotated[int | None, typer.Option(min=1, help="most live sessions one client (X-Envfactory-Client) may hold (default: half of --max-sessions)")] = None,
    max_mcp_sessions_per_client: Annotated[int | None, typer.Option(min=1, help="most MCP transport sessions (Mcp-Session-Id) one client may hold (default: --max-sessions-per-client)")] = None,
    close_on_disconnect: Annotated[bool, typer.Option(help="close the sessions a WebSocket connection created when it drops (a connection may ask either way: ?close_on_disconnect=1|0)")] = False,
    memory_budget: Annotated[str | None, typer.Option(envvar="ENVFACTORY_MEMORY_BUDGET", help="memory budget: 512M, 2G or 50% (of physical memory); caps the container's cgroup limit, which is the default (else 60% of physical memory); creates, forks, restores, read frames, calls and scores that would not fit are refused (-32006)")] = None,
    announce: Annotated[bool, typer.Option(help="print the bound URL as one JSON line on stdout")] = False,
    announce_fd: Annotated[int | None, typer.Option("--announce-fd", help="write that JSON line to this inherited file descriptor (3 or more; a pipe the parent reads), then close it: what an environment module prints on stdout cannot garble it")] = None,
    transport: Annotated[str, typer.Option(help="http (every route below) or stdio (MCP for one environment over stdin/stdout)")] = "http",
    uds: Annotated[Path | None, typer.Option(help="listen on this Unix domain socket path instead of --host/--port (mode 0600)")] = None,
    module: Annotated[list[str] | None, typer.Option("--module", help="import this module (name, or a .py file) first and serve the environments it defines with define_environment (default: all of them when no names are given); repeatable")] = None,
) -> None:
    """Serve environments: MCP on /mcp/<Env> (and /mcp with one environment), fast session protocol
    on /v1/ws, control plane on /v1/rpc, /healthz, /readyz, /metrics.  With --transport stdio: one
    environment as an MCP server over stdin/stdout (one client, one session; logs on stderr)."""
    try:
        import starlette  # noqa: F401 - imported when serving starts; checked here for a one-line error
        import uvicorn  # noqa: F401

        from gym_envfactory.errors import InsecureBindError
        from gym_envfactory.server import serve
    except ImportError as exc:
        err_console.print(f"envfactory serve needs the 'server' extra (pip install -e '.[server]'): {exc}", style="red",
                          markup=False, highlight=False)  # markup would eat '[server]'
        raise typer.Exit(2) from None

    if announce_fd is not None:  # checked before any module is imported (and cannot hand the pipe on)
        if announce_fd < 3:
            raise typer.BadParameter(f"--announce-fd must be 3 or more (use --announce for stdout), not {announce_fd}")
        try:
            os.fstat(announce_fd)
            os.set_inheritable(announce_fd, False)
        except OSError:
            raise typer.BadParameter(f"--announce-fd {announce_fd} is not an open file descriptor") from None
    defined: list[str] = []
    for m in module or []:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the announcement (and stdio MCP) only
                found = import_environment_module(m)
        except EnvFactoryError as exc:
            err_console.print(str(exc), style="red", markup=False, highlight=False)
            raise typer.Exit(1) from None
        if not found:
            err_console.print(f"{m} defines no environment (define_environment)", style="red", markup=False,
                              highlight=False)
            raise typer.Exit(1)
        defined += found
    if defined and not envs and not all_:
        envs = defined
    if token_file is not None:
        if token and _from_command_line(ctx, "token"):
            raise typer.BadParameter("give --token or --token-file, not both")
        token = read_token_file(token_file)
    elif token and _from_command_line(ctx, "token"):
        err_console.print("warning: a --token on the command line is visible to every user in `ps`; "
                          "use --token-file PATH or $ENVFACTORY_TOKEN", style="yellow", markup=False)
    if transport not in ("http", "stdio"):
        raise typer.BadParameter(f"--transport must be http or stdio, not {transport!r}")
    if transport == "stdio":
        if all_ or not envs or len(envs) != 1:
            err_console.print("[red]--transport stdio serves exactly one environment: envfactory serve <Env> --transport stdio[/red]")
            raise typer.Exit(2)
        from gym_envfactory.server.mcp_server import run_stdio

        spec = _load(envs[0])
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout carries only MCP frames
        run_stdio(spec.name)
        return
    given = [_load(e).name for e in envs or []]  # an unknown name is one line, even beside --all
    names = None if (all_ or not given) else given
    try:
        serve(names, host=host, port=port, token=token, ttl_s=ttl, max_sessions=max_sessions,
              max_sessions_per_client=max_sessions_per_client, close_on_disconnect=close_on_disconnect, announce=announce,
              announce_fd=announce_fd, memory_budget=memory_budget, uds=None if uds is None else str(uds),
              max_mcp_sessions_per_client=max_mcp_sessions_per_client)
    except InsecureBindError as exc:
        err_console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(2) from None
    except EnvFactoryError as exc:
        err_console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from None
    except OSError as exc:
        err_console.print(f"cannot listen on {host}:{port}: {exc}; pick another --port", style="red", markup=False,
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


@app.command("client-key")
def client_key_cmd(
    ctx: typer.Context,
    client: Annotated[str, typer.Argument(help="the client name (X-Envfactory-Client; a trainer's $ENVFACTORY_CLIENT)")],
    token: Annotated[str | None, typer.Option(envvar="ENVFACTORY_TOKEN", help="the server's bearer token (visible in `ps` when given here: prefer --token-file or $ENVFACTORY_TOKEN)")] = None,
    token_file: Annotated[Path | None, typer.Option(envvar="ENVFACTORY_TOKEN_FILE", help="read the server's bearer token from this file")] = None,
) -> None:
    """Print CLIENT's credential on a server with this token: HMAC-SHA256 of the token over the name
    (docs/architecture.md, "Backends").  Give it to that client as its token (with $ENVFACTORY_CLIENT set
    to CLIENT): the server lets it in as CLIENT and no other client, and it cannot make another's."""
    from gym_envfactory.protocol import CLIENT_ID_RULE, client_key, is_valid_client_id

    if token_file is not None:
        if token and _from_command_line(ctx, "token"):
            raise typer.BadParameter("give --token or --token-file, not both")
        token = read_token_file(token_file)
    if not token:
        raise typer.BadParameter("give the server's token: --token-file PATH or $ENVFACTORY_TOKEN")
    if not is_valid_client_id(client):
        raise typer.BadParameter(f"the client name must be {CLIENT_ID_RULE}")
    print(client_key(token, client))


def _print_results(gym_id: str, policy: str, results: list[EpisodeResult]) -> None:
    table = Table(title=f"{gym_id} · policy={policy} · {len(results)} episodes")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("task", "left"), ("turns", "right"), ("steps", "right"), ("matched/gt", "right"), ("R_traj", "right"),
        ("R_state", "right"), ("P_len", "right"), ("reward", "right"), ("why", "left"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for r in results:
        if r.error is not None:
            table.add_row(escape(r.task_id), "-", str(r.steps), "-", "-", "-", "-", "[red]failed[/red]",
                          escape(f"policy error: {r.error}"[:300]))
            continue
        c = r.components
        why = list(r.perturbations)
        if c.get("missed"):
            why.append("missed " + ", ".join(c["missed"]))
        if c.get("state_diff"):
            d = c["state_diff"][0]
            more = f" (+{len(c['state_diff']) - 1} more)" if len(c["state_diff"]) > 1 else ""
            why.append(f"state {d['path']}: want {d['expected']} got {d['actual']}{more}")
        if c.get("invalid"):
            why.append(f"{c['invalid']} invalid call(s)")
        if c.get("surplus"):
            why.append(f"{c['surplus']} surplus call(s)")
        if r.truncated:
            why.append("truncated")
        style = "green" if r.reward >= 0.999 else ("yellow" if r.reward >= 0.5 else "red")
        table.add_row(escape(r.task_id), str(len(c.get("turns", []))), str(r.steps), f"{c.get('matched', 0)}/{c.get('n_ground_truth', 0)}",
                      _fmt(c.get("r_traj")), _fmt(c.get("r_state")), str(c.get("p_len", 0)),
                      f"[{style}]{r.reward:.2f}[/{style}]", escape("; ".join(why)))
    console.print(table)
    scored = [r for r in results if r.error is None]
    rewards = [r.reward for r in scored]

    def mean(key: str) -> str:
        vals = [float(r.components[key]) for r in scored if r.components.get(key) is not None]
        return f"{statistics.fmean(vals):.3f}" if vals else "vacuous"

    summary = Table(title="summary", show_header=True)
    heads = ["episodes", "mean reward", "reward = 1.0", "mean R_traj", "mean R_state", "mean P_len", "mean penalty", "truncated"]
    failed = len(results) - len(scored)
    for col in heads + (["failed"] if failed else []):
        summary.add_column(col, justify="right")
    row = [str(len(results)), f"{statistics.fmean(rewards):.3f}" if rewards else "-",
           f"{sum(x >= 0.999 for x in rewards)}/{len(rewards)}", mean("r_traj"), mean("r_state"),
           mean("p_len"), mean("penalty"), str(sum(r.truncated for r in scored))]
    summary.add_row(*row, *([f"[red]{failed}[/red]"] if failed else []))
    console.print(summary)


def _load(env_name: str) -> EnvironmentSpec:
    try:
        return get_environment(env_name)
    except EnvFactoryError as exc:
        err_console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _register_subcommands() -> None:
    """``envfactory image ...`` and ``envfactory catalog ...`` (Docker; typer/rich only at import), then
    the commands optional parts contribute through the ``envfactory.cli`` entry-point group
    (``gen``, ``import`` from the generators): the runtime never imports them by name (docs/architecture.md, "Layers")."""
    from importlib.metadata import entry_points

    from gym_envfactory.cli import taskimport  # noqa: F401  (adds `tasks import` to tasks_app)
    from gym_envfactory.cli.images import catalog_app, image_app
    from gym_envfactory.cli.tasks import tasks_app

    app.add_typer(image_app, name="image")
    app.add_typer(catalog_app, name="catalog")
    app.add_typer(tasks_app, name="tasks")
    for ep in entry_points(group="envfactory.cli"):
        try:
            obj = ep.load()
        except ImportError as exc:
            _missing_extra(ep.name, exc)
            continue
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=ep.name)
        else:
            app.command(ep.name)(obj)


def _missing_extra(name: str, exc: ImportError) -> None:
    def stub() -> None:
        extra = {"gen": "gen", "import": "gen", "export": "export"}.get(name, name)
        err_console.print(f"envfactory {name} needs the '{extra}' extra (pip install -e '.[{extra}]'): {exc}", style="red",
                          markup=False, highlight=False, soft_wrap=True)  # markup would eat '[{extra}]'
        raise typer.Exit(2)

    stub.__doc__ = f"(unavailable: install its extra) {exc}"
    app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(stub)


_register_subcommands()


#: Set in the environment of the ``envfactory serve`` that :func:`_serve_on_system_allocator` re-executed (so it
#: happens once, even where the interpreter ignores ``PYTHONMALLOC``).
ALLOCATOR_REEXEC_VAR = "ENVFACTORY_SERVE_REEXEC"


def _serve_on_system_allocator(argv: list[str]) -> None:
    """``envfactory serve`` runs on the system allocator, as the image and the subprocess backend start it: a
    long-lived server's memory returns after its sessions close (pymalloc's arenas fragment; docs/performance.md,
    "Memory returns after close").  ``PYTHONMALLOC`` acts only at interpreter start, so when it is not set the
    process re-executes itself once, same interpreter, flags and arguments, with ``PYTHONMALLOC=malloc``, before
    it reads anything (a ``--token-file``, stdin for ``--transport stdio``) or imports a ``--module``; the pid,
    open files and stdio stay the same.  A ``PYTHONMALLOC`` already set (any value: ``pymalloc`` opts out) is
    kept; nothing happens when the interpreter ignores the environment (``-E``/``-I``) or cannot exec."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "serve" or "PYTHONMALLOC" in os.environ or os.environ.get(ALLOCATOR_REEXEC_VAR) \
            or sys.flags.ignore_environment or os.name != "posix" or not sys.executable:
        return
    os.environ["PYTHONMALLOC"] = "malloc"
    os.environ[ALLOCATOR_REEXEC_VAR] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError as exc:  # serve on pymalloc rather than not at all
        del os.environ["PYTHONMALLOC"]
        logging.getLogger(__name__).warning("could not re-execute on the system allocator (%s); serving on "
                                            "pymalloc, whose memory may creep up between rounds", exc)


def main() -> None:
    """The ``envfactory`` console script: configure logging and run the Typer app (exits the process)."""
    _serve_on_system_allocator(sys.argv[1:])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
