"""Score where the state lives (docs/reward.md, "Scoring on the server"): a remote session's turn end asks
the server for a digest of its state; equal to the reference's, no state crosses the wire.  The reward
(every component, the state diff, the per-turn scores) must be what the in-process env gives."""

from __future__ import annotations

import pytest

from gym_envfactory.digest import prune, state_digest
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.replay import task_reference
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy
from tests.conformance.test_conformance import CATALOG

REMOTE = pytest.mark.parametrize("make_env", ["subprocess", "url"], indirect=True)


def play_scores(env, policy, task_id, seed=0):
    """Reward, per-turn scores, final score and state diff of one episode."""
    env.reset(seed=seed, options={"task_id": task_id})
    policy.begin(env.unwrapped)
    total, turns, done, info = 0.0, [], False, {}
    while not done:
        _, r, term, trunc, info = env.step(policy.act(env.unwrapped))
        total += r
        if "turn_score" in info:
            turns.append(info["turn_score"])
        done = term or trunc
    return total, turns, info["score"], info["state_diff"], info["reward_components"]


def server_counters(env):
    stats = env.unwrapped.session.client.request("stats")
    return stats["state_reads"], stats["digests"]


@REMOTE
@pytest.mark.parametrize("env_name", CATALOG)
def test_remote_reward_is_the_in_process_reward(make_env, env_name):
    env = make_env(f"envfactory/{env_name}-v0", reward_mode="turn")
    local = EnvFactoryEnv(env_name, reward_mode="turn")
    ids = env.unwrapped.tasks.ids()
    for i, tid in enumerate(ids):
        policies = [OraclePolicy] + ([lambda i=i: NoisyPolicy(p=0.5, seed=i)] if i < 10 else [])
        for mk in policies:
            got = play_scores(env, mk(), tid, seed=i)
            want = play_scores(local, mk(), tid, seed=i)
            assert got == want, (tid, mk)
    local.close()


@REMOTE
def test_equal_state_at_a_turn_end_moves_no_state(make_env):
    env = make_env("envfactory/HotelBooking-v0")
    env.reset(options={"task_id": env.unwrapped.tasks.ids()[0]})
    reads0, digests0 = server_counters(env)
    total, turns, *_ = play_scores(env, OraclePolicy(), env.unwrapped.tasks.ids()[0])
    reads1, digests1 = server_counters(env)
    assert total == 1.0 and turns
    assert reads1 == reads0  # no whole state read at any turn end
    assert digests1 - digests0 == len(turns)


@REMOTE
def test_a_different_state_still_gets_the_full_diff(make_env):
    env = make_env("envfactory/HotelBooking-v0")
    local = EnvFactoryEnv("HotelBooking")
    spec = env.unwrapped.environment

    def writes(t):  # the ground truth changes what the reward compares (not only bookkeeping)
        ref = task_reference(spec, t)
        return state_digest(ref.final_state, ref.excluded_fields, ref.set_fields) != \
            state_digest(ref.initial, ref.excluded_fields, ref.set_fields)

    tid = next(t.task_id for t in env.unwrapped.tasks if len(t.envs) == 1 and len(t.turns) == 1 and writes(t))

    class Idle(OraclePolicy):  # replies without a single call: the writes never happen
        def act(self, e):
            return "Done."

    env.reset(options={"task_id": tid})
    reads0, _ = server_counters(env)
    got = play_scores(env, Idle(), tid)
    reads1, _ = server_counters(env)
    want = play_scores(local, Idle(), tid)
    assert got == want and got[3]  # the same non-empty difference report
    assert reads1 > reads0
    local.close()


