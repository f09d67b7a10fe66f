"""Runtime benchmark (docs/performance.md): in-process sessions against MCP, side by side in one run.

Measures on HotelBooking's large initial state (~1,000 records):
  1. tool-call latency: direct Python function call, Session.call (validation + typed result), and a
     FastMCP in-memory client call of the same tool;
  2. episode start: Session.reset (and reset + first call, which materialises the state) against
     starting one stdio MCP server process per episode (upstream EnvFactory) up to its first result;
  3. GRPO fork of 8 sessions of a materialised session (and fork + first call in each; target <= 2 ms,
     issue 10 part 2: copy-on-write states);
  4. a read-only tool that scans whole collections (search_hotels): steady state, and the first call in a
     fresh fork (under shared reads it copies nothing, docs/performance.md);
  5. memory: RSS per forked session for 1,000 forks (200 with --quick) of a materialised session, each
     with one read and one write call.
Part 1 alternates blocks of Session.call and FastMCP calls so machine load hits both alike, first for a
trivial tool (a counter's read: T1, FastMCP in-memory / Session.call >= 100x, issue 10 part 8), then for
get_hotel_details on the large state (a real tool whose own body costs microseconds: shown for scale).
Prints figures and ratios against the targets and writes bench/results/runtime.json.
Usage: python bench/bench_runtime.py [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from gym_envfactory import Session, get_environment

if TYPE_CHECKING:
    from HotelBooking.state import HotelDB

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv


class Summary(TypedDict):
    p50_us: float
    p99_us: float
    mean_us: float
    n: int


class ToolCallPart(TypedDict):
    tool: str
    direct_python: Summary
    session_call: Summary
    fastmcp_in_memory: Summary
    ratio_fastmcp_over_session_p50: float
    session_call_thread_cpu: Summary
    fastmcp_in_memory_thread_cpu: Summary
    ratio_fastmcp_over_session_thread_cpu_p50: float
    load_average_1min: float | None
    target_ratio: float


class EpisodeStart(TypedDict):
    session_reset: Summary
    session_reset_plus_first_call: Summary
    new_session_plus_first_call: Summary
    stdio_server_per_episode_to_first_result: Summary
    ratio_stdio_over_reset_p50: float
    ratio_stdio_over_reset_plus_first_call_p50: float
    target_ratio: float
    state_json_bytes: int


class GrpoFork(TypedDict):
    fork_many_8: Summary
    fork_many_8_plus_first_call_each: Summary
    target_plus_first_call_us: float


class ScanTool(TypedDict):
    tool: str
    steady_state: Summary
    first_call_in_a_fresh_fork: Summary


class ForkMemory(TypedDict):
    forks: int
    calls_per_fork: list[str]
    rss_growth_bytes: int
    rss_per_fork_bytes: float
    state_json_bytes: int


class RuntimeResults(TypedDict):
    """bench/results/runtime.json: the parts are filled in as they are measured."""
    machine: dict[str, Any]
    state: dict[str, Any]
    tool: str
    tool_call_trivial: NotRequired[ToolCallPart]
    tool_call: NotRequired[ToolCallPart]
    episode_start: NotRequired[EpisodeStart]
    grpo_fork_8: NotRequired[GrpoFork]
    scan_tool: NotRequired[ScanTool]
    fork_memory: NotRequired[ForkMemory]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timeit(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def summary(xs: list[float]) -> Summary:
    return {"p50_us": pct(xs, 50) * 1e6, "p99_us": pct(xs, 99) * 1e6, "mean_us": statistics.fmean(xs) * 1e6, "n": len(xs)}


def _counter_env():
    """The issue's trivial tool: a read of one integer (code-defined, not registered)."""
    from pydantic import BaseModel

    from gym_envfactory import define_environment, tool

    class Counter(BaseModel):
        value: int = 0

    @tool(read_only=True)
    def get_value(state: Counter) -> int:
        """The counter's value."""
        return state.value

    get_value.__annotations__["state"] = Counter
    return define_environment("BenchCounter", Counter, [get_value], register=False)


