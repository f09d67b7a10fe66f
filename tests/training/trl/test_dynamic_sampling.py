"""Dynamic sampling through TRL's ``rollout_func`` contract (training/sampling.py) with a scripted policy on
SmolLM2's real tokenizer: a slot whose group comes back flat is played again with another row, groups
are consecutive ``num_generations`` completions of one row, and the tokens are the played row's; and an
action cut by the episode's token budget is never stepped."""

from __future__ import annotations

import json

import pytest
import torch

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.training.episodes import compact_tools, play_episodes
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.sampling import DynamicSampler, dynamic_rollout_function
from recipes.smollm2 import action_text
from tests.training.smollm2 import smollm2_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


def _write_rows():
    """First-turn HotelBooking train rows with one ground-truth call that changes the state (doing nothing
    earns 0, the call earns 1)."""
    out = []
    for r in rl_rows(["HotelBooking"], split="train"):
        (turn,) = json.loads(r["reward_model"]["ground_truth"])["turns"]
        if r["extra_info"]["turn"] == 0 and len(turn["calls"]) == 1 and turn["calls"][0]["name"].startswith(("book", "cancel", "create")):
            out.append(r)
    return out


class CoinModel(torch.nn.Module):
    """Plays the oracle call on every other first action of rows whose user message is in ``good`` (a
    group with reward variance) and never on the others (a flat group); after a tool result it replies."""

    def __init__(self, tokenizer, good, calls):
        super().__init__()
        self.tokenizer, self.good, self.calls, self.count = tokenizer, good, calls, 0

    def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
            key = next(k for k in self.calls if k in text)
            if "<|im_start|>tool" in text:
                reply = "Done."
            elif key in self.good and self.count % 2 == 0:
                reply = self.calls[key]
            else:
                reply = "I cannot help with that."
            self.count += 1
            rows.append(ids + self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tokenizer.eos_token_id] * (width - len(r)) for r in rows])


class FakeTrainer:
    num_generations = 4

    def __init__(self, model, tokenizer):
        self.model, self.processing_class = model, tokenizer
        self.accelerator = type("A", (), {"unwrap_model": staticmethod(lambda m: m)})()
        self.args = type("Args", (), {"temperature": 1.0, "top_p": 1.0, "max_completion_length": 4096})()


def test_flat_groups_are_replaced_and_groups_carry_the_played_rows_tokens(tokenizer):
    rows = _write_rows()[:2]
    assert len(rows) == 2
    calls = {}
    for r in rows:
        (turn,) = json.loads(r["reward_model"]["ground_truth"])["turns"]
        calls[r["prompt"][-1]["content"]] = action_text(turn["calls"][0]["name"], turn["calls"][0]["arguments"])
    good = {rows[1]["prompt"][-1]["content"]}
    sampler = DynamicSampler(2, recheck_after=100, explore_every=0, seed=0)
    first = sampler._unplayed[0]
    seen = []
    rollout = dynamic_rollout_function(rows, sampler, max_steps=3, max_new_tokens=200, max_tries=2, tools=compact_tools,
                                       on_group=lambda row, rewards: seen.append((row, rewards)))
    out = rollout([rows[0]["prompt"]] * 4, FakeTrainer(CoinModel(tokenizer, good, calls), tokenizer))
    if first == 0:  # the flat row came first: its group was played, found flat, and replaced by the other
        assert [row for row, _ in seen] == [0, 1] and len(set(seen[0][1])) == 1
    assert out["envfactory_row"] == [1] * 4  # the returned group is the row with signal, as one group
    assert sorted(out["envfactory_reward"]) == [0.0, 0.0, 1.0, 1.0]
    user = rows[1]["prompt"][-1]["content"]
    assert all(user in tokenizer.decode(ids) for ids in out["prompt_ids"])  # tokens of the row actually played
    assert sampler.stats[1].has_signal and out["envfactory_turn_rewards"] == [[r] for r in out["envfactory_reward"]]


def test_a_call_cut_by_the_token_budget_is_never_stepped(tokenizer):
    row = _write_rows()[0]
    (turn,) = json.loads(row["reward_model"]["ground_truth"])["turns"]
    call = action_text(turn["calls"][0]["name"], turn["calls"][0]["arguments"])
    ids = tokenizer.encode(call, add_special_tokens=False) + [tokenizer.eos_token_id]

    def generate(seqs, n):
        return [ids[:n] for _ in seqs]

    def env():
        return EnvFactoryEnv("HotelBooking")

    opts = [row["extra_info"]["reset_options"]]
    (whole,) = play_episodes(generate, tokenizer, env, opts, max_steps=1, max_new_tokens=len(ids),
                             max_completion_tokens=4096, tools=compact_tools)
    assert any(rec.calls for rec in whole.env.records)  # with room, the call runs
    (cut,) = play_episodes(generate, tokenizer, env, opts, max_steps=2, max_new_tokens=len(ids),
                           max_completion_tokens=len(ids) - 5, tools=compact_tools)
    assert cut.truncated and len(cut.completion_ids) <= len(ids) - 5
    assert not any(rec.calls for rec in cut.env.records) and cut.reward == 0.0  # the cut call changed nothing


