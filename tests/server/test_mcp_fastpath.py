"""The MCP endpoint's fast path for ``tools/call`` (``server/mcp_server.py``, ``_FastCalls``): in-process, over
the app's ASGI interface with the SDK's session managers running.

Checks: once the SDK has accepted a session's first ``tools/call``, later calls are answered by the fast path
with exactly the JSON the SDK answers (results, typed errors, wrapped array outputs, bound sessions); requests
the fast path must not answer (a foreign Host, a mismatched protocol version, malformed params, an ended MCP
session, an unknown bound session) get the SDK's answer; what real clients send (``_meta`` with a progress
token and other keys, ``task``; the fastmcp Client end to end) takes the fast path; and an ended MCP session
leaves nothing behind.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

pytest.importorskip("mcp")
pytest.importorskip("starlette")

import anyio  # noqa: E402
import httpx2  # noqa: E402

from gym_envfactory.server.app import ServerConfig, build_app  # noqa: E402
from gym_envfactory.server.manager import SessionManager  # noqa: E402
from gym_envfactory.server.mcp_server import SESSION_HEADER, mcp_routes  # noqa: E402

ENV = "HotelBooking"
PV = "2025-11-25"
BASE = "http://127.0.0.1:8765"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Harness:
    def __init__(self, ttl_s: float = 900.0) -> None:
        self.manager = SessionManager([ENV])
        config = ServerConfig(envs=[ENV], ttl_s=ttl_s)
        routes, self.lifespan = mcp_routes(self.manager, config)
        self.app = build_app(self.manager, config, extra_routes=routes)
        self.srv = cast(Any, routes[0].endpoint).app.srv  # the EnvMCPServer behind /mcp/HotelBooking
        self.http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app), base_url=BASE)
        self.next_id = 100

    async def open(self, headers: dict[str, str] | None = None) -> dict[str, str]:
        """Initialize an MCP session; returns the headers its later requests carry."""
        h = {**ACCEPT, **(headers or {})}
        r = await self.http.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert r.status_code == 200, r.text
        h = {**h, "MCP-Protocol-Version": PV, "Mcp-Session-Id": r.headers["mcp-session-id"]}
        r = await self.http.post(f"/mcp/{ENV}", headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status_code == 202
        return h

    async def call(self, h: dict[str, str], name: str, arguments: Any, *, sdk: bool = False, **extra: Any) -> Any:
        """One ``tools/call`` (``extra``: more params, e.g. ``_meta``); ``sdk``: with the fast path switched off,
        so the SDK answers it."""
        self.next_id += 1
        params: dict[str, Any] = {"name": name, "arguments": arguments, **extra}
        return await self.post(h, {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params},
                               sdk=sdk)

    async def post(self, h: dict[str, str], msg: Any, *, sdk: bool = False) -> Any:
        if not sdk:
            return await self.http.post(f"/mcp/{ENV}", headers=h, json=msg)
        self.srv.fast_enabled = False
        try:
            n = self.srv.fast_calls
            r = await self.http.post(f"/mcp/{ENV}", headers=h, json=msg)
            assert self.srv.fast_calls == n
            return r
        finally:
            self.srv.fast_enabled = True


def run(test: Any, ttl_s: float = 900.0) -> None:
    async def main() -> None:
        h = Harness(ttl_s)
        async with h.lifespan(h.app):
            await test(h)
        await h.http.aclose()
        h.manager.worker.stop()
    anyio.run(main)


def body(r: Any) -> Any:
    out = json.loads(r.text)
    out.pop("id", None)
    return out


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_guest_profile", {"guest_id": "G-001"}),  # an object result
    ("list_hotel_destinations", {}),  # an array result, wrapped as {"result": [...]} on 2025-era wires
    ("get_guest_profile", {"guest_id": 5}),  # invalid arguments: isError with details
    ("get_guest_profile", {"guest_id": "G-999"}),  # a tool error
    ("no_such_tool", {}),  # unknown tool
]


def test_fast_path_answers_what_the_sdk_answers() -> None:
    async def test(h: Harness) -> None:
        sess = await h.open()
        first = await h.call(sess, *CALLS[0])  # through the SDK: registers the session for the fast path
        assert first.status_code == 200 and h.srv.fast_calls == 0
        for name, args in CALLS:
            slow = await h.call(sess, name, args, sdk=True)
            n = h.srv.fast_calls
            fast = await h.call(sess, name, args)
            assert h.srv.fast_calls == n + 1, "the fast path did not answer"
            assert fast.status_code == slow.status_code == 200
            assert fast.headers["content-type"] == slow.headers["content-type"] == "application/json"
            assert fast.headers["mcp-session-id"] == sess["Mcp-Session-Id"]
            assert body(fast) == body(slow), name
            assert json.loads(fast.text)["id"] == h.next_id
        # the fast path acts on the MCP session's own environment session: a write is seen by later reads
        card = {"guest_id": "G-001", "brand": "mastercard", "last4": "7777", "expiry": "2030-01"}
        assert not json.loads((await h.call(sess, "add_guest_payment_method", card)).text)["result"]["isError"]
        profile = json.loads((await h.call(sess, "get_guest_profile", {"guest_id": "G-001"}, sdk=True)).text)
        assert "7777" in profile["result"]["content"][0]["text"]
    run(test)


def test_bound_session_on_the_fast_path() -> None:
    async def test(h: Harness) -> None:
        sid = h.manager.create(ENV, initial_state="large", client="trainer-1").session_id
        sess = await h.open({SESSION_HEADER: sid, "X-Envfactory-Client": "trainer-1"})
        await h.call(sess, "list_hotel_destinations", {})
        n = h.srv.fast_calls
        fast = await h.call(sess, "list_hotel_destinations", {})
        slow = await h.call(sess, "list_hotel_destinations", {}, sdk=True)
        assert h.srv.fast_calls == n + 1 and body(fast) == body(slow)
        assert h.manager.sessions[sid].calls == 3  # every call acted on the bound session
        # another client's header, or a session that is gone: the SDK answers, with its error
        for bad in ({"X-Envfactory-Client": "someone-else"}, {SESSION_HEADER: "0" * 32}):
            n = h.srv.fast_calls
            r = await h.call({**sess, **bad}, "list_hotel_destinations", {})
            assert h.srv.fast_calls == n and "error" in json.loads(r.text), r.text
    run(test)


def test_requests_the_fast_path_must_leave_to_the_sdk() -> None:
    async def test(h: Harness) -> None:
        sess = await h.open()
        await h.call(sess, "list_hotel_destinations", {})
        n = h.srv.fast_calls
        # DNS rebinding protection still applies to an established session
        assert (await h.call({**sess, "Host": "evil.example:80"}, "list_hotel_destinations", {})).status_code == 421
        assert (await h.call({**sess, "Origin": "http://evil.example"}, "list_hotel_destinations", {})).status_code == 403
        assert (await h.call({**sess, "Content-Type": "text/plain"}, "list_hotel_destinations", {})).status_code == 400
        assert (await h.call({**sess, "Accept": "text/event-stream"}, "list_hotel_destinations", {})).status_code == 406
        other = await h.call({**sess, "MCP-Protocol-Version": "2025-06-18"}, "list_hotel_destinations", {})
        assert other.status_code == 200  # the SDK serves any supported version; not the fast path's to decide
        assert h.srv.fast_calls == n
        # not JSON, a batch, a notification: the SDK's answers
        raw = await h.http.post(f"/mcp/{ENV}", headers=sess, content=b"{nope")
        assert raw.status_code == 400 and json.loads(raw.text)["error"]["code"] == -32700
        assert h.srv.fast_calls == n
        # an ended MCP session: 404 from the SDK, its environment session closed, nothing left in the table
        assert (await h.http.delete(f"/mcp/{ENV}", headers=sess)).status_code == 200
        gone = await h.call(sess, "list_hotel_destinations", {})
        assert gone.status_code == 404 and h.srv.fast_calls == n
        with anyio.fail_after(5):
            while h.srv.fast or h.manager.sessions:
                await anyio.sleep(0.01)
    run(test)


def test_bodies_the_sdk_refuses_are_refused_on_the_fast_path_too() -> None:
    # review finding: json.loads read a UTF-8 BOM, UTF-16 and lone surrogates that the SDK's parser refuses
    async def test(h: Harness) -> None:
        sess = await h.open()
        await h.call(sess, "list_hotel_destinations", {})  # the session is on the fast path now
        n = h.srv.fast_calls
        good = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": {"name": "list_hotel_destinations", "arguments": {}}})
        for raw in (b"\xef\xbb\xbf" + good.encode(), good.encode("utf-16"),
                    good.replace('"arguments": {}', '"arguments": {"country": "\\ud800"}').encode()):
            r = await h.http.post(f"/mcp/{ENV}", headers=sess, content=raw)
            assert r.status_code == 400 and json.loads(r.text)["error"]["code"] == -32700, (raw[:20], r.text)
        assert h.srv.fast_calls == n
    run(test)


def test_a_memory_refusal_over_mcp_keeps_its_code_and_figures(monkeypatch) -> None:
    from gym_envfactory.errors import MemoryBudgetError

    async def test(h: Harness) -> None:
        def refuse(*a, **k):
            raise MemoryBudgetError("refused a session of HotelBooking", budget=100, estimate=50, used=90, headroom=10)
        monkeypatch.setattr(h.manager, "create", refuse)
        r = await h.http.post(f"/mcp/{ENV}", headers=ACCEPT, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        h2 = {**ACCEPT, "MCP-Protocol-Version": PV, "Mcp-Session-Id": r.headers.get("mcp-session-id", "")}
        await h.http.post(f"/mcp/{ENV}", headers=h2, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        out = json.loads((await h.call(h2, "list_hotel_destinations", {})).text)
        err = out.get("error") or {}
        assert err.get("code") == -32006 and err.get("data", {}).get("estimate") == 50, out
    run(test)


def test_an_idle_mcp_session_ends_and_closes_its_environment_session() -> None:
    # the fast path keeps its own table of live MCP sessions (no SDK internals): idle ones are ended with a DELETE
    async def test(h: Harness) -> None:
        sess = await h.open()
        assert (await h.call(sess, "list_hotel_destinations", {})).status_code == 200  # SDK: registers
        assert (await h.call(sess, "list_hotel_destinations", {})).status_code == 200  # fast path
        assert h.srv.fast and h.manager.sessions
        with anyio.fail_after(5):
            while h.srv.fast or h.manager.sessions:
                await anyio.sleep(0.02)
        gone = await h.call(sess, "list_hotel_destinations", {})
        assert gone.status_code == 404
    run(test, ttl_s=0.3)


def test_calls_on_the_fast_path_keep_the_mcp_session_alive() -> None:
    async def test(h: Harness) -> None:
        sess = await h.open()
        await h.call(sess, "list_hotel_destinations", {})  # SDK: registers the session for the fast path
        n = h.srv.fast_calls
        t_end = anyio.current_time() + 4 * 0.3
        while anyio.current_time() < t_end:  # only fast-path requests for four idle timeouts
            r = await h.call(sess, "list_hotel_destinations", {})
            assert r.status_code == 200, r.text
            await anyio.sleep(0.05)
        assert h.srv.fast_calls > n + 5 and h.srv.fast and h.manager.sessions
        assert (await h.call(sess, "get_guest_profile", {"guest_id": "G-001"}, sdk=True)).status_code == 200  # SDK too
    run(test, ttl_s=0.3)


META = [{"progressToken": "tok-1"}, {"progressToken": 7},  # what the fastmcp Client and the SDK's send
        {"progressToken": 8, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
         "io.example/custom": {"nested": [1, 2]}},  # any other keys (the spec's _meta is an open map)
        {}]


def test_calls_with_meta_and_the_other_spec_fields_take_the_fast_path() -> None:
    async def test(h: Harness) -> None:
        sess = await h.open()
        await h.call(sess, *CALLS[0])  # registers the session for the fast path
        extras: list[dict[str, Any]] = [{"_meta": m} for m in META]
        extras.append({"_meta": {"progressToken": 9}, "task": {"ttl": 60000}})  # task-augmented (ignored, as the SDK)
        for extra in extras:
            for name, args in CALLS:
                slow = await h.call(sess, name, args, sdk=True, **extra)
                n = h.srv.fast_calls
                fast = await h.call(sess, name, args, **extra)
                assert h.srv.fast_calls == n + 1, ("the fast path did not answer", extra)
                assert fast.status_code == slow.status_code == 200
                assert body(fast) == body(slow), (name, extra)
                assert json.loads(fast.text)["id"] == h.next_id
    run(test)


def test_malformed_params_get_the_sdks_error() -> None:
    async def test(h: Harness) -> None:
        sess = await h.open()
        await h.call(sess, "list_hotel_destinations", {})
        n = h.srv.fast_calls
        bad: list[tuple[Any, dict[str, Any]]] = [
            ({}, {"_meta": 3}), ({}, {"_meta": [1]}), ({}, {"_meta": {"progressToken": 1.5}}),
            ({}, {"_meta": {"progressToken": {"a": 1}}}), ({}, {"task": {"ttl": "soon"}}), ({}, {"task": 5}),
            ([], {}), ([], {"_meta": {"progressToken": 1}}), ("x", {}),
        ]
        for args, extra in bad:
            fast = await h.call(sess, "list_hotel_destinations", args, **extra)
            slow = await h.call(sess, "list_hotel_destinations", args, sdk=True, **extra)
            assert h.srv.fast_calls == n, (args, extra)
            assert fast.status_code == slow.status_code and body(fast) == body(slow), (args, extra)
            assert "error" in json.loads(fast.text), (args, extra, fast.text)
        # a name that is not a string, params that are not an object
        for params in ({"name": 5, "_meta": {"progressToken": 1}}, [1], None):
            msg = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
            fast, slow = await h.post(sess, msg), await h.post(sess, msg, sdk=True)
            assert h.srv.fast_calls == n and body(fast) == body(slow) and "error" in json.loads(fast.text), params
    run(test)


def test_the_fastmcp_client_takes_the_fast_path() -> None:
    fastmcp = pytest.importorskip("fastmcp")
    from fastmcp.client.transports import StreamableHttpTransport

    async def test(h: Harness) -> None:
        app = h.app

        sent: list[dict[str, Any]] = []

        async def record(request: httpx2.Request) -> None:
            if request.method == "POST":
                sent.append(json.loads(request.content))

        def factory(**kwargs: Any) -> httpx2.AsyncClient:
            kwargs.pop("follow_redirects", None)
            kwargs.setdefault("timeout", 30.0)
            return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE,
                                      event_hooks={"request": [record]}, **kwargs)

        transport = StreamableHttpTransport(f"{BASE}/mcp/{ENV}", httpx_client_factory=cast(Any, factory))
        async with fastmcp.Client(transport) as client:
            results = [await client.call_tool_mcp("get_guest_profile", {"guest_id": "G-001"}) for _ in range(4)]
        assert all(not r.is_error and "G-001" in r.content[0].text for r in results)
        assert results[0].structured_content == results[-1].structured_content
        assert h.srv.fast_calls >= 3, "the fastmcp Client's calls did not take the fast path"
        calls = [m for m in sent if m.get("method") == "tools/call"]
        assert calls and all("progressToken" in m["params"]["_meta"] for m in calls)  # what it sends
    run(test)


def test_the_sdk_reads_tool_input_schemas_without_listing_tools() -> None:
    # 2026-07-28 calls (a bound fastmcp Client) check Mcp-Param-* headers against the tool's input schema: the
    # SDK asks the server's lookup instead of running the tools/list handler on every call
    async def test(h: Harness) -> None:
        lookup = h.srv.server.get_tool_input_schema
        assert lookup is not None
        spec = h.manager.spec(ENV)
        for name, tool in spec.tools.items():
            assert lookup(name) == tool.mcp_schema()["inputSchema"]
        assert lookup("no_such_tool") is None
    run(test)
