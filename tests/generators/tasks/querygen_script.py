"""Scripted model answers for every QueryGen stage, the pass@k agent and the user simulator, plus an
executing stand-in for ``sampler.check_chain`` (used until/unless the sampler is installed).

Markers carry what the scripted agent needs through the messages: the turns stage writes
``<<c=CHAIN s=i,j>>`` into each turn's user message (the user simulator echoes its script), so the agent
answers by parsing the last user message, like a model that reads the request.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.states import resolve_initial_states
from gym_envfactory.generators.tasks.querygen import chain_json
from gym_envfactory.session import Session
from gym_envfactory.users.llm import STAGE_MARK

ADA_CALLS = [
    {"env": "HotelBooking", "name": "find_guest_by_email", "arguments": {"email": "ada.lovelace@example.com"}},
    {"env": "HotelBooking", "name": "create_hotel_quote",
     "arguments": {"hotel_id": "H-101", "room_type": "TWN", "check_in": "2026-12-10", "check_out": "2026-12-12", "guests": 2}},
    {"env": "HotelBooking", "name": "create_hotel_booking",
     "arguments": {"quote_id": "Q-0002", "guest_id": "G-001", "payment_method_id": "PM-0001"}},
]
GRACE_CALLS = [
    {"env": "HotelBooking", "name": "find_guest_by_email", "arguments": {"email": "grace.hopper@example.com"}},
    {"env": "HotelBooking", "name": "find_guest_by_email", "arguments": {"email": "grace.hopper@example.com"}},  # redundant
    {"env": "HotelBooking", "name": "create_hotel_quote",
     "arguments": {"hotel_id": "H-102", "room_type": "STD", "check_in": "2026-12-14", "check_out": "2026-12-16", "guests": 1}},
    {"env": "HotelBooking", "name": "create_hotel_booking",
     "arguments": {"quote_id": "Q-0002", "guest_id": "G-002", "payment_method_id": "PM-0004"}},
]


def make_chain(chain_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A chain in the documented JSON form (docs/synthesis.md) whose steps are ``calls``' tools."""
    steps = []
    for i, c in enumerate(calls):
        inputs: dict[str, Any] = {}
        for arg in c["arguments"]:
            if arg in ("quote_id",) and i > 0:
                inputs[arg] = {"source": "step", "step": i - 1, "output": "quote_id"}
            elif arg == "guest_id" and i > 0:
                inputs[arg] = {"source": "step", "step": 0, "output": "guest_id"}
            else:
                inputs[arg] = {"source": "user"}
        steps.append({"tool": f"HotelBooking.{c['name']}", "env": "HotelBooking", "name": c["name"], "inputs": inputs})
    return {"chain_id": chain_id, "seed": 0, "envs": ["HotelBooking"], "steps": steps}


class FakeChecker:
    """Executes each chain's fixed calls in a real Session from the given initial states
    (``sampler.check_chain``'s contract: ok, reason, calls, results, initial_states, final_state)."""

    def __init__(self, calls_by_chain: dict[str, list[dict[str, Any]]], broken: set[str] | None = None) -> None:
        self.calls_by_chain = calls_by_chain
        self.broken = broken or set()
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, chain: Any, initial_states: dict[str, Any] | None) -> Any:
        cj = chain_json(chain)
        self.seen.append((cj["chain_id"], initial_states is not None))
        specs = [get_environment(e) for e in cj["envs"]]
        ref: Any = None
        if initial_states is not None:
            ref = initial_states[specs[0].name] if len(specs) == 1 else initial_states
        states = resolve_initial_states(specs, ref)
        calls = self.calls_by_chain[cj["chain_id"]]
        if cj["chain_id"] in self.broken:
            calls = [*calls[:1], {**calls[1], "arguments": {**calls[1]["arguments"], "hotel_id": "H-999"}}]
        results = []
        with Session.from_states(specs, states) as s:
            for c in calls:
                r = s.call(c["name"], c["arguments"])
                if not r.ok:
                    return SimpleNamespace(ok=False, reason=f"{c['name']}: {r.error}", calls=[], results=[],
                                           initial_states={}, final_state=None)
                results.append(r.content)
            final = s.state()
        return SimpleNamespace(ok=True, reason=None, calls=[dict(c) for c in calls], results=results,
                               initial_states={n: json.loads(b) for n, b in states.items()}, final_state=final)


def stage_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]["content"].split("\n", 1)[0]
    return first[len(STAGE_MARK):] if first.startswith(STAGE_MARK) else "solve"


