"""The tool graph around one environment, as a readable inline SVG (arXiv 2605.18703 §3.3; docs/ui.md).

The environment's own tools are laid out left to right in layers (a tool sits one layer right of the
furthest tool it takes a value from, so chains read left to right); tools of other environments that
exchange values with them stand in a column of their own at the right.  Every node carries its tool's
name; every edge is an ``output → input`` dependency (``depends`` edges of
``gym_envfactory.generators.tasks.graph``), drawn by kind: within the environment or across
environments (colour), found by the embedding model or by the LLM refinement (solid or dashed).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GraphEdge", "GraphNode", "edge_kind", "environment_view", "graph_svg", "EDGE_KINDS"]

#: Edge kind → (colour, dash pattern, legend text).
EDGE_KINDS: dict[str, tuple[str, str, str]] = {
    "within/embedding": ("#0072B2", "", "within the environment, embedding match"),
    "within/llm": ("#0072B2", "6 3", "within the environment, LLM refinement"),
    "across/embedding": ("#D55E00", "", "across environments, embedding match"),
    "across/llm": ("#D55E00", "6 3", "across environments, LLM refinement"),
}


@dataclass(frozen=True)
class GraphNode:
    """A tool node: graph id, tool name, environment, and whether it belongs to the page's environment."""

    id: str
    name: str
    env: str
    own: bool


@dataclass(frozen=True)
class GraphEdge:
    """A dependency ``producer → consumer``: its kind (:data:`EDGE_KINDS`), the best link's
    ``output → input`` label, its score and how many links it merges."""

    producer: str
    consumer: str
    kind: str
    label: str
    score: float
    links: int


def edge_kind(producer_env: str, consumer_env: str, origins: Sequence[str]) -> str:
    """``within``/``across`` (same environment or not) and ``llm`` when any link came from the LLM
    refinement, else ``embedding``."""
    return f"{'within' if producer_env == consumer_env else 'across'}/{'llm' if 'llm' in origins else 'embedding'}"


def environment_view(G: Any, env: str) -> tuple[list[GraphNode], list[GraphEdge]]:
    """The nodes and edges around ``env`` in a tool graph ``G`` (a ``networkx.DiGraph`` as
    ``build_graph`` makes it): its tools, the tools they exchange values with, and those edges."""
    from gym_envfactory.generators.tasks.graph import depends_edges, tool_nodes

    own = set(tool_nodes(G, env))
    edges: list[GraphEdge] = []
    keep = set(own)
    for u, v, a in depends_edges(G):
        if u not in own and v not in own:
            continue
        keep.update((u, v))
        via = sorted(a.get("via", []), key=lambda x: -float(x.get("score", 0)))
        best = via[0] if via else {"output": "?", "input": "?"}
        kind = edge_kind(G.nodes[u]["env"], G.nodes[v]["env"], [str(x.get("origin", "")) for x in via])
        edges.append(GraphEdge(u, v, kind, f"{best['output']} → {best['input']}", float(a.get("score", 0.0)), len(via)))
    nodes = [GraphNode(n, str(G.nodes[n].get("name", n)), str(G.nodes[n].get("env", "")), n in own) for n in sorted(keep)]
    return nodes, edges


