"""MCP endpoint benchmark (docs/performance.md T3, MCP half): `envfactory serve`'s MCP endpoint against FastMCP
streamable HTTP, same client, same tool, same state, side by side in one run.

One client (httpx2 speaking MCP streamable HTTP directly: initialize, notifications/initialized, then
``tools/call`` POSTs with ``Mcp-Session-Id`` and ``MCP-Protocol-Version``, reading a JSON or an SSE
response) calls HotelBooking ``get_hotel_details`` sequentially N times on the large initial state against

(a) FastMCP streamable HTTP serving a tool that wraps one Session (bench/_stdio_server.py in HTTP mode), and
(b) ``envfactory serve``'s MCP endpoint ``/mcp/HotelBooking``, bound (``X-Envfactory-Session``) to a
    session created on the large state through the control plane.

With ``--sdk`` the official ``mcp`` SDK client (``mcp.client.Client`` over ``streamable_http_client``)
runs the same comparison too, and with ``--fastmcp`` the fastmcp ``Client`` (over its
``StreamableHttpTransport``; it sends ``params._meta.progressToken`` on every call and, bound by
``X-Envfactory-Session``, speaks the sessionless 2026-07-28 era).  Each comparison runs ``--reps`` times (default 3), alternating the two
servers, and reports min/median/max calls/s; the ratio (ours / FastMCP, target >= 1, goal 2) is printed
first.  Writes bench/results/mcp.json.

Usage: python bench/bench_mcp.py [--quick] [--sdk] [--fastmcp] [--reps R] [--n N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx

from gym_envfactory import get_environment

HERE = Path(__file__).resolve().parent
PROTOCOL = "2025-11-25"
TOOL = "get_hotel_details"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ours() -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}
    p = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0", "--announce"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    return p, json.loads(p.stdout.readline())["listening"]  # type: ignore[union-attr]


def start_fastmcp() -> tuple[subprocess.Popen, str]:
    port = free_port()
    p = subprocess.Popen([sys.executable, str(HERE / "_stdio_server.py"), "large", "http", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(HERE.parent), "FASTMCP_LOG_LEVEL": "WARNING"})
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.1)
    return p, f"http://127.0.0.1:{port}"


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()


def _message(resp: Any) -> dict[str, Any]:
    """The JSON-RPC response in a streamable-HTTP reply: a JSON body, or the last ``data:`` event of SSE."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in resp.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return resp.json()


class RawClient:
    """A minimal MCP streamable-HTTP client (handshake era): the same bytes to both servers."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                        **(headers or {})}
        self.http = httpx.AsyncClient(timeout=60)
        self.next_id = 0

    async def __aenter__(self) -> RawClient:
        init = await self.http.post(self.url, headers=self.headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        assert "result" in _message(init), init.text
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        if init.headers.get("mcp-session-id"):
            self.headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
        r = await self.http.post(self.url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status_code == 202, r.text
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        r = await self.http.post(self.url, headers=self.headers, json={
            "jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
        msg = _message(r)
        assert msg.get("id") == self.next_id and not msg["result"].get("isError"), r.text[:300]
        return msg["result"]

    async def __aexit__(self, *exc: Any) -> None:
        if "Mcp-Session-Id" in self.headers:
            await self.http.delete(self.url, headers=self.headers)
        await self.http.aclose()


class SdkClient:
    """The official ``mcp`` SDK client over streamable HTTP (2.x ``Client``)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        from mcp.client import Client
        from mcp.client.streamable_http import streamable_http_client

        self.http = httpx.AsyncClient(headers=headers or {}, timeout=60)
        self.client = Client(streamable_http_client(url, http_client=self.http), mode="legacy")

    async def __aenter__(self) -> SdkClient:
        await self.client.__aenter__()
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        res = await self.client.call_tool(name, arguments)
        assert not res.is_error, res
        return res

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)
        await self.http.aclose()


