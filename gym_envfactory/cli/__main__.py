"""``python -m gym_envfactory.cli``: the ``envfactory`` command."""

import sys

from gym_envfactory.cli.main import main

sys.exit(main())
