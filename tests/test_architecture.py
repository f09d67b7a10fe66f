"""The architecture's public seams (docs/architecture.md): what `import gym_envfactory` loads, the
session protocol, sessions from state bytes, one initial-state resolver, arguments decoded once per
call, one reference object per task, one error family."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import gym_envfactory
from gym_envfactory import EnvFactoryEnv, Session, ToolCall, get_environment
from gym_envfactory import errors as errors_module
from gym_envfactory.authoring import ToolError
from gym_envfactory.environment.states import resolve_initial_states, task_environments, task_initial_state
from gym_envfactory.errors import DatasetError, EnvFactoryError, SpecError
from gym_envfactory.replay import TaskReference, task_reference
from gym_envfactory.session import SessionProtocol

ENV = "HotelBooking"


def test_import_loads_no_server_docker_cli_or_llm_library():
    code = ("import sys, gym_envfactory\n"
            "heavy = {'starlette', 'uvicorn', 'websockets', 'docker', 'typer', 'rich', 'openai', 'mcp', 'torch', 'tenacity'}\n"
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_loads_no_server_container_llm_or_room_module_of_the_package():
    code = ("import sys, gym_envfactory\n"
            "heavy = ('gym_envfactory.server', 'gym_envfactory.containers', 'gym_envfactory.llm', "
            "'gym_envfactory.users.llm', 'gym_envfactory.cli', 'gym_envfactory.generators', 'gym_envfactory.training', "
            "'gym_envfactory.ui')\n"
            "print(sorted(m for m in sys.modules if m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_root_exports_the_classes_users_touch():
    for name in ("EnvFactoryEnv", "make_group", "RewardConfig", "EpisodeScore", "Session", "ToolError",
                 "define_environment", "tool", "get_environment"):
        assert name in gym_envfactory.__all__ and hasattr(gym_envfactory, name)


def test_every_runtime_error_is_one_family_and_tool_error_stays_apart():
    classes = [c for _, c in inspect.getmembers(errors_module, inspect.isclass) if issubclass(c, Exception)]
    assert classes and all(issubclass(c, EnvFactoryError) for c in classes)
    assert set(errors_module.__all__) == {c.__name__ for c in classes}
    assert not issubclass(ToolError, EnvFactoryError)  # the model-facing signal, on purpose
    assert issubclass(errors_module.UnknownTaskError, KeyError)  # builtin bases kept as mixins
    assert issubclass(errors_module.BackendUnavailableError, ConnectionError)


def test_local_and_remote_sessions_share_one_protocol():
    from gym_envfactory.backends.remote import RemoteSession

    assert isinstance(Session(get_environment(ENV)), SessionProtocol)
    for name in ("call", "record_invalid", "state", "state_bytes", "snapshot", "restore", "reset", "fork",
                 "fork_many", "close", "action_log", "closed"):
        assert hasattr(RemoteSession, name), name


def test_session_from_states_is_the_named_constructor_and_checks_its_environments():
    spec = get_environment(ENV)
    states = resolve_initial_states([spec], "small")
    s = Session.from_states(spec, states)
    assert s.state() == Session(spec, "small").state()
    with pytest.raises(SpecError, match="states for"):
        Session.from_states(spec, {"Other": states[ENV]})


def test_one_resolver_for_task_and_code_references():
    spec = get_environment(ENV)
    task = next(t for t in spec.tasks if isinstance(t.initial_state, dict)) if any(
        isinstance(t.initial_state, dict) for t in spec.tasks) else spec.tasks.get(spec.tasks.ids()[0])
    by_task = task_initial_state(spec, task)
    assert set(by_task) == {e.name for e in task_environments(spec, task)}
    with pytest.raises(DatasetError, match="initial_state"):
        resolve_initial_states([spec], {"name": "small", "bogus": 1}, task_form=True, where={"task_id": "x"})
    with pytest.raises(SpecError):
        resolve_initial_states([spec], "no-such-state")


class _CountingArguments(dict):
    """Arguments that count how often something walks them (``items``/``values``/``keys``)."""

    walks = 0

    def items(self):
        type(self).walks += 1
        return super().items()

    def values(self):
        type(self).walks += 1
        return super().values()

    def keys(self):
        type(self).walks += 1
        return super().keys()


def test_arguments_are_decoded_once_per_call_in_one_walk():
    """The parser decodes a call's arguments once (the session accepts its output as is), and that
    decoding walks them once: copy, type check, lone-surrogate check and depth limit together."""
    env = EnvFactoryEnv(ENV)
    env.reset(options={"task_id": env.tasks.ids()[0]})
    _CountingArguments.walks = 0
    env.step(ToolCall("list_hotel_destinations", _CountingArguments(country="Portugal")))
    through_env = _CountingArguments.walks
    env.close()
    _CountingArguments.walks = 0
    res = Session(get_environment(ENV)).call("list_hotel_destinations", _CountingArguments(country="Portugal"))
    assert res.ok and through_env == _CountingArguments.walks == 1


def test_the_reward_gets_one_reference_object_per_task():
    spec = get_environment(ENV)
    tid = spec.tasks.ids()[0]
    ref = task_reference(spec, tid)
    assert isinstance(ref, TaskReference) and ref is task_reference(spec, tid)  # cached
    assert len(ref.turn_calls) == len(ref.turn_states) == len(spec.tasks.get(tid).turns)
    assert ref.excluded_fields == spec.excluded_fields
    assert json.loads(ref.initial_state[ENV]) == ref.initial