def _group(pattern: str, text: str, flags: int = 0) -> str:
    """Group 1 of ``pattern``'s first match in ``text``; AssertionError when it does not match."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not found in the request"
    return match.group(1)


_MARK = re.compile(r"<<c=(\S+) s=([\d,]+)>>")
_CALL_LINE = re.compile(r"^(\d+)\. (\w+)\(", re.M)


class Script:
    """Answers by stage.  ``overrides[stage]``: a list of raw ``content`` strings consumed in order (the
    last repeats) replacing the good answer; ``agent``: ``"good"`` or ``"wrong"``; ``user_done``:
    what the simulator says about ``done``."""

    def __init__(self, calls_by_chain: dict[str, list[dict[str, Any]]], *, conversational: bool = True,
                 overrides: dict[str, list[str]] | None = None, agent: str = "good", user_done: bool = False) -> None:
        # the scripted model sees the calls after QueryGen removed repeated read-only calls
        self.calls_by_chain = {k: [c for i, c in enumerate(v) if c not in v[:i]] for k, v in calls_by_chain.items()}
        self.conversational = conversational
        self.overrides = overrides or {}
        self.agent = agent
        self.user_done = user_done
        self.stages: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = stage_of(body)
        self.stages.append(stage)
        ov = self.overrides.get(stage)
        if ov:
            return {"content": ov.pop(0) if len(ov) > 1 else ov[0]}
        return getattr(self, f"answer_{stage}")(body)

    # ---------------------------------------------------------------- stages
    def answer_scenario(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"content": json.dumps({"scenario": "A guest plans a December trip.",
                                       "user_profile": {"name": "Ada", "persona": "brisk and precise"}})}

    def answer_state(self, body: dict[str, Any]) -> dict[str, Any]:
        # first a state that fails validation (the error goes back), then a valid patch
        if len(body["messages"]) == 2:
            return {"content": json.dumps({"patches": {"HotelBooking": [
                {"op": "replace", "path": "/guests/G-001/payment_methods/PM-0001/credit_limit", "value": "lots"}]}})}
        return {"content": json.dumps({"patches": {"HotelBooking": [
            {"op": "replace", "path": "/guests/G-001/phone", "value": "+44 20 7946 0999"}]}})}

    def answer_turns(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][1]["content"]
        n = len(_CALL_LINE.findall(prompt))
        chain = next(cid for cid, calls in self.calls_by_chain.items()
                     if len(self.calls_by_chain) == 1 or calls[0]["arguments"].get("email", "") in prompt)
        groups = [[0], list(range(1, n))] if n > 1 else [[0]]
        turns = []
        for g in groups:
            mark = f"<<c={chain} s={','.join(map(str, g))}>>"
            turns.append({"steps": g, "subgoal": "step", "user": f"{mark} please do it",
                          "expected_outputs": ["G-001", "G-002", "BK-0007", "not-in-any-result"]})
        return {"content": json.dumps({"turns": turns})}

    def answer_refine(self, body: dict[str, Any]) -> dict[str, Any]:
        text = body["messages"][1]["content"]
        msgs = re.findall(r"message: (<<[^>]*>> please do it)", text)
        turns = [{"user": m.replace("please do it", "could you take care of that?")} for m in msgs]
        clar = None
        m = re.search(r"^1\. .*?user-provided values: (\{.*\})$", text, re.M)
        if self.conversational and m:
            values = json.loads(m.group(1))
            pm = values.get("payment_method_id")
            if pm:
                clar = {"turn": 1, "argument": "payment_method_id",
                        "ambiguous_user": "CLARIFY book that room for me", "answer": f"{msgs[1]} use card {pm}"}
        return {"content": json.dumps({"turns": turns, "clarification": clar})}

    def answer_user(self, body: dict[str, Any]) -> dict[str, Any]:
        system, prompt = body["messages"][0]["content"], body["messages"][1]["content"]
        turn = int(_group(r"message for turn (\d+)", prompt))
        line = _group(rf"^{turn}\. (.*?)(?: \(leave out the detail.*\))?$", system, re.M)
        return {"content": json.dumps({"message": line, "done": self.user_done})}

    def answer_solve(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        text = msgs[last_user]["content"]
        m = _MARK.search(text)
        if "CLARIFY" in text or m is None:
            return {"content": "Which card should I charge?"}
        chain, steps = m.group(1), [int(x) for x in m.group(2).split(",")]
        done = sum(1 for x in msgs[last_user:] if x["role"] == "assistant" and x.get("tool_calls"))
        if done >= len(steps):
            return {"content": "All done."}
        call = self.calls_by_chain[chain][steps[done]]
        args = dict(call["arguments"])
        if self.agent == "wrong" and call["name"] == "create_hotel_quote":
            args["room_type"] = "FAM"
        return {"tool_calls": [{"function": {"name": call["name"], "arguments": args}}]}