def _layers(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> dict[str, int]:
    """Own tools: layer = 1 + the furthest own producer's layer (cycles stop after ``len(nodes)`` rounds)."""
    own = {n.id for n in nodes if n.own}
    layer = dict.fromkeys(own, 0)
    inner = [(e.producer, e.consumer) for e in edges if e.producer in own and e.consumer in own and e.producer != e.consumer]
    for _ in range(len(own)):
        changed = False
        for u, v in inner:
            if layer[v] < layer[u] + 1 <= len(own):
                layer[v] = layer[u] + 1
                changed = True
        if not changed:
            break
    return layer


def graph_svg(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> str:
    """The picture: own tools in layers, other environments' tools in a right-hand column, labelled
    nodes, edges coloured and dashed by kind with a legend.  Each edge has a ``<title>`` (its link)."""
    e = html.escape
    layer = _layers(nodes, edges)
    columns: dict[int, list[GraphNode]] = {}
    for n in nodes:
        if n.own:
            columns.setdefault(layer[n.id], []).append(n)
    far = (max(columns) + 1) if columns else 0
    others = [n for n in nodes if not n.own]
    if others:
        columns[far] = others
    char_w, box_h, gap_y, gap_x = 6.6, 22, 12, 70
    col_w = {c: max(90.0, max(len(n.name if n.own else f"{n.env}.{n.name}") for n in ns) * char_w + 16)
             for c, ns in columns.items()}
    pos: dict[str, tuple[float, float, float]] = {}  # id -> (x, y centre, box width)
    x = 20.0
    for c in sorted(columns):
        for i, n in enumerate(sorted(columns[c], key=lambda n: (n.env, n.name))):
            pos[n.id] = (x, 50 + i * (box_h + gap_y) + box_h / 2, col_w[c])
        x += col_w[c] + gap_x
    width = int(max(x - gap_x + 20, 520))
    height = int(max((len(ns) for ns in columns.values()), default=1) * (box_h + gap_y) + 60 + 20 * len(EDGE_KINDS))
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' class='toolgraph' width='{width}' height='{height}' role='img' "
           "aria-label='tool graph'><defs>"]
    for kind, (colour, _, _) in EDGE_KINDS.items():
        out.append(f"<marker id='arrow-{kind.replace('/', '-')}' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' "
                   f"markerHeight='7' orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='{colour}'/></marker>")
    out.append("</defs>")
    if others:
        ox = pos[others[0].id][0]
        out.append(f"<text x='{ox:.0f}' y='30' font-size='11' fill='#667085'>other environments</text>")
    if columns:
        out.append("<text x='20' y='30' font-size='11' fill='#667085'>this environment's tools, producers left of "
                   "the tools that use their outputs</text>")
    for ed in edges:
        if ed.producer not in pos or ed.consumer not in pos:
            continue
        colour, dash, _ = EDGE_KINDS.get(ed.kind, ("#888", "", ""))
        ux, uy, uw = pos[ed.producer]
        vx, vy, vw = pos[ed.consumer]
        if ed.producer == ed.consumer:
            d = f"M{ux + uw:.1f},{uy - 5:.1f} C{ux + uw + 30:.1f},{uy - 25:.1f} {ux + uw + 30:.1f},{uy + 25:.1f} {ux + uw:.1f},{uy + 5:.1f}"
        elif vx > ux:  # left to right: from the producer's right side to the consumer's left side
            x1, x2 = ux + uw, vx
            d = f"M{x1:.1f},{uy:.1f} C{(x1 + x2) / 2:.1f},{uy:.1f} {(x1 + x2) / 2:.1f},{vy:.1f} {x2:.1f},{vy:.1f}"
        elif vx < ux:  # right to left (an other environment's tool feeding this one, or a cycle)
            x1, x2 = ux, vx + vw
            d = f"M{x1:.1f},{uy:.1f} C{(x1 + x2) / 2:.1f},{uy + 30:.1f} {(x1 + x2) / 2:.1f},{vy + 30:.1f} {x2:.1f},{vy:.1f}"
        else:  # same column: an arc on the left
            d = f"M{ux:.1f},{uy:.1f} C{ux - 40:.1f},{uy:.1f} {vx - 40:.1f},{vy:.1f} {vx:.1f},{vy:.1f}"
        title = f"{ed.producer} → {ed.consumer}: {ed.label} (score {ed.score:.3f}" + (
            f", {ed.links} links)" if ed.links > 1 else ")")
        out.append(f"<path class='edge' data-kind='{e(ed.kind)}' d='{d}' fill='none' stroke='{colour}' stroke-width='1.4' "
                   f"stroke-dasharray='{dash}' opacity='0.8' marker-end='url(#arrow-{ed.kind.replace('/', '-')})'>"
                   f"<title>{e(title)}</title></path>")
    for n in nodes:
        nx_, ny, nw = pos[n.id]
        label = n.name if n.own else f"{n.env}.{n.name}"
        fill = "#e8f1fb" if n.own else "#fdf0e6"
        out.append(f"<g class='node' data-tool='{e(n.id)}'><rect x='{nx_:.1f}' y='{ny - box_h / 2:.1f}' width='{nw:.1f}' "
                   f"height='{box_h}' rx='4' fill='{fill}' stroke='#667085'/><text x='{nx_ + 8:.1f}' y='{ny + 4:.1f}' "
                   f"font-size='11' font-family='monospace'>{e(label)}</text><title>{e(n.id)}</title></g>")
    ly = height - 20 * len(EDGE_KINDS) - 4
    for i, (kind, (colour, dash, text)) in enumerate(EDGE_KINDS.items()):
        y = ly + 20 * i
        out.append(f"<g class='legend' data-kind='{kind}'><line x1='20' x2='60' y1='{y}' y2='{y}' stroke='{colour}' "
                   f"stroke-width='2' stroke-dasharray='{dash}'/><text x='68' y='{y + 4}' font-size='11'>{e(text)} "
                   f"({sum(1 for ed in edges if ed.kind == kind)})</text></g>")
    out.append("</svg>")
    return "".join(out)
