"""What run_grpo.sh hands VeRL, checked against VeRL 0.9.1's own code: every key of the shipped config
exists in VeRL's defaults; group filtering resolves in the V1 trainer; the batch sizes for one environment
train a stated number of steps > 0 as the trainer counts them (``PPOTrainer._init_dataloader`` on a real
``RLHFDataset``); the ENVFACTORY_* variables reach ``ray.init``'s runtime env through VeRL's ``main``."""

from __future__ import annotations

import inspect
import io
import os
import stat
import sys
from contextlib import redirect_stderr, redirect_stdout
from types import SimpleNamespace

import pytest
import verl.trainer.main_ppo as main_ppo
from hydra import compose, initialize_config_dir, initialize_config_module
from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from gym_envfactory.training.export.rl import rl_rows, write_parquet
from gym_envfactory.training.verl import AGENT_LOOP_CONFIG, AGENT_NAME, CONFIG_DIR
from gym_envfactory.training.verl.agent_loop import EnvFactoryAgentLoop
from gym_envfactory.training.verl.launch import batch_plan, main, parquet_rows
from tests.training.smollm2 import smollm2_tokenizer


def leaves(node, prefix=""):
    """Dotted keys of the leaves (and empty mappings) of a config."""
    if isinstance(node, DictConfig) and len(node):
        for k in node:
            yield from leaves(node[k] if not OmegaConf.is_missing(node, k) else None, f"{prefix}{k}.")
    else:
        yield prefix[:-1]


def has_key(cfg, dotted):
    """Whether ``dotted`` names a key of ``cfg`` (a mandatory ``???`` value counts)."""
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node._get_node(part)
    return True


def compose_shipped(overrides=()):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="envfactory_grpo", overrides=list(overrides))


