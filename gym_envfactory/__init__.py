"""gym_envfactory: executable, stateful, verifiable multi-turn tool-use environments for RL.

Quick start::

    import gymnasium as gym
    import gym_envfactory  # registers envfactory/<Name>-v0 for the shipped catalog

    env = gym.make("envfactory/HotelBooking-v0")
    obs, info = env.reset(seed=0)

See DESIGN.md for the architecture and the reward policy (EnvFactory, arXiv 2605.18703).
"""

from __future__ import annotations

from .authoring import ToolAnnotations, ToolError, tool
from .errors import DatasetError, EnvFactoryError, SpecError, UnknownEnvironmentError, UnknownTaskError
from .parsing import ToolCall
from .session import Session, ToolResult
from .spec import EnvironmentSpec, define_environment, get_environment, list_environments, load_environment

__version__ = "0.1.0"

__all__ = [
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

from . import _layout  # noqa: E402
from .registration import register_catalog as _register_catalog  # noqa: E402

_layout.install()
_register_catalog()