def tool_call_part(spec, session: Session, name: str, args: dict, direct_fn, n: int) -> ToolCallPart:
    """Session.call against a FastMCP in-memory client call of the same tool (whose handler calls a second
    session), in alternating blocks so machine load hits both alike; also the bare function."""
    from fastmcp import Client, FastMCP

    direct = timeit(direct_fn, n)
    mcp = FastMCP("bench")
    mcp_session = Session(spec, session_initial(session))

    async def handler(**kwargs) -> dict:
        r = mcp_session.call(name, kwargs)
        return {"result": r.content} if r.ok else {"error": r.error}

    mcp.tool(name=name)(_with_signature(handler, args))
    cpu = time.thread_time  # this thread's CPU time: what each call costs, without the time others' load takes

    async def alternating(rounds: int, k_session: int, k_mcp: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"call": [], "mcp": [], "call_cpu": [], "mcp_cpu": []}
        async with Client(mcp) as c:
            await c.call_tool(name, args)
            for _ in range(rounds):
                session.reset()  # a bounded action log, as in an episode
                session.call(name, args)
                for _ in range(k_session):
                    t, u = time.perf_counter(), cpu()
                    session.call(name, args)
                    out["call_cpu"].append(cpu() - u)
                    out["call"].append(time.perf_counter() - t)
                for _ in range(k_mcp):
                    t, u = time.perf_counter(), cpu()
                    await c.call_tool(name, args)
                    out["mcp_cpu"].append(cpu() - u)
                    out["mcp"].append(time.perf_counter() - t)
        return out

    alt = asyncio.run(alternating(10 if QUICK else 20, n // 10 if QUICK else n // 20, 30 if QUICK else 100))
    call, mcp_mem = alt["call"], alt["mcp"]
    return {
        "tool": name,
        "direct_python": summary(direct),
        "session_call": summary(call),
        "fastmcp_in_memory": summary(mcp_mem),
        "ratio_fastmcp_over_session_p50": pct(mcp_mem, 50) / pct(call, 50),
        "session_call_thread_cpu": summary(alt["call_cpu"]),
        "fastmcp_in_memory_thread_cpu": summary(alt["mcp_cpu"]),
        "ratio_fastmcp_over_session_thread_cpu_p50": pct(alt["mcp_cpu"], 50) / pct(alt["call_cpu"], 50),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "target_ratio": 100.0,
    }


def session_initial(session: Session):
    """The session's initial state as a reference a new Session accepts (its name when it has one)."""
    return "large" if session.envs and "HotelBooking" in session.envs else None


def _with_signature(fn, args: dict):
    """``fn`` with a signature naming ``args``' keys as string parameters (FastMCP derives the schema)."""
    import inspect

    params = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, annotation=str) for k in args]
    fn.__signature__ = inspect.Signature(params, return_annotation=dict)
    fn.__annotations__ = {k: str for k in args} | {"return": dict}
    return fn