@pytest.fixture(scope="module")
def hotel(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    train = write_parquet(rl_rows(["HotelBooking"], split="train"), path / "train.parquet")
    test = write_parquet(rl_rows(["HotelBooking"], split="test"), path / "test.parquet")
    return train, test


def test_every_key_of_the_shipped_configs_exists_in_verls_defaults():
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        defaults = compose(config_name="ppo_trainer")
    raw = OmegaConf.load(CONFIG_DIR / "envfactory_grpo.yaml")
    keys = [k for k in leaves(raw) if not k.startswith(("hydra", "defaults"))]
    assert "algorithm.filter_groups.enable" in keys and "data.max_prompt_length" in keys
    missing = [k for k in keys if not has_key(defaults, k)]
    assert not missing, f"keys VeRL 0.9.1 does not have: {missing}"
    # and the composed config takes the shipped values (none silently shadowed)
    cfg = compose_shipped()
    for k in keys:
        shipped, got = OmegaConf.select(raw, k), OmegaConf.select(cfg, k)
        if not isinstance(shipped, DictConfig | ListConfig):
            assert got == shipped, k
    # the agent loop entry's keys are constructor keywords of the loop
    entry = next(e for e in OmegaConf.load(AGENT_LOOP_CONFIG) if e.name == AGENT_NAME)
    params = inspect.signature(EnvFactoryAgentLoop.__init__).parameters
    assert {k for k in entry if k not in ("name", "_target_")} <= set(params)


def test_group_filtering_is_on_and_resolves_in_verls_v1_trainer():
    """VeRL's own check (reward must be known at sampling time: the loop sets reward_score) accepts it."""
    cfg = compose_shipped()
    assert cfg.algorithm.filter_groups.enable and cfg.trainer.use_v1 and cfg.trainer.v1.trainer_mode == "sync"
    assert PPOTrainer._resolve_filter_groups_metric(SimpleNamespace(config=cfg)) == "reward"


def verl_training_steps(cfg, tokenizer):
    """Total training steps as VeRL 0.9.1's V1 trainer computes them (its own ``_init_dataloader``)."""
    trainer = SimpleNamespace(config=cfg, tokenizer=tokenizer, processor=None, trainer_mode="sync",
                              parameter_sync_step=1)
    PPOTrainer._init_dataloader(trainer)
    return trainer.total_training_steps, len(trainer.train_dataset)


def test_one_environment_trains_three_steps_where_the_shipped_batch_size_trained_none(hotel, tmp_path):
    train, test = hotel
    rows = parquet_rows(train)
    plan = batch_plan(rows)
    assert (rows, plan.train_batch_size, plan.ppo_mini_batch_size, plan.total_steps) == (44, 32, 16, 3)
    base = [f"data.train_files={train}", f"data.val_files={test}", f"+data.cache_dir={tmp_path / 'cache'}"]
    tok = smollm2_tokenizer()
    steps, dataset_rows = verl_training_steps(compose_shipped(base + plan.overrides()), tok)
    assert dataset_rows == rows and steps == plan.total_steps == 3  # no row filtered as overlong
    assert verl_training_steps(compose_shipped(base), tok)[0] == 0  # train_batch_size 64 > 44 rows
    # two environments (HotelBooking + TeamCalendar: 85 rows) keep 64 and train 3 steps too
    assert batch_plan(85).total_steps == 3 and batch_plan(85).train_batch_size == 64
    # sizes given on the command line are kept; a plan that trains nothing is refused by the launcher
    assert batch_plan(44, {"data.train_batch_size": "8"}).total_steps == 15
    assert batch_plan(10).train_batch_size == 10 and batch_plan(10).total_steps == 3
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
        assert main([str(train), str(tmp_path), "--", "data.train_batch_size=64"]) == 2
    assert "train 0 steps" in err.getvalue()


def test_run_grpo_arguments_carry_envfactory_variables_to_ray_workers(hotel, tmp_path, monkeypatch):
    """launch.main (what run_grpo.sh calls) then VeRL's ``main_ppo.main`` with the same argv as the script,
    ``ray`` and the task runner faked: the runtime env ``ray.init`` receives holds the variables (literal
    values, not interpolations), and the config the trainer gets has the planned batch sizes."""
    train, test = hotel
    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    monkeypatch.setenv("ENVFACTORY_BACKEND", "url")
    monkeypatch.setenv("ENVFACTORY_URL", "http://envs:8000")
    monkeypatch.setenv("ENVFACTORY_TOKEN_FILE", str(token_file))
    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main([str(train), str(tmp_path / ".launch"), "--", "trainer.total_epochs=2"]) == 0
    extra = out.getvalue().splitlines()
    assert "44 train rows" in err.getvalue() and "= 2 training step(s)" in err.getvalue()
    carried = tmp_path / ".launch" / "envfactory_ray" / "carried.yaml"
    assert stat.S_IMODE(os.stat(carried).st_mode) == 0o600
    assert not any("envs:8000" in a for a in extra)  # values travel in the file, not on the command line

    seen: dict = {}

    class TaskRunner:
        @staticmethod
        def remote():
            return SimpleNamespace(run=SimpleNamespace(remote=lambda cfg: seen.setdefault("config", cfg)))

    monkeypatch.setattr(main_ppo, "TaskRunnerV1", TaskRunner)
    monkeypatch.setattr(main_ppo.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(main_ppo.ray, "init", lambda **kw: seen.setdefault("ray_init", kw))
    monkeypatch.setattr(main_ppo.ray, "get", lambda ref: None)
    monkeypatch.chdir(tmp_path)  # hydra writes its outputs/ folder here
    argv = ["main_ppo", "--config-path", str(CONFIG_DIR), "--config-name", "envfactory_grpo", *extra,
            f"data.train_files={train}", f"data.val_files={test}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}", "trainer.total_epochs=2"]
    monkeypatch.setattr(sys, "argv", argv)
    with redirect_stdout(io.StringIO()):
        main_ppo.main()
    env_vars = seen["ray_init"]["runtime_env"]["env_vars"]
    assert {k: env_vars.get(k) for k in ("ENVFACTORY_BACKEND", "ENVFACTORY_URL", "ENVFACTORY_TOKEN_FILE")} == {
        "ENVFACTORY_BACKEND": "url", "ENVFACTORY_URL": "http://envs:8000", "ENVFACTORY_TOKEN_FILE": str(token_file)}
    assert "TOKENIZERS_PARALLELISM" in env_vars  # merged over VeRL's defaults, not replacing them
    cfg = seen["config"]
    assert cfg.data.train_batch_size == 32 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16
    assert cfg.algorithm.filter_groups.enable
