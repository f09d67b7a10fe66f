"""Training tests run in their own environments (`make test-training`: `.venv-verl` with VeRL 0.9.x, and
`.venv-trl` with TRL 1.x and torch; the two pin different transformers; `.venv-openenv` and `.venv-skyrl`
with the OpenEnv and SkyRL-gym clients; `.venv-verifiers` and `.venv-nemo-gym` with verifiers and NeMo Gym).  Where a framework is not
installed its folder is not collected at all (not skipped): the run that needs it invokes pytest on that
folder, where an empty collection fails the build."""

import importlib.util

collect_ignore_glob = []
if importlib.util.find_spec("verl") is None:
    collect_ignore_glob.append("verl/*")
if importlib.util.find_spec("trl") is None or importlib.util.find_spec("torch") is None:
    collect_ignore_glob.append("trl/*")
if importlib.util.find_spec("openenv") is None:
    collect_ignore_glob.append("openenv/*")
if importlib.util.find_spec("skyrl_gym") is None:
    collect_ignore_glob.append("skyrl/*")
if importlib.util.find_spec("verifiers") is None:  # make test-verifiers: .venv-verifiers
    collect_ignore_glob.append("verifiers/*")
if importlib.util.find_spec("nemo_gym") is None:  # make test-nemo-gym: .venv-nemo-gym
    collect_ignore_glob.append("nemo_gym/*")
