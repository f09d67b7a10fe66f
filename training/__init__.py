"""Training on gym_envfactory environments (import name ``gym_envfactory.training``).

The runtime never imports this package.  Each part needs its extra:

- :mod:`.ray_rollouts` (``pip install ".[train-ray]"``): rollouts spread over a Ray cluster, with the
  environments in each worker's process or on environment servers run as Ray actors and reached as
  ``url`` backends.
- :mod:`.trl` (``pip install ".[train-trl]"``): a class per environment for TRL's
  ``GRPOTrainer(environment_factory=...)``, with one typed, documented method per tool and
  ``get_reward`` returning the gym's reward.

Data export for trainers lives in :mod:`gym_envfactory.generators.export` (``envfactory export rl|sft``).
Still to come (issue 8): the VeRL agent loop, TRL's multi-turn ``rollout_func`` path and the SFT→GRPO
recipe.
"""
