"""TRL end to end on CPU with a random-initialised tiny model (seconds): ``GRPOTrainer`` steps through
both adapters (``rollout_func`` for whole multi-turn episodes, ``environment_factory`` for one-turn
rows), the rollout function's tokens are the generated ones with tool results and user turns masked,
and the recipe's CI variant writes its JSON and plot."""

from __future__ import annotations

import json
import os

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from gym_envfactory.training.episodes import compact_tools
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.trl import (
    environment_class,
    environment_reward,
    prompt_key,
    rollout_function,
    tool_chat_template,
)
from recipes.smollm2 import action_text, run, tiny_model
from tests.training.smollm2 import smollm2_tokenizer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


def _message(m):
    return {"role": m["role"], "content": m.get("content") or "", "tool_calls": m.get("tool_calls") or None,
            "tool_call_id": m.get("tool_call_id"), "name": m.get("name")}


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4, max_steps=1,
                max_completion_length=256, use_cpu=True, report_to=[], logging_steps=1, bf16=False,
                save_strategy="no", seed=0)
    return GRPOConfig(**{**base, **kw})


class ScriptedModel(torch.nn.Module):
    """Stands in for the policy inside the rollout function: ``generate`` appends the next scripted action
    of each sequence's episode (found by its first user message)."""

    def __init__(self, tokenizer, scripts):
        super().__init__()
        self.tokenizer, self.scripts, self.seen = tokenizer, scripts, {}

    def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            real = [i for i, m in zip(ids, mask, strict=True) if m]
            key = next(k for k in self.scripts if k in self.tokenizer.decode(real))
            step = self.seen.get(key, 0)
            self.seen[key] = step + 1
            text = self.scripts[key][step] if step < len(self.scripts[key]) else "Done."
            rows.append(ids + self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tokenizer.eos_token_id] * (width - len(r)) for r in rows])


class FakeTrainer:
    def __init__(self, model, tokenizer):
        self.model, self.processing_class = model, tokenizer
        self.accelerator = type("A", (), {"unwrap_model": staticmethod(lambda m: m)})()
        self.args = type("Args", (), {"temperature": 1.0, "top_p": 1.0, "max_completion_length": 4096})()


def _oracle_script(row):
    texts = []
    for turn in json.loads(row["reward_model"]["ground_truth"])["turns"]:
        texts += [action_text(c["name"], c["arguments"]) for c in turn["calls"]]
        texts.append("All done.")
    return texts


def test_rollout_function_plays_multi_turn_episodes_token_faithfully(tokenizer):
    rows = [r for r in rl_rows(["HotelBooking"], split="train", per="task") if r["extra_info"]["n_turns"] >= 2][:3]
    scripts = {r["prompt"][-1]["content"]: _oracle_script(r) for r in rows}
    model = ScriptedModel(tokenizer, scripts)
    rollout = rollout_function(rows, max_steps=12, tools=compact_tools)
    prompts = [[_message(m) for m in r["prompt"]] for r in rows]
    out = rollout(prompts, FakeTrainer(model, tokenizer))
    assert out["envfactory_reward"] == [1.0, 1.0, 1.0]
    assert environment_reward(completions=[None] * 3, envfactory_reward=out["envfactory_reward"]) == [1.0] * 3
    for ids, mask, script in zip(out["completion_ids"], out["env_mask"], [scripts[r["prompt"][-1]["content"]] for r in rows], strict=True):
        assert len(ids) == len(mask)
        generated = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
        assert generated == "".join(script[: generated.count("</tool_call>") + generated.count("All done.")])
        observed = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
        assert "<|im_start|>tool" in observed and "<|im_start|>user" in observed  # results and the next user turn


def test_rollout_function_refuses_unknown_prompts_and_ambiguous_rows(tokenizer):
    rows = rl_rows(["HotelBooking"], split="train")[:2]
    rollout = rollout_function(rows)
    with pytest.raises(ValueError, match="not among the rows"):
        rollout([[{"role": "user", "content": "hello"}]], FakeTrainer(None, tokenizer))
    clash = dict(rows[1], prompt=rows[0]["prompt"])
    with pytest.raises(ValueError, match="same prompt"):
        rollout_function([rows[0], clash])
    assert prompt_key(rows[0]["prompt"]) == prompt_key([_message(m) for m in rows[0]["prompt"]])


