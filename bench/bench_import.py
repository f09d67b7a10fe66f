"""Imported-server benchmark (issue 12, part 2): a tool call on the session's live API instance against the
per-call rebuild the bridge did before (fresh instance, load_scenario, call, save_scenario, validate, write
back), at about 0.7 MiB and 3 MiB of state, beside the original server's own method call.

The server is tests/generators/fixtures/live/garage_server.py (imported unedited, sandbox "process"); the
state is its notes and trips scaled to size.  Measured per size: a read (count_notes) and a write (drive)
in steady state, the first call of a new session (builds the instance), a state read after a write (brings
the fields up to date), fork_many(8) of a materialised session, and a fork plus its first call (the child
deep-copies the parent's instance then).  Prints ratios first, then the figures, and
writes bench/results/import.json.
Usage: python bench/bench_import.py [--quick]
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gym_envfactory.generators.importer import import_tool_server
from gym_envfactory.generators.importer.bridge import write_back
from gym_envfactory.session import Session

HERE = Path(__file__).resolve().parent
GARAGE = HERE.parent / "tests" / "generators" / "fixtures" / "live" / "garage_server.py"
QUICK = "--quick" in sys.argv


def med(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def state_of(target_bytes: int) -> dict:
    """Drivers, notes and trips adding up to about ``target_bytes`` of JSON."""
    per = 230  # bytes of JSON per (note + trip/4) unit, measured below and scaled once
    n = max(1, target_bytes // per)
    state = {"drivers": {"ada": "pw"}, "notes": {f"note-{i:06d}": f"remember the {i}th thing " * 2 for i in range(n)},
             "trips": {f"t{i:06d}": {"trip_id": f"t{i:06d}", "driver": "ada", "started_at": "2025-01-01T00:00:00",
                                     "started_ts": 1735689600.0, "bay": i % 7, "lucky_number": i}
                       for i in range(n // 4)}}
    size = len(json.dumps(state))
    scale = target_bytes / size
    n = int(n * scale)
    state["notes"] = {f"note-{i:06d}": f"remember the {i}th thing " * 2 for i in range(n)}
    state["trips"] = {f"t{i:06d}": {"trip_id": f"t{i:06d}", "driver": "ada", "started_at": "2025-01-01T00:00:00",
                                    "started_ts": 1735689600.0, "bay": i % 7, "lucky_number": i} for i in range(n // 4)}
    return state


def rebuild_call(server, state, tool: str, arguments: dict):
    """What ImportedServer.call did per call before issue 12 part 2 (same steps, same order)."""
    api = server.api_class()
    api.load_scenario(state.model_dump(mode="json"))
    result = getattr(api, tool)(**arguments)
    import pydantic_core

    saved = server.state_model.model_validate(pydantic_core.to_jsonable_python(api.save_scenario()))
    write_back(state, saved)
    return result


def measure(label: str, target: int, out_dir: Path) -> dict:
    state = state_of(target)
    size = len(json.dumps(state))
    src = out_dir / f"garage_{label.lower()}.py"  # a file of its own per import
    src.write_bytes(GARAGE.read_bytes())
    spec = import_tool_server(src, name=f"BenchGarage{label}", out_dir=out_dir, register=False, validate=False,
                              probe=False, check_isolation=False, sandbox="process", initial_state=state)
    tools_mod = sys.modules[f"gym_envfactory._envs.BenchGarage{label}.tools"]
    server = tools_mod._SERVER
    source = sys.modules[f"gym_envfactory._envs.BenchGarage{label}._source"]
    n_fast, n_slow = (200, 3) if QUICK else (2000, 7)

    original = source.GarageAPI()
    original.load_scenario(state)
    t_original = med(original.count_notes, n_fast)

    s = Session(spec)
    for name, args in (("login", {"driver": "ada", "password": "pw"}), ("press_brake", {"force": 60.0}),
                       ("start_engine", {})):
        assert s.call(name, args).ok
    t_read = med(lambda: s.call("count_notes", {}), n_fast)
    t_write = med(lambda: s.call("drive", {"km": 1}), n_fast // 4)

    def first_call():
        fresh = Session(spec)
        fresh.call("count_notes", {})

    t_first = med(first_call, n_slow)

    def write_then_read():
        s.call("drive", {"km": 1})
        s.state_bytes()

    t_state = med(write_then_read, n_slow)
    t_fork = med(lambda: s.fork_many(8), n_slow)
    t_fork_call = med(lambda: s.fork_many(1)[0].call("count_notes", {}), n_slow)  # the child copies the instance

    plain = spec.state_model.model_validate(state)
    t_old_read = med(lambda: rebuild_call(server, plain, "count_notes", {}), n_slow)
    return {"label": label, "state_bytes": size, "original_read_s": t_original, "live_read_s": t_read,
            "live_write_s": t_write, "rebuild_read_s": t_old_read, "first_call_s": t_first,
            "write_then_state_bytes_s": t_state, "fork_many_8_s": t_fork,
            "fork_then_first_call_s": t_fork_call}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure("Small", 700 * 1024, Path(tmp)), measure("Large", 3 * 1024 * 1024, Path(tmp))]
    print("ratios (per-call rebuild before / live instance now):")
    for r in rows:
        print(f"  {r['state_bytes'] / 2**20:5.2f} MiB  read: {r['rebuild_read_s'] / r['live_read_s']:10,.0f}x faster   "
              f"live read / original method: {r['live_read_s'] / r['original_read_s']:6.1f}x")
    print("figures (median):")
    print(f"  {'state':>9} {'original':>10} {'live read':>10} {'live write':>10} {'rebuild':>10} "
          f"{'1st call':>10} {'write+state':>11} {'fork_many(8)':>12} {'fork+call':>10}")
    for r in rows:
        print(f"  {r['state_bytes'] / 2**20:6.2f}MiB {r['original_read_s'] * 1e6:8.2f}us {r['live_read_s'] * 1e6:8.1f}us "
              f"{r['live_write_s'] * 1e6:8.1f}us {r['rebuild_read_s'] * 1e3:8.1f}ms {r['first_call_s'] * 1e3:8.1f}ms "
              f"{r['write_then_state_bytes_s'] * 1e3:9.1f}ms {r['fork_many_8_s'] * 1e3:10.1f}ms "
              f"{r['fork_then_first_call_s'] * 1e3:8.1f}ms")
    out = HERE / "results" / "import.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"python": platform.python_version(), "quick": QUICK, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