def test_kv_cache_reuse_changes_no_token(tokenizer):
    """Greedy generation on a random tiny model is token-for-token the same with the KV cache kept across
    rounds (only new tokens prefilled, padding between rounds masked, positions from the mask) as from
    scratch: rounds extend each row by its generated tokens and observations of different lengths, and a
    row that finished drops out (the cache follows the surviving rows)."""
    from gym_envfactory.training.episodes import hf_generate
    from recipes.smollm2 import tiny_model

    model = tiny_model(tokenizer, seed=3)
    reused = []
    inner = model.generate

    def spy(**kw):
        cache = kw.get("past_key_values")
        reused.append(cache.get_seq_length() if cache is not None else None)
        return inner(**kw)

    model.generate = spy
    cached = hf_generate(model, tokenizer, do_sample=False, reuse_cache=True)
    seqs = [tokenizer.encode(t) for t in ("Book a room in Lisbon for two nights", "hi", "Cancel order 17, please")]
    for extension in ([[11, 12, 13], [14], [15, 16, 17, 18, 19]], [[20, 21], None, [22]], [[23] * 7, None]):
        fresh = hf_generate(model, tokenizer, do_sample=False)(seqs, 6)
        got = cached(seqs, 6)
        assert got == fresh
        seqs = [s + g + e for s, g, e in zip(seqs, got, extension, strict=True) if e is not None]
    assert len(seqs) == 1  # two rows dropped out on the way
    assert cached(seqs, 6) == hf_generate(model, tokenizer, do_sample=False)(seqs, 6)
    with_cache = [n for n in reused if n is not None]
    assert with_cache[0] == 0 and all(n > 0 for n in with_cache[1:]) and len(with_cache) == 4  # later rounds reuse it


def test_one_generation_batch_mixes_environments(tokenizer):
    rows = rl_rows(["HotelBooking"], split="test")[:2] + rl_rows(["TeamCalendar"], split="test")[:2]
    factories = [lambda e=r["extra_info"]["env"]: EnvFactoryEnv(e) for r in rows]
    opts = [r["extra_info"]["reset_options"] for r in rows]
    calls = []

    def generate(seqs, n):
        calls.append(len(seqs))
        return [tokenizer.encode("No.", add_special_tokens=False) + [tokenizer.eos_token_id] for _ in seqs]

    eps = play_episodes(generate, tokenizer, factories, opts, max_steps=2, tools=compact_tools)
    assert calls == [4]  # one batch across both environments
    assert [e.env.environment.name for e in eps] == ["HotelBooking"] * 2 + ["TeamCalendar"] * 2
    with pytest.raises(ValueError, match="factories"):
        play_episodes(generate, tokenizer, factories[:2], opts, max_steps=1)


class LoopModel(torch.nn.Module):
    """Writes the same lookup call at every action (a looping policy); counts its generation rounds."""

    def __init__(self, tokenizer, call):
        super().__init__()
        self.tokenizer, self.call, self.rounds = tokenizer, call, 0

    def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
        self.rounds += 1
        reply = self.tokenizer.encode(self.call, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return torch.tensor([ids + reply for ids in input_ids.tolist()])


@pytest.mark.parametrize("stop", [True, False])
def test_stop_on_repeat_ends_looping_samples_in_the_rollout(tokenizer, stop):
    rows = _write_rows()[:1]
    call = action_text("search_hotels", {"city": "Lisbon"})
    model = LoopModel(tokenizer, call)
    seen = []
    rollout = dynamic_rollout_function(rows, DynamicSampler(1, seed=0), max_steps=5, max_new_tokens=200, max_tries=1,
                                       tools=compact_tools, stop_on_repeat=stop,
                                       on_group=lambda row, rewards: seen.append(rewards))
    out = rollout([rows[0]["prompt"]] * 4, FakeTrainer(model, tokenizer))
    # with the rule on, the repeat (second action) ends each episode; off, the step limit does
    assert model.rounds == (2 if stop else 5)
    assert len(out["completion_ids"]) == 4 and len(seen) == 1
    n_calls = [tokenizer.decode(ids).count("<tool_call>") for ids in out["completion_ids"]]
    assert n_calls == [2 if stop else 5] * 4