def test_grpo_trainer_steps_on_whole_multi_turn_episodes(tmp_path, tokenizer):
    rows = [r for r in rl_rows(["HotelBooking"], split="train", per="task") if r["extra_info"]["n_turns"] >= 2][:1]
    seen = []
    inner = rollout_function(rows, max_steps=3, max_new_tokens=8, tools=compact_tools)

    def spy(prompts, trainer):
        out = inner(prompts, trainer)
        seen.append(out)
        return out

    model = tiny_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=environment_reward,
                          train_dataset=Dataset.from_list([{"prompt": [_message(m) for m in r["prompt"]]} for r in rows]),
                          args=_args(tmp_path), rollout_func=spy)
    trainer.train()
    assert len(seen) == 1 and len(seen[0]["completion_ids"]) == 4  # one group of 4 generations
    log = trainer.state.log_history[0]
    assert "rewards/environment_reward/mean" in log and 0.0 <= log["reward"] <= 1.0
    assert all(0 in m and 1 in m for m in seen[0]["env_mask"])  # generated and observation tokens both there
    assert trainer.state.global_step == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)) == (log["reward_std"] == 0)


def test_grpo_trainer_normalises_each_reward_component_gdpo_style(tmp_path, tokenizer):
    """Issue 28 part 5: the components as separate reward functions with TRL's decoupled normalisation
    (``multi_objective_aggregation="normalize_then_sum"``); TRL logs each one."""
    from gym_envfactory.training.trl import component_reward_functions

    rows = rl_rows(["HotelBooking"], split="train", per="task")[:1]
    fns, weights = component_reward_functions()
    trainer = GRPOTrainer(model=tiny_model(tokenizer), processing_class=tokenizer, reward_funcs=fns,
                          train_dataset=Dataset.from_list([{"prompt": [_message(m) for m in r["prompt"]]} for r in rows]),
                          args=_args(tmp_path, reward_weights=weights, multi_objective_aggregation="normalize_then_sum"),
                          rollout_func=rollout_function(rows, max_steps=2, max_new_tokens=8, tools=compact_tools))
    trainer.train()
    log = trainer.state.log_history[0]
    for key in ("r_traj", "r_state", "r_output", "p_len"):
        assert f"rewards/envfactory_{key}/mean" in log, sorted(log)
    assert trainer.state.global_step == 1


def test_grpo_trainer_with_the_environment_factory_adapter(tmp_path, tokenizer):
    tokenizer = tool_chat_template(smollm2_tokenizer())  # CHATML_TOOLS + TRL's Hermes parser (README "Train")
    rows = rl_rows(["HotelBooking"], split="train")[:1]
    cls = environment_class("HotelBooking")
    resets = []

    class Recorded(cls):
        def reset(self, **row):
            resets.append(row["extra_info"])
            return super().reset(**row)

    ds = Dataset.from_list([{"prompt": [{"role": m["role"], "content": m["content"]} for m in r["prompt"]],
                             "extra_info": json.dumps(r["extra_info"])} for r in rows])
    trainer = GRPOTrainer(model=tiny_model(tokenizer), processing_class=tokenizer, reward_funcs=[],
                          train_dataset=ds, args=_args(tmp_path, max_completion_length=16), environment_factory=Recorded)
    trainer.train()
    assert len(resets) == 4 and all(json.loads(e)["task_id"] == rows[0]["extra_info"]["task_id"] for e in resets)
    log = trainer.state.log_history[0]
    assert any(k.startswith("rewards/") for k in log), log


def test_recipe_ci_variant_writes_json_and_plot(tmp_path):
    result = run(tmp_path, tiny=True)
    written = json.loads((tmp_path / "recipe-smollm2.json").read_text())
    assert set(written["eval"]) == {"base", "sft", "grpo"} and written["eval"] == result["eval"]
    assert {s["phase"] for s in written["steps"]} == {"sft", "grpo"}
    assert written["config"]["sft_examples"] > 0
    assert (tmp_path / "recipe-smollm2.png").stat().st_size > 1000