class FastMcpClient:
    """The fastmcp ``Client`` over streamable HTTP (sends ``_meta.progressToken`` with every call)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        from fastmcp import Client
        from fastmcp.client.transports import StreamableHttpTransport

        self.client = Client(StreamableHttpTransport(url, headers=headers or {}))

    async def __aenter__(self) -> FastMcpClient:
        await self.client.__aenter__()
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        res = await self.client.call_tool_mcp(name, arguments)
        assert not res.is_error, res
        return res

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)


async def run_calls(client_cls: type, url: str, headers: dict[str, str], hotel_id: str, n: int) -> dict[str, float]:
    args = {"hotel_id": hotel_id}
    async with client_cls(url, headers) as c:
        for _ in range(max(10, n // 20)):  # warm-up
            await c.call(TOOL, args)
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await c.call(TOOL, args)
            lat.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
    return {"calls_per_s": n / wall, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3, "n": n}


async def bound_session(base: str) -> str:
    async with httpx.AsyncClient(timeout=30) as hc:
        r = await hc.post(f"{base}/v1/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "create",
                                                  "params": {"env": "HotelBooking", "initial_state": "large"}})
        return r.json()["result"]["session_id"]


def summary(runs: list[dict[str, float]], key: str) -> dict[str, float]:
    xs = [r[key] for r in runs]
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


async def compare(client_cls: type, fm_url: str, ours_url: str, ours_headers: dict[str, str], hotel_id: str,
                  n: int, reps: int) -> dict[str, Any]:
    fm, ours = [], []
    for _ in range(reps):  # alternate, so both see the same machine load
        fm.append(await run_calls(client_cls, fm_url, {}, hotel_id, n))
        ours.append(await run_calls(client_cls, ours_url, ours_headers, hotel_id, n))
    ratios = [o["calls_per_s"] / f["calls_per_s"] for o, f in zip(ours, fm, strict=True)]
    return {"fastmcp": fm, "ours": ours, "ratio_runs": ratios,
            "ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
            "fastmcp_calls_per_s": summary(fm, "calls_per_s"), "ours_calls_per_s": summary(ours, "calls_per_s"),
            "fastmcp_p50_ms": summary(fm, "p50_ms"), "ours_p50_ms": summary(ours, "p50_ms"),
            "fastmcp_p99_ms": summary(fm, "p99_ms"), "ours_p99_ms": summary(ours, "p99_ms")}


def show(label: str, r: dict[str, Any]) -> None:
    def mmm(s: dict[str, float], fmt: str) -> str:
        return f"{s['min']:{fmt}}/{s['median']:{fmt}}/{s['max']:{fmt}}"

    print(f"{label}: ratio ours/FastMCP {mmm(r['ratio'], '.2f')}x (min/median/max; target >= 1x, goal 2x)")
    print(f"  FastMCP streamable HTTP    {mmm(r['fastmcp_calls_per_s'], '.0f')} calls/s"
          f"  p50 {mmm(r['fastmcp_p50_ms'], '.2f')} ms  p99 {mmm(r['fastmcp_p99_ms'], '.2f')} ms")
    print(f"  envfactory serve /mcp      {mmm(r['ours_calls_per_s'], '.0f')} calls/s"
          f"  p50 {mmm(r['ours_p50_ms'], '.2f')} ms  p99 {mmm(r['ours_p99_ms'], '.2f')} ms")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls")
    ap.add_argument("--sdk", action="store_true", help="also compare with the official mcp SDK client")
    ap.add_argument("--fastmcp", action="store_true", help="also compare with the fastmcp Client")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=None, help="calls per run (default 1000, --quick 200)")
    a = ap.parse_args()
    n = a.n or (200 if a.quick else 1000)
    spec = get_environment("HotelBooking")
    hotel_id = next(iter(json.loads(spec.initial_state_json("large"))["hotels"]))
    fm_proc, fm_base = start_fastmcp()
    ours_proc, ours_base = start_ours()
    out: dict[str, Any] = {"tool": TOOL, "state": "large", "protocol": PROTOCOL, "n": n, "reps": a.reps,
                           "target_ratio": 1.0, "goal_ratio": 2.0}
    try:
        sid = await bound_session(ours_base)
        hdr = {"X-Envfactory-Session": sid}
        out["raw_client"] = await compare(RawClient, f"{fm_base}/mcp", f"{ours_base}/mcp/HotelBooking", hdr,
                                          hotel_id, n, a.reps)
        if a.sdk:
            out["sdk_client"] = await compare(SdkClient, f"{fm_base}/mcp", f"{ours_base}/mcp/HotelBooking", hdr,
                                              hotel_id, n, a.reps)
        if a.fastmcp:
            out["fastmcp_client"] = await compare(FastMcpClient, f"{fm_base}/mcp", f"{ours_base}/mcp/HotelBooking",
                                                  hdr, hotel_id, n, a.reps)
    finally:
        stop(fm_proc)
        stop(ours_proc)
    out["ratio"] = out["raw_client"]["ratio"]["median"]
    show(f"one client (httpx, MCP {PROTOCOL} over streamable HTTP), {n} sequential {TOOL} calls on the large state, "
         f"{a.reps} runs", out["raw_client"])
    if a.sdk:
        show("the official mcp SDK client, same calls", out["sdk_client"])
    if a.fastmcp:
        show("the fastmcp Client, same calls", out["fastmcp_client"])
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "mcp.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {HERE / 'results' / 'mcp.json'}")


if __name__ == "__main__":
    asyncio.run(main())
