"""Pictures of the tool graph (``envfactory graph show``): matplotlib PNG/SVG and a self-contained HTML page.

Only the tool nodes and ``depends`` edges are drawn (parameters appear as edge labels): each
environment's tools sit on their own circle, coloured per environment; an edge's label is the input
parameter it feeds (``+n`` when more than one).  The HTML page holds the same picture as inline SVG and
a table of every ``output → input`` link; it loads nothing from the network (no scripts, no CDN).
"""

from __future__ import annotations

import html
import io
import math
from pathlib import Path
from typing import Any

import networkx as nx

from gym_envfactory.generators.errors import GraphError
from gym_envfactory.generators.tasks.graph import depends_edges, tool_nodes

__all__ = ["layout", "draw_figure", "write_picture", "edge_rows"]

_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf"]


def layout(G: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """Tool node id → (x, y): environments' circles of radius ~sqrt(tools) spread on a larger circle."""
    envs = sorted({G.nodes[t]["env"] for t in tool_nodes(G)})
    pos: dict[str, tuple[float, float]] = {}
    radii = {e: 1.0 + math.sqrt(len(tool_nodes(G, e))) for e in envs}
    ring = 0.0 if len(envs) == 1 else sum(radii.values()) / math.pi * 1.3
    for k, env in enumerate(envs):
        cx = ring * math.cos(2 * math.pi * k / len(envs))
        cy = ring * math.sin(2 * math.pi * k / len(envs))
        tools = tool_nodes(G, env)
        for j, t in enumerate(tools):
            a = 2 * math.pi * j / max(1, len(tools))
            pos[t] = (cx + radii[env] * math.cos(a), cy + radii[env] * math.sin(a))
    return pos


def draw_figure(G: nx.DiGraph, *, labels: bool = True) -> Any:
    """A matplotlib ``Figure`` of the tool graph (Agg backend; caller saves or closes it).

    Raises:
        GraphError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise GraphError("pictures need matplotlib (pip install -e '.[synthesis]'); .html works without it") from exc
    tools = tool_nodes(G)
    envs = sorted({G.nodes[t]["env"] for t in tools})
    colour = {e: _COLOURS[i % len(_COLOURS)] for i, e in enumerate(envs)}
    pos = layout(G)
    size = max(8.0, min(40.0, 2.0 + math.sqrt(len(tools)) * 2.2))
    fig, ax = plt.subplots(figsize=(size, size))
    H = nx.DiGraph()
    H.add_nodes_from(tools)
    edges = depends_edges(G)
    H.add_edges_from((u, v) for u, v, _ in edges)
    nx.draw_networkx_edges(H, pos, ax=ax, edge_color="#888888", alpha=0.5, arrows=True, arrowsize=8,
                           width=0.7, connectionstyle="arc3,rad=0.08", node_size=300)
    for env in envs:
        nodes = tool_nodes(G, env)
        nx.draw_networkx_nodes(H, pos, nodelist=nodes, node_color=colour[env], node_size=300, ax=ax,
                               label=f"{env} ({len(nodes)})", alpha=0.9)
    small = len(tools) <= 300
    if labels and small:
        nx.draw_networkx_labels(H, pos, labels={t: G.nodes[t]["name"] for t in tools}, font_size=6, ax=ax)
        if len(edges) <= 400:
            elabels = {(u, v): _edge_label(a) for u, v, a in edges}
            nx.draw_networkx_edge_labels(H, pos, edge_labels=elabels, font_size=4, font_color="#444444", ax=ax,
                                         bbox={"alpha": 0.0}, rotate=False)
    ax.set_title(f"tool graph: {len(tools)} tools, {len(edges)} dependencies "
                 f"(threshold {G.graph.get('threshold')}, model {G.graph.get('model')})", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_axis_off()
    fig.tight_layout()
    return fig


def _edge_label(a: dict[str, Any]) -> str:
    via = sorted(a.get("via", []), key=lambda v: -v["score"])
    if not via:
        return ""
    return via[0]["input"] + (f" +{len(via) - 1}" if len(via) > 1 else "")


def edge_rows(G: nx.DiGraph) -> list[dict[str, Any]]:
    """Every ``match`` link as ``{"producer", "output", "consumer", "input", "score", "origin"}``, best first."""
    rows = []
    for u, v, a in depends_edges(G):
        for via in a["via"]:
            rows.append({"producer": u, "output": via["output"], "consumer": v, "input": via["input"],
                         "score": via["score"], "origin": via["origin"]})
    return sorted(rows, key=lambda r: (-r["score"], r["producer"], r["consumer"]))


def _html(G: nx.DiGraph, svg: str | None) -> str:
    rows = edge_rows(G)
    esc = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>tool graph</title>",
             "<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#eee}"
             "svg{max-width:100%;height:auto}</style></head><body>",
             f"<h1>Tool graph</h1><p>{len(tool_nodes(G))} tools, {len(depends_edges(G))} dependencies, "
             f"{len(rows)} parameter links; environments: {esc(', '.join(G.graph.get('envs', [])))}; "
             f"model {esc(str(G.graph.get('model')))}, threshold {esc(str(G.graph.get('threshold')))}.</p>"]
    if svg:
        parts.append(svg[svg.find("<svg"):])
    parts.append("<h2>Links</h2><table><tr><th>producer</th><th>output</th><th>consumer</th><th>input</th>"
                 "<th>score</th><th>origin</th></tr>")
    for r in rows:
        parts.append(f"<tr><td>{esc(r['producer'])}</td><td>{esc(r['output'])}</td><td>{esc(r['consumer'])}</td>"
                     f"<td>{esc(r['input'])}</td><td>{r['score']:.3f}</td><td>{esc(r['origin'])}</td></tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)


def write_picture(G: nx.DiGraph, path: str | Path) -> Path:
    """Write the picture of ``G`` to ``path``: ``.png`` (150 dpi) or ``.svg`` via matplotlib, ``.html``
    a self-contained page (inline SVG when matplotlib is there, and the table of links).

    Raises:
        GraphError: another suffix, or matplotlib missing for ``.png``/``.svg``.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".png", ".svg", ".html", ".htm"):
        raise GraphError(f"unknown picture format {p.suffix!r}: use .png, .svg or .html")
    p.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".png", ".svg"):
        fig = draw_figure(G)
        fig.savefig(p, dpi=150 if suffix == ".png" else None, format=suffix[1:])
        _close(fig)
        return p
    svg: str | None = None
    try:
        fig = draw_figure(G)
    except GraphError:
        fig = None
    if fig is not None:
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        _close(fig)
        svg = buf.getvalue()
    p.write_text(_html(G, svg), encoding="utf-8")
    return p


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)
