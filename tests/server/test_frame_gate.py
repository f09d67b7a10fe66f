"""Large frames are admitted before they are parsed (issue 25, adversarial pass).

The manager's admission runs once a frame is parsed (``FrameJob._start``), and the worker interleaves the
slices of every frame in flight, so frames that stay parsed between slices were held all at once: eight
3.9 MB frames (one call of nested empty lists behind 299 pings) took a server to 831 MiB resident on a 512 MiB
budget with no refusal.  Now a frame estimated at ``FRAME_FACTOR`` x its size or more than
``SMALL_FRAME_ESTIMATE`` runs only while the large frames in flight leave it room (a quarter of the budget):
over HTTP it is refused (-32006, HTTP 503, nothing run), over a WebSocket it waits its turn.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.testclient import TestClient

from gym_envfactory import protocol
from gym_envfactory.errors import MemoryBudgetError
from gym_envfactory.server.admission import Admission, MemoryBudget
from gym_envfactory.server.app import FRAME_FACTOR, SMALL_FRAME_ESTIMATE, ServerConfig, build_app
from gym_envfactory.server.manager import SessionManager

ENV = "HotelBooking"
MiB = 1024 * 1024


def _app(allowed: int = 400 * MiB) -> Any:
    rss = 50 * MiB
    adm = Admission(MemoryBudget(allowed, "test budget", 0), rss=lambda: rss, trim=lambda: None)
    m = SessionManager([ENV], memory_budget=adm)
    return build_app(m, ServerConfig(envs=[ENV])), m


def test_a_large_frame_waits_or_is_refused_while_others_hold_the_room():
    app, _ = _app()
    state = app.state.server
    big = state.frame_cap() // FRAME_FACTOR  # one such frame fills the room
    small = SMALL_FRAME_ESTIMATE // FRAME_FACTOR - 1

    async def main() -> None:
        order: list[str] = []
        async with state.frame_admitted(big, wait=False):
            assert state.frame_bytes == FRAME_FACTOR * big
            try:
                async with state.frame_admitted(big, wait=False):
                    raise AssertionError("a second large frame ran beside the first")
            except MemoryBudgetError as exc:
                assert exc.scope == "memory" and exc.estimate == FRAME_FACTOR * big
            async with state.frame_admitted(small, wait=False):  # small frames never wait
                order.append("small")

            async def waiter() -> None:
                async with state.frame_admitted(big, wait=True):
                    order.append("second")
            task = asyncio.create_task(waiter())
            for _ in range(5):
                await asyncio.sleep(0)
            assert order == ["small"]  # still waiting for the first
            order.append("first done")
        await task
        assert order == ["small", "first done", "second"] and state.frame_bytes == 0
        async with state.frame_admitted(10 * big, wait=False):  # alone, even an oversized one runs
            pass

    asyncio.run(main())


def test_a_large_http_frame_is_refused_with_503_and_nothing_runs_while_another_holds_the_room():
    app, m = _app()
    state = app.state.server
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        sid = client.post("/v1/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "create",
                                           "params": {"env": ENV}}).json()["result"]["session_id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "call", "params": {
            "session_id": sid, "name": "search_hotels", "arguments": {"city": "Lisbon"}}}
        pad = [{"jsonrpc": "2.0", "id": 100 + i, "method": "ping"} for i in range(300)]
        frame = json.dumps([call, *pad, {"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {
            "pad": "x" * (state.frame_cap() // FRAME_FACTOR)}}])
        state.frame_bytes = state.frame_cap()  # another large frame is running
        r = client.post("/v1/rpc", content=frame, headers={"Content-Type": "application/json"})
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == protocol.ERR_MEMORY and error["data"]["scope"] == "memory"
        assert m.sessions[sid].session.action_log == []  # nothing of the frame ran
        small = client.post("/v1/rpc", json=call)  # a small frame is served meanwhile
        assert small.status_code == 200 and small.json()["result"]["ok"]
        state.frame_bytes = 0  # the other frame is done
        r = client.post("/v1/rpc", content=frame, headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and len(m.sessions[sid].session.action_log) == 2
