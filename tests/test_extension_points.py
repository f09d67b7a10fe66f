"""Extension points of the Gymnasium layer (docs/architecture.md): backend kinds registered by name with
capabilities, the option groups the flat ``gym.make`` keywords fill, and the registry of action parsers."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from pydantic import BaseModel

import gym_envfactory  # noqa: F401 - registers the ids
from gym_envfactory import define_environment, tool
from gym_envfactory.backends import (
    BACKENDS,
    BackendCapabilities,
    InProcessBackend,
    acquire_backend,
    backend_kind,
    backend_names,
    register_backend,
    unregister_backend,
)
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.envs.options import BackendOptions, EpisodeLimits, PromptOptions, TaskSelection
from gym_envfactory.envs.parsing import (
    ParsedAction,
    ParseError,
    ToolCall,
    action_parsers,
    parse_action,
    register_action_parser,
    unregister_action_parser,
)
from gym_envfactory.errors import BackendError

# ---------------------------------------------------------------------------- backends


class Probe(BaseModel):
    n: int = 0


@tool
def bump(state: Probe) -> int:
    """Add one."""
    state.n += 1
    return state.n


def test_the_shipped_backends_are_registered_with_their_capabilities():
    assert backend_names()[:5] == BACKENDS == ("inprocess", "subprocess", "isolated", "docker", "url")
    assert backend_kind("inprocess").capabilities.in_process
    docker = backend_kind("docker").capabilities
    assert docker.needs_docker and not docker.serves_code_defined_environments
    assert backend_kind("subprocess").capabilities.imports_defining_module
    assert backend_kind("url").capabilities.needs_url
    assert isinstance(acquire_backend(None), InProcessBackend) and isinstance(acquire_backend("inprocess"), InProcessBackend)


def test_unknown_backend_lists_the_registered_names():
    with pytest.raises(BackendError, match="unknown backend 'nope'; choose inprocess, subprocess, isolated, docker or url"):
        acquire_backend("nope")
    with pytest.raises(BackendError, match="unknown backend"):
        gym.make("envfactory/HotelBooking-v0", backend="nope")
    with pytest.raises(BackendError, match="url="):
        acquire_backend("url")


def test_a_registered_backend_is_built_by_name_and_its_capabilities_are_asked(tmp_path):
    made: list[dict] = []

    @register_backend("test-local", capabilities=BackendCapabilities(in_process=True,
                                                                      serves_code_defined_environments=False))
    def factory(**kwargs):
        made.append(kwargs)
        return InProcessBackend()

    try:
        with pytest.raises(BackendError, match="already registered"):
            register_backend("test-local", factory)
        assert "test-local" in backend_names()
        env = gym.make("envfactory/HotelBooking-v0", backend="test-local", backend_options={"knob": 3}, timeout=5)
        env.reset(seed=0)
        assert made[0]["envs"][0] == "HotelBooking" and made[0]["knob"] == 3 and made[0]["timeout"] == 5
        env.close()
        spec = define_environment("RegistryProbe", Probe, [bump], register=False)
        with pytest.raises(BackendError, match="defined in code.*test-local server cannot load"):
            EnvFactoryEnv(spec, backend="test-local")
    finally:
        unregister_backend("test-local")
    assert "test-local" not in backend_names()


# ---------------------------------------------------------------------------- option groups


def test_option_objects_have_the_flat_keywords_defaults():
    env = EnvFactoryEnv("HotelBooking")
    assert env.limits == EpisodeLimits() == EpisodeLimits(32, 16, 16, 16, 128)
    assert env.prompt == PromptOptions() and env.selection == TaskSelection()
    assert env.backend_spec == BackendOptions()
    assert (env.max_steps, env.max_steps_per_turn, env.max_calls_per_step, env.max_invalid_calls_per_step,
            env.max_invalid_calls_per_episode, env.history) == (32, 16, 16, 16, 128, "parsed")
    env.close()


def _user(conversation, task, turn):
    return task.turns[turn].user if turn < len(task.turns) else None


def test_flat_keywords_and_option_objects_build_the_same_env():
    flat = gym.make("envfactory/HotelBooking-v0", max_steps=7, max_steps_per_turn=3, max_calls_per_step=2,
                    max_invalid_calls_per_step=1, max_invalid_calls_per_episode=4, split="train",
                    task_ids=["hotel-001", "hotel-002"], system_prompt="Hi. {description}", user=_user,
                    history="raw", timeout=9, reward={"alpha": 0.7}, reward_mode="turn").unwrapped
    grouped = gym.make("envfactory/HotelBooking-v0",
                       limits=EpisodeLimits(max_steps=7, max_steps_per_turn=3, max_calls_per_step=2,
                                            max_invalid_calls_per_step=1, max_invalid_calls_per_episode=4),
                       selection=TaskSelection(split="train", task_ids=["hotel-001", "hotel-002"]),
                       prompt=PromptOptions(system_prompt="Hi. {description}", user=_user, history="raw"),
                       backend=BackendOptions(timeout=9), reward={"alpha": 0.7}, reward_mode="turn").unwrapped
    assert flat.limits == grouped.limits and flat.selection == grouped.selection
    assert flat.prompt == grouped.prompt and flat.backend_spec == grouped.backend_spec
    for attr in ("max_steps", "max_steps_per_turn", "max_calls_per_step", "max_invalid_calls_per_step",
                 "max_invalid_calls_per_episode", "split", "task_ids", "fixed_task_id", "system_prompt", "user",
                 "history", "reward_config", "reward_mode"):
        assert getattr(flat, attr) == getattr(grouped, attr), attr
    assert flat.task_ids == ["hotel-001", "hotel-002"] and flat.backend_spec.backend_kwargs() == {"timeout": 9}
    a, _ = flat.reset(seed=3)
    b, _ = grouped.reset(seed=3)
    assert a == b and a[0]["content"].startswith("Hi. HotelBooking")
    flat.close()
    grouped.close()


def test_an_option_object_and_its_flat_keyword_together_are_refused():
    with pytest.raises(ValueError, match="limits=EpisodeLimits"):
        EnvFactoryEnv("HotelBooking", limits=EpisodeLimits(), max_steps=3)
    with pytest.raises(ValueError, match="backend=BackendOptions"):
        EnvFactoryEnv("HotelBooking", backend=BackendOptions(), url="http://x")
    with pytest.raises(TypeError, match="limits must be a EpisodeLimits"):
        EnvFactoryEnv("HotelBooking", limits={"max_steps": 3})
    with pytest.raises(ValueError, match="step and call limits"):
        EpisodeLimits(max_steps=0)
    with pytest.raises(ValueError, match="history"):
        EnvFactoryEnv("HotelBooking", history="tokens")
    with pytest.raises(ValueError, match="not both"):
        EnvFactoryEnv("HotelBooking", backend_options={"timeout": 1}, timeout=2)


def test_an_env_built_from_option_objects_passes_gymnasiums_checker():
    env = gym.make("envfactory/HotelBooking-v0", limits=EpisodeLimits(max_steps=8),
                   prompt=PromptOptions(history="raw"))
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


# ---------------------------------------------------------------------------- action parsers


def test_the_shipped_formats_are_registered_in_the_documented_order():
    assert action_parsers()[:6] == ("tool_call", "openai_message", "call_object", "call_list", "hermes", "json_call")


class Bracketed(str):
    """A text type of a made-up model family, to register a parser for its own type."""


def test_a_custom_parser_is_registered_and_used():
    @register_action_parser("test_mistral", accepts=str, before="json_call")
    def mistral(text):
        if not text.startswith("[TOOL_CALLS]"):
            return None
        return parse_action(text[len("[TOOL_CALLS]"):])

    try:
        assert action_parsers().index("test_mistral") == action_parsers().index("json_call") - 1
        with pytest.raises(ValueError, match="already registered"):
            register_action_parser("test_mistral")(mistral)
        out = parse_action('[TOOL_CALLS][{"name": "search_hotels", "arguments": {"city": "Lisbon"}}]')
        assert [(c.name, c.arguments) for c in out.calls] == [("search_hotels", {"city": "Lisbon"})]
        assert parse_action("just text").content == "just text"  # other text: unchanged
        # through the env: the custom format's call runs
        env = EnvFactoryEnv("HotelBooking")
        env.reset(options={"task_id": "hotel-001"})
        _, _, _, _, info = env.step('[TOOL_CALLS][{"name": "search_hotels", "arguments": {"city": "Lisbon"}}]')
        assert info["parsed_calls"][0]["name"] == "search_hotels" and not info["errors"]
        env.close()
    finally:
        unregister_action_parser("test_mistral")
    assert "test_mistral" not in action_parsers()
    out = parse_action('[TOOL_CALLS][{"name": "search_hotels", "arguments": {}}]')
    assert out.calls == [] and out.content.startswith("[TOOL_CALLS]")


def test_a_parser_for_a_new_action_type_and_one_that_raises_stay_total():
    @register_action_parser("test_bracketed", accepts=Bracketed)
    def bracketed(text):
        return ParsedAction(items=[ToolCall(text.strip("[]"), {})])

    @register_action_parser("test_broken", accepts=int)
    def broken(value):
        raise RuntimeError("bug")

    try:
        assert parse_action(Bracketed("[list_hotel_destinations]")).calls == [ToolCall("list_hotel_destinations", {})]
        out = parse_action(5)
        assert isinstance(out.items[0], ParseError) and "test_broken" in out.items[0].message
        assert parse_action(5.0).items[0].message == "unsupported action type float"
    finally:
        unregister_action_parser("test_bracketed")
        unregister_action_parser("test_broken")
    assert parse_action(5).items[0].message == "unsupported action type int"


def test_a_bad_parser_registration_is_refused_and_a_wrong_answer_is_a_parse_error():
    with pytest.raises(TypeError, match="accepts"):
        register_action_parser("test_bad_accepts", accepts="str")
    with pytest.raises(TypeError, match="callable"):
        register_action_parser("test_not_callable", accepts=int)(5)
    assert "test_bad_accepts" not in action_parsers() and "test_not_callable" not in action_parsers()
    assert parse_action("plain reply").content == "plain reply"  # the registry still works

    @register_action_parser("test_wrong_answer", accepts=int)
    def wrong(value):
        return "not a ParsedAction"

    try:
        out = parse_action(7)
        assert isinstance(out.items[0], ParseError) and "returned str" in out.items[0].message
    finally:
        unregister_action_parser("test_wrong_answer")


def test_the_limits_follow_the_attributes_and_errors_name_the_keyword_the_user_wrote():
    env = EnvFactoryEnv("HotelBooking", limits=EpisodeLimits(max_steps=2))
    env.max_steps = 5
    assert env.limits.max_steps == 5
    with pytest.raises(ValueError, match="backend_options="):
        EnvFactoryEnv("HotelBooking", backend=BackendOptions(), backend_options={"timeout": 3})


def test_a_backend_factory_that_returns_no_backend_is_a_backend_error():
    register_backend("test_garbage", lambda **kw: "not a backend", capabilities=BackendCapabilities())
    try:
        with pytest.raises(BackendError, match="returned str, not a Backend"):
            EnvFactoryEnv("HotelBooking", backend="test_garbage")
    finally:
        unregister_backend("test_garbage")
