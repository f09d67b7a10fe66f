"""Does one client's large frame stall the others? (issue 24, part 4, "the wire does not stall").

One ``envfactory serve HotelBooking`` process.  A heavy client, in a process of its own (so that decoding its
~40 MB answer never delays the probes), sends one frame of 150 ``state`` reads of the large state.  A
bystander, on its own connection, sends a small tool call every ``--interval-ms`` on a fixed schedule
(open loop): each probe's latency is measured from the time it was *scheduled*, not sent, so a stall
counts every probe it held back (the correction for coordinated omission; a closed-loop probe that waits
for its answer before sending the next would see one slow probe where a client sees many).  Side by side:
the same probes with no heavy frame.

    python bench/bench_stall.py [--reads 150] [--interval-ms 5] [--repeats 3]   # bench/results/stall.json
    python bench/bench_stall.py --heavy score --reads 5   # bench/results/stall-score.json

``--heavy score``: the heavy frame is ``--reads`` ``score`` requests of a session created from a task and
restored to the large state with 20 times its hotels (3.1 MB; every score compares the whole state with the task's reference and lists
the differences), the long single request of issue 24, part 4: the server computes them on its scoring
thread, so the worker goes on serving others meanwhile.

Target: bystander p99 <= 100 ms while the frame runs, counting the probes a stall held back; the max
is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gym_envfactory.backends.remote import AsyncSessionClient

TOKEN = "bench-stall"

HEAVY = r"""
import asyncio, json, sys, time
from gym_envfactory.backends.remote import AsyncSessionClient
async def main(url, n):
    async with AsyncSessionClient(url, token=sys.argv[3], timeout=900) as c:
        src = (await c.request("create", env="HotelBooking", initial_state="large"))["session_id"]
        forks = await c.request("fork", session_id=src, k=8)
        contact = {"guest_id": "G-001", "phone": "+1 555 0100"}
        await c.batch([("call", {"session_id": s, "name": "update_guest_contact", "arguments": contact}) for s in forks])
        print("ready", flush=True)
        sys.stdin.readline()
        t = time.time()
        out = await c.batch([("state", {"session_id": forks[i % 8]}) for i in range(n)])
        print(json.dumps({"start": t, "end": time.time(), "answers": len(out)}), flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


HEAVY_SCORE = r"""
import asyncio, json, sys, time
from gym_envfactory import get_environment
from gym_envfactory.backends.remote import AsyncSessionClient
async def main(url, n):
    async with AsyncSessionClient(url, token=sys.argv[3], timeout=900) as c:
        big = (await c.request("create", env="HotelBooking", initial_state="large"))["session_id"]
        snap = json.loads(await c.request("snapshot", session_id=big))
        hotels = snap["envs"]["HotelBooking"]["hotels"]
        base = list(hotels.items())
        for copy in range(1, 20):  # 20x the hotels: 3.1 MB of state (the request cap is 4 MiB)
            for k, v in base:
                hotels[f"{k}{copy:02d}"] = {**v, "hotel_id": f"{k}{copy:02d}"}
        snap = json.dumps(snap)
        tid = get_environment("HotelBooking").tasks.ids()[0]
        s = (await c.request("create", env="HotelBooking", task_id=tid))["session_id"]
        await c.request("restore", session_id=s, snapshot=snap)
        await c.request("score", session_id=s)  # parses the restored state, builds the task's reference
        print("ready", flush=True)
        sys.stdin.readline()
        t = time.time()
        out = await c.batch([("score", {"session_id": s}) for i in range(n)])
        print(json.dumps({"start": t, "end": time.time(), "answers": len(out)}), flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def probe_while(url: str, interval: float, proc: subprocess.Popen[str] | None,
                      idle_s: float = 1.0) -> tuple[list[tuple[float, float]], dict[str, Any] | None]:
    """Probes on a fixed schedule, open loop: ``(scheduled wall time, latency in s from the schedule)``
    each.  With ``proc`` (the heavy client, waiting on its stdin), tell it to send its frame 0.5 s in and
    probe until it reports the frame answered; without, probe for ``idle_s``."""
    results: list[tuple[float, float]] = []
    async with AsyncSessionClient(url, token=TOKEN, timeout=120) as c:
        sid = (await c.request("create", env="HotelBooking", initial_state="large"))["session_id"]
        args = {"session_id": sid, "name": "get_hotel_details", "arguments": {"hotel_id": "H-0001"}}
        await c.request("call", **args)
        loop = asyncio.get_running_loop()
        t0, wall0 = loop.time(), time.time()

        async def one(k: int) -> None:
            await c.request("call", **args)
            results.append((wall0 + k * interval, loop.time() - (t0 + k * interval)))

        async def heavy() -> dict[str, Any] | None:
            if proc is None:
                await asyncio.sleep(idle_s)
                return None
            await asyncio.sleep(0.5)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            line = await asyncio.to_thread(proc.stdout.readline)
            await asyncio.sleep(0.2)
            return dict(json.loads(line))

        frame_task = asyncio.create_task(heavy())
        tasks, k = [], 0
        while not frame_task.done():
            delay = t0 + k * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k)))
            k += 1
        await asyncio.gather(*tasks)
        return results, frame_task.result()


def run_once(url: str, reads: int, interval: float, heavy: bool, kind: str = "state") -> dict[str, Any]:
    proc = None
    if heavy:
        script = HEAVY_SCORE if kind == "score" else HEAVY
        proc = subprocess.Popen([sys.executable, "-c", script, url, str(reads), TOKEN], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    probes, frame = asyncio.run(probe_while(url, interval, proc))
    if proc is not None:
        proc.wait(timeout=60)
    during = [lat for t, lat in probes if frame is None or frame["start"] - 0.01 <= t <= frame["end"]]
    lat_ms = [x * 1000 for x in during]
    return {"probes": len(lat_ms), "p50_ms": pct(lat_ms, 0.5), "p99_ms": pct(lat_ms, 0.99), "max_ms": max(lat_ms),
            "frame_s": (frame["end"] - frame["start"]) if frame else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=150, help="requests in the heavy frame")
    ap.add_argument("--heavy", choices=("state", "score"), default="state",
                    help="the heavy frame: state reads of the large state, or scores of a task session holding it")
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    env = {**os.environ, "ENVFACTORY_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0",
                               "--announce"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert server.stdout is not None
    url = json.loads(server.stdout.readline())["listening"]
    rows: dict[str, list[dict[str, Any]]] = {"idle": [], "during_frame": []}
    try:
        for _ in range(a.repeats):
            rows["idle"].append(run_once(url, a.reads, a.interval_ms / 1000, heavy=False))
            rows["during_frame"].append(run_once(url, a.reads, a.interval_ms / 1000, heavy=True, kind=a.heavy))
    finally:
        server.terminate()
        server.wait(timeout=10)
    med = statistics.median
    summary = {case: {k: med([r[k] for r in rs]) for k in ("p50_ms", "p99_ms", "max_ms", "probes")}
               for case, rs in rows.items()}
    idle, busy = summary["idle"], summary["during_frame"]
    frame_s = med([r["frame_s"] for r in rows["during_frame"]])
    print(f"bystander, one probe every {a.interval_ms} ms on a fixed schedule (latency from the schedule), "
          f"median of {a.repeats}; heavy frame: {a.reads} {a.heavy} requests on the large state, {frame_s:.2f} s")
    print(f"{'case':14} {'p99 / idle p99':>15} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'probes':>7}")
    for case, s in summary.items():
        print(f"{case:14} {s['p99_ms'] / idle['p99_ms']:14.1f}x {s['p50_ms']:8.1f} {s['p99_ms']:8.1f} "
              f"{s['max_ms']:8.1f} {s['probes']:7.0f}")
    print(f"target: p99 during the frame <= 100 ms: {'met' if busy['p99_ms'] <= 100 else 'missed'}")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    name = "stall.json" if a.heavy == "state" else f"stall-{a.heavy}.json"
    (out / name).write_text(json.dumps({"heavy": a.heavy, "reads": a.reads, "interval_ms": a.interval_ms, "repeats": a.repeats,
                                                "frame_s": frame_s, "summary": summary, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
