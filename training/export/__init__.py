"""Training data from environments: RL prompts for VeRL and SFT conversations for LlamaFactory/TRL.

- :mod:`.rl`: one VeRL parquet row per task turn (the paper's unit, arXiv 2605.18703 §3.5) or per
  task, each naming the task, the turn window and the initial-state reference, so a trainer rebuilds
  the exact episode with ``env.reset(options=row["extra_info"]["reset_options"])``.
- :mod:`.sft`: LlamaFactory ``sharegpt`` (``conversations`` with human / gpt / function_call /
  observation, ``system``, ``tools``) and ``alpaca`` records, plus the ``dataset_info.json`` entry;
  from the tasks' ground truth (played by the oracle policy through the real environment) or from
  rollout trajectories filtered by reward.
- :mod:`.paper`: the same data in EnvFactory's own row shapes (``--format envfactory``: its RL rows with
  ``mcp_factory_kwargs`` and its alpaca SFT rows), which ``envfactory tasks import`` reads back as tasks.
- :mod:`.cli`: ``envfactory export rl|sft``.
"""
