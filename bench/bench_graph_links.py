"""Link precision and recall of the shipped catalog's tool graph against the hand-labelled set, with and
without the type/entity check, for each embedding encoder (issue 27 part 3, issue 29 part 4;
docs/synthesis.md, "Tool graph: link check").

    python bench/bench_graph_links.py [--encoders st,numpy] [--out docs/results/graph-links.json]

The labelled set is tests/generators/fixtures/graph_links_domains.json (how it was labelled: its "about").
For each encoder the graph of all catalog environments is built once per setting (threshold 0.85; the
embedding cache makes the second build encode nothing) and its match edges are scored.  Prints the
precision ratio (checked / unchecked) first, then the table; writes JSON.  An encoder whose libraries are
missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gym_envfactory.environment.catalog import list_environments  # noqa: E402
from gym_envfactory.generators.errors import GraphError  # noqa: E402
from gym_envfactory.generators.tasks.graph import build_graph  # noqa: E402
from gym_envfactory.generators.tasks.linkeval import graph_links, load_domains, score_links, true_links  # noqa: E402

LABELS = ROOT / "tests" / "generators" / "fixtures" / "graph_links_domains.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoders", default="st,numpy")
    ap.add_argument("--threshold", type=float, default=0.85)
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "graph-links.json"))
    args = ap.parse_args()
    envs = list_environments()
    domains = load_domains(LABELS)
    results: dict[str, Any] = {"envs": envs, "threshold": args.threshold, "labels": str(LABELS.relative_to(ROOT)),
                               "encoders": {}}
    graphs: dict[str, Any] = {}
    for enc in [e for e in args.encoders.split(",") if e]:
        with tempfile.TemporaryDirectory() as cache:
            row: dict[str, Any] = {}
            try:
                for check in (False, True):
                    t: dict[str, float] = {}
                    t0 = time.perf_counter()
                    G = build_graph(envs, threshold=args.threshold, encoder_kind=enc, check_links=check,
                                    cache_dir=cache, timings=t)
                    wall = time.perf_counter() - t0
                    truth = true_links(G, domains)
                    s = score_links(G, truth).as_dict()
                    s.update(seconds=round(wall, 2), encode_seconds=round(t.get("encode", 0.0), 2),
                             encoded=int(t.get("encoded", 0)), rejected=len(G.graph.get("rejected", [])))
                    row["checked" if check else "unchecked"] = s
                    if check:
                        graphs[enc] = G
            except GraphError as exc:
                results["encoders"][enc] = {"skipped": str(exc)}
                print(f"{enc}: skipped ({exc})")
                continue
            results["encoders"][enc] = row
    for enc, row in results["encoders"].items():
        if "checked" in row:
            u, c = row["unchecked"], row["checked"]
            print(f"{enc}: precision checked/unchecked = {c['precision'] / max(u['precision'], 1e-9):.3f}x "
                  f"({u['precision']:.4f} -> {c['precision']:.4f}); recall {u['recall']:.4f} -> {c['recall']:.4f}")
    enc_s = {e: r["unchecked"]["encode_seconds"] for e, r in results["encoders"].items() if "unchecked" in r}
    if len(enc_s) == 2:
        (e1, s1), (e2, s2) = enc_s.items()
        results["encode_ratio"] = {"first": e1, "second": e2, "seconds": [s1, s2], "ratio": round(s1 / max(s2, 1e-9), 2)}
        print(f"encode (model load + all texts, cold cache): {e1}/{e2} = {s1 / max(s2, 1e-9):.2f}x ({s1:.1f} s / {s2:.1f} s)")
    if len(graphs) == 2:
        a, b = (graph_links(g) for g in graphs.values())
        results["encoders_agree"] = {"links_only_in_first": len(a - b), "links_only_in_second": len(b - a),
                                     "common": len(a & b), "order": list(graphs)}
        print(f"{' vs '.join(graphs)}: {len(a & b)} common links, {len(a - b)} / {len(b - a)} only in one")
    print(f"{'encoder':8} {'check':9} {'links':>6} {'correct':>8} {'truth':>6} {'precision':>9} {'recall':>7} "
          f"{'encode s':>8} {'rejected':>8}")
    for enc, row in results["encoders"].items():
        for key in ("unchecked", "checked"):
            if key in row:
                s = row[key]
                print(f"{enc:8} {key:9} {s['links']:6d} {s['correct']:8d} {s['truth']:6d} {s['precision']:9.4f} "
                      f"{s['recall']:7.4f} {s['encode_seconds']:8.1f} {s['rejected']:8d}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