def test_prune_is_at_most_the_rewards_exclusions():
    state = {"log": [1, 2, 3], "items": {"a": {"x": 1, "note": "n"}}, "tags": [{"k": 1, "note": "a"}]}
    # an excluded list element keeps its place: the reward still compares the list's length
    assert prune(state, ["log.*"]) == {"log": ["\x00excluded"] * 3, "items": state["items"], "tags": state["tags"]}
    assert state_digest({"log": [1, 2]}, ["log.*"]) != state_digest({"log": [1, 2, 3]}, ["log.*"])
    # excluded keys go, present or absent
    assert state_digest({"items": {"a": {"x": 1, "note": "n"}}}, ["items.*.note"]) == \
        state_digest({"items": {"a": {"x": 1}}}, ["items.*.note"])
    # nothing inside a set-declared list is excluded (the reward compares its elements whole)
    assert state_digest({"tags": [{"note": "a"}]}, ["tags.*.note"], ["tags"]) != \
        state_digest({"tags": [{"note": "b"}]}, ["tags.*.note"], ["tags"])
    # numbers keep their type in the bytes: 5 and 5.0 only cost the full comparison
    assert state_digest({"n": 5}) != state_digest({"n": 5.0})


@pytest.mark.parametrize("mutate", ["none", "read", "write", "pop", "del", "clear", "popitem", "update"])
def test_session_digest_reuses_untouched_collections_and_stays_the_states_digest(mutate):
    """``session_digest`` reuses the parts of root collections a view still holds exactly as its base does
    (``CowDict.pristine``): any read, write or removal must end the reuse, so the digest is always the
    one of the session's state as it stands, and forks of one base share the work."""
    from gym_envfactory.digest import session_digest
    from gym_envfactory.session import Session

    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": _single_env_task()})
    base = env.session
    excluded = ("bookings.*.updated_at",)
    first = session_digest(base, excluded)
    assert first == state_digest(base.state(), excluded)
    for fork in [base.fork() for _ in range(2)]:
        assert isinstance(fork, Session)
        assert session_digest(fork, excluded) == state_digest(fork.state(), excluded)
        model = fork.state_model()
        hotels = model.__dict__["hotels"]
        key = next(iter(dict.keys(hotels)))
        if mutate == "read":
            _ = hotels[key]
            hotels[key].name = "changed through a read"  # a handed-out record may be mutated later
        elif mutate == "write":
            hotels["H-NEW"] = hotels[key]
        elif mutate == "pop":
            hotels.pop(key)
        elif mutate == "del":
            del hotels[key]
        elif mutate == "clear":
            hotels.clear()
        elif mutate == "popitem":
            hotels.popitem()
        elif mutate == "update":
            hotels.update({key: hotels[key]})
        got = session_digest(fork, excluded)
        assert got == state_digest(fork.state(), excluded)
        assert (got == first) == (mutate in ("none", "update"))  # update wrote the same record back
    env.close()


def test_session_digest_of_records_follows_the_exclusions_and_the_owned_records():
    """Record by record (the records a view shares with its base cached by identity, the ones it owns
    serialised afresh): an excluded field or record changes nothing, anything else changes the digest,
    and the digest is always the state's own."""
    from gym_envfactory.digest import session_digest

    env = EnvFactoryEnv("HotelBooking")
    env.reset(options={"task_id": _single_env_task()})
    base = env.session
    guest = next(iter(base.state()["guests"]))
    excluded = ("hotels.*.name", f"guests.{guest}")
    first = session_digest(base, excluded)
    for change, same in (("name", True), ("guest", True), ("city", False), ("new", False), ("drop", False)):
        fork = base.fork()
        model = fork.state_model()
        hotels = model.__dict__["hotels"]
        key = sorted(dict.keys(hotels))[3]
        if change == "name":
            hotels[key].name = "excluded"
        elif change == "guest":
            model.__dict__["guests"][guest] = model.__dict__["guests"][guest].model_copy(update={"name": "x"})
        elif change == "city":
            hotels[key].neighborhood = "Elsewhere"
        elif change == "new":
            hotels["H-ZZZZ"] = hotels[key].model_copy()
        else:
            del hotels[key]
        for _ in range(2):  # the second time from the caches
            got = session_digest(fork, excluded)
            assert got == state_digest(fork.state(), excluded), change
            assert (got == first) == same, change
    env.close()


def _single_env_task() -> str:
    from gym_envfactory import get_environment

    return next(t.task_id for t in get_environment("HotelBooking").tasks if len(t.envs) == 1)
