"""Remote benchmark (docs/performance.md): the fast session protocol against FastMCP streamable HTTP, and a
1,024-session soak, side by side in one run.

1. Same tool (HotelBooking get_hotel_details on the large state), same machine, one client:
   FastMCP streamable HTTP (calls/s, p50/p99) vs our WebSocket JSON-RPC fast path, sequential and
   batched (a GRPO-style frame of 64 calls on 64 sessions).
2. Soak: 1,024 concurrent sessions in one server, 1,024 concurrent episodes interleaving writes
   through 8 connections: per-call p99 latency, server peak RSS, RSS after close (leak check), and
   every final state checked against its solo replay.
3. Bystander (T7): one client's /healthz probes and small calls (p50/p99) while another client's single
   frame of expensive calls runs: 64 first calls on fresh forks of the large state (each parses it), and
   4,096 requests (2,048 reset + first-call pairs on 64 sessions: 2,048 parses).  Target p99 <= 100 ms.
Prints figures and ratios and writes bench/results/server.json.  Usage: python bench/bench_server.py [--quick] [--bystander-only]
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from gym_envfactory import get_environment
from gym_envfactory.backends.remote import AsyncSessionClient
from gym_envfactory.replay import task_reference

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
BYSTANDER_ONLY = "--bystander-only" in sys.argv


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_ours() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "ENVFACTORY_TOKEN": "bench"}
    p = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "--all", "--port", "0", "--announce"],
                         stdout=subprocess.PIPE, text=True, env=env)
    return p, json.loads(p.stdout.readline())["listening"]


async def bench_fastmcp(hotel_id: str, n: int) -> dict:
    from fastmcp import Client

    port = free_port()
    p = subprocess.Popen([sys.executable, str(HERE / "_stdio_server.py"), "large", "http", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(HERE.parent), "FASTMCP_LOG_LEVEL": "WARNING"})
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                await asyncio.sleep(0.1)
        lat = []
        async with Client(f"http://127.0.0.1:{port}/mcp") as c:
            await c.call_tool("get_hotel_details", {"hotel_id": hotel_id})
            t0 = time.perf_counter()
            for _ in range(n):
                t = time.perf_counter()
                await c.call_tool("get_hotel_details", {"hotel_id": hotel_id})
                lat.append(time.perf_counter() - t)
            wall = time.perf_counter() - t0
        return {"calls_per_s": n / wall, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3, "n": n}
    finally:
        p.terminate()
        p.wait(timeout=10)


async def bench_fast(url: str, hotel_id: str, n: int) -> dict:
    async with AsyncSessionClient(url, token="bench") as c:
        sid = (await c.request("create", env="HotelBooking", initial_state="large"))["session_id"]
        args = {"hotel_id": hotel_id}
        await c.request("call", session_id=sid, name="get_hotel_details", arguments=args)
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await c.request("call", session_id=sid, name="get_hotel_details", arguments=args)
            lat.append(time.perf_counter() - t)
        seq_wall = time.perf_counter() - t0
        group = [s for s in await c.request("fork", session_id=sid, k=64)]
        frames = max(20, n // 64)
        await c.batch([("call", {"session_id": s, "name": "get_hotel_details", "arguments": args}) for s in group])  # materialise
        flat = []
        t0 = time.perf_counter()
        for _ in range(frames):
            t = time.perf_counter()
            await c.batch([("call", {"session_id": s, "name": "get_hotel_details", "arguments": args}) for s in group])
            flat.append(time.perf_counter() - t)
        batch_wall = time.perf_counter() - t0
        await c.batch([("close", {"session_id": s}) for s in group + [sid]])
    return {"sequential": {"calls_per_s": n / seq_wall, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3, "n": n},
            "batched_64": {"calls_per_s": frames * 64 / batch_wall, "frame_p50_ms": pct(flat, 50) * 1e3,
                           "frame_p99_ms": pct(flat, 99) * 1e3, "frames": frames}}


async def soak(url: str, pid: int, n_sessions: int = 1024, connections: int = 8, think_ms: float = 250.0) -> dict:
    """1,024 sessions open at once; every episode replays its task's ground truth call by call with a
    uniform 0..2*think_ms pause between calls (an LLM's generation time; mean think_ms), so all 1,024
    episodes interleave their writes.  Latency is measured per call at the client."""
    import random

    spec = get_environment("HotelBooking")
    tasks = [t for t in spec.tasks if len(t.envs) == 1 and t.n_ground_truth_calls >= 2]
    clients = [await AsyncSessionClient(url, token="bench", timeout=300).connect() for _ in range(connections)]
    rss0 = rss_kib(pid)
    created = []
    for k in range(0, n_sessions, 256):
        created += await clients[0].batch([("create", {"env": "HotelBooking", "task_id": tasks[i % len(tasks)].task_id})
                                           for i in range(k, min(n_sessions, k + 256))])
    sids = [r["session_id"] for r in created]
    lat: list[float] = []
    peak = [rss_kib(pid)]
    rng = random.Random(0)
    pauses = [[rng.uniform(0, 2 * think_ms) / 1000 for _ in range(64)] for _ in range(n_sessions)]

    async def episode(i: int) -> None:
        c = clients[i % connections]
        task = tasks[i % len(tasks)]
        for j, g in enumerate(g for turn in task.turns for g in turn.ground_truth):
            await asyncio.sleep(pauses[i][j % 64])
            t = time.perf_counter()
            r = await c.request("call", session_id=sids[i], name=g.name, arguments=g.arguments)
            lat.append(time.perf_counter() - t)
            assert r["ok"], r

    async def sample_rss():
        while True:
            peak[0] = max(peak[0], rss_kib(pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample_rss())
    t0 = time.perf_counter()
    await asyncio.gather(*(episode(i) for i in range(n_sessions)))
    wall = time.perf_counter() - t0
    sampler.cancel()
    live = (await clients[0].request("stats"))["sessions"]
    rss_open = rss_kib(pid)
    states = []
    for k in range(0, n_sessions, 128):
        states += await clients[0].batch([("state", {"session_id": s}) for s in sids[k:k + 128]])
    equal = all(st == task_reference(spec, tasks[i % len(tasks)]).final_state for i, st in enumerate(states))
    await clients[0].batch([("close", {"session_id": s}) for s in sids])
    after = (await clients[0].request("stats"))["sessions"]
    rss_closed = rss_kib(pid)
    for c in clients:
        await c.close()
    return {"sessions": n_sessions, "connections": connections, "think_ms_mean": think_ms, "calls": len(lat),
            "wall_s": wall, "offered_calls_per_s": len(lat) / wall,
            "call_p50_ms": pct(lat, 50) * 1e3, "call_p99_ms": pct(lat, 99) * 1e3,
            "all_states_equal_solo_replay": equal, "live_sessions_at_peak": live,
            "live_sessions_after_close": after, "rss_start_mib": rss0 / 1024, "rss_peak_mib": peak[0] / 1024,
            "rss_with_sessions_open_mib": rss_open / 1024, "rss_after_close_mib": rss_closed / 1024}


async def _healthz_probe(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


async def _get_healthz(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], host: str) -> None:
    """One GET /healthz on a kept-alive connection (reads the whole response)."""
    reader, writer = conn
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)


async def bystander(url: str, hotel_id: str, n_requests: int) -> dict:
    """Another client's /healthz and small-call latency while one frame of ``n_requests`` expensive
    requests runs (docs/performance.md T7).  64: the first call on 64 fresh forks of the large state
    (each parses it); more: reset + first-call pairs over 64 sessions (n/2 parses)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    async with AsyncSessionClient(url, token="bench", timeout=900) as heavy, \
            AsyncSessionClient(url, token="bench", timeout=900) as other:
        src = (await heavy.request("create", env="HotelBooking", initial_state="large"))["session_id"]
        group = await heavy.request("fork", session_id=src, k=64)
        args = {"hotel_id": hotel_id}
        if n_requests <= 64:
            frame = [("call", {"session_id": s, "name": "get_hotel_details", "arguments": args}) for s in group[:n_requests]]
        else:
            frame = [r for i in range(n_requests // 2) for r in (
                ("reset", {"session_id": group[i % 64]}),
                ("call", {"session_id": group[i % 64], "name": "get_hotel_details", "arguments": args}))]
        mine = (await other.request("create", env="HotelBooking"))["session_id"]
        await other.request("call", session_id=mine, name="list_hotel_destinations", arguments={})
        conn = await _healthz_probe(host, int(port))
        await _get_healthz(conn, host)
        health: list[float] = []
        calls: list[float] = []
        done = asyncio.Event()

        async def probe_health() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await _get_healthz(conn, host)
                health.append(time.perf_counter() - t)
                await asyncio.sleep(0.005)

        async def probe_calls() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await other.request("call", session_id=mine, name="list_hotel_destinations", arguments={})
                calls.append(time.perf_counter() - t)
                await asyncio.sleep(0.005)

        probes = [asyncio.create_task(probe_health()), asyncio.create_task(probe_calls())]
        await asyncio.sleep(0.05)
        t0 = time.perf_counter()
        out = await heavy.batch(frame)
        wall = time.perf_counter() - t0
        done.set()
        await asyncio.gather(*probes)
        conn[1].close()
        failed = sum(isinstance(r, Exception) for r in out)
        await heavy.batch([("close", {"session_id": s}) for s in group + [src]])
        await other.request("close", session_id=mine)
    return {"requests": len(frame), "parses": sum(1 for m, _ in frame if m == "call"), "failed": failed,
            "heavy_frame_s": wall, "healthz_n": len(health), "healthz_p50_ms": pct(health, 50) * 1e3,
            "healthz_p99_ms": pct(health, 99) * 1e3, "healthz_max_ms": max(health) * 1e3,
            "call_n": len(calls), "call_p50_ms": pct(calls, 50) * 1e3, "call_p99_ms": pct(calls, 99) * 1e3,
            "call_max_ms": max(calls) * 1e3}


def print_bystander(rows: list[dict]) -> None:
    print("bystander while another client's one frame of expensive requests runs (target p99 <= 100 ms; p99/target first):")
    for r in rows:
        print(f"  /healthz p99 {r['healthz_p99_ms'] / 100:5.2f}x target, call p99 {r['call_p99_ms'] / 100:5.2f}x target:"
              f" {r['requests']:5d} requests ({r['parses']} parses of the large state) in {r['heavy_frame_s']:6.2f} s:"
              f"  /healthz p50 {r['healthz_p50_ms']:7.1f} ms  p99 {r['healthz_p99_ms']:7.1f} ms (n={r['healthz_n']})"
              f"  |  call p50 {r['call_p50_ms']:7.1f} ms  p99 {r['call_p99_ms']:7.1f} ms (n={r['call_n']})")


async def main() -> None:
    import gc

    spec = get_environment("HotelBooking")
    for t in spec.tasks:  # the client checks final states against solo replays: compute them first
        task_reference(spec, t)
    gc.collect()
    gc.freeze()  # the load generator's own GC pauses would otherwise show up as server latency
    import json as _j

    hotel_id = next(iter(_j.loads(spec.initial_state_json("large"))["hotels"]))
    n = 300 if QUICK else 2000
    sizes = (64, 1024) if QUICK else (64, 4096)
    if BYSTANDER_ONLY:
        proc, url = start_ours()
        try:
            rows = [await bystander(url, hotel_id, k) for k in sizes]
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "server_bystander.json").write_text(json.dumps({"bystander": rows, "target_p99_ms": 100.0}, indent=2))
        print_bystander(rows)
        print(f"wrote {HERE / 'results' / 'server_bystander.json'}")
        return
    fastmcp = await bench_fastmcp(hotel_id, n // 2)
    proc, url = start_ours()
    try:
        bystanders = [await bystander(url, hotel_id, k) for k in sizes]
        fast = await bench_fast(url, hotel_id, n)
        # an LLM policy's step takes ~1 s to generate: three rounds (memory must plateau), then a
        # stress round at a quarter of that think time
        soaks = [await soak(url, proc.pid, think_ms=1000.0) for _ in range(3)]
        soaks.append(await soak(url, proc.pid, think_ms=250.0))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    out = {"tool": "get_hotel_details", "state": "large", "fastmcp_streamable_http": fastmcp, "fast_session_protocol": fast,
           "ratio_sequential": fast["sequential"]["calls_per_s"] / fastmcp["calls_per_s"],
           "ratio_batched": fast["batched_64"]["calls_per_s"] / fastmcp["calls_per_s"], "target_ratio": 10.0,
           "soak": soaks, "bystander": bystanders, "targets": {"soak_call_p99_ms": 100.0, "bystander_p99_ms": 100.0}}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "server.json").write_text(json.dumps(out, indent=2))
    print("one client, same tool, loopback:")
    print(f"  FastMCP streamable HTTP      {fastmcp['calls_per_s']:8.0f} calls/s  p50 {fastmcp['p50_ms']:.2f} ms  p99 {fastmcp['p99_ms']:.2f} ms")
    s, b = fast["sequential"], fast["batched_64"]
    print(f"  fast protocol, sequential    {s['calls_per_s']:8.0f} calls/s  p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms"
          f"  ({out['ratio_sequential']:.1f}x; target >= 10x)")
    print(f"  fast protocol, 64-call frames {b['calls_per_s']:7.0f} calls/s  frame p50 {b['frame_p50_ms']:.2f} ms"
          f"  ({out['ratio_batched']:.1f}x)")
    for i, k in enumerate(out["soak"], 1):
        print(f"soak {i} (think {k['think_ms_mean']:.0f} ms): {k['sessions']} concurrent sessions, {k['calls']} calls in {k['wall_s']:.1f} s"
              f" ({k['offered_calls_per_s']:.0f}/s): call p50 {k['call_p50_ms']:.1f} ms"
              f" p99 {k['call_p99_ms']:.1f} ms (target <= 100); states == solo replay: {k['all_states_equal_solo_replay']};"
              f" sessions after close {k['live_sessions_after_close']}; RSS start {k['rss_start_mib']:.0f} MiB,"
              f" peak {k['rss_peak_mib']:.0f} MiB, after close {k['rss_after_close_mib']:.0f} MiB")
    print_bystander(bystanders)
    print(f"wrote {HERE / 'results' / 'server.json'}")


if __name__ == "__main__":
    asyncio.run(main())
