"""``gym.make_vec(..., vectorization_mode="async")`` with gymnasium's defaults (shared memory on): chat
observations travel through the hooks gym_envfactory.envs.vector_memory registers (issue 29 part 4)."""

from __future__ import annotations

import copy
import multiprocessing as mp

import gymnasium as gym
import pytest
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from gym_envfactory.envs.spaces import MessagesSpace
from gym_envfactory.envs.vector_memory import MessagesBatchView

ID = "envfactory/HotelBooking-v0"
ACTIONS = [['<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>', "Done."],
           ["Which dates?", '<tool_call>{"name": "list_hotel_destinations", "arguments": {}}</tool_call>']]


def _run(**kwargs):
    vec = gym.make_vec(ID, num_envs=2, task_id="hotel-001", **kwargs)
    try:
        out = [vec.reset(seed=0)[0]]
        for actions in ACTIONS:
            obs, rew, term, trunc, _ = vec.step(actions)
            out.append((copy.deepcopy(obs), list(rew), list(term), list(trunc)))
        return out
    finally:
        vec.close()


def test_async_make_vec_needs_no_vector_kwargs_and_matches_sync():
    got = _run(vectorization_mode="async")
    assert isinstance(got[0], tuple) and len(got[0]) == 2 and got[0][0][-1]["role"] == "user"
    assert got == _run(vectorization_mode="sync")
    assert got == _run(vectorization_mode="async", vector_kwargs={"shared_memory": False})


def test_async_with_spawned_workers_needs_no_vector_kwargs_either():
    """A spawned worker imports the package afresh: the hooks must be registered there too."""
    assert _run(vectorization_mode="async", vector_kwargs={"context": "spawn"}) == _run(vectorization_mode="sync")


def test_async_without_copy_returns_the_live_view_of_the_latest_observations():
    vec = gym.make_vec(ID, num_envs=2, vectorization_mode="async", task_id="hotel-001", vector_kwargs={"copy": False})
    try:
        obs, _ = vec.reset(seed=0)
        assert isinstance(obs, MessagesBatchView)
        first = [list(o) for o in obs]
        again, *_ = vec.step(ACTIONS[0])
        assert again is obs and obs[0] != first[0] and obs[0][0]["role"] == "tool"
    finally:
        vec.close()


def test_the_channel_carries_observations_larger_than_a_pipe_buffer():
    space = MessagesSpace()
    mem = create_shared_memory(space, n=2, ctx=mp.get_context())
    view = read_from_shared_memory(space, mem, n=2)
    assert list(view) == [[], []]
    big = [{"role": "tool", "tool_call_id": "c1", "content": "x" * 2_000_000}]
    write_to_shared_memory(space, 1, big, mem)
    write_to_shared_memory(space, 1, [{"role": "user", "content": "later"}], mem)  # the latest wins
    write_to_shared_memory(space, 0, big, mem)
    assert view[1] == [{"role": "user", "content": "later"}] and view[0] == big
    assert copy.deepcopy(view) == (big, [{"role": "user", "content": "later"}])


def test_a_plain_space_still_refuses_shared_memory():
    from gymnasium.error import CustomSpaceError
    from gymnasium.spaces import Space

    with pytest.raises(CustomSpaceError):
        create_shared_memory(Space(), n=1)


def test_importing_the_package_registers_the_hooks(tmp_path):
    import subprocess
    import sys

    code = ("import gymnasium as gym, gym_envfactory\n"
            f"v = gym.make_vec({ID!r}, num_envs=2, vectorization_mode='async', task_id='hotel-001')\n"
            "obs, _ = v.reset(seed=0); v.close(); print(len(obs), obs[1][-1]['role'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["2", "user"], r.stderr[-2000:]