def main() -> None:
    spec = get_environment("HotelBooking")
    session = Session(spec, "large")
    state = cast("HotelDB", session.state_model())
    hotel_id = next(iter(state.hotels))
    args = {"hotel_id": hotel_id}
    tool = spec.tools["get_hotel_details"]
    n = 2000 if QUICK else 20000
    results: RuntimeResults = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "state": {"env": "HotelBooking", "initial_state": "large", "bytes": len(spec.initial_state_json("large"))},
        "tool": "get_hotel_details",
    }

    # 1. tool-call latency (Session.call and FastMCP in alternating blocks), for the trivial tool
    #    (a counter's read) and for a real read of the large state (get_hotel_details)
    counter = _counter_env()
    c_session = Session(counter)
    c_state = Session(counter).state_model()
    results["tool_call_trivial"] = tool_call_part(counter, c_session, "get_value", {},
                                                  lambda: counter.tools["get_value"].fn(c_state), n)
    results["tool_call"] = tool_call_part(spec, session, "get_hotel_details", args,
                                          lambda: tool.fn(state, hotel_id=hotel_id), n)
    session.reset()

    # 2. episode start
    reset = timeit(lambda: session.reset(), 2000)
    def reset_first():
        session.reset()
        session.call("get_hotel_details", args)
    reset_first_call = timeit(reset_first, 200 if QUICK else 1000)
    init = spec.initial_state_json("large")
    new_session = timeit(lambda: Session(spec, "large").call("get_hotel_details", args), 200 if QUICK else 1000)

    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    async def stdio_episode() -> float:
        t = time.perf_counter()
        transport = StdioTransport(command=sys.executable, args=[str(HERE / "_stdio_server.py"), "large"],
                                   env={**os.environ, "PYTHONPATH": str(HERE.parent), "FASTMCP_LOG_LEVEL": "WARNING"})
        async with Client(transport) as c:
            await c.call_tool("get_hotel_details", args)
        return time.perf_counter() - t

    stdio = [asyncio.run(stdio_episode()) for _ in range(3 if QUICK else 8)]
    results["episode_start"] = {
        "session_reset": summary(reset),
        "session_reset_plus_first_call": summary(reset_first_call),
        "new_session_plus_first_call": summary(new_session),
        "stdio_server_per_episode_to_first_result": summary(stdio),
        "ratio_stdio_over_reset_p50": pct(stdio, 50) / pct(reset, 50),
        "ratio_stdio_over_reset_plus_first_call_p50": pct(stdio, 50) / pct(reset_first_call, 50),
        "target_ratio": 500.0,
        "state_json_bytes": len(init),
    }

    # 3. GRPO fork of 8
    base = Session(spec, "large")
    base.call("get_hotel_details", args)  # materialised, as mid-episode
    fork8 = timeit(lambda: base.fork_many(8), 500)
    def fork8_first():
        for f in base.fork_many(8):
            f.call("get_hotel_details", args)
    fork8_first_call = timeit(fork8_first, 50 if QUICK else 200)
    results["grpo_fork_8"] = {
        "fork_many_8": summary(fork8),
        "fork_many_8_plus_first_call_each": summary(fork8_first_call),
        "target_plus_first_call_us": 2000.0,
    }

    # 4. a scan tool (search_hotels walks every hotel and its room types)
    city = state.cities[state.hotels[hotel_id].city_id].name
    night = state.now.date().toordinal() + 9
    from datetime import date
    scan_args = {"city": city, "check_in": str(date.fromordinal(night)), "check_out": str(date.fromordinal(night + 2))}
    assert base.call("search_hotels", scan_args).ok
    scan_steady = timeit(lambda: base.call("search_hotels", scan_args), 300 if QUICK else 2000)
    scan_first = []
    for _ in range(100 if QUICK else 400):
        fresh = base.fork()
        t = time.perf_counter()
        fresh.call("search_hotels", scan_args)
        scan_first.append(time.perf_counter() - t)
    results["scan_tool"] = {
        "tool": "search_hotels",
        "steady_state": summary(scan_steady),
        "first_call_in_a_fresh_fork": summary(scan_first),
    }

    # 5. memory per forked session: 1,000 forks, one read and one write each
    guest_id = next(iter(state.guests))
    k_mem = 200 if QUICK else 1000
    gc.collect()
    rss0 = rss_bytes()
    kept = []
    for i in range(k_mem):
        f = base.fork()
        f.call("get_hotel_details", args)
        assert f.call("update_guest_contact", {"guest_id": guest_id, "phone": f"+1 555 {i:07d}"}).ok
        kept.append(f)
    gc.collect()
    rss1 = rss_bytes()
    results["fork_memory"] = {
        "forks": k_mem,
        "calls_per_fork": ["get_hotel_details", "update_guest_contact"],
        "rss_growth_bytes": rss1 - rss0,
        "rss_per_fork_bytes": (rss1 - rss0) / k_mem,
        "state_json_bytes": len(init),
    }
    del kept

    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "runtime.json").write_text(json.dumps(results, indent=2))

    tc, es, fk = results["tool_call"], results["episode_start"], results["grpo_fork_8"]
    sc, fm = results["scan_tool"], results["fork_memory"]
    for part, label in ((results["tool_call_trivial"], "(T1 target >= 100x) the trivial tool get_value (a counter's read)"),
                        (tc, f"(for scale, no target) HotelBooking large state ({es['state_json_bytes'] / 1024:.0f} "
                             "KiB JSON), tool get_hotel_details")):
        print(f"ratio FastMCP in-memory / Session.call = {part['ratio_fastmcp_over_session_p50']:.1f}x wall, "
              f"{part['ratio_fastmcp_over_session_thread_cpu_p50']:.1f}x thread CPU time {label}")
        print("  tool call p50 / p99:")
        for k in ("direct_python", "session_call", "fastmcp_in_memory"):
            print(f"    {k:<22} {part[k]['p50_us']:10.1f} us {part[k]['p99_us']:10.1f} us")
    print(f"  (1-min load average {tc['load_average_1min']}: FastMCP's wall time grows fastest under load)")
    print("episode start p50:")
    for start in ("session_reset", "session_reset_plus_first_call", "new_session_plus_first_call", "stdio_server_per_episode_to_first_result"):
        print(f"  {start:<42} {es[start]['p50_us'] / 1000:10.3f} ms")
    print(f"  ratio stdio server / (reset + first call) = {es['ratio_stdio_over_reset_plus_first_call_p50']:.0f}x (target >= 500x)")
    print(f"  ratio stdio server / reset alone          = {es['ratio_stdio_over_reset_p50']:.0f}x (reset is lazy: the first call parses the state)")
    print("GRPO fork of 8 (of a materialised session) p50 / p99:")
    f8, f8c = fk["fork_many_8"], fk["fork_many_8_plus_first_call_each"]
    print(f"  fork_many(8) + first call in each  {f8c['p50_us']:10.1f} us {f8c['p99_us']:10.1f} us (target <= 2000 us)")
    print(f"  fork_many(8) alone                 {f8['p50_us']:10.1f} us {f8['p99_us']:10.1f} us")
    print("scan tool search_hotels p50 / p99:")
    for case in ("steady_state", "first_call_in_a_fresh_fork"):
        print(f"  {case:<34} {sc[case]['p50_us']:10.1f} us {sc[case]['p99_us']:10.1f} us")
    print(f"memory: {fm['forks']} forks (one read + one write each): RSS +{fm['rss_growth_bytes'] / 2**20:.1f} MiB, "
          f"{fm['rss_per_fork_bytes'] / 1024:.1f} KiB per fork (state JSON {fm['state_json_bytes'] / 1024:.0f} KiB)")
    print(f"wrote {out_dir / 'runtime.json'}")


if __name__ == "__main__":
    main()
