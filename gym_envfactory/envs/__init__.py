"""The Gymnasium layer: :class:`~.env.EnvFactoryEnv` (multi-turn episodes over a session), action parsing
(:mod:`.parsing`), spaces (:mod:`.spaces`), the reward (:mod:`.reward`) and GRPO groups (:mod:`.groups`).
"""
