"""Tool-graph benchmark (arXiv 2605.18703 §3.3; generators/tasks/graph.py): build time against tool count.

A synthetic catalog (seeded): environments of 10 tools over 3 entities each (list/get/create/update
tools with ids, names, amounts, dates, foreign ids), entity names drawn from pairs of 40 nouns, so the
parameter vocabulary grows with the catalog as in a real one.  For each size the graph is built with
build_graph_from_tools and timed by phase: flatten (schemas → nodes), encode (distinct texts through the
embedding model), match (the outputs × required-inputs matrix products and threshold), graph (edges).
Each size is built twice on a fresh embedding cache (generators/tasks/embcache.py): cold (every distinct
text encoded) and again unchanged (every text from the cache: what a rebuild of an unchanged catalog
costs).  The model is loaded once, before the timings (its load time is reported apart).

Prints ratios first (encoding and matching apart: seconds, share of the build, texts/s, pairs/s; the
duplicate text share removed before encoding; the cached rebuild), then the figures side by side;
writes bench/results/graph.json.
Usage: python bench/bench_graph.py [--quick] [--sizes 100,500,1000] [--encoder model|hash] [--batch 64]
  --encoder hash: a NumPy hashing encoder instead of the model (measures everything but the model).
  --batch: texts per model forward pass (default: load_encoder's, 256).
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from gym_envfactory.generators.tasks.graph import ToolInfo, build_graph_from_tools, depends_edges, load_encoder

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
NOUNS = ("order account invoice ticket project task hotel room flight seat driver vehicle patient doctor "
         "course student book loan device sensor policy claim parcel shipment store product user team "
         "event venue recipe menu song playlist repo issue job candidate plan meter lease unit").split()


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def synthetic_catalog(n_tools: int, seed: int = 0) -> list[ToolInfo]:
    """``n_tools`` ToolInfos: environments of 10 tools (3 entities: list, get, create per entity, plus update)."""
    rng = random.Random(seed)
    tools: list[ToolInfo] = []
    env_i = 0
    while len(tools) < n_tools:
        env = f"Synth{env_i:04d}"
        env_i += 1
        ents: list[str] = []
        while len(ents) < 3:  # three distinct entities per environment
            e = f"{rng.choice(NOUNS)}_{rng.choice(NOUNS)}"
            ents += [e] if e not in ents else []
        for k, e in enumerate(ents):
            other = ents[(k + 1) % 3]
            words = e.replace("_", " ")
            record = {"type": "object", "properties": {
                f"{e}_id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"},
                "amount": {"type": "number"}, "created_at": {"type": "string", "format": "date-time"},
                f"{other}_id": {"type": "string"}}}
            tools.append(ToolInfo(env, f"list_{e}s", f"List the {words}s, newest first.",
                                  {"type": "object", "properties": {"status": {"type": "string", "description": "filter"}}},
                                  {"type": "array", "items": record}, read_only=True))
            tools.append(ToolInfo(env, f"get_{e}", f"Get one {words} by id.",
                                  {"type": "object", "required": [f"{e}_id"], "properties": {
                                      f"{e}_id": {"type": "string", "description": f"{words} id (from list_{e}s)"}}},
                                  record, read_only=True))
            tools.append(ToolInfo(env, f"create_{e}", f"Create a {words} linked to a {other.replace('_', ' ')}.",
                                  {"type": "object", "required": ["name", f"{other}_id", "amount"], "properties": {
                                      "name": {"type": "string", "description": f"name of the new {words}"},
                                      f"{other}_id": {"type": "string", "description": f"{other.replace('_', ' ')} id"},
                                      "amount": {"type": "number", "description": "amount in EUR"}}},
                                  record))
        tools.append(ToolInfo(env, f"update_{ents[0]}", "Rename one record.",
                              {"type": "object", "required": [f"{ents[0]}_id", "name"], "properties": {
                                  f"{ents[0]}_id": {"type": "string", "description": "id of the record"},
                                  "name": {"type": "string", "description": "new name"}}},
                              {"type": "object", "properties": {"ok": {"type": "boolean"}}}))
    return tools[:n_tools]


def hash_encoder(texts: list[str]) -> np.ndarray:
    """Bag of hashed words and word bigrams, 384 dimensions (no model): the bench's control."""
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for i, t in enumerate(texts):
        w = t.lower().replace(":", " ").replace("(", " ").replace(")", " ").split()
        for tok in w + [a + " " + b for a, b in zip(w, w[1:], strict=False)]:
            out[i, zlib.crc32(tok.encode()) % 384] += 1.0
    return out


