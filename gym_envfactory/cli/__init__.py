"""The ``envfactory`` command line: catalog, validation, rollouts, serving (:mod:`.main`), Docker images
and the compose catalog (:mod:`.images`).  Optional parts (``gen``, ``import``) plug in through the
``envfactory.cli`` entry-point group; the runtime never imports them.
"""

from gym_envfactory.cli.main import app, main

__all__ = ["app", "main"]
