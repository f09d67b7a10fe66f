"""Imported-server benchmark (issue 12 part 2, issue 26 defect 1): an imported environment's read, write
and failing write against calling the original class directly, at three state sizes.

The server is tests/generators/fixtures/live/garage_server.py (imported unedited, sandbox "process"); the
state is its notes and trips scaled to about 10 KiB, 600 KiB and 3 MiB.  Measured per size, median per
call, in steady state:

* ``read``: ``count_notes`` (the original method / ``Session.call``);
* ``write``: ``drive`` (adds a trip, advances the odometer);
* ``failing write``: ``crash`` (advances the odometer, then raises: a partial write the session must
  undo; the original keeps its partial write, the import rolls it back);
* ``write after a failure``: ``drive`` right after a ``crash`` (what the next call pays);
* the first call of a new session (builds the instance) and ``fork_many(8)`` of a materialised session.

Prints ratios first (failing write / write: target <= 3x at every size; imported / original), then the
figures, and writes bench/results/import.json.  Asserts nothing about time.
Usage: python bench/bench_import.py [--quick] [--out PATH]
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
from gym_envfactory.session import Session

HERE = Path(__file__).resolve().parent
GARAGE = HERE.parent / "tests" / "generators" / "fixtures" / "live" / "garage_server.py"
QUICK = "--quick" in sys.argv
OUT = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else HERE / "results" / "import.json"
SIZES = (("10KiB", 10 * 1024), ("600KiB", 600 * 1024), ("3MiB", 3 * 1024 * 1024))
TARGET = 3.0  # failing write / successful write, at every size


def med(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _fill(n: int) -> dict:
    return {"drivers": {"ada": "pw"}, "notes": {f"note-{i:06d}": f"remember the {i}th thing " * 2 for i in range(n)},
            "trips": {f"t{i:06d}": {"trip_id": f"t{i:06d}", "driver": "ada", "started_at": "2025-01-01T00:00:00",
                                    "started_ts": 1735689600.0, "bay": i % 7, "lucky_number": i}
                      for i in range(n // 4)}}


def state_of(target_bytes: int) -> dict:
    """Drivers, notes and trips adding up to about ``target_bytes`` of JSON."""
    n = max(4, target_bytes // 230)
    return _fill(max(4, int(n * target_bytes / len(json.dumps(_fill(n))))))


def original_of(source, state: dict):
    api = source.GarageAPI()
    api.load_scenario(state)
    api.login("ada", "pw")
    api.press_brake(60.0)
    api.start_engine()
    return api


def crash_original(api) -> None:
    try:
        api.crash(1)
    except RuntimeError:
        pass


def measure(label: str, target: int, out_dir: Path) -> dict:
    state = state_of(target)
    size = len(json.dumps(state))
    src = out_dir / f"garage_{label.lower()}.py"  # a file of its own per import
    src.write_bytes(GARAGE.read_bytes())
    env = f"BenchGarage{label}"
    spec = import_tool_server(src, name=env, out_dir=out_dir, register=False, validate=False,
                              probe=False, check_isolation=False, sandbox="process", initial_state=state)
    source = sys.modules[f"gym_envfactory._envs.{env}._source"]
    fast, slow = (100, 3) if QUICK else (1000, 7)
    n_fail = (3 if QUICK else 7) if size > 200_000 else (20 if QUICK else 200)

    api = original_of(source, state)
    o_read = med(api.count_notes, fast)
    o_write = med(lambda: api.drive(1), fast)
    o_fail = med(lambda: crash_original(api), fast)

    s = Session(spec)
    for name, args in (("login", {"driver": "ada", "password": "pw"}), ("press_brake", {"force": 60.0}),
                       ("start_engine", {})):
        assert s.call(name, args).ok
    i_read = med(lambda: s.call("count_notes", {}), fast)
    i_write = med(lambda: s.call("drive", {"km": 1}), fast)
    before = s.call("get_mileage", {}).content
    i_fail = med(lambda: s.call("crash", {"km": 1}), n_fail)
    assert s.call("get_mileage", {}).content == before, "a failing write changed the state"

    def fail_then_write() -> float:
        s.call("crash", {"km": 1})
        t = time.perf_counter()
        s.call("drive", {"km": 1})
        return time.perf_counter() - t

    i_after = statistics.median(fail_then_write() for _ in range(n_fail))

    def first_call() -> None:
        Session(spec).call("count_notes", {})

    first = med(first_call, slow)
    fork8 = med(lambda: s.fork_many(8), slow)
    return {"label": label, "state_bytes": size,
            "original_read_s": o_read, "original_write_s": o_write, "original_failing_write_s": o_fail,
            "read_s": i_read, "write_s": i_write, "failing_write_s": i_fail, "write_after_failure_s": i_after,
            "first_call_s": first, "fork_many_8_s": fork8,
            "failing_over_write": i_fail / i_write, "meets_target": i_fail / i_write <= TARGET}


def us(x: float) -> str:
    return f"{x * 1e6:10.1f}us" if x < 0.01 else f"{x * 1e3:10.1f}ms"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(label, size, Path(tmp)) for label, size in SIZES]
    print(f"ratios (target: failing write <= {TARGET:.0f}x a successful write, imported environment):")
    print(f"  {'state':>9} {'fail/write':>11} {'read/orig':>10} {'write/orig':>11} {'fail/orig':>10} "
          f"{'write-after-fail/write':>23}")
    for r in rows:
        print(f"  {r['state_bytes'] / 1024:7.0f}KiB {r['failing_over_write']:10.2f}x "
              f"{r['read_s'] / r['original_read_s']:9.1f}x {r['write_s'] / r['original_write_s']:10.1f}x "
              f"{r['failing_write_s'] / r['original_failing_write_s']:9.1f}x "
              f"{r['write_after_failure_s'] / r['write_s']:22.2f}x  {'ok' if r['meets_target'] else 'OVER TARGET'}")
    print("figures (median per call; original = the class's own method, imported = Session.call):")
    print(f"  {'state':>9} {'orig read':>12} {'orig write':>12} {'orig fail':>12} {'read':>12} {'write':>12} "
          f"{'failing wr':>12} {'wr after fail':>13} {'1st call':>12} {'fork_many(8)':>12}")
    for r in rows:
        print(f"  {r['state_bytes'] / 1024:7.0f}KiB {us(r['original_read_s'])} {us(r['original_write_s'])} "
              f"{us(r['original_failing_write_s'])} {us(r['read_s'])} {us(r['write_s'])} {us(r['failing_write_s'])} "
              f"{us(r['write_after_failure_s'])}  {us(r['first_call_s'])} {us(r['fork_many_8_s'])}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"python": platform.python_version(), "quick": QUICK, "target": TARGET,
                               "rows": rows}, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
