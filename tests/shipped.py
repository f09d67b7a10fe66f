"""The shipped catalog as the tests see it: every package under env_images/ (one place to list it)."""

from __future__ import annotations

from pathlib import Path

ENV_IMAGES = Path(__file__).resolve().parents[1] / "env_images"

#: Names of the shipped environments, sorted (a folder with an environment.toml is one).
SHIPPED = sorted(p.name for p in ENV_IMAGES.iterdir() if (p / "environment.toml").is_file())
