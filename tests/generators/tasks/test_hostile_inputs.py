"""Task synthesis (``generators/tasks/``) on hostile or malformed inputs: graph files, chain files and the
``graph`` CLI give one-line typed errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from gym_envfactory.generators.errors import GraphError
from gym_envfactory.generators.tasks.graph import build_graph, load_graph, save_graph

from .test_sampler import hotel_calendar_graph


def _encoder(texts: list[str]) -> np.ndarray:
    """A deterministic bag-of-characters encoder (no model download)."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for ch in t:
            out[i, ord(ch) % 64] += 1.0
    return out


def _node_link(nodes: list[Any], edges: list[Any], graph: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"directed": True, "multigraph": False, "graph": graph or {}, "nodes": nodes, "edges": edges}


_A = {"id": "A.a", "kind": "tool", "env": "A", "name": "a"}
_B = {"id": "A.b", "kind": "tool", "env": "A", "name": "b"}
_BIN = {"id": "A.b:in:x_id", "kind": "input", "tool": "A.b", "param": "x_id", "required": True}
_VIA = {"output": "x_id", "input": "x_id", "score": 0.9, "origin": "embedding"}
HOSTILE = {
    "tool_without_env": _node_link([{"id": "notool", "kind": "tool"}], []),
    "via_is_a_string": _node_link([_A, _B], [{"source": "A.a", "target": "A.b", "kind": "depends", "via": "xx",
                                              "score": 0.9}]),
    "via_score_null": _node_link([_A, _B, _BIN], [{"source": "A.a", "target": "A.b", "kind": "depends", "score": 0.9,
                                                   "via": [{**_VIA, "score": None}]}]),
    "via_without_origin": _node_link([_A, _B, _BIN], [{"source": "A.a", "target": "A.b", "kind": "depends",
                                                       "score": 0.9, "via": [{"output": "x", "input": "x_id",
                                                                              "score": 0.9}]}]),
    "nodes_not_objects": {"nodes": [1, 2], "edges": []},
    "node_without_id": {"nodes": [{"kind": "tool", "env": "A", "name": "a"}], "edges": []},
    "input_of_unknown_tool": _node_link([_A, {**_BIN, "tool": "A.zz"}], []),
    "unknown_kind": _node_link([_A, {"id": "q", "kind": "weird"}], []),
    "envs_not_a_list": _node_link([_A], [], {"envs": "A"}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_graph_json_is_a_graph_error(tmp_path: Path, name: str) -> None:
    p = tmp_path / "g.json"
    p.write_text(json.dumps(HOSTILE[name]))
    with pytest.raises(GraphError):
        load_graph(p)


@pytest.mark.parametrize("command", ["sample", "show"])
def test_cli_on_a_hostile_graph_is_one_line_without_traceback(tmp_path: Path, command: str) -> None:
    from gym_envfactory.generators.tasks.cli import graph_app

    p = tmp_path / "g.json"
    p.write_text(json.dumps(HOSTILE["via_is_a_string"]))
    args = ["sample", "--graph", str(p), "--no-check", "--out", str(tmp_path / "c.jsonl")] if command == "sample" \
        else ["show", str(p)]
    result = CliRunner().invoke(graph_app, args)
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "not a tool graph" in result.output and "Traceback" not in result.output


def test_well_formed_graphs_still_load(tmp_path: Path) -> None:
    built = build_graph(["HotelBooking"], encoder=_encoder, threshold=0.5)
    for G in (built, hotel_calendar_graph()):
        back = load_graph(save_graph(G, tmp_path / "g.json"))
        assert sorted(back.nodes) == sorted(G.nodes) and back.number_of_edges() == G.number_of_edges()


def test_read_chains_non_utf8_names_the_file_and_keeps_u2028(tmp_path: Path) -> None:
    from gym_envfactory.generators.errors import ChainError
    from gym_envfactory.generators.tasks.sampler import Chain, read_chains, write_chains

    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b"\xff\xfe\n")
    with pytest.raises(ChainError, match="bin.jsonl"):
        read_chains(bad)
    chain = Chain.model_validate({"chain_id": "c\u2028x", "seed": 0, "envs": ["HotelBooking"], "steps": [
        {"tool": "HotelBooking.search_hotels", "env": "HotelBooking", "name": "search_hotels", "inputs": {}}]})
    p = write_chains([chain], tmp_path / "c.jsonl")
    p.write_text(p.read_text(encoding="utf-8").replace("\\u2028", "\u2028"), encoding="utf-8")
    assert "\u2028" in p.read_text(encoding="utf-8")
    assert read_chains(p) == [chain]


def test_graph_cli_errors_keep_brackets_and_name_the_extra(tmp_path, monkeypatch):
    """Error text went through rich markup, which swallowed ``[synthesis]`` in "pip install -e '.[synthesis]'";
    and a missing extra was a traceback."""
    import builtins

    from typer.testing import CliRunner

    from gym_envfactory.generators.tasks.cli import graph_app

    missing = tmp_path / "g[abc].json"
    r = CliRunner().invoke(graph_app, ["show", str(missing), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 1 and "g[abc].json" in r.output and "Traceback" not in r.output, r.output

    real_import = builtins.__import__

    def no_networkx(name, *args, **kwargs):
        if name == "networkx":
            raise ImportError("No module named 'networkx'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_networkx)
    r = CliRunner().invoke(graph_app, ["build", "HotelBooking", "--out", str(tmp_path / "G.json")])
    assert r.exit_code == 1 and "pip install -e '.[synthesis]'" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
