"""``envfactory ui``: a local web page to browse the catalog, environments, tasks, the tool graph and
rollouts (``trajectories.jsonl``), for people debugging what a policy did (issue 13; docs/ui.md).

Installed as ``gym_envfactory.ui``; an outside part like ``generators/``: it imports the runtime, the
runtime never imports it (docs/architecture.md, "Layers").  Needs the ``server`` extra (Starlette and
uvicorn); the tool graph picture also needs the ``synthesis`` extra.  Pages are server-rendered HTML
with inline CSS and one small dependency-free script (sorting tables): no front-end build step, nothing
loaded from the network.
"""

from __future__ import annotations

__all__: list[str] = []
