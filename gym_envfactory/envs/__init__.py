"""The Gymnasium layer: :class:`~.env.EnvFactoryEnv` (multi-turn episodes over a session), its option
groups (:mod:`.options`), action parsing and the registry of action formats (:mod:`.parsing`), spaces
(:mod:`.spaces`) and GRPO groups (:mod:`.groups`); the reward lives one layer down, in
:mod:`gym_envfactory.reward`.
"""
