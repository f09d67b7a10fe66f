"""Training on gym_envfactory environments (import name ``gym_envfactory.training``).

The runtime never imports this package.  Each part needs its extra:

- :mod:`.ray_rollouts` (``pip install -e ".[train-ray]"``): rollouts spread over a Ray cluster, with the
  environments in each worker's process or on environment servers run as Ray actors and reached as
  ``url`` backends.
- :mod:`.trl` (``pip install -e ".[train-trl]"``): a class per environment for TRL's
  ``GRPOTrainer(environment_factory=...)``, with one typed, documented method per tool and
  ``get_reward`` returning the gym's reward.

- :mod:`.trl` also has :func:`~.trl.rollout_function` (``GRPOTrainer(rollout_func=...)``) for whole
  multi-turn tasks played with the trainer's model.
- :mod:`.verl` (``pip install -e ".[train-verl]"``): the VeRL agent loop ``envfactory_agent``, Hydra GRPO
  configs and a launch script.
- :mod:`.openenv` (``pip install -e ".[server]"``; clients: ``".[openenv]"``): OpenEnv's HTTP/WebSocket protocol,
  mounted by ``envfactory serve`` at ``/openenv/<Env>`` (the ``envfactory.routes`` entry point).
- :mod:`.skyrl` (``pip install -e ".[skyrl]"``): SkyRL-gym text environments (``register_environments``).
- :mod:`.episodes`: token-faithful episodes (generated ids kept, observation tokens masked) for any
  trainer that generates with its own model.
- :mod:`.export` (``pip install -e ".[export]"`` for parquet): training data from environments, VeRL RL rows
  and LlamaFactory SFT records (``envfactory export rl|sft``, mounted through the ``envfactory.cli`` entry
  points).

The SmolLM2 recipe (SFT → GRPO on CPU) is an experiment, not part of this package: ``recipes/smollm2.py``
in the repository (``make recipe``).  Design: docs/training.md.
"""
