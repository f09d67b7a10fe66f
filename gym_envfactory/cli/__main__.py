"""``python -m gym_envfactory.cli``: the ``envfactory`` command."""

from gym_envfactory.cli.main import main

main()
