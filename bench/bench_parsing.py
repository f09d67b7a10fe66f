"""Parsing cost against message size (issue 10, part 6: bounded episodes).

For each message shape (malformed and valid ``<tool_call>`` blocks, unclosed tags, nested braces, huge
JSON strings, tags inside strings, ``<think>`` blocks, a plain JSON list of bad calls) at 1k, 2k, 4k
and 8k blocks, times ``parse_action`` and prints the ratios time(2n)/time(n) first: 2 is linear, 4
quadratic.  Times are the thread's CPU time, best of several runs (wall time beside it): on a machine
shared with other jobs, wall time measures the scheduler more than the parser.  Then one ``env.step`` of 10,000 junk blocks:
its time, the action log's length and the snapshot's size.

    python bench/bench_parsing.py [--quick] [--module FILE]

``--module FILE`` times another version of ``gym_envfactory/envs/parsing.py`` (for a before/after:
``git show REV:gym_envfactory/envs/parsing.py > /tmp/parsing_before.py``); the env step always runs the
installed code.  Writes ``bench/results/parsing.json`` (``parsing_<stem>.json`` with ``--module``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.parsing import parse_action

JUNK = '<tool_call>{"name": "cancel_hotel_booking", "arguments": {"booking_id": </tool_call>'
VALID = '<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>'

SHAPES: dict[str, Callable[[int], str]] = {
    "malformed": lambda k: JUNK * k,
    "valid": lambda k: VALID * k,
    "unclosed": lambda k: '<tool_call>{"name": "f", "arguments": {"x": 1}}' * k,
    "nested_braces": lambda k: ("<tool_call>" + "{" * 20 + "</tool_call>") * k,
    "huge_string": lambda k: '<tool_call>{"name": "f", "arguments": {"x": "' + "a" * (50 * k) + '"}}</tool_call>',
    "tags_in_strings": lambda k: '<tool_call>{"name":"f","arguments":{"x":"</tool_call>"' * k,
    "think_blocks": lambda k: "<think>hm</think>x" * k,
    "json_list": lambda k: json.dumps([{"name": "", "arguments": {}}] * k),
}


def load_parser(path: str | None) -> Callable[[Any], Any]:
    if path is None:
        return parse_action
    spec = importlib.util.spec_from_file_location("parsing_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.parse_action


def best_of(fn: Callable[[], Any], repeats: int, budget_s: float) -> tuple[float, float]:
    """The least CPU time of this thread and the least wall time over ``repeats`` runs of ``fn`` (fewer
    once ``budget_s`` is spent)."""
    cpu: list[float] = []
    wall: list[float] = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    return min(cpu), min(wall)


def bench_parsing(parse: Callable[[Any], Any], sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape, build in SHAPES.items():
        rows = []
        for k in sizes:
            text = build(k)
            cpu, wall = best_of(partial(parse, text), repeats, budget_s=20.0)
            rows.append({"blocks": k, "chars": len(text), "seconds": cpu, "wall_seconds": wall})
        ratios = [b["seconds"] / a["seconds"] if a["seconds"] else None for a, b in zip(rows, rows[1:], strict=False)]
        out[shape] = {"rows": rows, "ratios_2n_over_n": ratios}
    return out


def bench_step(n: int, repeats: int) -> dict[str, Any]:
    env = EnvFactoryEnv("HotelBooking", task_id="hotel-004")
    text = JUNK * n
    times, log, snapshot = [], 0, b""
    for _ in range(repeats):
        env.reset()
        gc.collect()
        c0 = time.thread_time()
        env.step(text)
        times.append(time.thread_time() - c0)
        assert env.session is not None
        log = len(env.session.action_log)
        snapshot = env.session.snapshot()
    p_len = env.score().p_len
    env.close()
    return {"junk_blocks": n, "message_chars": len(text), "step_seconds": min(times), "action_log_records": log,
            "snapshot_bytes": len(snapshot), "p_len": p_len}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--module", help="time this parsing.py instead of the installed one")
    args = ap.parse_args()
    repeats = 3 if args.quick else 7
    sizes = [1000, 2000, 4000, 8000]
    parsing = bench_parsing(load_parser(args.module), sizes, repeats)
    print("parse_action: time(2n)/time(n) for n = " + ", ".join(f"{k // 1000}k" for k in sizes[:-1])
          + "  (2 = linear, 4 = quadratic)")
    for shape, r in parsing.items():
        print(f"  {shape:16s} " + "  ".join(f"{x:5.2f}" if x is not None else "  n/a" for x in r["ratios_2n_over_n"]))
    print("parse_action: CPU ms (best of runs) against message size")
    for shape, r in parsing.items():
        print(f"  {shape:16s} " + "  ".join(f"{row['chars'] / 1000:4.0f} KB {row['seconds'] * 1000:8.1f} ms" for row in r["rows"]))
    result: dict[str, Any] = {"module": args.module or "gym_envfactory.envs.parsing", "repeats": repeats,
                              "parse_action": parsing}
    if args.module is None:
        step = bench_step(10_000, 3 if args.quick else 5)
        result["step_10000_junk_calls"] = step
        print(f"env.step of {step['junk_blocks']:,} junk blocks ({step['message_chars'] / 1000:.0f} KB): "
              f"{step['step_seconds'] * 1000:.0f} ms CPU, {step['action_log_records']} log records, "
              f"snapshot {step['snapshot_bytes'] / 1000:.1f} KB, P_len {step['p_len']:,}")
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    name = "parsing.json" if args.module is None else f"parsing_{Path(args.module).stem}.json"
    (out_dir / name).write_text(json.dumps(result, indent=2))
    print(f"wrote {out_dir / name}")


if __name__ == "__main__":
    main()
