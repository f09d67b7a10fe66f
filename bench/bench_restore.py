"""``Session.restore`` cost against state size (issue 24, part 6): the lazy restore (state bytes kept, parsed on
first use) side by side with the eager one it replaced (every state parsed into Python, validated by its
model and dumped again inside ``restore``), on HotelBooking small, large and large with its collections
repeated x4 and x8.

For each size: ``restore`` alone, and ``restore`` + the first call (``get_hotel_details``, which parses the
state, with the parsed-base cache cleared: the cost a lazy restore moves to first use), min of ``--reps`` runs, and the
growth exponent between the smallest and the largest state (time ~ size^k).  Writes
bench/results/restore.json.

Usage: python bench/bench_restore.py [--reps R]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from gym_envfactory import get_environment
from gym_envfactory.environment import cow
from gym_envfactory.errors import SnapshotError
from gym_envfactory.session import ActionRecord, Session, ToolResult

HERE = Path(__file__).resolve().parent


def eager_restore(s: Session, data: bytes) -> None:
    """What ``Session.restore`` did before it was lazy (the reference for the comparison)."""
    obj = json.loads(data)
    envs, records = obj["envs"], obj["log"]
    if set(envs) != set(s.envs):
        raise SnapshotError("envs")
    pending = {n: s.envs[n].state_model.model_validate(raw).model_dump_json().encode() for n, raw in envs.items()}
    log = [ActionRecord(int(r["index"]), str(r["name"]), r["raw_arguments"], ToolResult(**r["result"]), r.get("tag"))
           for r in records]
    s._pending, s._unchecked, s._states, s._log = pending, set(), {}, log


def scaled(state: dict[str, Any], k: int) -> dict[str, Any]:
    return {key: ({f"{kk}~{i}" if i else kk: vv for i in range(k) for kk, vv in v.items()} if isinstance(v, dict) else v)
            for key, v in state.items()}


def best(f: Any, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return min(out) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    spec = get_environment("HotelBooking")
    large = json.loads(spec.initial_state_json("large"))
    sizes = {"small": json.loads(spec.initial_state_json("small")), "large": large,
             "large x4": scaled(large, 4), "large x8": scaled(large, 8)}
    rows: list[dict[str, Any]] = []
    for label, state in sizes.items():
        spec.state_model.model_validate(state)
        snap = json.dumps({"v": 1, "envs": {"HotelBooking": state}, "log": []}, separators=(",", ":")).encode()
        hotel = next(iter(state["hotels"]))
        s = Session(spec, "small")
        row: dict[str, Any] = {"state": label, "bytes": len(snap)}
        for name, restore in (("eager", lambda d, s=s: eager_restore(s, d)), ("lazy", s.restore)):  # noqa: B023
            row[f"{name}_restore_ms"] = best(lambda r=restore: r(snap), a.reps)  # noqa: B023

            def with_call(r: Any = restore) -> None:
                cow.BASE_CACHE.clear()  # the first call parses the state, as in a fresh process
                r(snap)  # noqa: B023
                assert s.call("get_hotel_details", {"hotel_id": hotel}).ok  # noqa: B023
            row[f"{name}_restore_and_first_call_ms"] = best(with_call, a.reps)
        rows.append(row)
    first, last = rows[0], rows[-1]
    growth = {key: math.log(last[key] / first[key]) / math.log(last["bytes"] / first["bytes"])
              for key in first if key.endswith("_ms")}
    print(f"Session.restore, HotelBooking, min of {a.reps} runs (ms); eager = before (parse + validate + dump in "
          f"restore), lazy = now")
    print(f"{'state':>10} {'bytes':>9} {'eager':>8} {'lazy':>8} {'ratio':>6} | {'eager+call':>10} {'lazy+call':>10}")
    for r in rows:
        print(f"{r['state']:>10} {r['bytes']:>9} {r['eager_restore_ms']:>8.2f} {r['lazy_restore_ms']:>8.2f} "
              f"{r['eager_restore_ms'] / r['lazy_restore_ms']:>5.1f}x | {r['eager_restore_and_first_call_ms']:>10.2f} "
              f"{r['lazy_restore_and_first_call_ms']:>10.2f}")
    print("growth exponent (time ~ bytes^k, smallest to largest): "
          + ", ".join(f"{k.removesuffix('_ms')} {v:.2f}" for k, v in growth.items()))
    (HERE / "results").mkdir(exist_ok=True)
    out = HERE / "results" / "restore.json"
    out.write_text(json.dumps({"env": "HotelBooking", "reps": a.reps, "rows": rows, "growth_exponent": growth}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