def main() -> None:
    sizes = [int(s) for s in _arg("--sizes", "50,100,200" if QUICK else "100,250,500,1000").split(",")]
    which = _arg("--encoder", "model")
    batch = int(_arg("--batch", "256"))
    t = time.perf_counter()
    encoder = hash_encoder if which == "hash" else load_encoder(batch_size=batch)
    load_s = time.perf_counter() - t if which != "hash" else 0.0
    encoder(["warm up"])
    rows = []
    for n in sizes:
        tools = synthetic_catalog(n)
        with tempfile.TemporaryDirectory(prefix="bench-graph-") as cache:
            timings: dict[str, float] = {}
            t = time.perf_counter()
            G = build_graph_from_tools(tools, encoder=encoder, model=which, timings=timings, cache_dir=cache)
            total = time.perf_counter() - t
            again: dict[str, float] = {}
            t = time.perf_counter()
            build_graph_from_tools(tools, encoder=encoder, model=which, timings=again, cache_dir=cache)
            rebuild = time.perf_counter() - t
        outs = sum(1 for _, a in G.nodes(data=True) if a["kind"] == "output")
        ins = sum(1 for _, a in G.nodes(data=True) if a["kind"] == "input" and a["required"])
        text_rows = 2 * (outs + ins)  # a name/type and a description text per output and required input
        rows.append({"tools": n, "build_s": total, "per_tool_ms": total / n * 1e3, **timings,
                     "text_rows": text_rows, "duplicate_share": 1 - timings["texts"] / text_rows,
                     "texts_per_s": timings["encoded"] / max(timings["encode"], 1e-9),
                     "outputs": outs, "required_inputs": ins, "pairs": outs * ins,
                     "pairs_per_s": outs * ins / max(timings["match"], 1e-9),
                     "rebuild_s": rebuild, "rebuild_encode": again["encode"], "rebuild_encoded": again["encoded"],
                     "depends_edges": len(depends_edges(G)),
                     "match_edges": sum(1 for *_, a in G.edges(data=True) if a["kind"] == "match")})
        print(f"  built {n} tools in {total:.2f} s (rebuilt from the cache in {rebuild:.2f} s)", flush=True)
    print(f"\nTool graph build ({which} encoder, batch {batch}; model load {load_s:.1f} s, not "
          f"counted; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    print("ratios:")
    for r in rows:
        print(f"  {r['tools']:>5} tools: encode {r['encode']:.2f} s = {r['encode'] / r['build_s']:.0%} of build "
              f"({r['encoded']} distinct texts of {r['text_rows']}, {r['duplicate_share']:.0%} duplicates removed; "
              f"{r['texts_per_s']:.0f} texts/s)  |  match {r['match']:.3f} s = {r['match'] / r['build_s']:.1%} "
              f"({r['pairs_per_s'] / 1e6:.0f} M pairs/s)  |  unchanged rebuild {r['rebuild_s']:.2f} s "
              f"= {r['rebuild_s'] / r['build_s']:.1%} ({r['rebuild_encoded']} texts encoded)")
    cols = ["tools", "build_s", "per_tool_ms", "flatten", "encode", "match", "graph", "texts", "encoded",
            "texts_per_s", "outputs", "required_inputs", "pairs", "match_edges", "depends_edges", "rebuild_s"]
    print("".join(f"{c:>16}" for c in cols))
    for r in rows:
        print("".join(f"{r[c]:>16.3f}" if isinstance(r[c], float) else f"{r[c]:>16}" for c in cols))
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average": os.getloadavg()[0]},
              "encoder": which, "batch_size": batch, "model_load_s": load_s, "threshold": 0.85, "rows": rows}
    out = HERE / "results" / "graph.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
