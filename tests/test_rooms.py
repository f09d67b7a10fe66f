"""Where the LLM client, the simulated users and the training data export live (docs/architecture.md,
"Layers"): the LLM package is never loaded by ``import gym_envfactory``, the test server needs no LLM
library, the users are in one package, and ``envfactory export`` is mounted from ``gym_envfactory.training``
through its entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import gym_envfactory
import gym_envfactory.users as users
from gym_envfactory import errors
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.envs import env as env_module

ROOT = Path(__file__).resolve().parents[1]
LLM_LIBRARIES = {"openai", "tenacity", "jsonschema"}


def _loaded_after(code: str) -> set[str]:
    """The top-level names of modules loaded (``sys.modules``) after running ``code`` in a fresh
    interpreter, plus the ``gym_envfactory.llm``/``.users`` submodules by full name."""
    probe = (f"import sys\n{code}\n"
             "import json\n"
             "mods = set(sys.modules)\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in mods} | "
             "{m for m in mods if m.startswith(('gym_envfactory.llm', 'gym_envfactory.users'))})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def test_import_gym_envfactory_loads_neither_the_llm_package_nor_the_llm_user():
    loaded = _loaded_after("import gym_envfactory")
    assert not loaded & LLM_LIBRARIES
    assert "gym_envfactory.llm" not in loaded and "gym_envfactory.llm.client" not in loaded
    assert "gym_envfactory.users" in loaded  # the light users: the env's default user source
    assert "gym_envfactory.users.llm" not in loaded


@pytest.mark.parametrize("code", [
    "import gym_envfactory.llm",
    "from gym_envfactory.llm import LLMError, LLMOutputError, LLMRequestError",
    "from gym_envfactory.testing import ScriptedChatServer, RecordingProxy",
    "from gym_envfactory.users import scripted_user, replayed_user, import_user",
])
def test_llm_package_errors_and_test_server_import_no_llm_library(code):
    loaded = _loaded_after(code)
    assert not loaded & LLM_LIBRARIES, code
    assert "gym_envfactory.llm.client" not in loaded and "gym_envfactory.users.llm" not in loaded


def test_llm_errors_are_in_the_one_error_family_and_re_exported_by_the_llm_package():
    import gym_envfactory.llm as llm

    for name in ("LLMError", "LLMRequestError", "LLMOutputError"):
        assert name in errors.__all__ and name in llm.__all__
        assert getattr(llm, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.EnvFactoryError)
    assert issubclass(errors.LLMError, RuntimeError)
    assert issubclass(errors.LLMOutputError, errors.LLMError) and issubclass(errors.LLMRequestError, errors.LLMError)
    with pytest.raises(AttributeError):
        _ = llm.NoSuchName


def test_llm_client_names_load_on_first_access():
    pytest.importorskip("openai")
    pytest.importorskip("tenacity")
    import gym_envfactory.llm as llm
    from gym_envfactory.llm import client

    assert llm.LLMClient is client.LLMClient and llm.LLMConfig is client.LLMConfig and llm.run is client.run


def test_testing_module_re_exports_the_llm_test_server():
    import gym_envfactory.testing as testing
    from gym_envfactory.llm import testing as llm_testing

    for name in testing.__all__:
        assert getattr(testing, name) is getattr(llm_testing, name)


def test_the_users_live_in_one_package_and_the_env_takes_them_from_there():
    assert env_module.scripted_user is users.scripted_user
    assert env_module.UserSource is users.UserSource
    from gym_envfactory.envs.env import UserSource, scripted_user  # the old import path keeps working

    assert scripted_user is users.scripted_user and UserSource is users.UserSource
    assert set(users.__all__) == {"UserSource", "scripted_user", "replayed_user", "import_user", "LLMUser"}
    pytest.importorskip("openai")
    pytest.importorskip("tenacity")
    from gym_envfactory.users.llm import LLMUser

    assert users.LLMUser is LLMUser
    with pytest.raises(AttributeError):
        _ = users.NoSuchUser


def test_scripted_and_replayed_users_answer_per_turn_then_end():
    spec = get_environment("HotelBooking")
    task = spec.tasks.get(spec.tasks.ids()[0])
    assert [users.scripted_user([], task, i) for i in range(len(task.turns))] == [t.user for t in task.turns]
    assert users.scripted_user([], task, len(task.turns)) is None
    replay = users.replayed_user(["one", "two"])
    assert [replay([], task, 5), replay([], task, 0), replay([], task, 1)] == ["one", "two", None]
    assert users.replayed_user(["one"])([], task, 0) == "one"  # each source has its own position


def test_replayed_user_drives_an_episode():
    env = gym_envfactory.EnvFactoryEnv("HotelBooking", user=users.replayed_user(["Hello from the replay"]))
    try:
        obs, _ = env.reset(options={"task_id": env.tasks.ids()[0]})
        assert obs[-1] == {"role": "user", "content": "Hello from the replay"}
        _, _, terminated, _, _ = env.step({"role": "assistant", "content": "Done."})
        assert terminated  # the replayed user has nothing more to say
    finally:
        env.close()


def test_import_user_resolves_module_function_and_says_what_is_wrong():
    assert users.import_user("gym_envfactory.users:scripted_user") is users.scripted_user
    with pytest.raises(ValueError, match="module:function"):
        users.import_user("gym_envfactory.users.scripted_user")
    with pytest.raises(TypeError, match="not callable"):
        users.import_user("gym_envfactory.users:__all__")
    with pytest.raises(AttributeError):
        users.import_user("gym_envfactory.users:no_such_user")


def test_export_entry_point_is_the_training_package_and_the_installed_command_runs(tmp_path):
    (ep,) = [e for e in entry_points(group="envfactory.cli") if e.name == "export"]
    assert ep.value == "gym_envfactory.training.export.cli:export_app"
    from gym_envfactory.training.export.cli import export_app

    assert ep.load() is export_app
    envfactory = Path(sys.executable).parent / "envfactory"
    command = [str(envfactory)] if envfactory.exists() else [sys.executable, "-m", "gym_envfactory.cli"]
    r = subprocess.run([*command, "export", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "rl" in r.stdout and "sft" in r.stdout
    r = subprocess.run([*command, "export", "sft", "HotelBooking", "--split", "train", "--out", "sft.json",
                        "--name", "hotel"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sft.json").read_text())


def test_training_does_not_import_generators_and_the_recipe_is_outside_the_package():
    for path in (ROOT / "training").rglob("*.py"):  # (only generators/export/, a deprecated alias, goes the other way)
        text = path.read_text()
        assert "gym_envfactory.generators" not in text and "from ...generators" not in text, path
    assert not (ROOT / "training" / "recipe_smollm2.py").exists()
    assert not (ROOT / "generators" / "export" / "rl.py").read_text().count("def ")  # only a deprecated alias (below)
    assert (ROOT / "recipes" / "smollm2.py").exists()
    assert "recipes.smollm2" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize(("old", "name", "home"), [
    ("gym_envfactory.generators.llm", "LLMClient", "gym_envfactory.llm.client"),
    ("gym_envfactory.generators.llm", "LLMOutputError", "gym_envfactory.errors"),
    ("gym_envfactory.generators.tasks.user", "LLMUser", "gym_envfactory.users.llm"),
    ("gym_envfactory.generators.tasks.user", "known_values", "gym_envfactory.users.llm"),
    ("gym_envfactory.generators.export.rl", "rl_rows", "gym_envfactory.training.export.rl"),
    ("gym_envfactory.generators.export.sft", "to_sharegpt", "gym_envfactory.training.export.sft"),
])
def test_moved_names_keep_their_old_import_path_with_a_deprecation_warning(old, name, home):
    code = (f"import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    import {old}\nexcept DeprecationWarning as w:\n    print('warned', w)\n"
            f"warnings.simplefilter('ignore')\nimport importlib\n"
            f"print(getattr(importlib.import_module({old!r}), {name!r}) is getattr(importlib.import_module({home!r}), {name!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0].startswith("warned ") and "moved to" in out[0] and out[1] == "True"
