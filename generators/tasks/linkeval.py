"""Precision and recall of a tool graph's links against a hand-labelled set (issue 27 part 3;
``docs/synthesis.md``, "Tool graph: link check").

A labelled set is a *domain table* per environment (``tests/generators/fixtures/graph_links_domains.json``
labels the shipped catalog; its ``about`` says how): each required input lists the domains it accepts, each
output leaf names the domain of the value it carries.  :func:`true_links` expands it over a graph's nodes
into the set of true links ``(producer tool, output path, consumer tool, input param)``: same environment,
different tools, the output's domain among the input's.  :func:`score_links` compares a graph's ``match``
edges with that set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from gym_envfactory.generators.errors import GraphError

__all__ = ["Link", "LinkScore", "load_domains", "true_links", "graph_links", "score_links"]

Link = tuple[str, str, str, str]
"""``(producer tool id, output path, consumer tool id, input param)``."""


def load_domains(path: str | Path) -> dict[str, Any]:
    """The ``envs`` table of a domain-table file (module docstring).

    Raises:
        GraphError: the file is missing, not JSON, or has no ``envs`` object.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GraphError(f"cannot read the labelled links {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GraphError(f"{p} is not JSON: {exc}") from None
    envs = data.get("envs") if isinstance(data, dict) else None
    if not isinstance(envs, dict):
        raise GraphError(f"{p}: expected an object with 'envs' (environment -> inputs/outputs)")
    return envs


def _output_domain(table: Mapping[str, Any], tool: str, path: str) -> str | None:
    outs = table.get("outputs", {})
    if f"{tool}:{path}" in outs:
        return outs[f"{tool}:{path}"]
    for key, dom in outs.items():
        if ":" not in key and ("." in key or "[]" in key) and (path == key or path.endswith("." + key)):
            return dom
    leaf = path.rsplit(".", 1)[-1].replace("[]", "")
    return outs.get(leaf)


def _input_domains(table: Mapping[str, Any], tool: str, param: str) -> list[str]:
    ins = table.get("inputs", {})
    return list(ins.get(f"{tool}.{param}", ins.get(param, [])) or [])


def true_links(G: nx.DiGraph, domains: Mapping[str, Any]) -> set[Link]:
    """Every true link among ``G``'s output nodes and required input nodes under ``domains``
    (:func:`load_domains`), whatever the graph's edges are."""
    outs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for _, a in G.nodes(data=True):
        if a.get("kind") != "output":
            continue
        t = G.nodes[a["tool"]]
        table = domains.get(t["env"])
        dom = _output_domain(table, t["name"], a["path"]) if table else None
        if dom:
            outs.setdefault((t["env"], dom), []).append((a["tool"], a["path"]))
    truth: set[Link] = set()
    for _, a in G.nodes(data=True):
        if a.get("kind") != "input" or not a.get("required"):
            continue
        t = G.nodes[a["tool"]]
        table = domains.get(t["env"])
        if not table:
            continue
        for dom in _input_domains(table, t["name"], a["param"]):
            for tool, path in outs.get((t["env"], dom), []):
                if tool != a["tool"]:
                    truth.add((tool, path, a["tool"], a["param"]))
    return truth


def graph_links(G: nx.DiGraph) -> set[Link]:
    """The graph's ``match`` edges as links."""
    found: set[Link] = set()
    for u, v, a in G.edges(data=True):
        if a.get("kind") == "match":
            found.add((G.nodes[u]["tool"], G.nodes[u]["path"], G.nodes[v]["tool"], G.nodes[v]["param"]))
    return found


@dataclass
class LinkScore:
    """Links found, true among them, true in all; ``precision`` and ``recall`` in [0, 1]."""

    links: int
    correct: int
    truth: int

    @property
    def precision(self) -> float:
        """correct / links (1.0 for a graph without links)."""
        return self.correct / self.links if self.links else 1.0

    @property
    def recall(self) -> float:
        """correct / truth (1.0 when nothing is true)."""
        return self.correct / self.truth if self.truth else 1.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able figures."""
        return {"links": self.links, "correct": self.correct, "truth": self.truth,
                "precision": round(self.precision, 4), "recall": round(self.recall, 4)}


def score_links(G: nx.DiGraph, truth: set[Link]) -> LinkScore:
    """Precision and recall of ``G``'s ``match`` edges against ``truth`` (:func:`true_links`)."""
    found = graph_links(G)
    return LinkScore(len(found), len(found & truth), len(truth))
