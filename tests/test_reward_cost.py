"""The reward's state comparison does work in proportion to what differs (issue 10, part 1;
docs/performance.md T4), and stays exact: the C-level shortcut never hides a difference the walk
would report (True vs 1, NaN, bookkeeping-only differences), checked by counting leaf comparisons and
by a Hypothesis property against ``values_equal``."""

from __future__ import annotations

import copy
import json
import math
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import gym_envfactory.reward as reward
import gym_envfactory.state_compare as state_compare
from gym_envfactory import get_environment
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.replay import task_reference
from gym_envfactory.reward import state_diff, state_text, values_equal
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode


def _large_state() -> dict:
    spec = get_environment("HotelBooking")
    return json.loads(spec.initial_state_json("large"))


def _count_leaves(fn):
    calls = {"n": 0}
    real = state_compare.values_equal

    def counting(a, b):
        calls["n"] += 1
        return real(a, b)

    with mock.patch.object(state_compare, "values_equal", counting):
        out = fn()
    return out, calls["n"]


def test_equal_large_states_compare_without_a_walk():
    a, b = _large_state(), _large_state()
    diff, leaves = _count_leaves(lambda: state_diff(a, b))
    assert diff == [] and leaves == 0


def test_one_changed_record_walks_only_that_record():
    a, b = _large_state(), _large_state()
    coll = next(k for k, v in a.items() if isinstance(v, dict) and len(v) > 100)
    key = next(iter(a[coll]))
    rec = a[coll][key]
    field = next(f for f, v in rec.items() if isinstance(v, str))
    rec[field] = rec[field] + "-changed"
    diff, leaves = _count_leaves(lambda: state_diff(a, b))
    assert [d.path for d in diff] == [f"{coll}.{key}.{field}"]
    n_leaves = sum(1 for _ in _walk_leaves(b))
    assert leaves <= 10 * len(rec) and leaves < n_leaves / 100, (leaves, n_leaves)


def _walk_leaves(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _walk_leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from _walk_leaves(v)
    else:
        yield x


def test_shortcut_is_exact_on_the_cases_python_equality_gets_wrong():
    assert state_diff({"a": [True]}, {"a": [1]})          # True is not 1, though True == 1
    assert state_diff({"a": 0}, {"a": False})
    assert state_diff({"a": [1.0, True]}, {"a": [1, 1]})
    assert not state_diff({"a": 5}, {"a": 5.0})          # numbers by value: no difference
    assert not state_diff({"a": 1, "b": 2}, {"b": 2, "a": 1})  # key order is not a difference
    nan = math.nan
    x = {"a": [nan]}
    assert state_diff(x, x)                                # NaN equals nothing, itself included
    # a bookkeeping-only difference: the texts differ, the verdict is "equal"
    a, b = {"t": {"x": 1, "updated": 1}}, {"t": {"x": 1, "updated": 2}}
    assert not state_diff(a, b, bookkeeping=["t.updated"], expected_text=state_text(b))


def test_expected_text_never_changes_the_verdict():
    a, b = {"a": [True], "b": 1}, {"a": [1], "b": 1}
    assert state_diff(a, b, expected_text=state_text(b)) == state_diff(a, b)
    assert state_diff(b, b, expected_text=state_text(b)) == []


_leaf = st.one_of(st.booleans(), st.integers(-3, 3), st.floats(-3, 3, allow_nan=False).map(lambda f: round(f, 1)),
                  st.sampled_from(["a", "b"]), st.none())
_tree = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)),
                     max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_tree, _tree)
def test_state_diff_agrees_with_values_equal(a, b):
    assert (not state_diff(a, b)) == values_equal(a, b)
    assert (not state_diff(a, b, expected_text=state_text(b))) == values_equal(a, b)
    assert not state_diff(a, copy.deepcopy(a))


def test_ground_truth_comparisons_are_memoised_per_task():
    env = EnvFactoryEnv("HotelBooking")
    task = next(t for t in get_environment("HotelBooking").tasks if len(t.turns) > 1 and len(t.envs) == 1)
    policy = OraclePolicy()
    run_episode(env, policy, task_id=task.task_id)  # fills the memo
    calls = {"n": 0}
    real = reward.state_diff

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    with mock.patch.object(reward, "state_diff", counting):
        r = run_episode(env, policy, task_id=task.task_id)
    assert r.reward == 1.0
    # one comparison per turn end and one for the final state: nothing between ground-truth states
    assert calls["n"] == len(task.turns) + 1, calls["n"]
    ref = task_reference(get_environment("HotelBooking"), task.task_id)
    assert any(k[0] == "changes" for k in ref.memo) and any(k[0] == "text" for k in ref.memo)
    env.close()


def test_expected_text_is_exact_for_objects_that_are_not_plain_json():
    assert state_diff({"a": (1, 2)}, {"a": [1, 2]}, expected_text=state_text({"a": [1, 2]}))
    assert state_diff({1: "x"}, {"1": "x"}, expected_text=state_text({"1": "x"}))


def test_a_hand_built_reference_is_a_copy_of_the_callers_states():
    from gym_envfactory.replay import TaskReference
    from gym_envfactory.reward import RewardConfig, TurnRecord, score_episode

    right = {"n": 1}
    ref = TaskReference.from_parts([[("add", {}, ())]], [right], initial={"n": 0})
    first = score_episode([TurnRecord(calls=[("add", {}, False)], state={"n": 1})], ref, {"n": 1}, RewardConfig())
    right["n"] = 2  # the caller edits its own dict afterwards: the reference (and its memo) must not change
    again = score_episode([TurnRecord(calls=[("add", {}, False)], state={"n": 1})], ref, {"n": 1}, RewardConfig())
    assert first.r_state == again.r_state == 1.0
