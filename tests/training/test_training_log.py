"""The training log (training/log.py): JSON Lines a trainer appends per logged step, with the episodes'
reward-component means, read back by the UI's training-curve page (docs/ui.md, "Training curves")."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gym_envfactory.training.log import TrainingLog
from gym_envfactory.ui.traininglog import read_training_log


def test_lines_carry_the_trainer_metrics_and_the_observed_component_means(tmp_path):
    log = TrainingLog(tmp_path / "runs" / "log.jsonl")
    log.observe([{"reward": 0.5, "r_traj": 1.0, "r_state": None, "r_output": 0.0, "penalty": 0.0},
                 {"reward": 0.0, "r_traj": 0.0, "r_state": 0.0, "r_output": 0.0, "penalty": 0.1}])
    log.write(1, "grpo", {"loss": 0.25, "reward": 0.3, "lr": "constant", "nan": float("nan")})
    log.write(2, "grpo", {"loss": 0.2})
    lines = [json.loads(x) for x in (tmp_path / "runs" / "log.jsonl").read_text().splitlines()]
    assert lines[0] == {"step": 1, "phase": "grpo", "loss": 0.25, "reward": 0.3, "r_traj": 0.5, "r_state": 0.0,
                        "r_output": 0.0, "penalty": 0.05, "env_reward": 0.25}
    assert lines[1] == {"step": 2, "phase": "grpo", "loss": 0.2}  # the means are per line, then forgotten
    read = read_training_log(tmp_path / "runs" / "log.jsonl")
    assert read.series("grpo", "r_traj") == [(1.0, 0.5)] and read.series("grpo", "loss") == [(1.0, 0.25), (2.0, 0.2)]


def test_a_wrapped_rollout_function_is_observed(tmp_path):
    log = TrainingLog(tmp_path / "log.jsonl")
    rollout = log.wrap_rollout(lambda prompts, trainer: {"completion_ids": [[1]], "envfactory_components": [
        {"reward": 1.0, "r_traj": 1.0, "r_state": 1.0, "penalty": 0.0}]})
    assert rollout(["p"], None)["completion_ids"] == [[1]]
    assert log.write(5)["r_state"] == 1.0


def test_the_transformers_callback_writes_a_line_per_log_event(tmp_path):
    pytest.importorskip("transformers", reason="the train-trl extra")
    from transformers import TrainerCallback

    log = TrainingLog(tmp_path / "log.jsonl")
    cb = log.callback("sft")
    assert isinstance(cb, TrainerCallback)
    cb.on_log(None, SimpleNamespace(global_step=7), None, logs={"loss": 1.5, "epoch": 0.1})
    assert json.loads((tmp_path / "log.jsonl").read_text()) == {"step": 7, "phase": "sft", "loss": 1.5, "epoch": 0.1}
