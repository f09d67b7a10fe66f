"""Command line of the generators: ``envfactory gen env``, ``envfactory gen resume``, ``envfactory gen tasks``, ``envfactory import``.

The main CLI (:mod:`gym_envfactory.cli`) mounts :data:`gen_app` as ``gen`` and :func:`import_cmd` as
``import``.  Each command prints a report of stages, tokens and validation results (rich tables).
Exit code 0 when every environment passed validation, 1 otherwise, 2 for bad input.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_envfactory.errors import EnvFactoryError

if TYPE_CHECKING:
    from .importer.options import ImportOptions

__all__ = ["gen_app", "import_cmd", "print_results", "print_task_stats", "run_template_writer"]

log = logging.getLogger(__name__)

gen_app = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="EnvGen: synthesise, execution-validate and revise environments from tool metadata with an LLM.")
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)  # an error is one line, however narrow the terminal


def _fmt_counts(counts: dict[str, int]) -> str:
    parts = [f"{counts[s]} {s}" for s in ("high", "medium", "low") if counts.get(s)]
    return ", ".join(parts) or "-"


def print_results(results: list[Any], usage_by_stage: dict[str, dict[str, int]] | None = None) -> None:
    """Print the EnvGen report: one row per environment, token usage per stage, blocking findings."""
    table = Table(title="EnvGen")
    for col in ("environment", "status", "attempts", "scenarios", "interface", "execution", "results", "state", "written to"):
        table.add_column(col)
    for r in results:
        colour = {"passed": "green", "quarantined": "yellow"}.get(r.status, "red")
        rep = r.report
        counts = rep.counts() if rep else {}
        table.add_row(escape(r.name), f"[{colour}]{escape(r.status)}[/{colour}]", str(r.attempts),
                      f"{rep.scenarios_passed}/{len(rep.scenarios)}" if rep else "-",
                      *(_fmt_counts(counts.get(d, {})) for d in ("interface", "execution", "results", "state")),
                      escape(str(r.path or r.checkpoint)))
    console.print(table)
    stages: dict[str, dict[str, int]] = {}
    for r in results:
        for stage, u in (r.usage or {}).items():
            acc = stages.setdefault(stage, {})
            for k, v in u.items():
                acc[k] = acc.get(k, 0) + int(v)
    if usage_by_stage:  # the client's own accounting wins for this process (it also counts repairs, retries)
        for stage, u in usage_by_stage.items():
            stages.setdefault(stage, {}).update({k: int(v) for k, v in u.items()})
    if stages:
        tok = Table(title="LLM usage by stage (tokens count paid requests only)")
        keys = ("requests", "cached_hits", "prompt_tokens", "completion_tokens", "repairs", "retries")
        for col in ("stage", *keys):
            tok.add_column(col, justify="right" if col != "stage" else "left")
        for stage in sorted(stages, key=lambda s: ("code", "test", "revise").index(s) if s in ("code", "test", "revise") else 9):
            tok.add_row(stage, *(str(stages[stage].get(k, 0)) for k in keys))
        console.print(tok)
    for r in results:
        for h in r.history:
            console.print(f"  {r.name} attempt {h['attempt']}: {'passed' if h['passed'] else str(h['blocking']) + ' blocking'}"
                          f", scenarios {h.get('scenarios', '-')}", markup=False)
        if r.status == "crashed":
            console.print(f"[red]{escape(r.name)} stopped: {escape(str(r.error))}[/red]\n  resume with: envfactory gen resume "
                          f"{escape(str(r.checkpoint))}",
                          soft_wrap=True)
        elif r.report and not r.report.passed:
            blocking = r.report.blocking()
            console.print(f"[yellow]{escape(r.name)}: {len(blocking)} blocking finding(s); report "
                          f"{escape(str(r.path))}/report.json[/yellow]")
            for f in blocking[:12]:
                console.print(escape(f"    [{f.severity}] {f.dimension}/{f.check}: {f.message[:240]}"), soft_wrap=True)
        elif r.status == "passed":
            from gym_envfactory.environment.catalog import catalog_dirs

            console.print(f"[green]{escape(r.name)}: registered as {escape(r.gym_id)}[/green]")
            if r.path and not any(Path(r.path).parent.resolve() == d.resolve() for d in catalog_dirs()):
                console.print(f"  outside the catalog path: ENVFACTORY_CATALOG={Path(r.path).parent} envfactory validate --trust {r.name}",
                              markup=False)


def _progress_printer(name: str, event: str, detail: str) -> None:
    err_console.print(f"[dim]{escape(name)}[/dim] {escape(event)}: {escape(detail)}", soft_wrap=True)


#: Where ``gen env`` and ``import`` write environments by default: a folder of the user's, beside the
#: shipped catalog rather than inside it (find it with ``ENVFACTORY_CATALOG``; README, "Your own environment").
DEFAULT_OUT = Path("envfactory_envs")


def catalog_hint(out: Path) -> str | None:
    """How to make the environments written to ``out`` findable (``gym.make``, ``envfactory list``): an
    ``export ENVFACTORY_CATALOG=...`` line, or ``None`` when ``out`` is already searched."""
    from gym_envfactory.environment.catalog import catalog_dirs

    target = out.resolve()
    if any(d.resolve() == target for d in catalog_dirs()):
        return None
    return (f"to use them (gym.make, envfactory list): export ENVFACTORY_CATALOG={target}"
            + "${ENVFACTORY_CATALOG:+:$ENVFACTORY_CATALOG}")


def _print_catalog_hint(out: Path) -> None:
    hint = catalog_hint(out)
    if hint:
        console.print(hint, markup=False, highlight=False, soft_wrap=True)


def _exit(results: list[Any]) -> None:
    raise typer.Exit(0 if results and all(r.passed for r in results) else 1)


@gen_app.command("env")
def gen_env(
    metadata: Annotated[Path | None, typer.Option("--metadata", help="metadata JSON (one environment, a list, or JSON Lines)")] = None,
    openapi: Annotated[Path | None, typer.Option("--openapi", help="OpenAPI 3.x document (.json/.yaml)")] = None,
    mcp: Annotated[str | None, typer.Option("--mcp", help="a live MCP server: stdio command line or http(s) URL")] = None,
    name: Annotated[str | None, typer.Option("--name", help="environment name (CamelCase); default: the metadata class_name")] = None,
    model: Annotated[str | None, typer.Option("--model", envvar="ENVFACTORY_MODEL", help="model id (or $ENVFACTORY_MODEL)")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")] = None,
    api_key_env: Annotated[str, typer.Option("--api-key-env", help="environment variable holding the API key")] = "OPENAI_API_KEY",
    resources: Annotated[Path | None, typer.Option("--resources", help="folder of notes / API docs given to the Code Agent")] = None,
    max_revisions: Annotated[int, typer.Option("--max-revisions", help="Reviser rounds after the first attempt")] = 3,
    out: Annotated[Path, typer.Option("--out", help="output catalog folder (add it to $ENVFACTORY_CATALOG to use its environments)")] = DEFAULT_OUT,
    quarantine: Annotated[Path, typer.Option("--quarantine", help="folder for environments that never pass")] = Path("build/quarantine"),
    checkpoint_dir: Annotated[Path, typer.Option("--checkpoint-dir", help="checkpoints and the LLM cache")] = Path("build/envgen"),
    concurrency: Annotated[int, typer.Option("--concurrency", help="LLM requests in flight at once")] = 4,
    domain: Annotated[str | None, typer.Option("--domain", help="force the domain of the generated environments")] = None,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    inline: Annotated[bool, typer.Option("--inline", help="validate in this process (default: a child process per validation)")] = False,
) -> None:
    """Generate environments from tool metadata, an OpenAPI document or a live MCP server; validate them
    by execution, revise, and write the ones that pass to the catalog."""
    need_extras("gen env", "gen")
    from gym_envfactory.llm.client import LLMConfig

    from . import inputs
    from .envgen import EnvGen, EnvGenJob, EnvGenOptions

    if sum(x is not None for x in (metadata, openapi, mcp)) != 1:
        raise typer.BadParameter("give exactly one of --metadata, --openapi, --mcp")
    if not model:
        raise typer.BadParameter("give --model (or set ENVFACTORY_MODEL)")
    try:
        if metadata is not None:
            metas, source = inputs.load_metadata_all(metadata), f"metadata:{metadata}"
        elif openapi is not None:
            metas, source = [inputs.openapi_to_metadata(openapi)], f"openapi:{openapi}"
        else:
            metas, source = [asyncio.run(inputs.mcp_to_metadata(mcp))], f"mcp:{mcp}"  # type: ignore[arg-type]
        res_text = inputs.load_resources(resources) if resources is not None else None
    except (ValueError, RuntimeError, OSError) as exc:
        err_console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    if name and len(metas) != 1:
        raise typer.BadParameter(f"--name needs exactly one environment; the input holds {len(metas)}")
    try:
        jobs = [EnvGenJob(metadata=m.to_dict() if isinstance(m, inputs.EnvMetadata) else m, name=name, source=source,
                          resources=res_text) for m in metas]
        options = EnvGenOptions(out_dir=out, quarantine_dir=quarantine, checkpoint_dir=checkpoint_dir,
                                max_revisions=max_revisions, domain=domain, isolation="inline" if inline else "process",
                                on_event=_progress_printer)
        config = LLMConfig(model=model, base_url=base_url, api_key_env=api_key_env, temperature=temperature, seed=seed,
                           max_concurrency=concurrency, cache_dir=options.checkpoint_dir / "cache")
        gen = EnvGen(config, options)
        results = asyncio.run(gen.generate_many(jobs))
    except (EnvFactoryError, ValueError) as exc:
        err_console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    print_results(results, gen.client.usage_by_stage)
    if any(r.passed for r in results):
        _print_catalog_hint(out)
    _exit(results)


@gen_app.command("resume")
def gen_resume(
    checkpoint: Annotated[Path, typer.Argument(help="a checkpoint file (<checkpoint-dir>/<Name>.json) or a checkpoint folder (every unfinished run)")],
    base_url: Annotated[str | None, typer.Option("--base-url", help="override the stored endpoint")] = None,
    model: Annotated[str | None, typer.Option("--model", help="override the stored model (its cached answers then do not apply)")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env")] = None,
) -> None:
    """Continue runs from their checkpoints; answered LLM requests replay from the cache."""
    need_extras("gen resume", "gen")
    import json

    from .envgen import resume_checkpoint

    if checkpoint.is_dir():
        files = []
        for p in sorted(checkpoint.glob("*.json")):
            try:
                data = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("format", "").startswith("envgen-checkpoint") \
                    and data.get("status") not in ("passed", "quarantined"):
                files.append(p)
    else:
        files = [checkpoint]
    if not files:
        err_console.print(f"[yellow]nothing to resume in {escape(str(checkpoint))}[/yellow]")
        raise typer.Exit(0)
    overrides = {k: v for k, v in (("base_url", base_url), ("model", model), ("api_key_env", api_key_env)) if v}

    async def _all() -> list[Any]:
        return list(await asyncio.gather(*(resume_checkpoint(f, llm_overrides=overrides, on_event=_progress_printer)
                                           for f in files)))

    try:
        results = asyncio.run(_all())
    except (EnvFactoryError, ValueError, OSError) as exc:
        err_console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    print_results(results)
    _exit(results)


def import_cmd(
    file: Annotated[Path, typer.Argument(help="a single-file tool server (FastMCP wrappers over an API class), or a folder "
                                         "of them (each *.py imported; a summary table at the end)")],
    name: Annotated[str | None, typer.Option("--name", help="environment name (CamelCase; one file only)")] = None,
    out: Annotated[Path, typer.Option("--out", help="output catalog folder (add it to $ENVFACTORY_CATALOG to use its environments)")] = DEFAULT_OUT,
    domain: Annotated[str | None, typer.Option("--domain", help="environment domain")] = None,
    initial_state: Annotated[Path | None, typer.Option("--initial-state", help="scenario JSON used as the small initial state "
                                                       "(for a folder: a folder of <server stem>.json files; default "
                                                       "<stem>.json or <stem>_scenario.json beside each server)")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="tasks.jsonl to copy in (one file only)")] = None,
    scenarios: Annotated[Path | None, typer.Option("--scenarios", help="scenarios.jsonl to copy in (one file only)")] = None,
    api_class: Annotated[str | None, typer.Option("--api-class", help="the API class, when the file has several with "
                                                  "load_scenario/save_scenario")] = None,
    state_model: Annotated[str | None, typer.Option("--state-model", help="the root scenario model, when the scenario data "
                                                    "and the load_scenario/save_scenario annotations do not decide")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace a previous import of the same name in --out "
                                            "(never a shipped or hand-written package)")] = False,
    validate: Annotated[bool, typer.Option("--validate/--no-validate", help="run the validation scenarios afterwards")] = True,
    sandbox: Annotated[str, typer.Option("--sandbox", help="where the file's code runs while it is imported: auto (docker "
                                         "when the runtime image is there, else process), docker, process, inline "
                                         "(this process: trusted files only)")] = "auto",
    class_name: Annotated[str | None, typer.Option("--class", help="import the plain Python class NAME of FILE (public "
                                                   "attributes are the state, typed public methods the tools; the "
                                                   "file runs in this process)")] = None,
    lenient_types: Annotated[bool, typer.Option("--lenient-types", help="with --class: the class's annotations are "
                                                "advisory (state types from the loaded values, results checked only "
                                                "as JSON); default strict")] = False,
    map_file: Annotated[Path | None, typer.Option("--map", help="with a folder: a TOML or JSON file of per-file options "
                                                  "([files.\"x.py\"] name, domain, initial_state, state_model, "
                                                  "api_class, class, tasks, scenarios, skip); docs/authoring.md")] = None,
) -> None:
    """Import existing single-file tool servers into the catalog without editing them.

    FILE is one server or a folder of servers (each imported on its own; the others are still written
    when one is refused, and the exit code is 1 if any was).  The file's code runs only in the
    sandbox (``--sandbox``); this process never loads it."""
    if class_name is not None:  # issue 12 part 4: a plain class (gym_envfactory.generators.importer.python_class)
        from .importer.python_class import import_class_package

        if sandbox not in ("auto", "inline"):
            err_console.print(f"[red]--class runs FILE in this process (no sandbox yet): --sandbox {escape(sandbox)} "
                              f"cannot apply; import trusted files only[/red]", soft_wrap=True)
            raise typer.Exit(2)

        try:
            folder = import_class_package(file, class_name, name=name, out_dir=out, domain=domain,
                                          initial_state=initial_state, tasks=tasks, scenarios=scenarios,
                                          validate=validate, overwrite=overwrite, lenient_types=lenient_types)
        except (EnvFactoryError, ValueError, OSError) as exc:
            err_console.print(f"[red]import failed: {escape(str(exc))}[/red]", soft_wrap=True)
            raise typer.Exit(1) from None
        console.print(f"imported class {class_name} of {file.name} as {folder}", markup=False, soft_wrap=True)
        _print_catalog_hint(out)
        return
    from .importer.options import (
        AnalysisHints,
        CheckOptions,
        ImportData,
        ImportOptions,
        ManifestOptions,
        OutputOptions,
        SandboxOptions,
    )

    options = ImportOptions(manifest=ManifestOptions(name=name, domain=domain),  # None: inferred (generators.domains)
                            analysis=AnalysisHints(state_model=state_model, api_class=api_class),
                            checks=CheckOptions(validate=validate), sandbox=SandboxOptions(sandbox=sandbox),
                            output=OutputOptions(out_dir=out, overwrite=overwrite))
    if lenient_types:
        _fail_line("--lenient-types applies to plain classes: import FILE --class NAME --lenient-types (or "
                   "lenient_types = true in a --map table with class = ...)")
    if map_file is not None and not file.is_dir():
        _fail_line("--map gives per-file options for a folder: envfactory import DIR --map FILE")
    if file.is_dir():
        from .importer.folder import import_folder
        from .importer.mapfile import load_import_map

        if name or tasks or scenarios:
            _fail_line("--name, --tasks and --scenarios apply to one file; for a folder give them per file in a "
                       "--map file (name, domain, initial_state, state_model, class, tasks)")
        try:
            import_map = load_import_map(map_file, file) if map_file is not None else None
        except EnvFactoryError as exc:
            _fail_line(f"--map: {exc}")
        rows = import_folder(file, options, import_map, initial_state=initial_state,
                             on_file=lambda src: err_console.print(f"[dim]importing {escape(src.name)}[/dim]", soft_wrap=True))
        if not any(not r.get("skipped") for r in rows):
            err_console.print(f"[red]import failed: no *.py server files in {escape(str(file))}[/red]", soft_wrap=True)
            raise typer.Exit(1)
        _print_import_table(f"imported {file} ({len(rows)} files)", rows)
        _print_catalog_hint(out)
        done_rows = [r for r in rows if not r.get("skipped")]
        failed = sum(r["error"] is not None for r in done_rows)
        skipped = len(rows) - len(done_rows)
        console.print(f"{len(done_rows) - failed} of {len(done_rows)} imported"
                      + (" and validated" if validate else " (not validated)") + (f"; {failed} refused" if failed else "")
                      + (f"; {skipped} skipped by the map" if skipped else ""))
        raise typer.Exit(1 if failed else 0)
    row = _import_one(file, dataclasses.replace(options, data=ImportData(
        initial_state=_scenario_for(file, initial_state), tasks=tasks, scenarios=scenarios)))
    if row["error"] is not None:
        err_console.print(f"[red]import failed: {escape(row['error'])}[/red]", soft_wrap=True)
        raise typer.Exit(1)
    done = row["done"]
    _print_import_table(f"imported {file.name} ({done.sandbox} sandbox)", [row])
    if not (done.path / "tasks.jsonl").is_file():
        console.print(f"{done.name} has no tasks: its tools run in a Session, but gym.make(...).reset() needs tasks; "
                      f"import again with --tasks tasks.jsonl --overwrite", style="yellow", markup=False, soft_wrap=True)
    _print_catalog_hint(out)
    report = done.validation
    if not validate or report is None:
        raise typer.Exit(0)
    # the importer's policy: failing scenarios, tasks or lint are fatal (refused above); coverage gaps are warnings
    ok = report["scenarios_passed"] == report["scenarios"] and not report["task_failures"] and not report["lint_failures"]
    status = "[green]✓[/green]" if ok else "[red]✗[/red]"
    console.print(f"{status} {escape(done.name)}: scenarios {report['scenarios_passed']}/{report['scenarios']} passed, "
                  f"tools covered {report['tools_covered']}/{report['tools']}, "
                  f"tasks replayed {report['tasks'] - report['task_failures']}/{report['tasks']}")
    for f in report["failures"]:
        colour = "yellow" if f in report["coverage_failures"] else "red"
        console.print(f"    [{colour}]{escape(f)}[/{colour}]", soft_wrap=True)
    if report["coverage_failures"]:
        console.print("  coverage gaps: add scenarios (envfactory import ... --scenarios FILE) so every tool's success "
                      "and error paths run")
    raise typer.Exit(0 if ok else 1)


def _scenario_for(src: Path, given: Path | None) -> Path | None:
    from .importer.folder import scenario_for

    return scenario_for(src, given)


def _import_one(src: Path, options: ImportOptions) -> dict[str, Any]:
    from .importer.folder import import_one

    return import_one(src, options)


def _print_import_table(title: str, rows: list[dict[str, Any]]) -> None:
    """The import summary: file, environment, tools, reads/writes, result (imported + validated, or the
    refusal with file:line and reason), and notes (no-op writes the probe observed, tools read-only after it)."""
    table = Table(title=escape(title))
    for col in ("file", "environment", "tools", "reads/writes", "result", "notes"):
        table.add_column(col, overflow="fold")
    for r in rows:
        done = r["done"]
        if r.get("skipped"):
            table.add_row(escape(r["file"].name), "-", "-", "-", "[dim]skipped (--map)[/dim]", "")
            continue
        if done is None:
            table.add_row(escape(r["file"].name), "-", "-", "-", f"[red]refused: {escape(r['error'])}[/red]", "")
            continue
        writes = sum(not ro for ro in done.tools.values())
        if r["error"] is not None:
            result = f"[red]{escape(r['error'])}[/red]"
        elif done.validation is not None:
            v = done.validation
            result = f"[green]imported + validated[/green] (scenarios {v['scenarios_passed']}/{v['scenarios']})"
        elif r.get("class"):
            result = ("[green]imported + validated[/green]" if r.get("validated") else "[yellow]imported (not validated)"
                      "[/yellow]") + f" (class {escape(r['class'])})"
        else:
            result = "[yellow]imported (not validated)[/yellow]"
        notes = []
        if done.noop_writes:
            notes.append("no-op writes observed: " + ", ".join(done.noop_writes))
        if done.reclassified:
            notes.append("read-only (probe saw no change): " + ", ".join(done.reclassified))
        if done.validation is not None and done.validation.get("coverage_failures"):  # warnings, as in validate
            notes.append("warnings: " + "; ".join(done.validation["coverage_failures"]))
        table.add_row(escape(r["file"].name), escape(done.name), str(len(done.tools)), f"{len(done.tools) - writes}/{writes}", result,
                      escape("; ".join(notes)))
    console.print(table)


# ------------------------------------------------------------------------------------------ gen tasks
def print_task_stats(stats: dict[str, Any]) -> None:
    """Print QueryGen's statistics (``querygen.task_statistics``) as rich tables: tasks, turns per
    task, steps per turn, calls, clarification share, state fallbacks, drop reasons, LLM usage."""
    writer = f" ({stats['writer']} writer, {stats.get('style', '')}-style)" if stats.get("writer") else ""
    table = Table(title=f"QueryGen{writer}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    rows = [("chains", stats["chains"]), ("tasks written", stats["tasks"]),
            ("turns per task (mean)", stats["turns_per_task"]["mean"]),
            ("steps per turn (mean)", stats["steps_per_turn"]["mean"]),
            ("calls (total)", stats["calls"]["total"]), ("calls per task", stats["calls"]["per_task"]),
            ("clarification share (tasks)", stats["clarification_share"]),
            ("clarification share (turns)", stats["clarification_turn_share"]),
            ("resumed chains", stats.get("resumed_chains", 0))]
    rows += [(f"state: {k}", v) for k, v in stats.get("state", {}).items()]
    drops = sorted(stats.get("drop_reasons", {}).items(), key=lambda kv: -kv[1])
    if len(drops) > 12:  # many environments (--all): the most frequent; every reason is in the statistics JSON
        drops = drops[:11] + [(f"{len(drops) - 11} other reasons (see {stats.get('stats_path', 'the statistics')})",
                               sum(v for _, v in drops[11:]))]
    rows += [(f"dropped: {k}", v) for k, v in drops]
    rows += [(f"note: {k}", v) for k, v in stats.get("notes", {}).items()]
    for name, value in rows:
        table.add_row(escape(str(name)), str(value))
    console.print(table)
    usage = stats.get("llm_usage") or {}
    if usage:
        tok = Table(title="LLM usage by stage (tokens count paid requests only)")
        keys = ("requests", "cached_hits", "prompt_tokens", "completion_tokens", "repairs", "retries")
        for col in ("stage", *keys):
            tok.add_column(col, justify="right" if col != "stage" else "left")
        for stage in sorted(usage):
            tok.add_row(stage, *(str(usage[stage].get(k, 0)) for k in keys))
        console.print(tok)


def _fail_line(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[red]{escape(message)}[/red]", soft_wrap=True)
    raise typer.Exit(code)


#: A module of each extra a ``gen`` command needs: the LLM client's (``gen``) and the tool graph's (``synthesis``).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {"gen": ("openai", "tenacity", "jsonschema"), "synthesis": ("networkx",)}


def need_extras(command: str, *extras: str) -> None:
    """Exit (code 2) with one line naming the extras ``command`` needs and how to install them when a
    module of one of ``extras`` (keys of :data:`EXTRA_MODULES`) is missing, instead of a traceback."""
    import importlib

    missing: list[str] = []
    why: list[str] = []
    for extra in extras:
        for module in EXTRA_MODULES[extra]:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                missing.append(extra)
                why.append(str(exc))
                break
    if missing:
        names = " and ".join(f"'{e}'" for e in missing) + (" extras" if len(missing) > 1 else " extra")
        spec = ",".join(missing)
        _fail_line(f"envfactory {command} needs the {names}: pip install 'gym-envfactory[{spec}]' (in a checkout: "
                   f"pip install -e '.[{spec}]'); {'; '.join(why)}")


def endpoint_failure_line(outcomes: list[Any], base_url: str | None) -> str | None:
    """One line for the chains QueryGen dropped because the LLM endpoint failed (``llm_request_failed``):
    how many, the endpoint and the first error (the client's message names the cause); ``None`` when none was."""
    failed = [o for o in outcomes if getattr(o, "reason", None) == "llm_request_failed"]
    if not failed:
        return None
    detail = failed[0].detail
    where = "" if base_url and base_url in detail else f" ({base_url or 'the openai default endpoint'})"
    return f"{len(failed)} of {len(outcomes)} chain(s) dropped, the LLM endpoint failed{where}: {detail}"


@gen_app.command("tasks")
def gen_tasks(
    envs: Annotated[list[str] | None, typer.Argument(help="environment names or gym ids")] = None,
    all_envs: Annotated[bool, typer.Option("--all", help="every environment of the catalog")] = False,
    writer: Annotated[str, typer.Option("--writer", help="llm: QueryGen's LLM stages and pass@k solving (needs "
                                        "--model); template: instruction-style tasks from the executed chains, no "
                                        "LLM, --n tasks per environment, each scored 1.0 by the oracle")] = "llm",
    preset: Annotated[str, typer.Option("--preset", help="sft-conv | sft-non-conv | rl-non-conv")] = "sft-conv",
    n: Annotated[int, typer.Option("--n", min=1, help="solvable chains to sample (each becomes at most one task); "
                                   "with --writer template: tasks per environment")] = 20,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="chain checks at most (per environment with "
                                               "--writer template); default 10 n + 50")] = None,
    model: Annotated[str | None, typer.Option("--model", envvar="ENVFACTORY_MODEL", help="model id (or $ENVFACTORY_MODEL)")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible base URL")] = None,
    api_key_env: Annotated[str, typer.Option("--api-key-env", help="environment variable holding the API key")] = "OPENAI_API_KEY",
    out: Annotated[Path, typer.Option("--out", help="tasks JSONL to write (next to it: <stem>.stats.json and the "
                                                    "verified trajectories, <stem>.trajectories.jsonl)")] = Path("tasks.jsonl"),
    k: Annotated[int, typer.Option("--k", min=1, help="pass@k solving attempts per task")] = 4,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    graph: Annotated[Path | None, typer.Option("--graph", help="tool graph JSON (default: built from ENV...)")] = None,
    chains_file: Annotated[Path | None, typer.Option("--chains", help="chains JSONL from `envfactory graph sample` "
                                                                      "to use instead of sampling (those over ENV...; "
                                                                      "the first --n)")] = None,
    checkpoint_dir: Annotated[Path, typer.Option("--checkpoint-dir", help="per-chain checkpoints, the LLM cache and the embedding cache")] = Path("build/querygen"),
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="chains in flight at once")] = 2,
    structured_output: Annotated[str, typer.Option(
        "--structured-output",
        help="send each stage's JSON schema as response_format: none, json_schema (vLLM, SGLang, hosted APIs) "
             "or json_object (llama-cpp-python's server)")] = "none",
    trust: Annotated[bool, typer.Option("--trust", help="generate tasks for untrusted packages too (provenance "
                                        "generated or imported): their code then runs in this process, with your "
                                        "environment variables, files and network")] = False,
) -> None:
    """QueryGen (arXiv 2605.18703 §3.4): sample tool chains and turn them into verified multi-turn tasks
    (scenario, initial state, turns, refinement, pass@k solving); writes tasks.jsonl, their verified
    trajectories and statistics.  Chains and solving run the environments' code in this process, so an
    untrusted package (written by EnvGen or the importer) is refused unless --trust."""
    from gym_envfactory.environment.catalog import get_environment, list_environments, strip_gym_id

    if writer not in ("llm", "template"):
        _fail_line(f"--writer must be llm or template, not {writer!r}")
    if all_envs == bool(envs):
        _fail_line("give environment names or --all (not both)")
    if writer == "template":
        need_extras("gen tasks --writer template", "synthesis")
        from .tasks.solvable import require_trusted

        try:
            names = [get_environment(strip_gym_id(e)).name for e in (list_environments() if all_envs else envs or [])]
            require_trusted(names, trust=trust, doing="gen tasks --writer template")
        except EnvFactoryError as exc:
            _fail_line(str(exc))
        raise typer.Exit(run_template_writer(names, n=n, seed=seed, budget=budget, out=out, graph=graph,
                                             checkpoint_dir=checkpoint_dir))
    need_extras("gen tasks", "gen", "synthesis")
    from rich.progress import Progress

    from gym_envfactory.llm.client import LLMConfig

    from .tasks.querygen import QueryGen, QueryGenOptions, get_preset, write_tasks

    if not model:
        _fail_line("give --model (or set ENVFACTORY_MODEL), or --writer template to write tasks without an LLM")
    if structured_output not in ("none", "json_schema", "json_object"):
        _fail_line(f"--structured-output must be none, json_schema or json_object, not {structured_output!r}")
    try:
        from .tasks.solvable import require_trusted

        chosen = get_preset(preset)
        names = [get_environment(strip_gym_id(e)).name for e in (list_environments() if all_envs else envs or [])]
        require_trusted(names, trust=trust, doing="gen tasks")
        options = QueryGenOptions(preset=chosen, k=k, seed=seed, checkpoint_dir=checkpoint_dir / "chains",
                                  concurrency=concurrency)
        config = LLMConfig(model=model, base_url=base_url, api_key_env=api_key_env, seed=seed,
                           cache_dir=checkpoint_dir / "cache",
                           structured_output=False if structured_output == "none" else structured_output)
    except (EnvFactoryError, ValueError) as exc:
        _fail_line(str(exc))
    try:
        from .tasks import graph as graph_mod
        from .tasks import sampler
    except ImportError as exc:
        _fail_line(f"the tool graph / chain sampler is not available (install the synthesis extra): {exc}")
    try:
        if chains_file is not None:
            chains = sampler.read_chains(chains_file)
            chains = [c for c in chains if set(c.envs) <= set(names)][:n]
            if len(chains) < n:
                console.print(f"{chains_file} holds {len(chains)} chain(s) over {', '.join(names)}, not the {n} asked",
                              style="yellow", markup=False, highlight=False, soft_wrap=True)
        else:
            from .tasks.solvable import sample_solvable

            G = graph_mod.load_graph(graph) if graph is not None else \
                graph_mod.build_graph(names, cache_dir=checkpoint_dir / "embeddings")
            # drawn inside ENV... and checked until --n run (issue 27 part 3): the report says why any are missing
            found = sample_solvable(G, n, seed=seed, envs=names, budget=budget)
            chains = found.chains
            console.print(f"chains: {found.summary()}", style=None if found.kept >= n else "yellow", markup=False,
                          highlight=False, soft_wrap=True)
    except (EnvFactoryError, ValueError, OSError) as exc:
        _fail_line(str(exc))
    if not chains:
        _fail_line(f"no chain over {', '.join(names)} to generate tasks from", code=1)
    with Progress(console=err_console, transient=False) as bar:
        job = bar.add_task(f"QueryGen {chosen.name}", total=len(chains))
        gen = QueryGen(config, options, progress=lambda _o: bar.advance(job))
        try:
            outcomes = asyncio.run(gen.generate(chains))
        except (EnvFactoryError, ValueError) as exc:
            _fail_line(str(exc))
    stats = write_tasks(outcomes, out, extra={"model": model, "preset": chosen.to_dict(), "seed": seed, "k": k,
                                              "llm_usage": gen.usage_by_stage, "user_simulator": gen.user_stats})
    print_task_stats(stats)
    failure = endpoint_failure_line(outcomes, base_url)
    if failure:
        err_console.print(failure, style="red", markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {stats['tasks']} task(s) to {out}; verified trajectories: {stats['trajectories_path']} "
                  f"({stats['trajectories']}); statistics: {stats['stats_path']}", highlight=False, markup=False)
    raise typer.Exit(0 if stats["tasks"] else 1)


