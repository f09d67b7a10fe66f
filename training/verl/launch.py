"""What ``run_grpo.sh`` adds to VeRL's command line: batch sizes that fit the data, and the environment
server's variables carried to every Ray worker (docs/training.md, "VeRL").

Batch sizes.  VeRL 0.9.1's trainer (``verl.trainer.ppo.v1.trainer_base.PPOTrainer._init_dataloader``)
trains ``len(train_dataset) // data.train_batch_size`` steps per epoch (the dataloader drops the last
partial batch) times ``trainer.total_epochs``, unless ``trainer.total_training_steps`` is set: with the
shipped ``train_batch_size`` 64, one environment's 37-44 train rows train **0 steps**.
:func:`batch_plan` takes ``train_batch_size = min(64, rows)`` rounded down to a multiple of
``ppo_mini_batch_size = min(16, that)`` (values given on the command line are kept) and says the steps.

Carried variables.  Ray workers on other nodes do not inherit the launching shell's environment, so the
agent loop's ``${oc.env:ENVFACTORY_*}`` would fall back to in-process sessions.  :func:`write_ray_env`
writes the ``ENVFACTORY_*`` variables that are set into a Hydra config file (mode 0600, not on the command
line) merged into ``ray_kwargs.ray_init.runtime_env`` (VeRL merges it over its defaults and passes it to
``ray.init``).  VeRL prints the resolved runtime env at start, so a token travels best as
``ENVFACTORY_TOKEN_FILE`` (a path present on every node; only the path is printed).

Command line (what run_grpo.sh calls)::

    python -m gym_envfactory.training.verl.launch TRAIN_PARQUET WORKDIR [-- HYDRA_OVERRIDES...]

prints the extra VeRL arguments one per line on stdout and the plan on stderr; exits 2 when the data
trains 0 steps.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CARRIED_VARS", "BatchPlan", "batch_plan", "carried_env", "main", "parquet_rows", "write_ray_env"]

#: Variables of the environment server carried to the Ray workers (those set when launching).
CARRIED_VARS = ("ENVFACTORY_BACKEND", "ENVFACTORY_URL", "ENVFACTORY_TOKEN", "ENVFACTORY_TOKEN_FILE")
#: The shipped config's batch sizes and epochs (``envfactory_grpo.yaml``).
DEFAULTS = {"data.train_batch_size": 64, "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "trainer.total_epochs": 3}
#: Hydra config group (under WORKDIR) holding the carried variables.
RAY_ENV_GROUP = "envfactory_ray"


@dataclass(frozen=True)
class BatchPlan:
    """Batch sizes for ``rows`` training rows and the steps VeRL trains with them (module docstring)."""

    rows: int
    train_batch_size: int
    ppo_mini_batch_size: int
    total_epochs: int
    steps_per_epoch: int
    total_steps: int

    def overrides(self) -> list[str]:
        """The Hydra overrides that set these batch sizes."""
        return [f"data.train_batch_size={self.train_batch_size}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={self.ppo_mini_batch_size}"]


def batch_plan(rows: int, overrides: Mapping[str, str] | None = None) -> BatchPlan:
    """Batch sizes for ``rows`` training rows: ``overrides`` (Hydra ``key=value`` pairs from the command
    line) win for ``data.train_batch_size``, ``actor_rollout_ref.actor.ppo_mini_batch_size``,
    ``trainer.total_epochs`` and ``trainer.total_training_steps``; the rest follows the module docstring.
    Steps are counted as VeRL 0.9.1's trainer does: ``rows // train_batch_size * total_epochs``.

    Raises:
        ValueError: ``rows`` < 1, or a size that is not a positive integer.
    """
    given = dict(overrides or {})
    if rows < 1:
        raise ValueError("no training rows: export some (envfactory export rl ENV --split train)")
    epochs = int(given.get("trainer.total_epochs", DEFAULTS["trainer.total_epochs"]))
    if "data.train_batch_size" in given:
        batch = int(given["data.train_batch_size"])
    else:
        batch = min(DEFAULTS["data.train_batch_size"], rows)
    mini = int(given.get("actor_rollout_ref.actor.ppo_mini_batch_size",
                         min(DEFAULTS["actor_rollout_ref.actor.ppo_mini_batch_size"], batch)))
    if "data.train_batch_size" not in given:
        batch = max(mini, batch // mini * mini)
    if min(batch, mini, epochs) < 1:
        raise ValueError(f"batch sizes and epochs must be positive: train_batch_size={batch}, "
                         f"ppo_mini_batch_size={mini}, total_epochs={epochs}")
    per_epoch = rows // batch
    total = per_epoch * epochs
    fixed = given.get("trainer.total_training_steps")
    if fixed not in (None, "null", "None"):
        total = int(fixed)
    return BatchPlan(rows, batch, mini, epochs, per_epoch, total)


def parquet_rows(path: str | Path) -> int:
    """Number of rows of a parquet file (its footer; pyarrow, the ``export`` extra)."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def carried_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`CARRIED_VARS` set (non-empty) in ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in CARRIED_VARS if environ.get(k)}


def write_ray_env(workdir: str | Path, env: Mapping[str, str]) -> list[str]:
    """Write ``env`` as ``WORKDIR/envfactory_ray/carried.yaml`` (``env_vars``, mode 0600) and return the
    VeRL arguments that merge it into ``ray_kwargs.ray_init.runtime_env``; ``[]`` when ``env`` is empty
    (and an earlier run's file is removed)."""
    folder = Path(workdir) / RAY_ENV_GROUP
    if not env:
        (folder / "carried.yaml").unlink(missing_ok=True)
        return []
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "carried.yaml"
    # a fresh file (O_EXCL: never through a link planted at a temporary name), mode 0600 from its creation,
    # then renamed over the target: a symlink at carried.yaml is replaced, never followed
    tmp = folder / f".carried.{os.getpid()}.{os.urandom(4).hex()}.yaml"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump({"env_vars": {k: str(v) for k, v in env.items()}}, f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ["--config-dir", str(Path(workdir).resolve()), f"+{RAY_ENV_GROUP}@ray_kwargs.ray_init.runtime_env=carried"]


def _overrides(args: Sequence[str]) -> dict[str, str]:
    out = {}
    for a in args:
        key, sep, value = a.lstrip("+").partition("=")
        if sep:
            out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    if len(args) != 2:
        sys.stderr.write("usage: python -m gym_envfactory.training.verl.launch TRAIN_PARQUET WORKDIR [-- OVERRIDES]\n")
        return 2
    given = _overrides(extra)
    plan = batch_plan(parquet_rows(args[0]), given)
    env = carried_env()
    sys.stderr.write(
        f"envfactory: {plan.rows} train rows, train_batch_size {plan.train_batch_size}, ppo_mini_batch_size "
        f"{plan.ppo_mini_batch_size}: {plan.steps_per_epoch} step(s) per epoch x {plan.total_epochs} epoch(s) = "
        f"{plan.total_steps} training step(s); carried to Ray workers: {', '.join(env) or 'nothing'}\n")
    if plan.total_steps < 1:
        sys.stderr.write(f"envfactory: {plan.rows} rows train 0 steps with train_batch_size "
                         f"{plan.train_batch_size}: lower it or add environments\n")
        return 2
    out = write_ray_env(args[1], env) + [o for o in plan.overrides() if o.split("=")[0] not in given]
    sys.stdout.write("".join(f"{a}\n" for a in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
