"""``run_grpo.sh``'s carried-variables file (training/verl/launch.py ``write_ray_env``): a symlink planted at
its path is replaced, never followed (review finding: the token was written into the link's target)."""

from __future__ import annotations

import os
import stat

import yaml

from gym_envfactory.training.verl.launch import RAY_ENV_GROUP, write_ray_env


def test_the_token_file_replaces_a_planted_symlink_and_is_private_from_creation(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    folder = tmp_path / "work" / RAY_ENV_GROUP
    folder.mkdir(parents=True)
    (folder / "carried.yaml").symlink_to(victim)
    args = write_ray_env(tmp_path / "work", {"ENVFACTORY_TOKEN": "secret"})
    assert victim.read_text() == "keep me" and not (folder / "carried.yaml").is_symlink()
    assert yaml.safe_load((folder / "carried.yaml").read_text()) == {"env_vars": {"ENVFACTORY_TOKEN": "secret"}}
    assert stat.S_IMODE(os.stat(folder / "carried.yaml").st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["carried.yaml"]  # no temporary file left behind
    assert args and args[0] == "--config-dir"
