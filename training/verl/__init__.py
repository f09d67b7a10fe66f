"""VeRL (https://verl.readthedocs.io, pinned 0.9.x; extra ``train-verl``): the gym as a VeRL agent loop.

- :class:`~gym_envfactory.training.verl.agent_loop.EnvFactoryAgentLoop`, registered as
  ``envfactory_agent``: each trajectory runs against its own session (any backend), multi-turn with
  the task's scripted user turns (or your user source), tool results and user turns masked out
  (``response_mask`` 0), and ``reward_score`` set to the gym's reward with every component in
  ``reward_extra_info``.
- :data:`CONFIG_DIR`: Hydra configs: ``envfactory_grpo.yaml`` (GRPO, ``rollout.n = 8``, async,
  multi-turn, this agent loop by default) and ``agent_loops.yaml`` (the loop's registration for
  VeRL's workers); ``run_grpo.sh`` launches it on a GPU box.
- :mod:`.prompts`: compact tool schemas and the refusal of a prompt over ``rollout.prompt_length``;
  :mod:`.launch`: batch sizes that fit the row count and the ``ENVFACTORY_*`` variables carried to
  Ray workers (what ``run_grpo.sh`` adds to VeRL's command line).  Design: docs/training.md, "VeRL".

Importing this package does not import VeRL; :mod:`.agent_loop` does.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "AGENT_LOOP_CONFIG", "AGENT_NAME"]

#: Folder of the Hydra configs (``--config-path`` of ``python -m verl.trainer.main_ppo``).
CONFIG_DIR = Path(__file__).resolve().parent / "config"
#: ``actor_rollout_ref.rollout.agent.agent_loop_config_path``: registers the loop in VeRL's workers.
AGENT_LOOP_CONFIG = CONFIG_DIR / "agent_loops.yaml"
#: The name rows (``agent_name``) or ``rollout.agent.default_agent_loop`` use.
AGENT_NAME = "envfactory_agent"
