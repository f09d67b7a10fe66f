"""gym_envfactory: executable, stateful, verifiable multi-turn tool-use environments for RL.

Quick start::

    import gymnasium as gym
    import gym_envfactory  # registers envfactory/<Name>-v0 for the shipped catalog

    env = gym.make("envfactory/HotelBooking-v0")
    obs, info = env.reset(seed=0)

docs/architecture.md describes the layers, docs/reward.md the reward (EnvFactory, arXiv 2605.18703).
"""

from __future__ import annotations

from gym_envfactory.authoring import ToolAnnotations, ToolError, tool
from gym_envfactory.environment.catalog import (
    define_environment,
    get_environment,
    list_environments,
)
from gym_envfactory.environment.package import load_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.groups import RolloutGroup, make_group
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.errors import (
    DatasetError,
    EnvFactoryError,
    SpecError,
    UnknownEnvironmentError,
    UnknownTaskError,
)
from gym_envfactory.reward import EpisodeScore, RewardConfig
from gym_envfactory.session import Session, ToolResult

__version__ = "0.1.0"

__all__ = [
    "EnvFactoryEnv",
    "make_group",
    "RolloutGroup",
    "RewardConfig",
    "EpisodeScore",
    "ToolError",
    "ToolAnnotations",
    "tool",
    "Session",
    "ToolCall",
    "ToolResult",
    "EnvironmentSpec",
    "define_environment",
    "get_environment",
    "list_environments",
    "load_environment",
    "EnvFactoryError",
    "SpecError",
    "DatasetError",
    "UnknownEnvironmentError",
    "UnknownTaskError",
]

from gym_envfactory.environment.catalog import register_catalog as _register_catalog

_register_catalog()
