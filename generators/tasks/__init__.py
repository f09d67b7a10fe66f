"""Task synthesis (arXiv 2605.18703 §3.3–3.4; import name ``gym_envfactory.generators.tasks``).

- :mod:`.graph`: the tool dependency graph (parameter embeddings, threshold 0.85), saved as networkx
  node-link JSON;
- :mod:`.sampler`: topology-aware sampling of tool chains, with an executed solvability check;
- :mod:`.querygen`: chains → verified multi-turn tasks (``envfactory gen tasks``); its user simulator is
  the runtime's :class:`gym_envfactory.users.llm.LLMUser` (also usable in episodes: ``gym.make(..., user=...)``).

Needs the ``synthesis`` extra.  Design: ``docs/synthesis.md``.
"""