def run_template_writer(names: list[str], *, n: int, seed: int, budget: int | None, out: Path, graph: Path | None,
                        checkpoint_dir: Path) -> int:
    """``envfactory gen tasks --writer template``: ``n`` instruction-style tasks per environment of
    ``names`` (:func:`~.tasks.template.generate_template_tasks`), written with their oracle trajectories and
    statistics by :func:`~.tasks.querygen.write_tasks`; prints ``ENV: kept K of N (why dropped: ...)`` per
    environment and the statistics.  Returns the exit code: 0 when tasks were written, 1 when none were."""
    from rich.progress import Progress, TaskID

    from .tasks import graph as graph_mod
    from .tasks.querygen import write_tasks
    from .tasks.template import STYLE, WRITER, TemplateOptions, generate_template_tasks

    try:
        G = graph_mod.load_graph(graph) if graph is not None else \
            graph_mod.build_graph(names, cache_dir=checkpoint_dir / "embeddings")
    except (EnvFactoryError, ValueError, OSError) as exc:
        _fail_line(str(exc))
    options = TemplateOptions(seed=seed, budget=budget)
    results = []
    with Progress(console=err_console, transient=True) as bar:
        for name in names:
            job = bar.add_task(f"template writer: {name}", total=n)

            def advance(kept: int, job: TaskID = job) -> None:
                bar.update(job, completed=kept)

            try:
                results.append(generate_template_tasks(G, name, n, options, progress=advance))
            except (EnvFactoryError, ValueError) as exc:
                _fail_line(f"{name}: {exc}")
    outcomes = [o for r in results for o in r.outcomes]
    per_env = {r.env: r.summary() for r in results}
    stats = write_tasks(outcomes, out, extra={"writer": WRITER, "style": STYLE, "seed": seed, "requested_per_env": n,
                                              "per_environment": per_env})
    print_task_stats(stats)
    for r in results:
        assert r.sample is not None
        s = per_env[r.env]
        splits = " / ".join(f"{k} {v}" for k, v in s["splits"].items())
        console.print(f"{r.env}: {r.sample.summary()}; {s['state_changing']} state-changing, {s['multi_turn']} "
                      f"multi-turn, {s['clarification']} with a clarification turn; {splits or 'no tasks'}",
                      style=None if r.sample.kept >= n else "yellow", markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {stats['tasks']} {STYLE}-style task(s) ({WRITER} writer, no LLM) to {out}; oracle "
                  f"trajectories: {stats['trajectories_path']} ({stats['trajectories']}); statistics: {stats['stats_path']}",
                  highlight=False, markup=False, soft_wrap=True)
    return 0 if stats["tasks"] else 1
