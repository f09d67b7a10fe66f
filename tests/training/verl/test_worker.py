"""The agent loop driven by VeRL's own ``AgentLoopWorker`` (the class whose ``_run_agent_loop`` the V1
trainer's ``AgentLoopWorkerTQ`` inherits): exported parquet → ``RLHFDataset`` → ``collate_fn`` →
``DataProto`` repeated ``rollout.n`` times → ``generate_sequences`` (registry from the shipped
``agent_loops.yaml``, hydra instantiation, padding, ``rm_scores``) → VeRL's GRPO advantages.  No GPU and no
vLLM: the LLM client is a scripted fake; the model folder holds SmolLM2's tokenizer and a tiny config."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict
from transformers import LlamaConfig
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from gym_envfactory.training.export.rl import rl_rows, write_parquet
from gym_envfactory.training.verl import AGENT_LOOP_CONFIG, CONFIG_DIR
from gym_envfactory.training.verl.agent_loop import REWARD_EXTRA_KEYS
from gym_envfactory.training.verl.prompts import row_prompt_ids
from tests.training.smollm2 import smollm2_tokenizer
from tests.training.verl.test_agent_loop import oracle_texts

N = 2  # rollout.n


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """What ``actor_rollout_ref.model.path`` names: SmolLM2's tokenizer (gym ChatML tool template) and a
    one-layer Llama config (VeRL reads the config, never the weights, to set up the worker)."""
    path = tmp_path_factory.mktemp("model")
    tok = smollm2_tokenizer()
    tok.save_pretrained(path)
    LlamaConfig(vocab_size=len(tok), hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1,
                num_key_value_heads=1, architectures=["LlamaForCausalLM"]).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def config(model_dir):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="envfactory_grpo", overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}",
            f"actor_rollout_ref.rollout.n={N}", "actor_rollout_ref.rollout.response_length=2048"])


class RowServer:
    """VeRL's LLM client interface (``await generate(request_id=, prompt_ids=, sampling_params=)``).  The
    first call of a trajectory is matched to its row by the exact prompt ids the row renders to
    (``row_prompt_ids``), so an unmatched prompt fails the test; each row's trajectories then play
    ``plans[task_id]``: the oracle's texts, or a refusal.  Records the ids it generated per trajectory."""

    def __init__(self, tokenizer, rows, plans):
        self.tokenizer, self.plans = tokenizer, plans
        self.by_prompt = {tuple(row_prompt_ids(tokenizer, r)): r for r in rows}
        self.started: dict[str, int] = {}
        self.texts: dict[str, list[str]] = {}
        self.generated: dict[str, list[int]] = {}
        self.rewards_planned: dict[str, tuple[str, str]] = {}

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        await asyncio.sleep(0)
        if request_id not in self.texts:
            row = self.by_prompt[tuple(prompt_ids)]  # KeyError: the loop built a prompt the row does not render to
            task = row["extra_info"]["task_id"]
            k = self.started[task] = self.started.get(task, 0) + 1
            plan = self.plans[task][k - 1]
            self.texts[request_id] = oracle_texts(row) if plan == "oracle" else ["Sorry, I cannot help with that."]
            self.rewards_planned[request_id] = (task, plan)
            self.generated[request_id] = []
        texts = self.texts[request_id]
        text = texts.pop(0) if texts else "I am done."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.generated[request_id] += ids
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def test_agent_loop_worker_plays_verl_batches_with_oracle_rewards_masks_and_grpo_advantages(config, tmp_path):
    rows = rl_rows(["HotelBooking"], split="test", per="task")[:2]  # whole tasks: multi-turn, scripted users
    a, b = (r["extra_info"]["task_id"] for r in rows)
    assert a != b
    plans = {a: ["oracle", "oracle"], b: ["oracle", "refuse"]}
    worker = AgentLoopWorker(config, llm_client=None)
    server = worker.llm_client = RowServer(worker.tokenizer, rows, plans)

    data = config.data.copy()
    with open_dict(data):
        data.cache_dir = str(tmp_path / "cache")
    ds = RLHFDataset(data_files=[str(write_parquet(rows, tmp_path / "train.parquet"))], tokenizer=worker.tokenizer,
                     config=data)
    batch = DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))]))
    batch.non_tensor_batch["uid"] = np.array([r["extra_info"]["task_id"] for r in rows], dtype=object)
    batch = batch.repeat(repeat_times=N, interleave=True)
    out = asyncio.run(worker.generate_sequences(batch))

    uids = out.non_tensor_batch["uid"]
    assert list(uids) == [a, a, b, b] and len(server.generated) == 2 * N
    rewards = out.batch["rm_scores"].sum(-1)
    # reward per trajectory: the oracle earns 1.0, the refusal less; the order of the group's members is
    # the order their first generate call came in, so compare as multisets
    assert sorted(rewards[:2].tolist()) == [1.0, 1.0]
    assert sorted(rewards[2:].tolist())[1] == 1.0 and sorted(rewards[2:].tolist())[0] < 1.0
    # masks: 1 exactly on the generated ids (in order), 0 on observations and padding
    prompt_len = out.batch["prompts"].shape[1]
    response_attention = out.batch["attention_mask"][:, prompt_len:]
    mask = out.batch["response_mask"]
    assert bool(((mask == 1) <= (response_attention == 1)).all())
    generated = sorted(server.generated.values())
    masked = sorted(out.batch["responses"][i][mask[i] == 1].tolist() for i in range(len(uids)))
    assert masked == generated
    assert all(int((mask[i] == 0)[: int(response_attention[i].sum())].sum()) > 0
               for i in range(len(uids)) if rewards[i] == 1.0)  # the oracle's episodes have tool results
    # the prompt VeRL pads is the one the row renders to, left-padded
    for i, row in enumerate(r for r in rows for _ in range(N)):
        ids = row_prompt_ids(worker.tokenizer, row)
        assert out.batch["prompts"][i][-len(ids):].tolist() == ids
    # every reward component travels as reward_extra_info, one value per trajectory
    assert out.non_tensor_batch["r_traj"].shape == (2 * N,)
    assert out.meta_info["reward_extra_keys"] == list(REWARD_EXTRA_KEYS)

    # VeRL's GRPO: a group whose members earn the same reward has zero advantage (the group DAPO's
    # filter_groups evicts); the mixed group has positive advantage for the oracle, negative for the refusal
    adv, _ = compute_grpo_outcome_advantage(token_level_rewards=out.batch["rm_scores"], response_mask=mask,
                                            index=uids)
    per_traj = (adv * mask).sum(-1) / mask.sum(-1)
    assert torch.allclose(per_traj[:2], torch.zeros(2))
    assert torch.sign(per_traj[2:]).tolist() == [1.0 if r == 1.0 else -1.0 for r in rewards[2:].tolist()]
